// The segment layouts (docs/architecture.md, "Segment layout"; docs/format.md): each store
// that writes appends records to segment files of its own and lists them in a summary beside
// each segment; every store indexes the summaries (all of them on open, the new entries of
// others' summaries when a key is not indexed), and reads a record with one read at its
// offset, verified like a page. With a capacity, whole sealed segments are reclaimed, oldest
// first, and the pages this store read in them are copied forward.
//
//   FileSegments    on directories: records appended, summaries appended after them
//   ObjectSegments  on an object store: each segment and its summary written whole, once
//
// Their code: segments.cc (open, scan, refresh, a remove entry, clear), segments_write.cc
// (the put window: appends, summaries, rolls, seals), segments_objects.cc (segments written
// whole), segments_capacity.cc (reclaiming), segments_read.cc (lookups, remove and the read
// path's steps). Their state, and its locks, are segments_state.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/page_index.h"
#include "format/segment_format.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/mutex.h"
#include "kvtier/store/store.h"
#include "layout/layout.h"
#include "layout/segments_state.h"

namespace kvtier {

class SegmentLayout : public Layout {
 public:
  explicit SegmentLayout(StoreCore& store) : s_(store) {}
  // layout=auto: whether `store`'s namespace holds segments.
  static Result<bool> holds_pages(StoreCore& store);

  StoreLayout kind() const override { return StoreLayout::kSegments; }
  bool fans_out() const override { return false; }
  Status open() override;
  Result<uint64_t> charged_bytes() override;
  void with_capacity(bool alone) override;
  void catch_up() override {}  // removals come through the summaries
  Result<bool> look_up(const routing::Route& route) override;
  size_t look_up_from(std::span<const std::string_view> keys, size_t n) override;
  Status remove(const routing::Route& route) override;
  Status clear() override;
  bool orders_batches() const override { return false; }  // segments go whole
  bool seals_whole_pages() const override { return true; }
  bool trusts_sizes() const override { return false; }
  void open_for_read(detail::ReadWindow& rw, std::span<Status> out, bool trust_size) override;
  void after_read(const detail::ReadWindow& rw) override;
  uint64_t stored_bytes(const page::Header& h) const override;
  Status verify_stored(const page::Header& h, const detail::PageWork<MutableBuffer>& w,
                       std::optional<std::span<const uint64_t>> sums) const override;
  std::string where(const detail::PageWork<MutableBuffer>& w) const override;
  void drop_corrupt(detail::PageWork<MutableBuffer>& w) override;
  void index_hit(const detail::PageWork<MutableBuffer>& w, uint64_t now) override;

 protected:
  // Records that `key_hash` is gone (a summary remove entry) so no store finds it again.
  virtual Status forget(const Hash128& key_hash, size_t base) = 0;

