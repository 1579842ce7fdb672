#include "kvtier/core/checksum.h"

#include <fmt/format.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t by value
#include <xxhash.h>
#if defined(__x86_64__)
// libxxhash's runtime dispatch: AVX-512 or AVX2 where the CPU has them (2-3x the SSE2 code
// the plain entry points use). The header maps XXH3_* onto the *_dispatch functions.
#include <xxh_x86dispatch.h>
#endif

#include <isa-l/crc64.h>

#include <new>

namespace kvtier {

#if KVTIER_CHECKSUM_AVX512
namespace detail {
uint64_t checksum64_avx512(const void* data, size_t size) noexcept;
}
#endif

namespace {

using Checksum64Fn = uint64_t (*)(const void*, size_t) noexcept;

uint64_t checksum64_library(const void* data, size_t size) noexcept {
  return XXH3_64bits(data, size);
}

// Chosen once, on first use (so a static initialiser elsewhere may checksum too): the
// AVX-512 build of XXH3 where the CPU (and the kernel, which must save the registers) has
// AVX-512, libxxhash's dispatch otherwise.
Checksum64Fn checksum64_fn() noexcept {
  static const Checksum64Fn fn = [] {
#if KVTIER_CHECKSUM_AVX512
    __builtin_cpu_init();  // may run before libgcc's own initialisation
    if (__builtin_cpu_supports("avx512f")) return &detail::checksum64_avx512;
#endif
    return &checksum64_library;
  }();
  return fn;
}

}  // namespace

uint64_t checksum64(const void* data, size_t size) noexcept {
  return checksum64_fn()(data, size);
}

std::string_view checksum64_implementation() noexcept {
  return checksum64_fn() == &checksum64_library ? "libxxhash" : "avx512";
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
