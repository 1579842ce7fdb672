// The segment layouts' lookups and their steps of the read path (store_read.cc runs the
// rest): a key the index does not hold is looked for in what other writers appended since
// this store last looked; a window opens each segment its records lie in once, and reads
// each record at its offset.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <optional>
#include <vector>

#include "layout/segments.h"
#include "window/store_core.h"

namespace kvtier {

Result<bool> SegmentLayout::look_up(const routing::Route& r) {
  // Not indexed: perhaps another writer appended it since this store looked.
  bump(s_.counters.index_stats);
  std::vector<bool> base(s_.router.base_count(), false);
  base[r.base] = true;
  segments_refresh(base, s_.lookup_max_age_ns());
  return s_.index.contains(r.key_hash);
}

size_t SegmentLayout::look_up_from(std::span<const std::string_view> keys, size_t n) {
  if (n == keys.size()) {
    bump(s_.counters.exists_queries, n);
    return n;
  }
  // One look at what other writers appended, then the index answers the rest.
  segments_refresh({}, s_.lookup_max_age_ns());
  bump(s_.counters.index_stats);
  for (; n < keys.size(); ++n) {
    if (!routing::validate_key(keys[n]).ok()) break;
    if (!s_.index.contains(s_.router.key_hash(keys[n]))) break;  // the route's key_hash
  }
  bump(s_.counters.exists_queries, std::min(n + 1, keys.size()));
  return n;
}

Status SegmentLayout::remove(const routing::Route& r) {
  if (!s_.index.contains(r.key_hash)) {
    std::vector<bool> base(s_.router.base_count(), false);
    base[r.base] = true;
    segments_refresh(base, s_.lookup_max_age_ns());
  }
  if (!s_.index.erase(r.key_hash)) {
    return not_found_error(fmt::format("no page {} to remove", r.key_hash.hex()));
  }
  return forget(r.key_hash, r.base);
}

void SegmentLayout::open_for_read(detail::ReadWindow& rw, std::span<Status> out,
                                  bool /*trust_size*/) {
  // Where each page's record is; keys this store has not indexed are looked for once in what
  // other writers appended on their bases since it last looked.
  std::vector<std::optional<PageIndex::Page>> where(rw.work.size());
  std::vector<bool> unindexed;
  for (size_t i = 0; i < rw.work.size(); ++i) {
    where[i] = s_.index.find(rw.work[i].route.key_hash);
    if (!where[i]) {
      unindexed.resize(s_.router.base_count(), false);
      unindexed[rw.work[i].route.base] = true;
    }
  }
  if (!unindexed.empty()) {
    segments_refresh(unindexed, s_.lookup_max_age_ns());
    for (size_t i = 0; i < rw.work.size(); ++i) {
      if (!where[i]) where[i] = s_.index.find(rw.work[i].route.key_hash);
    }
  }
  struct SegSpec {
    uint32_t id;
    bool direct;
  };
  std::vector<SegSpec> segs;
  std::vector<TargetSpec> specs;
  std::vector<size_t> spec_of(rw.work.size(), SIZE_MAX);
  for (size_t i = 0; i < rw.work.size(); ++i) {
    auto& w = rw.work[i];
    if (!where[i]) {
      out[w.page] = not_found_error("no such page");
      continue;
    }
    const PageIndex::Page& p = *where[i];
    w.at = p.offset;
    w.header_bytes = p.header_bytes;
    w.stored_bytes = p.bytes;
    w.header_only = p.payload != w.payload;
    // Direct I/O reads only aligned records; compact ones go through the page cache.
    if (w.io != PageIo::kBuffered &&
        (p.header_bytes != kHeaderBytes || p.offset % kBlockBytes != 0)) {
      w.io = PageIo::kBuffered;
      w.staging = StagingPool::Lease();
      bump(s_.counters.direct_fallback_pages);
    }
    const bool direct = w.io != PageIo::kBuffered;
    size_t s = 0;
    while (s < segs.size() && !(segs[s].id == p.segment && segs[s].direct == direct)) ++s;
    if (s == segs.size()) {
      segs.push_back({p.segment, direct});
      TargetSpec spec;
      {
        MutexLock lock(seg->mu);
        const SegmentFile& f = seg->files[p.segment];
        spec.path = f.seg_path;
        // A segment written whole is as large as its summary says (an object store then
        // opens it without a HEAD; the GET's answer is checked against it).
        if (seg->whole) spec.expected_size = f.ours ? f.end : f.record_end;
      }
      spec.direct = direct;
      specs.push_back(std::move(spec));
    }
    spec_of[i] = s;
  }
  std::vector<Result<Target>> opened = s_.agent.open_targets(specs);
  // Segments read are marked for other stores' clocks: their access time is set (one call
  // per segment and window; advice only, so a failure is ignored). This store's own reads
  // count per page instead (copy-forward, segments_capacity.cc).
  for (size_t s = 0; s < specs.size() && !seg->whole; ++s) {
    if (!opened[s].ok()) continue;
    const struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    (void)::utimensat(AT_FDCWD, specs[s].path.c_str(), times, 0);
  }
  for (const SegSpec& sp : segs) rw.segment_ids.push_back(sp.id);
  rw.segment_targets.reserve(opened.size());
  std::vector<Status> open_error(opened.size());
  for (auto& r : opened) {
    if (r.ok()) {
      rw.segment_targets.push_back(std::move(r).value());
    } else {
      open_error[rw.segment_targets.size()] = r.status();
      rw.segment_targets.emplace_back();
    }
  }
  rw.reading.reserve(rw.work.size());
  for (size_t i = 0; i < rw.work.size(); ++i) {
    if (spec_of[i] == SIZE_MAX) continue;
    auto& w = rw.work[i];
    const size_t s = spec_of[i];
    if (!open_error[s].ok()) {
      // A segment removed since it was indexed (reclaimed, cleared): a miss.
      out[w.page] = open_error[s];
      continue;
    }
    w.io_target = &rw.segment_targets[s];
    if (w.at + w.stored_bytes > w.io_target->size() || w.stored_bytes < w.header_bytes) {
      rw.reject(w.page, detail::Reject::kTorn);
      out[w.page] =
          corrupt_error(fmt::format("record [{}, +{}) lies beyond the end of '{}' ({})", w.at,
                                    w.stored_bytes, w.io_target->path(), w.io_target->size()));
      continue;
    }
    rw.reading.push_back(&w);
  }
}

void SegmentLayout::after_read(const detail::ReadWindow& rw) {
  if (rw.segment_ids.empty()) return;
  // The access times these reads set (open_for_read, and the kernel's own on a relatime
  // mount) are this store's: only a later one tells of another store's read.
  const uint64_t now = wall_ns();
  MutexLock lock(seg->mu);
  for (const uint32_t id : rw.segment_ids) seg->files[id].touched_ns = now;
}

uint64_t SegmentLayout::stored_bytes(const page::Header& h) const {
  return page::record_bytes(h.header_bytes, h.payload_bytes);
}

Status SegmentLayout::verify_stored(const page::Header& h, const detail::PageWork<MutableBuffer>& w,
                                    std::optional<std::span<const uint64_t>> sums) const {
  if (h.header_bytes != w.header_bytes) {
    return corrupt_error(fmt::format("record header of {} bytes; its summary says {}",
                                     h.header_bytes, w.header_bytes));
  }
  return page::verify_record(h, w.stored_bytes, sums);
}

std::string SegmentLayout::where(const detail::PageWork<MutableBuffer>& w) const {
  return fmt::format("record at {} of '{}'", w.at, w.io_target->path());
}

void SegmentLayout::drop_corrupt(detail::PageWork<MutableBuffer>& w) {
  // Records are never rewritten in place: the key is forgotten instead, by this store's
  // index and, through a remove entry, by every other.
  s_.index.erase(w.route.key_hash);
  if (s_.config.drop_corrupt && forget(w.route.key_hash, w.route.base).ok()) {
    bump(s_.counters.corrupt_dropped);
  }
}

void SegmentLayout::index_hit(const detail::PageWork<MutableBuffer>& w, uint64_t now) {
  // A record is indexed with its location before it can be read.
  s_.index.touch(w.route.key_hash, now);
}

}  // namespace kvtier
