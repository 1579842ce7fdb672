// What a bounded namespace takes on storage (footprint.h).
#include "capacity/footprint.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>

#include "kvtier/store/store.h"
#include "naming/routing.h"

namespace kvtier::footprint {
namespace {

constexpr uint64_t kSharedHeaderBytes = 64;  // shared_file.h
constexpr uint64_t kMarkBytes = 4;
constexpr uint64_t kRingSlotBytes = 32;
constexpr uint64_t kWordBytes = 8;
constexpr uint64_t kMarkGrain = 16384;  // a read mark per 16 KiB of capacity
constexpr uint64_t kRingGrain = 32768;  // a ring slot per 32 KiB
constexpr uint64_t kMaxUnit = 65536;    // larger "blocks" are not allocation units

// The doorkeeper: 8 capacities of keys per generation, 10 bits a key (admission.h), for pages
// as small as 16 KiB.
constexpr uint64_t kDoorkeeperPage = 16384;
constexpr uint64_t kDoorkeeperFactor = 8;
constexpr uint64_t kBitsPerKey = 10;
constexpr uint64_t kMaxGenerationBits = uint64_t{1} << 28;  // 32 MiB per generation

uint64_t round_up(uint64_t bytes, uint64_t unit) {
  return (bytes + unit - 1) / unit * unit;
}

}  // namespace

uint64_t read_mark_slots(uint64_t capacity_bytes) {
  // Four ways a bucket (read_marks.h); a block's worth at least.
  return std::clamp<uint64_t>(capacity_bytes / kMarkGrain, 1008, uint64_t{1} << 24) / 4 * 4;
}

uint64_t ring_slots(uint64_t capacity_bytes) {
  return std::clamp<uint64_t>(capacity_bytes / kRingGrain, 1024, 65536);
}

uint64_t generation_words(uint64_t keys_per_generation) {
  return std::clamp<uint64_t>(keys_per_generation * kBitsPerKey, 64 * 64, kMaxGenerationBits) / 64;
}

uint64_t doorkeeper_words(uint64_t capacity_bytes) {
  const uint64_t pages = std::max<uint64_t>(capacity_bytes / kDoorkeeperPage, 1);
  return 2 * generation_words(pages * kDoorkeeperFactor);
}

std::vector<SharedFileBytes> shared_files(const Shape& shape) {
  const auto shared = [&](uint64_t elements, uint64_t element_bytes) {
    return round_up(kSharedHeaderBytes + elements * element_bytes, shape.unit);
  };
  const uint64_t c = shape.capacity_bytes;
  std::vector<SharedFileBytes> files = {
      {routing::kDoorkeeperFile, shared(doorkeeper_words(c), kWordBytes)},
      {routing::kLookupsFile, shared(ring_slots(c), kRingSlotBytes)}};
  if (shape.page_files) {
    files.push_back({routing::kReadMarksFile, shared(read_mark_slots(c), kMarkBytes)});
    files.push_back({routing::kGoneFile, shared(ring_slots(c), kRingSlotBytes)});
  }
  return files;
}

uint64_t metadata_bytes(const Shape& shape) {
  const uint64_t unit = shape.unit;
  const uint64_t dir = std::max(kBlockBytes, unit);
  const uint64_t small_file = round_up(1, unit);
  // Per base: the kvtier and namespace directories, the temporaries directory (two blocks:
  // named temporaries come and go there), the manifest.
  uint64_t per_base = 4 * dir + small_file;
  per_base += shape.page_files ? kFanouts * dir : dir;  // fan-outs, or the segment directory
  // Once: the ledger's usage (its members file stays empty) and the clear generation (two: a
  // new one is written before it replaces the old).
  uint64_t once = 3 * small_file;
  for (const SharedFileBytes& f : shared_files(shape)) once += f.bytes;
  return shape.bases * per_base + once;
}

uint64_t reclaim_bytes(const Shape& shape) {
  // A sealed segment to reclaim and the segment being written beside it, each with its files.
  return shape.page_files ? 0 : 2 * (kMinSegmentBytes + 2 * appended_file_bytes(0, shape.unit));
}

uint64_t allocation_unit(const std::string& dir) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return kBlockBytes;
  const uint64_t unit = fs.f_frsize != 0 ? fs.f_frsize : fs.f_bsize;
  return unit >= 512 && unit <= kMaxUnit ? unit : 512;
}

Status check_floor(const Shape& shape, uint64_t page_bytes) {
  const uint64_t metadata = metadata_bytes(shape);
  const uint64_t page =
      file_bytes(std::max<uint64_t>(page_bytes, 1), shape.unit) + reclaim_bytes(shape);
  if (shape.capacity_bytes >= metadata + page) return ok_status();
  return invalid_argument_error(fmt::format(
      "capacity_bytes {} is too small: a store of {} on {} base{} keeps {} bytes beside its "
      "pages (directories, the capacity ledger, the shared files of eviction and admission), "
      "and {} take{} {} bytes; give it at least {}",
      shape.capacity_bytes, shape.page_files ? "page files" : "segments", shape.bases,
      shape.bases == 1 ? "" : "s", metadata,
      shape.page_files ? (page_bytes ? "a page" : "the smallest page")
                       : (page_bytes ? "a page and the two 1 MiB segments reclaiming needs"
                                     : "the smallest page and the two 1 MiB segments reclaiming "
                                       "needs"),
      shape.page_files ? "s" : "", page, metadata + page));
}

}  // namespace kvtier::footprint

namespace kvtier {

uint64_t capacity_page_bytes(uint64_t object_bytes) {
  return footprint::file_bytes(object_bytes, footprint::kBlockBytes);
}

uint64_t capacity_holding(uint64_t page_bytes, StoreLayout layout, size_t bases) {
  footprint::Shape shape{.page_files = layout == StoreLayout::kFiles, .bases = bases};
  // The metadata grows with the capacity (0.35%): a few rounds settle it.
  const uint64_t pages = page_bytes + footprint::reclaim_bytes(shape);
  uint64_t capacity = pages;
  for (int i = 0; i < 4; ++i) {
    shape.capacity_bytes = capacity;
    capacity = pages + footprint::metadata_bytes(shape);
  }
  return capacity;
}

}  // namespace kvtier