  // Creates the segment directories and scratch buffers and indexes every summary.
  Status segments_open();
  // Reads every summary of the namespace into the index (restart; never reads payloads).
  Status segments_scan();
  // Applies what other writers appended since the last look (new segments, new entries), on
  // the bases `want` names (all when empty) that are serving (a base not answering is left
  // alone: its pages are misses anyway), except those where a look began after this call did,
  // or at most max_age_ns before it (lookups pass StoreCore::lookup_max_age_ns(), from
  // config.refresh_ms).
  void segments_refresh(const std::vector<bool>& want = {}, uint64_t max_age_ns = 0);
  // Appends records and their summary entries to this store's segments.
  // `relocating`: the pages are copies of records being reclaimed (copy_forward), last read
  // at `read_ns` or before: they go to a segment of their own, sealed with the window, that
  // joins the clock where that read puts it (not at the back); counted as relocated; room is
  // made for them without copying forward again.
  void put_window_segments(std::span<const std::string_view> keys,
                           std::span<const ConstBuffer> pieces, size_t k, std::span<Status> out,
                           bool relocating = false, uint64_t read_ns = 0);
  // Active slots (Segments::active): a base's copies forward go to its slot after every
  // lane's.
  size_t copy_slot(size_t base) const;
  size_t slot_base(size_t slot) const;
  // sync_appends: makes the records of a window durable, one sync per segment target written
  // (`by_target`: the pages written through each, indexes into `work`), before their summary
  // entries are appended. The pages of a target whose sync failed get its error and leave
  // `by_target`.
  void sync_records(std::span<const detail::PageWork<ConstBuffer>> work,
                    std::span<std::vector<size_t>> by_target, std::span<Status> out);
  // Segments on an object store (segments_objects.cc): written whole, sealed at once.
  struct WholeSegment {
    uint32_t id;   // the store's number for it (seg->files)
    uint32_t seq;  // in its name
    size_t base;
    std::vector<size_t> pages;  // indexes into the window's `work`
    uint64_t end;               // its size: the header and every record
  };
  // `count` new segments of this store on base `b`, known to the table (not yet written).
  std::vector<WholeSegment> new_whole_segments(size_t b, size_t count) KVTIER_EXCLUDES(seg->mu);
  // Uploads the summary of each of `segs` (its begin entry, `entries`, a seal) side by side.
  std::vector<Status> write_whole_summaries(std::span<const WholeSegment> segs,
                                            std::span<const std::vector<segment::Entry>> entries)
      KVTIER_EXCLUDES(seg->mu);
  // Reads the summaries of segments `ids` (written whole: others', or all at open) side by
  // side and applies them to the index in the order they were written; each is then sealed.
  // One that cannot be read now is left for the next look.
  void apply_whole_summaries(std::span<const uint32_t> ids, bool at_open) KVTIER_EXCLUDES(seg->mu);
  // The put window on an object store: each segment of the window one upload.
  void put_window_whole(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces,
                        size_t k, std::span<Status> out);
  // forget() on an object store: a summary of its own with the remove entry.
  Status forget_whole(const Hash128& key_hash, size_t base);
  // Capacity for the segment layout: `need` bytes are charged to the ledger, whole
  // reclaimable segments removed (oldest first; one that other stores read gets a second
  // chance) until they fit; with `copy_forward_pages`, the pages of each this store read
  // since they were put are written again first (below).
  Status reserve_segments(uint64_t need, bool copy_forward_pages = true);
  // Copy-forward: the records of segments about to be reclaimed that this store read since
  // they were put, read and verified before the segments go.
  struct CopyForward {
    struct Record {
      PageIndex::Page page;  // its index entry
      uint64_t at = 0;       // where its record lies in `records`
      std::string key;       // from here on: from its verified header
      uint32_t piece_count = 0;
      uint64_t piece_bytes = 0;
    };
    std::vector<Record> records;
    AlignedBuffer bytes;
    Registration reg;
  };
  CopyForward read_for_copy_forward(std::span<const uint32_t> victims);
  // Writes them again (after their segments are gone); returns how many were written.
  size_t copy_forward(CopyForward& cf);
  // The bytes of every segment file of the namespace (what the ledger charges at a lone open).
  Result<uint64_t> segment_file_bytes();
  // After a lone open: others' segments not sealed belong to writers that are gone.
  void segments_adopt_abandoned();
  // REQUIRES seg->mu: a segment learnt sealed (or abandoned) joins the clock.
  void make_reclaimable(uint32_t id) KVTIER_REQUIRES(seg->mu);
  // Removes the index entries of segments marked gone (journalled as evicted); returns how
  // many.
  size_t forget_gone_segments();
  // The next four run holding the segment's base's `io` (SegmentBase), not seg->mu; what they
  // add to this store's files is added to `*grown`.
  // Starts a new segment for active slot `slot` (on base slot_base(slot)), retiring the one
  // there.
  Status roll_segment(size_t slot, uint64_t* grown) KVTIER_EXCLUDES(seg->mu);
  Status append_entries(uint32_t id, std::span<const segment::Entry> entries, uint64_t* grown)
      KVTIER_EXCLUDES(seg->mu);
  // No new records; sealed once no window has records in it in flight.
  void retire_segment(uint32_t id, uint64_t* grown) KVTIER_EXCLUDES(seg->mu);
  // A window's entries in segment `id` are written (or abandoned).
  void finish_in_flight(uint32_t id, uint64_t* grown) KVTIER_EXCLUDES(seg->mu);
  // Reads `sum_path` on base `b` (holding its `refresh`) from `from` (bytes) and calls
  // fn(entry) for each intact entry up to the first that is not (a torn or unwritten tail):
  // returns where that stopped.
  Result<uint64_t> read_summary(size_t b, const std::string& sum_path, uint64_t from,
                                const std::function<void(const segment::Entry&)>& fn);
  // Lists base `b`'s segment directory: fn(name, size) for each summary (size 0 unless
  // `with_sizes`).
  static Status list_summaries_of(StoreCore& s, size_t b,
                                  const std::function<void(const std::string&, uint64_t)>& fn,
                                  bool with_sizes = false);
  Status list_summaries(size_t b, const std::function<void(const std::string&, uint64_t)>& fn,
                        bool with_sizes = false);

  StoreCore& s_;
  std::unique_ptr<Segments> seg;
};

// Segments on directories: records are appended to this store's segment files and their
// entries to the summaries beside them, synced when config.fsync asks.
class FileSegments final : public SegmentLayout {
 public:
  using SegmentLayout::SegmentLayout;
  void put_window(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces,
                  size_t k, std::span<Status> out) override {
    put_window_segments(keys, pieces, k, out);
  }

 protected:
  Status forget(const Hash128& key_hash, size_t base) override;
};

// Segments on an object store, which cannot append: each window's pages go up as whole
// segments, one upload per lane and base, each sealed by the summary uploaded after it.
class ObjectSegments final : public SegmentLayout {
 public:
  using SegmentLayout::SegmentLayout;
  void put_window(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces,
                  size_t k, std::span<Status> out) override {
    put_window_whole(keys, pieces, k, out);
  }

 protected:
  Status forget(const Hash128& key_hash, size_t base) override {
    return forget_whole(key_hash, base);
  }
};

}  // namespace kvtier
