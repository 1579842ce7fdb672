// The header of a sealed page (docs/format.md, "Sealed pages"; docs/security.md says why).
//
// A sealed page has the header of a plain one (page_format.h) with these differences:
//
//   offset size  field
//   12     4     flags: kFlagSealed
//   32     16    key hash: the page key's keyed name (seal/tenant.h: HMAC-SHA256 under the
//                tenant's naming key), not its XXH3-128
//   56     8     payload checksum: 0 (each chunk's tag checks it)
//   64     4     key bytes K: the page key's length
//   88     4     chunk bytes C: sealed_chunk_bytes(payload, K)
//   92     4     key id: the master key the page is sealed under
//   96     8     page number: the sealing session's number for this page
//   104    16    reserved (0)
//   120    8     header checksum: XXH3-64 of bytes 0..119 followed by bytes 128..128+A-1
//   128    K     the page key, sealed (AES-256-GCM, chunk index kKeyChunk)
//   128+K  16    its tag
//   144+K  32    the sealing session's salt
//   176+K  16N   each payload chunk's tag, in chunk order (N = chunk count)
//   ...          zero padding to the header's size (4096, or A + 128 rounded up to 64 in a
//                compact segment record)
//
// where A = K + 48 + 16N is the sealed area. Each payload chunk is sealed with bytes 0..119
// and the page key as its associated data (the page key's own seal with bytes 0..119 alone,
// so `kvtier verify` can open it first). No byte of the page key or of the payload is stored
// in the clear.
//
// Chunks are 256 KiB, doubled until the tags fit a 4096-byte header with the longest key
// (pages up to 45 MiB keep 256 KiB chunks); sealed pages hold up to 128 GiB.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/page_format.h"
#include "kvtier/core/status.h"

namespace kvtier::page {

inline constexpr uint32_t kFlagSealed = 1;
inline constexpr size_t kSealTagBytes = 16;
inline constexpr size_t kSealSaltBytes = 32;
// The chunk index the page key is sealed as; payload chunks are numbered from 0.
inline constexpr uint32_t kKeyChunk = UINT32_MAX;
// The associated data every seal of a page starts with: header bytes 0..119.
inline constexpr size_t kSealBoundBytes = 120;

// The largest payload a sealed page may have (its chunk size must fit the header's 32 bits).
inline constexpr uint64_t kMaxSealedPayloadBytes = uint64_t{1} << 37;

// The chunk size of a sealed page of `payload_bytes`: the smallest 256 KiB * 2^k whose tags
// fit one header block beside a key of the longest length.
// REQUIRES: payload_bytes <= kMaxSealedPayloadBytes.
constexpr uint32_t sealed_chunk_bytes(uint64_t payload_bytes) {
  constexpr uint64_t kRoom = kHeaderBytes - 128 - kMaxKeyBytes - kSealTagBytes - kSealSaltBytes;
  uint64_t chunk = kChecksumChunkBytes;
  while ((payload_bytes + chunk - 1) / chunk * kSealTagBytes > kRoom) chunk *= 2;
  return static_cast<uint32_t>(chunk);
}
constexpr size_t sealed_chunk_count(uint64_t payload_bytes) {
  const uint64_t c = sealed_chunk_bytes(payload_bytes);
  return payload_bytes == 0 ? 1 : (payload_bytes + c - 1) / c;
}
// The sealed area: the sealed key, its tag, the salt and the chunks' tags.
constexpr size_t sealed_area_bytes(size_t key_bytes, uint64_t payload_bytes) {
  return key_bytes + kSealTagBytes + kSealSaltBytes +
         kSealTagBytes * sealed_chunk_count(payload_bytes);
}
// A sealed segment record's compact header.
constexpr uint32_t compact_sealed_header_bytes(size_t key_bytes, uint64_t payload_bytes) {
  return static_cast<uint32_t>(
      (128 + sealed_area_bytes(key_bytes, payload_bytes) + kRecordAlignBytes - 1) /
      kRecordAlignBytes * kRecordAlignBytes);
}

// Where a sealed header's parts lie in its block.
struct SealedView {
  uint32_t key_id = 0;
  uint64_t page_number = 0;
  uint32_t chunk_bytes = 0;
  std::span<const std::byte> bound;       // bytes 0..119
  std::span<const std::byte> sealed_key;  // K bytes
  std::span<const std::byte> key_tag;     // 16
  std::span<const std::byte> salt;        // 32
  std::span<const std::byte> chunk_tags;  // 16 per chunk
};
struct SealedSlots {  // the same, writable, for the writer
  std::span<const std::byte> bound;
  std::span<std::byte> sealed_key;
  std::span<std::byte> key_tag;
  std::span<std::byte> salt;
  std::span<std::byte> chunk_tags;
};

// Writer, step 1: the fixed fields of a sealed header (h.key gives only its length; h.key_hash
// is the keyed name; h.payload_checksum is ignored), key id and page number, zeros elsewhere.
// Returns where the writer seals the key, and puts the salt and tags. Then, step 2, after the
// slots are filled: finish_sealed writes the header checksum.
SealedSlots encode_sealed(const Header& h, uint32_t key_id, uint64_t page_number,
                          std::span<std::byte, kHeaderBytes> block) noexcept;
void finish_sealed(std::span<std::byte, kHeaderBytes> block) noexcept;

// Whether a block's flags say sealed (before decoding it).
bool is_sealed(std::span<const std::byte, kHeaderBytes> block) noexcept;

// Decodes a sealed header block: magic, version, flags, sizes, header checksum (kCorrupt with
// the reason otherwise). The result's key is empty (it is sealed: `view.sealed_key`); its
// key_hash is the keyed name.
Result<Header> decode_sealed(std::span<const std::byte, kHeaderBytes> block, SealedView& view);

}  // namespace kvtier::page
