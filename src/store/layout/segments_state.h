// The segment layout's state in one store (docs/architecture.md, "Segment layout"): the table
// of segment files this store knows (its own and others'), each base's I/O locks and buffers,
// the lanes' active segments and the reclaim clock. The layout's code is segments*.cc
// (segments.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/segment_format.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/mutex.h"
#include "kvtier/core/worker_pool.h"
#include "kvtier/transfer/agent.h"
#include "naming/routing.h"

namespace kvtier {

// A namespace's segment directory under base `b` (the segment layout's files).
inline std::string segment_dir(const routing::Router& router, size_t b) {
  return router.namespace_dir(b) + "/" + std::string(segment::kDir);
}

// One segment file as this store knows it.
struct SegmentFile {
  std::string name;  // "<writer>-<seq>"
  uint32_t base = 0;
  std::string seg_path;
  std::string sum_path;
  uint64_t summary_read = 0;  // others' segments: summary bytes applied to the index
  uint64_t listed_bytes = 0;  // segments written whole: the summary's size when listed
  uint64_t record_end = 0;    // others' segments: the end of the last record seen
  bool sealed = false;        // its summary ends with a seal: nothing more will come
  bool ours = false;          // this store writes it
  // Capacity (docs/architecture.md, "Segment layout"): reclaimable once in the clock (sealed,
  // or abandoned by a writer that is gone); removed.
  bool in_clock = false;
  bool gone = false;
  uint64_t clock_ns = 0;  // when it last joined the clock (wall clock)
  // Its place in the clock, which is kept in this order: clock_ns, or for a segment of
  // copies forward the latest read among its records (copies_read_ns when it joined).
  uint64_t order_ns = 0;
  // When this store last set its access time (a read): a later one is another store's read.
  uint64_t touched_ns = 0;
  // Ours only:
  uint64_t end = 0;             // where the next record goes
  uint64_t summary_end = 0;     // where the next summary entry goes
  uint32_t in_flight = 0;       // put windows with records here whose entries are not written
  bool retired = false;         // no new records; sealed once in_flight drops to zero
  uint64_t copies_read_ns = 0;  // copies forward: the latest read among its records
};

// One base's share of the segment layout's I/O. Creating this store's segments there,
// opening their append targets, appending their summary entries and learning what others
// appended there run holding these mutexes, never Segments::mu (which guards only memory):
// a base whose mount hangs holds up only the calls that need that base.
struct SegmentBase {
  // This store's segments on the base: rolls, appends and their targets (taken before
  // Segments::mu, never while holding it).
  Mutex io;
  AlignedBuffer append_buf;  // summary entries being appended, used holding `io`
  Registration append_reg;
  // Learning what other writers appended on the base.
  Mutex refresh;
  AlignedBuffer read_buf;  // used holding `refresh`
  Registration read_reg;
  // The directory's time when last listed, if it was settled then (0: list again).
  uint64_t dir_mtime KVTIER_GUARDED_BY(refresh) = 0;
  // When the last look that completed began (now_ns()); 0: none since open. Stored holding
  // `refresh`, once the look's findings are in the index; read without it.
  std::atomic<uint64_t> looked_ns{0};
};

struct Segments {
  uint64_t writer = 0;  // this store's writer id (random)
  Mutex mu;             // the table (memory only: no I/O is done holding it)
  uint32_t next_seq KVTIER_GUARDED_BY(mu) = 0;
  std::vector<SegmentFile> files KVTIER_GUARDED_BY(mu);  // index = the store's segment number
  std::unordered_map<std::string, uint32_t> by_name KVTIER_GUARDED_BY(mu);
  // The segment each lane appends to, per base: index base * lanes + lane; then the one
  // copies forward go to, per base (SegmentLayout::copy_slot).
  std::vector<std::optional<uint32_t>> active KVTIER_GUARDED_BY(mu);
  size_t lanes = 1;
  // Writes a window's lanes side by side (lanes - 1 threads and the caller), started by the
  // first window of more than one run: a store that never writes one has no thread of it
  // (tests fork children from processes holding such stores).
  std::once_flag lane_pool_started;
  std::unique_ptr<WorkerPool> lane_pool;
  // Records and summary entries are synced after each window (fsync, or a base on FUSE:
  // see segments_open).
  bool sync_appends = false;
  // Segments are written whole and never appended to (an object store): one per lane, base
  // and window, each sealed by the summary written after it (segments_objects.cc).
  bool whole = false;
  // Reclaimable segments, oldest first (order_ns: in the order they were last written, as
  // this store learnt of them, copies forward by when they were read); the clock hand is the
  // front.
  std::deque<uint32_t> clock KVTIER_GUARDED_BY(mu);
  // Per base (router order).
  std::unique_ptr<SegmentBase[]> bases;
};

}  // namespace kvtier
