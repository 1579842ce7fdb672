// The segment layout (docs/architecture.md, "Segment layout"; docs/format.md): each store
// that writes appends records to segment files of its own and lists them in a summary beside
// each segment; every store indexes the summaries (all of them on open, the new entries of
// others' summaries when a key is not indexed), and reads a record with one read at its
// offset, verified like a page. This file: finding what is on storage (open, the scan of
// every summary, the refresh that learns what others appended), the remove entry and clear;
// lookups and the read path's steps are segments_read.cc, the write path segments_write.cc.
#include "layout/segments.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "capacity/footprint.h"
#include "kvtier/core/cpus.h"
#include "naming/object_io.h"
#include "window/store_core.h"

namespace kvtier {
namespace {

// Summary entries moved per system call (appends: a window's worth; reads: 16,384 entries):
// the sizes of each base's append and read buffers.
constexpr size_t kAppendBufBytes = 256 * segment::kEntryBytes;
constexpr size_t kReadBufBytes = size_t{1} << 20;
// Lanes when StoreConfig::segment_lanes is 0: one per CPU the process may use, at most this many.
constexpr size_t kMaxAutoLanes = 4;
// On an object store, lanes when StoreConfig::segment_lanes is 0: a put window goes up as about
// this many segment objects side by side (each about 1 MiB or more, segments_objects.cc).
// Uploads, not the client's cores, are what runs in parallel there: on radosgw, 64 KiB pages
// in windows of 8 MiB put 1.62x faster as 8 segments of 1 MiB than as 2 of 4 MiB
// (docs/benchmarks.md, "Object store").
constexpr size_t kAutoObjectLanes = 8;

uint64_t random_writer_id() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) ^ rd() ^ wall_ns();
  return id;
}

}  // namespace

size_t SegmentLayout::copy_slot(size_t base) const {
  return s_.router.base_count() * seg->lanes + base;
}

size_t SegmentLayout::slot_base(size_t slot) const {
  const size_t lane_slots = s_.router.base_count() * seg->lanes;
  return slot < lane_slots ? slot / seg->lanes : slot - lane_slots;
}

Status SegmentLayout::open() {
  if (s_.config.capacity_bytes != 0) {
    // Capacity is reclaimed a segment at a time: segments of at most 1/64 of it (1 MiB at
    // least, which the smallest capacity holds: capacity/footprint.h) keep the budget's grain
    // fine.
    s_.config.segment_bytes =
        std::min(s_.config.segment_bytes,
                 std::max<uint64_t>(s_.config.capacity_bytes / 64, footprint::kMinSegmentBytes));
  }
  return segments_open();
}

Result<uint64_t> SegmentLayout::charged_bytes() {
  return segment_file_bytes();  // every segment and summary file
}

void SegmentLayout::with_capacity(bool alone) {
  // Alone: segments nobody sealed belong to writers that are gone, and can be reclaimed.
  if (alone) segments_adopt_abandoned();
}

Status SegmentLayout::segments_open() {
  seg = std::make_unique<Segments>();
  seg->writer = random_writer_id();
  seg->bases = std::make_unique<SegmentBase[]>(s_.router.base_count());
  for (size_t b = 0; b < s_.router.base_count(); ++b) {
    SegmentBase& sb = seg->bases[b];
    KVTIER_ASSIGN_OR_RETURN(sb.append_buf, AlignedBuffer::allocate(kAppendBufBytes));
    KVTIER_ASSIGN_OR_RETURN(sb.append_reg,
                            s_.agent.register_memory(sb.append_buf.data(), sb.append_buf.size()));
    KVTIER_ASSIGN_OR_RETURN(sb.read_buf, AlignedBuffer::allocate(kReadBufBytes));
    KVTIER_ASSIGN_OR_RETURN(sb.read_reg,
                            s_.agent.register_memory(sb.read_buf.data(), sb.read_buf.size()));
  }
  seg->whole = s_.config.location.storage_class == StorageClass::kObject;
  if (s_.config.segment_lanes != 0) {
    seg->lanes = s_.config.segment_lanes;
  } else if (seg->whole) {
    seg->lanes = kAutoObjectLanes;
  } else {
    seg->lanes = std::clamp<size_t>(usable_cpus(), 1, kMaxAutoLanes);
  }
  // On a FUSE filesystem (ceph-fuse) appends are synced even without fsync: another host's
  // first open or read of a file this one appended to, its data still dirty here, waited for
  // the metadata server's next tick (up to 5 s with Ceph's defaults; docs/deployment.md). A
  // sync per window and file after the append removed every such wait in a measured run.
  seg->sync_appends = s_.config.fsync && !seg->whole;
  for (size_t b = 0; b < s_.router.base_count() && !seg->sync_appends && !seg->whole; ++b) {
    seg->sync_appends = on_fuse_filesystem(s_.router.base(b));
  }
  {
    MutexLock lock(seg->mu);
    seg->active.assign(s_.router.base_count() * (seg->lanes + 1), std::nullopt);
  }
  for (size_t b = 0; b < s_.router.base_count(); ++b) {
    KVTIER_RETURN_IF_ERROR(s_.agent.make_dir(segment_dir(s_.router, b)));  // in the namespace
  }
  return segments_scan();
}

