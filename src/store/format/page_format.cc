#include "format/page_format.h"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cstring>

#include "format/header_fields.h"
#include "format/sealed_page.h"
#include "kvtier/store/namespace.h"

namespace kvtier::page {

// Headers carry the version that namespace ids are derived from.
static_assert(kVersion == kPageFormatVersion);

using namespace fields;

namespace {

// XXH3-64 of bytes 0..119 followed by the key, hashed from one stack copy (a streaming state
// would cost an allocation per page).
uint64_t header_checksum(const std::byte* block, size_t key_bytes) {
  std::array<std::byte, kOffHeaderChecksum + kMaxKeyBytes> bytes;
  std::memcpy(bytes.data(), block, kOffHeaderChecksum);
  std::memcpy(bytes.data() + kOffHeaderChecksum, block + kOffKey, key_bytes);
  return checksum64(bytes.data(), kOffHeaderChecksum + key_bytes);
}

}  // namespace

uint64_t combine_chunk_checksums(std::span<const uint64_t> chunk_checksums) noexcept {
  static_assert(std::endian::native == std::endian::little);
  return checksum64(chunk_checksums.data(), chunk_checksums.size_bytes());
}

namespace fields {

void encode_fixed(const Header& h, uint32_t flags, uint64_t payload_checksum, uint32_t chunk_bytes,
                  std::byte* b) noexcept {
  std::memset(b, 0, kHeaderBytes);
  std::memcpy(b, kMagic, sizeof(kMagic));
  put<uint16_t>(b, kOffVersion, kVersion);
  put<uint16_t>(b, kOffHeaderSize, static_cast<uint16_t>(h.header_bytes));
  put<uint32_t>(b, kOffFlags, flags);
  put_hash(b, kOffNamespace, h.namespace_id);
  put_hash(b, kOffKeyHash, h.key_hash);
  put<uint64_t>(b, kOffPayloadBytes, h.payload_bytes);
  put<uint64_t>(b, kOffPayloadChecksum, payload_checksum);
  put<uint32_t>(b, kOffKeyBytes, static_cast<uint32_t>(h.key.size()));
  put<uint32_t>(b, kOffPieceCount, h.piece_count);
  put<uint64_t>(b, kOffPieceBytes, h.piece_bytes);
  put<uint64_t>(b, kOffCreated, h.created_ns);
  put<uint32_t>(b, kOffChunkBytes, chunk_bytes);
}

}  // namespace fields

void encode(const Header& h, std::span<std::byte, kHeaderBytes> out) noexcept {
  std::byte* b = out.data();
  encode_fixed(h, h.chunk_hash == ChunkHash::kXxh3 ? kFlagXxh3Chunks : 0, h.payload_checksum,
               kChecksumChunkBytes, b);
  std::memcpy(b + kOffKey, h.key.data(), h.key.size());
  put<uint64_t>(b, kOffHeaderChecksum, header_checksum(b, h.key.size()));
}

Result<Header> decode(std::span<const std::byte, kHeaderBytes> in) {
  const std::byte* b = in.data();
  if (std::memcmp(b, kMagic, sizeof(kMagic)) != 0) return corrupt_error("bad magic");
  const auto version = get<uint16_t>(b, kOffVersion);
  if (version != kVersion) {
    return corrupt_error(fmt::format("format version {} (this build reads {})", version, kVersion));
  }
  const auto flags = get<uint32_t>(b, kOffFlags);
  if (flags != 0 && flags != kFlagXxh3Chunks) {
    // A sealed page's key and payload are ciphertext: only a reader with its key opens it
    // (sealed_page.h).
    return corrupt_error(flags == kFlagSealed ? "a sealed page, and this store has no key"
                                              : fmt::format("unknown flags {:#x}", flags));
  }
  const auto key_bytes = get<uint32_t>(b, kOffKeyBytes);
  if (key_bytes == 0 || key_bytes > kMaxKeyBytes) {
    return corrupt_error(fmt::format("key length {}", key_bytes));
  }
  const auto header_bytes = get<uint16_t>(b, kOffHeaderSize);
  if (header_bytes != kHeaderBytes && header_bytes != compact_header_bytes(key_bytes)) {
    return corrupt_error(fmt::format("header size {}", header_bytes));
  }
  if (header_checksum(b, key_bytes) != get<uint64_t>(b, kOffHeaderChecksum)) {
    return corrupt_error("header checksum mismatch");
  }
  if (const auto chunk = get<uint32_t>(b, kOffChunkBytes); chunk != kChecksumChunkBytes) {
    return corrupt_error(fmt::format("checksum chunks of {} bytes (this build reads {})", chunk,
                                     kChecksumChunkBytes));
  }
  Header h;
  h.namespace_id = get_hash(b, kOffNamespace);
  h.key_hash = get_hash(b, kOffKeyHash);
  h.payload_bytes = get<uint64_t>(b, kOffPayloadBytes);
  h.payload_checksum = get<uint64_t>(b, kOffPayloadChecksum);
  h.chunk_hash = flags == kFlagXxh3Chunks ? ChunkHash::kXxh3 : ChunkHash::kCrc64;
  h.piece_count = get<uint32_t>(b, kOffPieceCount);
  h.piece_bytes = get<uint64_t>(b, kOffPieceBytes);
  h.created_ns = get<uint64_t>(b, kOffCreated);
  h.key = std::string_view(reinterpret_cast<const char*>(b + kOffKey), key_bytes);
  h.header_bytes = header_bytes;
  if (hash128(h.key) != h.key_hash) return corrupt_error("key hash does not match the key");
  return h;
}

Status check(const Header& h, const Expectation& e) {
  if (h.namespace_id != e.namespace_id) {
    return corrupt_error(
        fmt::format("namespace {} (expected {})", h.namespace_id.hex(), e.namespace_id.hex()));
  }
  if (h.key != e.key) return corrupt_error("page holds another key");
  if (h.payload_bytes != e.payload_bytes) {
    return corrupt_error(
        fmt::format("payload of {} bytes (expected {})", h.payload_bytes, e.payload_bytes));
  }
  if (h.piece_count != e.piece_count || h.piece_bytes != e.piece_bytes) {
    return corrupt_error(fmt::format("layout {} pieces x {} bytes (expected {} x {})",
                                     h.piece_count, h.piece_bytes, e.piece_count, e.piece_bytes));
  }
  return ok_status();
}

Status verify_object(const Header& h, uint64_t object_size,
                     std::optional<std::span<const uint64_t>> chunk_checksums) {
  if (h.header_bytes != kHeaderBytes) {
    return corrupt_error(fmt::format("a page object with a {}-byte header", h.header_bytes));
  }
  if (object_size != object_bytes(h.payload_bytes)) {
    return corrupt_error(fmt::format("object is {} bytes; its header says {}", object_size,
                                     object_bytes(h.payload_bytes)));
  }
  if (chunk_checksums && combine_chunk_checksums(*chunk_checksums) != h.payload_checksum) {
    return corrupt_error("payload checksum mismatch");
  }
  return ok_status();
}

Status verify_record(const Header& h, uint64_t record_bytes,
                     std::optional<std::span<const uint64_t>> chunk_checksums) {
  if (record_bytes != page::record_bytes(h.header_bytes, h.payload_bytes)) {
    return corrupt_error(fmt::format("record is {} bytes; its header says {}", record_bytes,
                                     page::record_bytes(h.header_bytes, h.payload_bytes)));
  }
  if (chunk_checksums && combine_chunk_checksums(*chunk_checksums) != h.payload_checksum) {
    return corrupt_error("payload checksum mismatch");
  }
  return ok_status();
}

}  // namespace kvtier::page
