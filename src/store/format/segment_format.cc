#include "format/segment_format.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

namespace kvtier::segment {
namespace {

static_assert(std::endian::native == std::endian::little, "big-endian hosts need byte swaps");

constexpr char kSegmentMagic[8] = {'K', 'V', 'T', 'S', 'E', 'G', '0', '1'};
constexpr char kEntryMagic[4] = {'K', 'V', 'S', '1'};

template <typename T>
void put(std::byte* b, size_t off, T v) {
  std::memcpy(b + off, &v, sizeof(T));
}
template <typename T>
T get(const std::byte* b, size_t off) {
  T v;
  std::memcpy(&v, b + off, sizeof(T));
  return v;
}

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::optional<std::string> name_with_suffix(std::string_view file_name, std::string_view suffix) {
  if (!file_name.ends_with(suffix)) return std::nullopt;
  file_name.remove_suffix(suffix.size());
  if (file_name.size() != 25 || file_name[16] != '-' || !is_hex(file_name.substr(0, 16)) ||
      !is_hex(file_name.substr(17))) {
    return std::nullopt;
  }
  return std::string(file_name);
}

}  // namespace

std::string segment_name(uint64_t writer, uint32_t seq) {
  return fmt::format("{:016x}-{:08x}", writer, seq);
}

std::optional<std::string> name_of_summary(std::string_view file_name) {
  return name_with_suffix(file_name, kSummarySuffix);
}

std::optional<std::string> name_of_segment(std::string_view file_name) {
  return name_with_suffix(file_name, kSegmentSuffix);
}

bool is_segment_file(std::string_view file_name) {
  return name_with_suffix(file_name, kSegmentSuffix).has_value() ||
         name_with_suffix(file_name, kSummarySuffix).has_value();
}

void encode_segment_header(const SegmentHeader& h, std::span<std::byte> out) noexcept {
  std::byte* b = out.data();
  std::memset(b, 0, kSegmentHeaderBytes);
  std::memcpy(b, kSegmentMagic, sizeof(kSegmentMagic));
  put<uint16_t>(b, 8, kVersion);
  put<uint64_t>(b, 16, h.namespace_id.high);
  put<uint64_t>(b, 24, h.namespace_id.low);
  put<uint64_t>(b, 32, h.writer);
  put<uint32_t>(b, 40, h.seq);
  put<uint64_t>(b, 48, h.created_ns);
  put<uint64_t>(b, 56, checksum64(b, 56));
}

Result<SegmentHeader> decode_segment_header(std::span<const std::byte> in) {
  if (in.size() < 64) return corrupt_error("segment header: too short");
  const std::byte* b = in.data();
  if (std::memcmp(b, kSegmentMagic, sizeof(kSegmentMagic)) != 0) {
    return corrupt_error("segment header: bad magic");
  }
  if (get<uint64_t>(b, 56) != checksum64(b, 56)) {
    return corrupt_error("segment header: checksum mismatch");
  }
  if (const auto v = get<uint16_t>(b, 8); v != kVersion) {
    return corrupt_error(
        fmt::format("segment format version {} (this build reads {})", v, kVersion));
  }
  SegmentHeader h;
  h.namespace_id = Hash128{get<uint64_t>(b, 16), get<uint64_t>(b, 24)};
  h.writer = get<uint64_t>(b, 32);
  h.seq = get<uint32_t>(b, 40);
  h.created_ns = get<uint64_t>(b, 48);
  return h;
}

void encode_entry(const Entry& e, std::span<std::byte, kEntryBytes> out) noexcept {
  std::byte* b = out.data();
  std::memset(b, 0, kEntryBytes);
  std::memcpy(b, kEntryMagic, sizeof(kEntryMagic));
  put<uint8_t>(b, 4, static_cast<uint8_t>(e.type));
  put<uint16_t>(b, 6, e.header_bytes);
  put<uint64_t>(b, 8, e.key_hash.high);
  put<uint64_t>(b, 16, e.key_hash.low);
  put<uint64_t>(b, 24, e.offset);
  put<uint64_t>(b, 32, e.payload_bytes);
  put<uint64_t>(b, 40, e.record_bytes);
  put<uint64_t>(b, 48, e.time_ns);
  put<uint64_t>(b, 56, checksum64(b, 56));
}

std::optional<Entry> decode_entry(std::span<const std::byte, kEntryBytes> in) noexcept {
  const std::byte* b = in.data();
  if (std::memcmp(b, kEntryMagic, sizeof(kEntryMagic)) != 0) return std::nullopt;
  if (get<uint64_t>(b, 56) != checksum64(b, 56)) return std::nullopt;
  const auto type = get<uint8_t>(b, 4);
  if (type < 1 || type > 4) return std::nullopt;
  Entry e;
  e.type = static_cast<EntryType>(type);
  e.header_bytes = get<uint16_t>(b, 6);
  e.key_hash = Hash128{get<uint64_t>(b, 8), get<uint64_t>(b, 16)};
  e.offset = get<uint64_t>(b, 24);
  e.payload_bytes = get<uint64_t>(b, 32);
  e.record_bytes = get<uint64_t>(b, 40);
  e.time_ns = get<uint64_t>(b, 48);
  return e;
}

}  // namespace kvtier::segment