Status SegmentLayout::list_summaries(size_t b,
                                     const std::function<void(const std::string&, uint64_t)>& fn,
                                     bool with_sizes) {
  return list_summaries_of(s_, b, fn, with_sizes);
}

Status SegmentLayout::list_summaries_of(StoreCore& s, size_t b,
                                        const std::function<void(const std::string&, uint64_t)>& fn,
                                        bool with_sizes) {
  Status st = s.agent.list(
      segment_dir(s.router, b), ListOptions{.with_details = with_sizes}, [&](const ObjectInfo& e) {
        if (std::optional<std::string> name = segment::name_of_summary(e.name)) {
          fn(*name, e.size);
        }
        return ok_status();
      });
  return st.code() == StatusCode::kNotFound ? ok_status() : st;
}

Result<bool> SegmentLayout::holds_pages(StoreCore& s) {
  bool segments = false;
  for (size_t b = 0; b < s.router.base_count() && !segments; ++b) {
    KVTIER_RETURN_IF_ERROR(
        list_summaries_of(s, b, [&](const std::string&, uint64_t) { segments = true; }));
  }
  return segments;
}

Result<uint64_t> SegmentLayout::read_summary(size_t b, const std::string& sum_path, uint64_t from,
                                             const std::function<void(const segment::Entry&)>& fn) {
  std::byte* const buf = seg->bases[b].read_buf.data();
  Result<Target> t = s_.agent.open_target(TargetSpec{sum_path, TargetMode::kRead, 0, {}});
  if (!t.ok()) {
    // A summary removed since it was listed (a clear) has nothing more to say.
    if (t.status().code() == StatusCode::kNotFound) return from;
    return t.status();
  }
  const uint64_t end = t->size() / segment::kEntryBytes * segment::kEntryBytes;
  uint64_t at = from;
  while (at < end) {
    const uint64_t n = std::min<uint64_t>(end - at, kReadBufBytes);
    KVTIER_RETURN_IF_ERROR(object_io::transfer_range(s_.agent, TransferOp::kRead, *t, buf, at, n));
    for (uint64_t o = 0; o < n; o += segment::kEntryBytes) {
      const std::optional<segment::Entry> e = segment::decode_entry(
          std::span<const std::byte, segment::kEntryBytes>(buf + o, segment::kEntryBytes));
      // A torn or not yet written entry: stop before it, and look again next time.
      if (!e) return at + o;
      fn(*e);
    }
    at += n;
  }
  return at;
}

