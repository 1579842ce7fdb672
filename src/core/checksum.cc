#include "kvtier/core/checksum.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <vector>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's size, for a state held in place
#include <xxhash.h>
#if defined(__x86_64__)
// libxxhash's runtime dispatch: AVX-512 or AVX2 where the CPU has them (2-3x the SSE2 code
// the plain entry points use). The header maps XXH3_* onto the *_dispatch functions.
#include <xxh_x86dispatch.h>
#endif

#include <isa-l/crc64.h>

namespace kvtier {

uint64_t checksum64(const void* data, size_t size) noexcept {
  return XXH3_64bits(data, size);
}

uint64_t crc64(const void* data, size_t size, uint64_t crc) noexcept {
  // ISA-L picks its code for the CPU once, at its first call.
  return crc64_ecma_refl(crc, static_cast<const unsigned char*>(data), size);
}

std::string_view chunk_hash_name(ChunkHash hash) {
  return hash == ChunkHash::kXxh3 ? "xxh3" : "crc64";
}

namespace {

ChunkHash time_chunk_hashes() {
  constexpr size_t kBytes = 256 << 10;
  std::vector<unsigned char> buf(kBytes);
  for (size_t i = 0; i < kBytes; ++i) buf[i] = static_cast<unsigned char>(i * 131 + (i >> 9));
  using Clock = std::chrono::steady_clock;
  std::array<Clock::duration, 2> best{Clock::duration::max(), Clock::duration::max()};
  uint64_t sink = 0;
  // The first round warms the buffer and each library's dispatch up, and is not counted.
  for (int round = 0; round < 6; ++round) {
    for (int h = 0; h < 2; ++h) {
      const auto t0 = Clock::now();
      sink += h == 0 ? crc64(buf.data(), kBytes) : XXH3_64bits(buf.data(), kBytes);
      const auto took = Clock::now() - t0;
      if (round > 0) best[h] = std::min(best[h], took);
    }
  }
  [[maybe_unused]] volatile uint64_t keep = sink;  // the hashes are not optimized away
  return best[1] < best[0] ? ChunkHash::kXxh3 : ChunkHash::kCrc64;
}

}  // namespace

ChunkHash fastest_chunk_hash() {
  static const ChunkHash fastest = time_chunk_hashes();
  return fastest;
}

std::optional<ChunkHash> chunk_hash_named(std::string_view name) {
  if (name == "crc64") return ChunkHash::kCrc64;
  if (name == "xxh3") return ChunkHash::kXxh3;
  if (name == "auto") return fastest_chunk_hash();
  return std::nullopt;
}

void PartsHash::start_stream() noexcept {
  static_assert(sizeof(XXH3_state_t) <= kStreamStateBytes && alignof(XXH3_state_t) <= 64);
  auto* state = reinterpret_cast<XXH3_state_t*>(state_);
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, first_, first_size_);
  streaming_ = true;
}

void PartsHash::add(const void* data, size_t size) noexcept {
  if (hash_ == ChunkHash::kCrc64) {
    crc_ = crc64(data, size, crc_);
    return;
  }
  if (first_ == nullptr && !streaming_) {
    first_ = data;
    first_size_ = size;
    return;
  }
  if (!streaming_) start_stream();
  XXH3_64bits_update(reinterpret_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t PartsHash::digest() noexcept {
  if (hash_ == ChunkHash::kCrc64) return crc_;
  if (streaming_) return XXH3_64bits_digest(reinterpret_cast<XXH3_state_t*>(state_));
  return XXH3_64bits(first_, first_size_);
}

Hash128 hash128(const void* data, size_t size) noexcept {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  return Hash128{h.high64, h.low64};
}

std::string Hash128::hex() const {
  return fmt::format("{:016x}{:016x}", high, low);
}

}  // namespace kvtier
