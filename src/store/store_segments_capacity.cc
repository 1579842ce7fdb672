// The segment layout's capacity (docs/architecture.md, "Segment layout", capacity and
// eviction): a put window reserves an upper bound of what it adds under the shared ledger,
// whole sealed segments are reclaimed oldest first (a segment read since it last went to the
// back of the queue gets a second chance), and the unused part is given back afterwards.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>

#include "store_impl.h"

namespace kvtier {

void Store::Impl::make_reclaimable(uint32_t id) {
  SegmentFile& f = seg->files[id];
  if (f.in_clock || f.gone) return;
  if (f.ours && !f.sealed) return;  // this store still appends to it
  f.in_clock = true;
  f.clock_ns = wall_ns();
  seg->clock.push_back(id);
}

void Store::Impl::segments_adopt_abandoned() {
  MutexLock lock(seg->mu);
  for (uint32_t id = 0; id < seg->files.size(); ++id) {
    if (!seg->files[id].ours && !seg->files[id].sealed) make_reclaimable(id);
  }
}

size_t Store::Impl::forget_gone_segments() {
  std::vector<bool> gone;
  {
    MutexLock lock(seg->mu);
    gone.reserve(seg->files.size());
    for (const SegmentFile& f : seg->files) gone.push_back(f.gone);
  }
  const std::vector<Hash128> erased =
      index.erase_segments([&](uint32_t id) { return id < gone.size() && gone[id]; });
  evictions.add(erased);
  return erased.size();
}

Result<uint64_t> Store::Impl::segment_file_bytes() {
  uint64_t bytes = 0;
  for (size_t b = 0; b < router.base_count(); ++b) {
    Status st = agent.list(segment_dir(router, b), ListOptions{.with_details = true},
                           [&](const ObjectInfo& e) {
                             if (segment::is_segment_file(e.name)) bytes += e.size;
                             return ok_status();
                           });
    if (st.code() != StatusCode::kNotFound) KVTIER_RETURN_IF_ERROR(st);
  }
  return bytes;
}

void Store::Impl::settle_segments(uint64_t reserved, uint64_t grown) {
  if (!ledger || reserved == grown) return;
  // Drift only, either way: healed at the next lone open.
  if (grown < reserved) {
    ledger->release(reserved - grown).ignore_error();
  } else {
    ledger
        ->update([extra = grown - reserved](uint64_t& used) {
          used += extra;
          return ok_status();
        })
        .ignore_error();
  }
}

// The protocol is reserve_capacity()'s (store_write.cc). The victims are whole reclaimable
// segments from the clock's hand (one read since the hand last passed it goes to the back
// instead, once), removed with the ledger's lock released; the usage is lowered by what this
// store removed, so it never reads below what is on storage. Two stores choosing the same
// segment both try; the one whose remove succeeds gives the bytes back.
//
// A reader never loses a record under it: a get window opens the segment before it reads,
// and an unlinked file stays readable through descriptors already open; a window that opens
// after the unlink gets kNotFound, a miss, and drops the index entry.
Status Store::Impl::reserve_segments(uint64_t need) {
  // Second chances for segments other stores read (their access time), at most one pass of
  // the clock per call: readers that touch every segment cannot stall a writer.
  std::optional<size_t> chances_left;
  std::vector<uint32_t> victims;
  Evictor e;
  e.choose = [&](uint64_t short_by) {
    victims.clear();
    uint64_t freeing = 0;
    std::vector<bool> answering(router.base_count());
    for (size_t b = 0; b < answering.size(); ++b) answering[b] = serving(b);
    MutexLock lock(seg->mu);
    // Every segment gets at most one second chance per call.
    size_t steps = 2 * seg->clock.size();
    if (!chances_left) chances_left = seg->clock.size();
    while (freeing < short_by && !seg->clock.empty() && steps-- > 0) {
      const uint32_t id = seg->clock.front();
      seg->clock.pop_front();
      SegmentFile& f = seg->files[id];
      if (f.gone) {
        f.in_clock = false;
        continue;
      }
      if (!answering[f.base]) {
        // On a base not answering: removing it would wait as long as the base does.
        seg->clock.push_back(id);
        continue;
      }
      if (f.referenced) {
        f.referenced = false;
        f.clock_ns = wall_ns();
        seg->clock.push_back(id);
        continue;
      }
      f.in_clock = false;
      freeing += f.ours ? f.end + f.summary_end : f.record_end + f.summary_read;
      victims.push_back(id);
    }
    return !victims.empty();
  };
  e.evict = [&](uint64_t* freed) {
    const uint64_t freed_before = *freed;
    Status failed;
    for (const uint32_t id : victims) {
      std::string paths[2];
      uint64_t clock_ns;
      {
        MutexLock lock(seg->mu);
        paths[0] = seg->files[id].seg_path;  // the segment first: a summary left alone by a
        paths[1] = seg->files[id].sum_path;  // crash is still listed, and reclaimed later
        clock_ns = seg->files[id].clock_ns;
      }
      // Read by another store since it went to the back of the clock (open_records sets the
      // access time): a second chance, as for this store's own reads.
      struct stat st {};
      if (*chances_left > 0 && ::stat(paths[0].c_str(), &st) == 0 &&
          uint64_t(st.st_atim.tv_sec) * 1'000'000'000 + uint64_t(st.st_atim.tv_nsec) > clock_ns) {
        --*chances_left;
        MutexLock lock(seg->mu);
        make_reclaimable(id);
        continue;
      }
      bool removed_all = true;
      for (const std::string& path : paths) {
        // Reclaimable segments never grow, so the size now is the size removed.
        Result<ObjectInfo> info = agent.stat(path);
        Status removed = agent.remove(path);
        if (removed.ok()) {
          *freed += info.ok() ? info->size : 0;
        } else if (removed.code() != StatusCode::kNotFound) {
          removed_all = false;
          if (failed.ok()) failed = removed.with_context("reclaiming a segment");
        }
        // kNotFound: another store reclaimed it and gave its bytes back.
      }
      MutexLock lock(seg->mu);
      if (removed_all) {
        seg->files[id].gone = true;
      } else {
        make_reclaimable(id);
      }
    }
    bump(counters.evicted_pages, forget_gone_segments());
    bump(counters.evicted_bytes, *freed - freed_before);
    return failed;
  };
  e.relearn = [&]() -> Result<bool> {
    segments_refresh();  // the segments others sealed since this store last looked
    MutexLock lock(seg->mu);
    return !seg->clock.empty();
  };
  e.none_left = "no sealed segment is left to reclaim";
  return reserve_capacity(need, e);
}

}  // namespace kvtier