Status SegmentLayout::segments_scan() {
  struct Summary {
    std::string name;
    uint32_t base;
    uint64_t mtime_ns;
    uint64_t bytes;
  };
  std::vector<Summary> summaries;
  uint64_t entries = 0;
  for (size_t b = 0; b < s_.router.base_count(); ++b) {
    Status st = s_.agent.list(
        segment_dir(s_.router, b), ListOptions{.with_details = true}, [&](const ObjectInfo& e) {
          if (std::optional<std::string> n = segment::name_of_summary(e.name)) {
            summaries.push_back({*n, static_cast<uint32_t>(b), e.mtime_ns, e.size});
            entries += e.size / segment::kEntryBytes;
          }
          return ok_status();
        });
    if (st.code() != StatusCode::kNotFound) KVTIER_RETURN_IF_ERROR(st);
  }
  // The latest entry for a key decides. Each summary is in its writer's order; summaries go
  // in the order they were last written. Writers that overlapped in time may see an older
  // put of a key win over a newer one of another writer (both are the key's page) or a
  // remove undo a later put (a miss): a cache can afford either; neither reads wrong data.
  std::sort(summaries.begin(), summaries.end(), [](const Summary& a, const Summary& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name;
  });
  s_.index.reserve(entries);
  if (seg->whole) {
    std::vector<uint32_t> ids;
    MutexLock lock(seg->mu);
    for (const Summary& s : summaries) {
      if (seg->by_name.count(s.name) != 0) continue;
      SegmentFile f;
      f.name = s.name;
      f.base = s.base;
      f.listed_bytes = s.bytes;
      f.seg_path =
          segment_dir(s_.router, s.base) + "/" + s.name + std::string(segment::kSegmentSuffix);
      f.sum_path =
          segment_dir(s_.router, s.base) + "/" + s.name + std::string(segment::kSummarySuffix);
      ids.push_back(static_cast<uint32_t>(seg->files.size()));
      seg->by_name.emplace(s.name, ids.back());
      seg->files.push_back(std::move(f));
    }
    lock.unlock();
    apply_whole_summaries(ids, /*at_open=*/true);
    return ok_status();
  }
  std::vector<PageIndex::Page> run;
  run.reserve(size_t{1} << 16);
  auto flush = [&] {
    s_.index.put_many(run);
    run.clear();
  };
  for (const Summary& s : summaries) {
    SegmentFile f;
    f.name = s.name;
    f.base = s.base;
    f.seg_path =
        segment_dir(s_.router, s.base) + "/" + s.name + std::string(segment::kSegmentSuffix);
    f.sum_path =
        segment_dir(s_.router, s.base) + "/" + s.name + std::string(segment::kSummarySuffix);
    uint32_t id;
    {
      MutexLock lock(seg->mu);
      if (seg->by_name.count(s.name) != 0) continue;
      id = static_cast<uint32_t>(seg->files.size());
      seg->files.push_back(f);
      seg->by_name.emplace(s.name, id);
    }
    bool sealed = false;
    uint64_t record_end = segment::kSegmentHeaderBytes;
    // A summary of another namespace (copied in by hand) names no page of this one; the
    // begin entry comes first, so nothing is applied before it is known.
    bool ours = false;
    MutexLock refresh(seg->bases[s.base].refresh);
    KVTIER_ASSIGN_OR_RETURN(
        uint64_t read, read_summary(s.base, f.sum_path, 0, [&](const segment::Entry& e) {
          switch (e.type) {
            case segment::EntryType::kBegin:
              ours = e.key_hash == s_.ns_id;
              sealed = sealed || !ours;  // another namespace's: never read again
              break;
            case segment::EntryType::kPut:
              if (!ours) break;
              record_end = std::max(record_end, e.offset + e.record_bytes);
              run.push_back({e.key_hash, s.base, e.record_bytes, id, e.header_bytes, e.offset,
                             e.payload_bytes});
              if (run.size() == run.capacity()) flush();
              break;
            case segment::EntryType::kRemove:
              if (!ours) break;
              flush();  // the puts before it first
              s_.index.erase(e.key_hash);
              break;
            case segment::EntryType::kSeal:
              sealed = true;
              break;
          }
        }));
    flush();
    MutexLock lock(seg->mu);
    seg->files[id].summary_read = read;
    seg->files[id].record_end = record_end;
    seg->files[id].sealed = sealed;
    if (sealed) make_reclaimable(id);
  }
  return ok_status();
}

