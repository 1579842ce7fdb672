#include "kvtier/core/checksum.h"

#include <fmt/format.h>
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

Hash128 hash128(const void* data, size_t size) noexcept {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  return Hash128{h.high64, h.low64};
}

std::string Hash128::hex() const {
  return fmt::format("{:016x}{:016x}", high, low);
}

}  // namespace kvtier
