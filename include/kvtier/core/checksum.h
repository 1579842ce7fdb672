// Checksums and hashes: xxHash's XXH3 (libxxhash) and CRC-64 (Intel's ISA-L).
//
// crc64: the payload checksum of stored pages (every byte a read moves is hashed, so the
//   fastest strong check wins: ISA-L folds with carry-less multiplies, on AVX-512 where the
//   CPU has it, at about 1.4-1.5x the speed of XXH3 on the development VM).
// checksum64: header checksums, and the payload checksum's combination of its chunks' CRCs.
// Hash128: key and namespace identities (names on disk).
#pragma once

#include <cstddef>
#include <cstdint>
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