void SegmentLayout::segments_refresh(const std::vector<bool>& want, uint64_t max_age_ns) {
  const uint64_t asked = now_ns();
  bool any_gone = false;
  for (size_t b = 0; b < s_.router.base_count(); ++b) {
    if ((!want.empty() && !want[b]) || !s_.serving(b)) continue;
    SegmentBase& sb = seg->bases[b];
    // A look that began after this call did (a concurrent caller's), or at most max_age_ns
    // before it, will do.
    auto recent = [&] {
      const uint64_t at = sb.looked_ns.load(std::memory_order_acquire);
      return at != 0 && at + max_age_ns >= asked;
    };
    if (recent()) continue;
    MutexLock refresh(sb.refresh);
    if (recent()) continue;
    const uint64_t began = now_ns();
    // New segments change the directory; one unchanged since a listing that found it settled
    // (older than the clock's coarse tick, so no file created later can share its time) need
    // not be listed again. An object store's prefix has no such time: it is listed.
    Result<ObjectInfo> dir =
        seg->whole ? Result<ObjectInfo>(ObjectInfo{}) : s_.agent.stat(segment_dir(s_.router, b));
    const uint64_t mtime = dir.ok() ? dir->mtime_ns : 0;
    const bool settled = mtime != 0 && mtime + 100'000'000 < wall_ns();
    if (!(settled && mtime == sb.dir_mtime)) {
      size_t known_before;
      {
        MutexLock lock(seg->mu);
        known_before = seg->files.size();
      }
      std::vector<std::string> names;
      std::vector<uint64_t> sizes;
      // Whole summaries are read at the size listed (no HEAD on an object store).
      if (!list_summaries(
               b,
               [&](const std::string& n, uint64_t size) {
                 names.push_back(n);
                 sizes.push_back(size);
               },
               seg->whole)
               .ok()) {
        continue;
      }
      // A time still young when listed may be shared by a file created after the listing:
      // the next look lists again.
      sb.dir_mtime = settled ? mtime : 0;
      MutexLock lock(seg->mu);
      // A segment known before the listing began and missing from it was removed (reclaimed
      // by some store, or cleared): names are never used again, so it is gone for good.
      std::vector<bool> listed(known_before, false);
      for (const std::string& name : names) {
        const auto it = seg->by_name.find(name);
        if (it != seg->by_name.end() && it->second < known_before) listed[it->second] = true;
      }
      for (uint32_t id = 0; id < known_before; ++id) {
        SegmentFile& f = seg->files[id];
        if (f.base == b && !listed[id] && !f.gone) {
          f.gone = true;
          any_gone = true;
        }
      }
      for (size_t n = 0; n < names.size(); ++n) {
        const std::string& name = names[n];
        if (seg->by_name.count(name) != 0) continue;
        SegmentFile f;
        f.listed_bytes = sizes[n];
        f.name = name;
        f.base = static_cast<uint32_t>(b);
        f.seg_path = segment_dir(s_.router, b) + "/" + name + std::string(segment::kSegmentSuffix);
        f.sum_path = segment_dir(s_.router, b) + "/" + name + std::string(segment::kSummarySuffix);
        seg->by_name.emplace(name, static_cast<uint32_t>(seg->files.size()));
        seg->files.push_back(std::move(f));
      }
    }
    // Others' summaries on this base that may still grow.
    struct Todo {
      uint32_t id;
      std::string path;
      uint64_t from;
    };
    std::vector<Todo> todo;
    {
      MutexLock lock(seg->mu);
      for (uint32_t id = 0; id < seg->files.size(); ++id) {
        const SegmentFile& f = seg->files[id];
        if (f.base == b && !f.ours && !f.sealed) todo.push_back({id, f.sum_path, f.summary_read});
      }
    }
    if (seg->whole) {
      std::vector<uint32_t> ids;
      for (const Todo& t : todo) ids.push_back(t.id);
      apply_whole_summaries(ids, /*at_open=*/false);
      sb.looked_ns.store(began, std::memory_order_release);
      bump(s_.counters.segment_looks);
      continue;
    }
    for (const Todo& t : todo) {
      // One stat tells whether it grew (a dead writer's summary never does).
      Result<ObjectInfo> info = s_.agent.stat(t.path);
      if (info.ok() && info->size < t.from + segment::kEntryBytes) continue;
      bool sealed = false;
      uint64_t record_end = 0;
      // A summary is read from its begin entry once; later reads start past it, and a summary
      // of another namespace is marked sealed then and never read again.
      bool ours_ns = t.from != 0;
      Result<uint64_t> read = read_summary(b, t.path, t.from, [&](const segment::Entry& e) {
        switch (e.type) {
          case segment::EntryType::kBegin:
            ours_ns = e.key_hash == s_.ns_id;
            sealed = sealed || !ours_ns;
            break;
          case segment::EntryType::kPut:
            if (ours_ns) {
              record_end = std::max(record_end, e.offset + e.record_bytes);
              // A key put again (a copy forward, a rewrite) is where its latest entry says.
              s_.index.put_relearned({e.key_hash, static_cast<uint32_t>(b), e.record_bytes, t.id,
                                      e.header_bytes, e.offset, e.payload_bytes});
            }
            break;
          case segment::EntryType::kRemove:
            if (ours_ns) s_.index.erase(e.key_hash);
            break;
          case segment::EntryType::kSeal:
            sealed = true;
            break;
        }
      });
      if (!read.ok()) continue;  // asked again next time
      MutexLock lock(seg->mu);
      SegmentFile& f = seg->files[t.id];
      f.summary_read = *read;
      f.record_end = std::max({f.record_end, record_end, segment::kSegmentHeaderBytes});
      f.sealed = sealed || f.sealed;
      if (f.sealed && !f.gone) make_reclaimable(t.id);
    }
    sb.looked_ns.store(began, std::memory_order_release);
    bump(s_.counters.segment_looks);
  }
  if (any_gone) forget_gone_segments();
}

