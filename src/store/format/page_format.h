// The on-disk page format, version 2 (docs/format.md is the description for humans).
//
// A page object is a 4096-byte header block followed by the payload:
//
//   offset size  field
//   0      8     magic "KVTPAGE1"
//   8      2     format version (2)
//   10     2     header block size (4096) = payload offset
//   12     4     flags: 0, or kFlagXxh3Chunks (sealed pages: kFlagSealed, sealed_page.h)
//   16     16    namespace id (XXH3-128 of the namespace's canonical form; high, low words)
//   32     16    key hash (XXH3-128 of the key)
//   48     8     payload bytes
//   56     8     payload checksum (see below)
//   64     4     key bytes (1..1024)
//   68     4     piece count
//   72     8     piece bytes (0 when the pieces differ in size)
//   80     8     created, ns since the Unix epoch
//   88     4     checksum chunk bytes (262144)
//   92     28    reserved (0)
//   120    8     header checksum (XXH3-64 of bytes 0..119 followed by the key)
//   128    K     the key
//   ...          zero padding to 4096
//   4096   P     payload (the pieces back to back)
//   ...          zero padding to the next multiple of 4096
//
// All integers little-endian. The payload starts, and the object ends, on a 4096-byte
// boundary, so direct I/O can move any page (70,272-byte ones included) in aligned blocks.
//
// The payload checksum is XXH3-64 over the little-endian array of the hashes of the payload's
// consecutive 256 KiB chunks (the last one shorter). Chunks can then be verified in any order,
// by whichever thread just read them, while they are still in its cache. A chunk's hash is its
// CRC-64/XZ (flags 0), or its XXH3-64 (flags kFlagXxh3Chunks): the writer takes the faster on
// its CPU (fastest_chunk_hash(), checksum.h), readers check either. Hashing every byte is most
// of what verification costs a hot read: ISA-L's CRC-64 runs at about 1.4x XXH3 where it has
// its AVX-512 code, and at about a third of it where it does not (an AVX2 CPU).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvtier/core/checksum.h"
#include "kvtier/core/status.h"

