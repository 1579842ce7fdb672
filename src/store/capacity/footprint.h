// What a bounded namespace takes on storage: the bytes `du` counts, not the bytes written. A
// store with a capacity_bytes keeps its whole tree within it (plus at most one page): the pages,
// and everything it keeps beside them.
//
// Pages are charged as the filesystem allocates them: a page file is its size rounded up to the
// filesystem's allocation unit, plus kEntryBytes for its name in its directory; a segment or
// summary file, which grows, its size plus a unit and kEntryBytes. Everything else a namespace
// keeps is its metadata, set aside from the capacity when the store opens (the pages get the rest):
//
//   fixed, per base:   the kvtier and namespace directories, the temporaries directory,
//                      the manifest; page files: 256 fan-out directories (a block each; the
//                      entries beyond a directory's first block are the pages' kEntryBytes);
//                      segments: the segment directory
//   fixed, once:       the ledger (usage, members), the clear generation
//   in proportion:     the shared files of the capacity room, each sized from the capacity:
//                      read marks (4 bytes per 16 KiB), the admission doorkeeper (20 bytes per
//                      16 KiB), the rings of keys asked and pages evicted (32 bytes per 32 KiB
//                      each): 0.35% of the capacity in all, a few blocks at least each
//
// Directories and small files are counted at a block each (kBlockBytes, or the allocation
// unit when larger), wherever the filesystem counts less (CephFS directories take none).
// Directory entries of ext4 and XFS take 40-56 bytes for kvtier's names, and a directory's
// blocks split half full, so kEntryBytes = 128 covers them.
//
// The floor: a capacity is refused when it does not hold its metadata and one page (segments:
// and two segments of kMinSegmentBytes beside it, one sealed and one being written, or the
// store could reclaim nothing to make room: reclaim_bytes()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/status.h"

namespace kvtier::footprint {

inline constexpr uint64_t kBlockBytes = 4096;  // a directory block, a small file
inline constexpr uint64_t kEntryBytes = 128;   // a name in a directory, as charged
inline constexpr uint64_t kFanouts = 256;      // fan-out directories of the page-file layout
// The segment layout reclaims capacity a segment at a time, segments of 1/64 of the capacity
// and this many bytes at least.
inline constexpr uint64_t kMinSegmentBytes = uint64_t{1} << 20;

// The sizes of the namespace's shared files for a capacity (0: unbounded), in elements: every
// store that makes one makes it this size.
uint64_t read_mark_slots(uint64_t capacity_bytes);        // 4 bytes each
uint64_t ring_slots(uint64_t capacity_bytes);             // 32 bytes each (key_ring.h)
uint64_t doorkeeper_words(uint64_t capacity_bytes);       // 8 bytes each, both generations
uint64_t generation_words(uint64_t keys_per_generation);  // one doorkeeper generation's words

// What a store of this shape sets aside for its metadata (above).
struct Shape {
  uint64_t capacity_bytes = 0;
  bool page_files = true;  // else segments
  size_t bases = 1;
  uint64_t unit = kBlockBytes;  // the filesystem's allocation unit (allocation_unit())
};
uint64_t metadata_bytes(const Shape& shape);

// The shared files such a store makes in its namespace directory (on base 0), by name, with
// what each takes; part of metadata_bytes().
struct SharedFileBytes {
  std::string_view name;
  uint64_t bytes;
};
std::vector<SharedFileBytes> shared_files(const Shape& shape);

// The filesystem's allocation unit under `dir`: its fragment size, or 512 bytes where that is
// not a disk block (network filesystems that report an object size there, as CephFS does 4
// MiB, and count st_blocks from the size).
uint64_t allocation_unit(const std::string& dir);

// What `bytes` of one file take with allocation unit `unit`, its directory entry included.
inline uint64_t file_bytes(uint64_t bytes, uint64_t unit) {
  return (bytes + unit - 1) / unit * unit + kEntryBytes;
}

// What a file appended to (a segment, a summary) is charged at `bytes`: its bytes, a unit for
// its last block however full, and its directory entry, so that what it is charged when made
// and as it grows is what it gives back when removed.
inline uint64_t appended_file_bytes(uint64_t bytes, uint64_t unit) {
  return bytes + unit + kEntryBytes;
}

// What the segment layout needs beside its pages to reclaim any: a sealed segment of
// kMinSegmentBytes and the one being written beside it, with what their files take beyond
// their bytes; 0 for page files.
uint64_t reclaim_bytes(const Shape& shape);

// kInvalidArgument when `shape`'s capacity does not hold its metadata and a page of
// `page_bytes` (0: not known; a block), and for segments reclaim_bytes(), naming the smallest
// it takes.
Status check_floor(const Shape& shape, uint64_t page_bytes);

}  // namespace kvtier::footprint
