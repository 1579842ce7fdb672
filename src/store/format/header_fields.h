// The byte offsets of a page header's fields and the little-endian loads and stores that
// read and write them: shared by page_format.cc and sealed_page.cc (the format room's own).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "format/page_format.h"
#include "kvtier/core/checksum.h"

namespace kvtier::page::fields {

constexpr size_t kOffVersion = 8;
constexpr size_t kOffHeaderSize = 10;
constexpr size_t kOffFlags = 12;
constexpr size_t kOffNamespace = 16;
constexpr size_t kOffKeyHash = 32;
constexpr size_t kOffPayloadBytes = 48;
constexpr size_t kOffPayloadChecksum = 56;
constexpr size_t kOffKeyBytes = 64;
constexpr size_t kOffPieceCount = 68;
constexpr size_t kOffPieceBytes = 72;
constexpr size_t kOffCreated = 80;
constexpr size_t kOffChunkBytes = 88;
constexpr size_t kOffHeaderChecksum = 120;
constexpr size_t kOffKey = 128;
static_assert(kOffKey + kMaxKeyBytes <= kHeaderBytes);
// Sealed pages (sealed_page.h) use part of the reserved bytes 92..119.
constexpr size_t kOffKeyId = 92;
constexpr size_t kOffPageNumber = 96;

// Little-endian stores/loads (x86 and arm64 are little-endian; memcpy keeps it alignment-safe).
static_assert(std::endian::native == std::endian::little, "big-endian hosts need byte swaps");

template <typename T>
inline void put(std::byte* block, size_t off, T v) {
  std::memcpy(block + off, &v, sizeof(T));
}
template <typename T>
inline T get(const std::byte* block, size_t off) {
  T v;
  std::memcpy(&v, block + off, sizeof(T));
  return v;
}

inline void put_hash(std::byte* block, size_t off, const Hash128& h) {
  put(block, off, h.high);
  put(block, off + 8, h.low);
}
inline Hash128 get_hash(const std::byte* block, size_t off) {
  return Hash128{get<uint64_t>(block, off), get<uint64_t>(block, off + 8)};
}

// A header's bytes 0..119 but its checksum, zeros from 92 on: the fields every page has.
void encode_fixed(const Header& h, uint32_t flags, uint64_t payload_checksum, uint32_t chunk_bytes,
                  std::byte* block) noexcept;

}  // namespace kvtier::page::fields