namespace kvtier::page {

inline constexpr size_t kHeaderBytes = 4096;
// Objects are padded to a multiple of this.
inline constexpr size_t kBlockBytes = 4096;

// The size of the object that stores a payload of `payload_bytes`.
constexpr uint64_t object_bytes(uint64_t payload_bytes) {
  return kHeaderBytes + (payload_bytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes;
}
inline constexpr size_t kMaxKeyBytes = 1024;
inline constexpr char kMagic[8] = {'K', 'V', 'T', 'P', 'A', 'G', 'E', '1'};
inline constexpr uint16_t kVersion = 2;
inline constexpr uint32_t kChecksumChunkBytes = 256 << 10;
// Flags: the payload's chunks are hashed with XXH3-64, not CRC-64. (Builds that predate it
// refuse such a page as unknown flags: a miss to them, never data.)
inline constexpr uint32_t kFlagXxh3Chunks = 2;

// Chunks of a payload (at least one).
constexpr size_t chunk_count(uint64_t payload_bytes) {
  return payload_bytes == 0 ? 1 : (payload_bytes + kChecksumChunkBytes - 1) / kChecksumChunkBytes;
}

// The payload checksum from its chunks' hashes, in chunk order.
uint64_t combine_chunk_checksums(std::span<const uint64_t> chunk_checksums) noexcept;

// Calls fn(data, size) for the bytes of payload range [from, to) of a page made of `pieces`
// (each with .data and .size), in order.
template <typename Pieces, typename Fn>
void for_each_part(const Pieces& pieces, uint64_t from, uint64_t to, Fn&& fn) {
  uint64_t base = 0;
  for (const auto& p : pieces) {
    const uint64_t end = base + p.size;
    if (end > from && base < to) {
      const uint64_t lo = std::max(from, base);
      const uint64_t hi = std::min(to, end);
      fn(static_cast<const std::byte*>(p.data) + (lo - base), hi - lo);
    }
    if (end >= to) break;
    base = end;
  }
}

// The `hash` of payload chunk `chunk` of a page made of `pieces` holding `payload_bytes` (a
// chunk may span pieces).
template <typename Pieces>
uint64_t chunk_checksum(const Pieces& pieces, uint64_t payload_bytes, size_t chunk,
                        ChunkHash hash) {
  const uint64_t from = chunk * uint64_t{kChecksumChunkBytes};
  const uint64_t to = std::min(payload_bytes, from + kChecksumChunkBytes);
  PartsHash h(hash);
  for_each_part(pieces, from, to, [&](const std::byte* d, uint64_t n) { h.add(d, n); });
  return h.digest();
}

// The payload checksum of a whole page.
template <typename Pieces>
uint64_t payload_checksum(const Pieces& pieces, uint64_t payload_bytes, ChunkHash hash) {
  std::vector<uint64_t> chunks(chunk_count(payload_bytes));
  for (size_t c = 0; c < chunks.size(); ++c) {
    chunks[c] = chunk_checksum(pieces, payload_bytes, c, hash);
  }
  return combine_chunk_checksums(chunks);
}

// Records of the segment layout (docs/format.md) may carry a compact header: the 128 fixed
// bytes and the key, rounded up to kRecordAlignBytes, instead of a 4096-byte block. The header
// size field says which; everything else is the same.
inline constexpr size_t kRecordAlignBytes = 64;
constexpr uint32_t compact_header_bytes(size_t key_bytes) {
  return static_cast<uint32_t>((128 + key_bytes + kRecordAlignBytes - 1) / kRecordAlignBytes *
                               kRecordAlignBytes);
}
// The bytes of a segment record: aligned records are page objects (4096-byte header, payload
// padded to 4096); compact ones are the compact header and the payload, padded to 64.
constexpr uint64_t record_bytes(uint32_t header_bytes, uint64_t payload_bytes) {
  return header_bytes == kHeaderBytes ? object_bytes(payload_bytes)
                                      : (header_bytes + payload_bytes + kRecordAlignBytes - 1) /
                                            kRecordAlignBytes * kRecordAlignBytes;
}

struct Header {
  Hash128 namespace_id;
  Hash128 key_hash;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
  // How payload_checksum's chunks are hashed (flags kFlagXxh3Chunks).
  ChunkHash chunk_hash = ChunkHash::kCrc64;
  uint32_t piece_count = 0;
  uint64_t piece_bytes = 0;
  uint64_t created_ns = 0;
  std::string_view key;  // points into the decoded block
  // The header's size = where the payload starts: kHeaderBytes, or compact_header_bytes(key)
  // in a compact segment record.
  uint32_t header_bytes = kHeaderBytes;
};

// Writes a complete header block (all 4096 bytes) into `block`, with h.header_bytes as its
// size (zero padding after the key either way).
// REQUIRES: 1 <= key.size() <= kMaxKeyBytes; h.header_bytes is kHeaderBytes or
// compact_header_bytes(key.size()).
void encode(const Header& h, std::span<std::byte, kHeaderBytes> block) noexcept;

// Decodes and checks a block: magic, version, header size (kHeaderBytes or the compact size
// for its key), key length, header checksum. kCorrupt with the reason otherwise. Only the
// first header_bytes of `block` are looked at. The result's key points into `block`.
Result<Header> decode(std::span<const std::byte, kHeaderBytes> block);

// What a reader expects of a page; any difference is kCorrupt naming the field.
struct Expectation {
  Hash128 namespace_id;
  std::string_view key;
  uint64_t payload_bytes = 0;
  uint32_t piece_count = 0;
  uint64_t piece_bytes = 0;  // 0: pieces of differing sizes
};
Status check(const Header& h, const Expectation& e);

// The checks every reader of a page object makes once its header decoded and is the page it
// wants (a get, `kvtier verify`): the object is exactly as long as the header says, then the
// hashes of the payload's chunks (h.chunk_hash), in chunk order, combine to the header's payload
// checksum (nullopt: payloads are not verified). kCorrupt naming what differs.
Status verify_object(const Header& h, uint64_t object_size,
                     std::optional<std::span<const uint64_t>> chunk_checksums);
// The same for a record of the segment layout whose index entry says `record_bytes`.
Status verify_record(const Header& h, uint64_t record_bytes,
                     std::optional<std::span<const uint64_t>> chunk_checksums);

// Piece bytes as recorded in a header: the common size, or 0 when they differ.
template <typename Pieces>
uint64_t uniform_piece_bytes(const Pieces& pieces) {
  if (pieces.empty()) return 0;
  const uint64_t first = pieces.front().size;
  for (const auto& p : pieces) {
    if (p.size != first) return 0;
  }
  return first;
}

}  // namespace kvtier::page
