// The segment layout's files (docs/format.md, "Segment layout"): segment files holding
// records in the page format, and their summaries, which list what each segment holds.
//
//   <namespace dir>/seg/<writer>-<seq>.seg   4096-byte segment header, then records
//   <namespace dir>/seg/<writer>-<seq>.sum   64-byte entries: begin, put, remove, seal
//
// `writer` is 16 hex digits drawn at random by each store that writes (a process's own
// segments), `seq` 8 hex digits counting its segments. Only that writer appends to either
// file; records are written before the summary entries that name them, so an entry another
// process reads points at a complete record (which it still verifies).
//
// All integers little-endian. Pure encoding: no I/O, no state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/core/checksum.h"
#include "kvtier/core/status.h"

namespace kvtier::segment {

inline constexpr std::string_view kDir = "seg";
inline constexpr std::string_view kSegmentSuffix = ".seg";
inline constexpr std::string_view kSummarySuffix = ".sum";
inline constexpr uint16_t kVersion = 1;
// Records start after the segment header.
inline constexpr uint64_t kSegmentHeaderBytes = 4096;
inline constexpr size_t kEntryBytes = 64;

// "<writer:16 hex>-<seq:8 hex>", the name both files share before their suffix.
std::string segment_name(uint64_t writer, uint32_t seq);
// Parses "<name>.sum" into the shared name; nullopt for anything else.
std::optional<std::string> name_of_summary(std::string_view file_name);
// Parses "<name>.seg" into the shared name; nullopt for anything else.
std::optional<std::string> name_of_segment(std::string_view file_name);
bool is_segment_file(std::string_view file_name);

struct SegmentHeader {
  Hash128 namespace_id;
  uint64_t writer = 0;
  uint32_t seq = 0;
  uint64_t created_ns = 0;
};
// Fills all kSegmentHeaderBytes of `out`.
void encode_segment_header(const SegmentHeader& h, std::span<std::byte> out) noexcept;
Result<SegmentHeader> decode_segment_header(std::span<const std::byte> in);

enum class EntryType : uint8_t { kBegin = 1, kPut = 2, kRemove = 3, kSeal = 4 };

// One summary entry.
//   kBegin   first entry: key_hash = the namespace id, offset = writer, payload = seq
//   kPut     a record: key hash, offset in the segment, header bytes, payload and record bytes
//   kRemove  the key is gone as of `time_ns` (remove(), a corrupt record)
//   kSeal    the writer appends nothing more to this segment or its summary
struct Entry {
  EntryType type = EntryType::kPut;
  uint16_t header_bytes = 0;
  Hash128 key_hash;
  uint64_t offset = 0;
  uint64_t payload_bytes = 0;
  uint64_t record_bytes = 0;
  uint64_t time_ns = 0;
};
//   0 4 magic "KVS1" | 4 1 type | 5 1 reserved | 6 2 header bytes | 8 16 key hash |
//   24 8 offset | 32 8 payload bytes | 40 8 record bytes | 48 8 time ns |
//   56 8 checksum: XXH3-64 of bytes 0..55
void encode_entry(const Entry& e, std::span<std::byte, kEntryBytes> out) noexcept;
// nullopt when the bytes are not a whole, intact entry (a torn tail, zeros, garbage).
std::optional<Entry> decode_entry(std::span<const std::byte, kEntryBytes> in) noexcept;

}  // namespace kvtier::segment
