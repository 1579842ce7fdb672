#include "kvtier/core/checksum.h"

#include <fmt/format.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t by value
#include <xxhash.h>
#if defined(__x86_64__)
// libxxhash's runtime dispatch: AVX-512 or AVX2 where the CPU has them (2-3x the SSE2 code
// the plain entry points use). The header maps XXH3_* onto the *_dispatch functions.
#include <xxh_x86dispatch.h>
#endif

#include <new>

namespace kvtier {

uint64_t checksum64(const void* data, size_t size) noexcept {
  return XXH3_64bits(data, size);
}

Hash128 hash128(const void* data, size_t size) noexcept {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  return Hash128{h.high64, h.low64};
}

std::string Hash128::hex() const {
  return fmt::format("{:016x}{:016x}", high, low);
}

struct Checksum64Stream::State {
  XXH3_state_t xxh;
};

Checksum64Stream::Checksum64Stream() : state_(std::make_unique<State>()) {
  XXH3_64bits_reset(&state_->xxh);
}
Checksum64Stream::~Checksum64Stream() = default;
Checksum64Stream::Checksum64Stream(Checksum64Stream&&) noexcept = default;
Checksum64Stream& Checksum64Stream::operator=(Checksum64Stream&&) noexcept = default;

void Checksum64Stream::update(const void* data, size_t size) noexcept {
  XXH3_64bits_update(&state_->xxh, data, size);
}
uint64_t Checksum64Stream::digest() const noexcept {
  return XXH3_64bits_digest(&state_->xxh);
}
void Checksum64Stream::reset() noexcept {
  XXH3_64bits_reset(&state_->xxh);
}

}  // namespace kvtier