Status FileSegments::forget(const Hash128& key_hash, size_t base) {
  const segment::Entry e{segment::EntryType::kRemove, 0, key_hash, 0, 0, 0, wall_ns()};
  Status st;
  uint64_t grown = 0;
  {
    MutexLock io(seg->bases[base].io);
    const size_t slot = base * seg->lanes;  // the base's first lane
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::optional<uint32_t> active;
      {
        MutexLock lock(seg->mu);
        active = seg->active[slot];
      }
      if (!active) {
        st = roll_segment(slot, &grown);
        if (!st.ok()) break;
        MutexLock lock(seg->mu);
        active = seg->active[slot];
      }
      st = append_entries(*active, {&e, 1}, &grown);
      if (st.code() != StatusCode::kNotFound) break;
      // The segment was removed under us (a clear elsewhere): start another.
      MutexLock lock(seg->mu);
      seg->files[*active].retired = true;
      seg->active[slot].reset();
    }
  }
  s_.capacity.settle(0, grown);  // an entry or two, charged after the fact
  return st;
}

Status SegmentLayout::clear() {
  segments_refresh();
  bump(s_.counters.cleared, s_.index.pages());
  Status result;
  uint64_t freed = 0;
  for (size_t b = 0; b < s_.router.base_count(); ++b) {
    // This store's appends on the base wait; the listing and removal run outside seg->mu.
    MutexLock io(seg->bases[b].io);
    {
      std::vector<std::string> paths;
      std::vector<uint64_t> sizes;
      Status st = s_.agent.list(segment_dir(s_.router, b), ListOptions{.with_details = true},
                                [&](const ObjectInfo& e) {
                                  if (segment::is_segment_file(e.name)) {
                                    paths.push_back(segment_dir(s_.router, b) + "/" + e.name);
                                    sizes.push_back(e.size);
                                  }
                                  return ok_status();
                                });
      if (!st.ok() && st.code() != StatusCode::kNotFound && result.ok()) result = st;
      std::vector<Status> removed = s_.agent.remove_many(paths);
      for (size_t i = 0; i < removed.size(); ++i) {
        const Status& r = removed[i];
        if (r.ok()) freed += s_.capacity.charge_appended(sizes[i]);
        if (!r.ok() && r.code() != StatusCode::kNotFound && result.ok()) result = r;
      }
      MutexLock lock(seg->mu);
      std::vector<size_t> slots;
      for (size_t slot = b * seg->lanes; slot < (b + 1) * seg->lanes; ++slot) slots.push_back(slot);
      slots.push_back(copy_slot(b));
      for (const size_t slot : slots) {
        if (const std::optional<uint32_t> a = seg->active[slot]) {
          seg->files[*a].retired = true;
          seg->active[slot].reset();
        }
      }
    }
  }
  {
    MutexLock lock(seg->mu);
    for (SegmentFile& f : seg->files) {
      f.sealed = true;  // gone: nothing to seal
      f.gone = true;
      f.in_clock = false;
    }
    seg->clock.clear();
  }
  s_.index.clear();
  // The files' bytes as listed; one being appended to meanwhile drifts (healed at a lone
  // open).
  s_.capacity.release(freed).ignore_error();
  return result;
}

}  // namespace kvtier
