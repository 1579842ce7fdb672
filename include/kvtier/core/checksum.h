// Checksums and hashes: xxHash's XXH3 (libxxhash) and CRC-64 (Intel's ISA-L).
//
// ChunkHash / PartsHash: the payload checksum of stored pages, per 256 KiB chunk. Every byte
//   a read moves is hashed, so the faster strong check on the writer's CPU wins, and readers
//   check either: ISA-L's CRC-64 folds with carry-less multiplies and is fastest where it has
//   its AVX-512 code (about 1.4x XXH3 on an Intel Xeon); elsewhere XXH3 is (about 3x ISA-L's
//   128-bit CRC code on an AMD EPYC with AVX2). fastest_chunk_hash() times both once.
// checksum64: header checksums, and the payload checksum's combination of its chunks' hashes.
// Hash128: key and namespace identities (names on disk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier {

uint64_t checksum64(const void* data, size_t size) noexcept;
inline uint64_t checksum64(std::string_view s) noexcept {
  return checksum64(s.data(), s.size());
}

// CRC-64/XZ (the ECMA-182 polynomial, reflected, initial value and final XOR all ones; of
// "123456789" it is 0x995dc9bbdf1939fa). `crc` continues an earlier result, so that
// crc64(b, nb, crc64(a, na)) is the CRC of a followed by b.
uint64_t crc64(const void* data, size_t size, uint64_t crc = 0) noexcept;

// How a page's payload chunks are hashed (the page format's flags say which).
enum class ChunkHash : uint8_t { kCrc64, kXxh3 };
// "crc64" or "xxh3".
std::string_view chunk_hash_name(ChunkHash hash);
// The faster of the two on this CPU: each timed over a cache-resident 256 KiB buffer, a few
// times, alternating, once per process (well under a millisecond).
ChunkHash fastest_chunk_hash();
// The hash a name chooses: "crc64", "xxh3", or "auto" (fastest_chunk_hash()); nullopt for
// any other name.
std::optional<ChunkHash> chunk_hash_named(std::string_view name);

// The hash of bytes given in consecutive parts, equal to hashing them as one buffer: CRC-64/XZ
// (crc64 above) or XXH3-64. One part (the common case) is hashed in one call; more feed a
// streaming state kept inside the object (no allocation).
class PartsHash {
 public:
  explicit PartsHash(ChunkHash hash) noexcept : hash_(hash) {}
  PartsHash(const PartsHash&) = delete;
  PartsHash& operator=(const PartsHash&) = delete;

  void add(const void* data, size_t size) noexcept;
  uint64_t digest() noexcept;

 private:
  void start_stream() noexcept;

  ChunkHash hash_;
  uint64_t crc_ = 0;
  // XXH3: the first part, held until a second comes (then the stream starts with it).
  const void* first_ = nullptr;
  size_t first_size_ = 0;
  bool streaming_ = false;
  // An XXH3_state_t (checksum.cc checks that it fits).
  static constexpr size_t kStreamStateBytes = 576;
  alignas(64) unsigned char state_[kStreamStateBytes];
};

struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;
  friend bool operator==(const Hash128&, const Hash128&) = default;
  // 32 lowercase hex digits, high word first.
  std::string hex() const;
};

Hash128 hash128(const void* data, size_t size) noexcept;
inline Hash128 hash128(std::string_view s) noexcept {
  return hash128(s.data(), s.size());
}

}  // namespace kvtier
