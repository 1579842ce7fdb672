// Checksums and hashes (xxHash's XXH3, from libxxhash).
//
// checksum64: payload and header checksums of stored pages.
// Hash128: key and namespace identities (names on disk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kvtier {

uint64_t checksum64(const void* data, size_t size) noexcept;
inline uint64_t checksum64(std::string_view s) noexcept {
  return checksum64(s.data(), s.size());
}
// Which build of XXH3 checksum64 runs: "avx512" (kvtier's own, compiled for AVX-512 and
// chosen where the CPU has it) or "libxxhash" (the library's run-time dispatch). Both compute
// the same XXH3-64.
std::string_view checksum64_implementation() noexcept;

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

// Streaming checksum64 over several pieces: equal to checksum64 of their concatenation.
// Not thread-safe; one per computation.
class Checksum64Stream {
 public:
  Checksum64Stream();
  ~Checksum64Stream();
  Checksum64Stream(Checksum64Stream&&) noexcept;
  Checksum64Stream& operator=(Checksum64Stream&&) noexcept;

  void update(const void* data, size_t size) noexcept;
  uint64_t digest() const noexcept;
  void reset() noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kvtier
