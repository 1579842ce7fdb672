#include "format/sealed_page.h"

#include <fmt/format.h>

#include "format/header_fields.h"

namespace kvtier::page {

using namespace fields;

namespace {

constexpr size_t kOffReserved = 104;
constexpr size_t kReservedBytes = kOffHeaderChecksum - kOffReserved;

// XXH3-64 of bytes 0..119 followed by the sealed area.
uint64_t sealed_checksum(const std::byte* block, size_t area_bytes) {
  std::array<std::byte, kHeaderBytes> bytes;
  std::memcpy(bytes.data(), block, kOffHeaderChecksum);
  std::memcpy(bytes.data() + kOffHeaderChecksum, block + kOffKey, area_bytes);
  return checksum64(bytes.data(), kOffHeaderChecksum + area_bytes);
}

template <typename Byte>
struct Parts {
  std::span<Byte> sealed_key, key_tag, salt, chunk_tags;
};
template <typename Byte>
Parts<Byte> parts(Byte* block, size_t key_bytes, size_t chunks) {
  Byte* p = block + kOffKey;
  Parts<Byte> r;
  r.sealed_key = {p, key_bytes};
  r.key_tag = {p + key_bytes, kSealTagBytes};
  r.salt = {p + key_bytes + kSealTagBytes, kSealSaltBytes};
  r.chunk_tags = {p + key_bytes + kSealTagBytes + kSealSaltBytes, kSealTagBytes * chunks};
  return r;
}

}  // namespace

SealedSlots encode_sealed(const Header& h, uint32_t key_id, uint64_t page_number,
                          std::span<std::byte, kHeaderBytes> out) noexcept {
  std::byte* b = out.data();
  encode_fixed(h, kFlagSealed, 0, sealed_chunk_bytes(h.payload_bytes), b);
  put<uint32_t>(b, kOffKeyId, key_id);
  put<uint64_t>(b, kOffPageNumber, page_number);
  const Parts<std::byte> p = parts(b, h.key.size(), sealed_chunk_count(h.payload_bytes));
  return SealedSlots{std::span<const std::byte>(b, kSealBoundBytes), p.sealed_key, p.key_tag,
                     p.salt, p.chunk_tags};
}

void finish_sealed(std::span<std::byte, kHeaderBytes> out) noexcept {
  std::byte* b = out.data();
  const size_t area =
      sealed_area_bytes(get<uint32_t>(b, kOffKeyBytes), get<uint64_t>(b, kOffPayloadBytes));
  put<uint64_t>(b, kOffHeaderChecksum, sealed_checksum(b, area));
}

bool is_sealed(std::span<const std::byte, kHeaderBytes> block) noexcept {
  return std::memcmp(block.data(), kMagic, sizeof(kMagic)) == 0 &&
         get<uint32_t>(block.data(), kOffFlags) == kFlagSealed;
}

Result<Header> decode_sealed(std::span<const std::byte, kHeaderBytes> in, SealedView& view) {
  const std::byte* b = in.data();
  if (std::memcmp(b, kMagic, sizeof(kMagic)) != 0) return corrupt_error("bad magic");
  const auto version = get<uint16_t>(b, kOffVersion);
  if (version != kVersion) {
    return corrupt_error(fmt::format("format version {} (this build reads {})", version, kVersion));
  }
  if (get<uint32_t>(b, kOffFlags) != kFlagSealed) {
    return corrupt_error("a page in the clear where this store reads sealed pages");
  }
  const auto key_bytes = get<uint32_t>(b, kOffKeyBytes);
  if (key_bytes == 0 || key_bytes > kMaxKeyBytes) {
    return corrupt_error(fmt::format("key length {}", key_bytes));
  }
  const auto payload_bytes = get<uint64_t>(b, kOffPayloadBytes);
  // Checked before the sizes below are computed from it (a huge one would loop in
  // sealed_chunk_bytes).
  if (payload_bytes > kMaxSealedPayloadBytes) {
    return corrupt_error(fmt::format("payload of {} bytes", payload_bytes));
  }
  const auto header_bytes = get<uint16_t>(b, kOffHeaderSize);
  if (header_bytes != kHeaderBytes &&
      header_bytes != compact_sealed_header_bytes(key_bytes, payload_bytes)) {
    return corrupt_error(fmt::format("header size {}", header_bytes));
  }
  const size_t area = sealed_area_bytes(key_bytes, payload_bytes);
  if (sealed_checksum(b, area) != get<uint64_t>(b, kOffHeaderChecksum)) {
    return corrupt_error("header checksum mismatch");
  }
  const auto chunk = get<uint32_t>(b, kOffChunkBytes);
  if (chunk != sealed_chunk_bytes(payload_bytes)) {
    return corrupt_error(fmt::format("sealed chunks of {} bytes (expected {})", chunk,
                                     sealed_chunk_bytes(payload_bytes)));
  }
  for (size_t i = kOffReserved; i < kOffReserved + kReservedBytes; ++i) {
    if (b[i] != std::byte{0}) return corrupt_error("reserved header bytes are not zero");
  }
  Header h;
  h.namespace_id = get_hash(b, kOffNamespace);
  h.key_hash = get_hash(b, kOffKeyHash);
  h.payload_bytes = payload_bytes;
  h.payload_checksum = 0;
  h.piece_count = get<uint32_t>(b, kOffPieceCount);
  h.piece_bytes = get<uint64_t>(b, kOffPieceBytes);
  h.created_ns = get<uint64_t>(b, kOffCreated);
  h.header_bytes = header_bytes;
  const Parts<const std::byte> p = parts(b, key_bytes, sealed_chunk_count(payload_bytes));
  view.key_id = get<uint32_t>(b, kOffKeyId);
  view.page_number = get<uint64_t>(b, kOffPageNumber);
  view.chunk_bytes = chunk;
  view.bound = std::span<const std::byte>(b, kSealBoundBytes);
  view.sealed_key = p.sealed_key;
  view.key_tag = p.key_tag;
  view.salt = p.salt;
  view.chunk_tags = p.chunk_tags;
  return h;
}

}  // namespace kvtier::page
