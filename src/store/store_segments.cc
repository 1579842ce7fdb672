// The segment layout (docs/architecture.md, "Segment layout"; docs/format.md): each store
// that writes appends records to segment files of its own and lists them in a summary beside
// each segment; every store indexes the summaries (all of them on open, the new entries of
// others' summaries when a key is not indexed), and reads a record with one read at its
// offset, verified like a page.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "naming/object_io.h"
#include "store_impl.h"

namespace kvtier {
namespace {

// Summary entries moved per system call (appends: a window's worth; reads: 16,384 entries).
constexpr size_t kAppendBufBytes = 256 * segment::kEntryBytes;
constexpr size_t kReadBufBytes = size_t{1} << 20;
// Lanes when StoreConfig::segment_lanes is 0: one per hardware thread, at most this many.
constexpr size_t kMaxAutoLanes = 4;
// On an object store, lanes when StoreConfig::segment_lanes is 0: a put window goes up as about
// this many segment objects side by side (each about 1 MiB or more, store_segments_objects.cc).
// Uploads, not the client's cores, are what runs in parallel there: on radosgw, 64 KiB pages
// in windows of 8 MiB put 1.62x faster as 8 segments of 1 MiB than as 2 of 4 MiB
// (docs/benchmarks.md, "Object store").
constexpr size_t kAutoObjectLanes = 8;
// A put window goes out in runs of about this many bytes, each written in one request.
constexpr uint64_t kWriteChunkBytes = 1 << 20;

uint64_t random_writer_id() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) ^ rd() ^ wall_ns();
  return id;
}

}  // namespace

Status Store::Impl::segments_open() {
  seg = std::make_unique<Segments>();
  seg->writer = random_writer_id();
  seg->bases = std::make_unique<SegmentBase[]>(router.base_count());
  for (size_t b = 0; b < router.base_count(); ++b) {
    SegmentBase& sb = seg->bases[b];
    KVTIER_ASSIGN_OR_RETURN(sb.append_buf, AlignedBuffer::allocate(kAppendBufBytes));
    KVTIER_ASSIGN_OR_RETURN(sb.append_reg,
                            agent.register_memory(sb.append_buf.data(), sb.append_buf.size()));
    KVTIER_ASSIGN_OR_RETURN(sb.read_buf, AlignedBuffer::allocate(kReadBufBytes));
    KVTIER_ASSIGN_OR_RETURN(sb.read_reg,
                            agent.register_memory(sb.read_buf.data(), sb.read_buf.size()));
  }
  seg->whole = config.location.storage_class == StorageClass::kObject;
  if (config.segment_lanes != 0) {
    seg->lanes = config.segment_lanes;
  } else if (seg->whole) {
    seg->lanes = kAutoObjectLanes;
  } else {
    seg->lanes = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, kMaxAutoLanes);
  }
  // On a FUSE filesystem (ceph-fuse) appends are synced even without fsync: another host's
  // first open or read of a file this one appended to, its data still dirty here, waited for
  // the metadata server's next tick (up to 5 s with Ceph's defaults; docs/deployment.md). A
  // sync per window and file after the append removed every such wait in a measured run.
  seg->sync_appends = config.fsync && !seg->whole;
  for (size_t b = 0; b < router.base_count() && !seg->sync_appends && !seg->whole; ++b) {
    seg->sync_appends = on_fuse_filesystem(router.base(b));
  }
  {
    MutexLock lock(seg->mu);
    seg->active.assign(router.base_count() * (seg->lanes + 1), std::nullopt);
  }
  for (size_t b = 0; b < router.base_count(); ++b) {
    KVTIER_RETURN_IF_ERROR(agent.make_dirs(segment_dir(router, b)));
  }
  return segments_scan();
}

Status Store::Impl::list_summaries(size_t b,
                                   const std::function<void(const std::string&, uint64_t)>& fn,
                                   bool with_sizes) {
  Status st = agent.list(segment_dir(router, b), ListOptions{.with_details = with_sizes},
                         [&](const ObjectInfo& e) {
                           if (std::optional<std::string> name = segment::name_of_summary(e.name)) {
                             fn(*name, e.size);
                           }
                           return ok_status();
                         });
  return st.code() == StatusCode::kNotFound ? ok_status() : st;
}

Result<uint64_t> Store::Impl::read_summary(size_t b, const std::string& sum_path, uint64_t from,
                                           const std::function<void(const segment::Entry&)>& fn) {
  std::byte* const buf = seg->bases[b].read_buf.data();
  Result<Target> t = agent.open_target(TargetSpec{sum_path, TargetMode::kRead, 0, {}});
  if (!t.ok()) {
    // A summary removed since it was listed (a clear) has nothing more to say.
    if (t.status().code() == StatusCode::kNotFound) return from;
    return t.status();
  }
  const uint64_t end = t->size() / segment::kEntryBytes * segment::kEntryBytes;
  uint64_t at = from;
  while (at < end) {
    const uint64_t n = std::min<uint64_t>(end - at, kReadBufBytes);
    KVTIER_RETURN_IF_ERROR(object_io::transfer_range(agent, TransferOp::kRead, *t, buf, at, n));
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

Status Store::Impl::segments_scan() {
  struct Summary {
    std::string name;
    uint32_t base;
    uint64_t mtime_ns;
    uint64_t bytes;
  };
  std::vector<Summary> summaries;
  uint64_t entries = 0;
  for (size_t b = 0; b < router.base_count(); ++b) {
    Status st = agent.list(
        segment_dir(router, b), ListOptions{.with_details = true}, [&](const ObjectInfo& e) {
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
  index.reserve(entries);
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
          segment_dir(router, s.base) + "/" + s.name + std::string(segment::kSegmentSuffix);
      f.sum_path =
          segment_dir(router, s.base) + "/" + s.name + std::string(segment::kSummarySuffix);
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
    index.put_many(run);
    run.clear();
  };
  for (const Summary& s : summaries) {
    SegmentFile f;
    f.name = s.name;
    f.base = s.base;
    f.seg_path = segment_dir(router, s.base) + "/" + s.name + std::string(segment::kSegmentSuffix);
    f.sum_path = segment_dir(router, s.base) + "/" + s.name + std::string(segment::kSummarySuffix);
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
              ours = e.key_hash == ns_id;
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
              index.erase(e.key_hash);
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

void Store::Impl::segments_refresh(const std::vector<bool>& want, uint64_t max_age_ns) {
  const uint64_t asked = now_ns();
  bool any_gone = false;
  for (size_t b = 0; b < router.base_count(); ++b) {
    if ((!want.empty() && !want[b]) || !serving(b)) continue;
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
        seg->whole ? Result<ObjectInfo>(ObjectInfo{}) : agent.stat(segment_dir(router, b));
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
        f.seg_path = segment_dir(router, b) + "/" + name + std::string(segment::kSegmentSuffix);
        f.sum_path = segment_dir(router, b) + "/" + name + std::string(segment::kSummarySuffix);
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
      bump(counters.segment_looks);
      continue;
    }
    for (const Todo& t : todo) {
      // One stat tells whether it grew (a dead writer's summary never does).
      Result<ObjectInfo> info = agent.stat(t.path);
      if (info.ok() && info->size < t.from + segment::kEntryBytes) continue;
      bool sealed = false;
      uint64_t record_end = 0;
      // A summary is read from its begin entry once; later reads start past it, and a summary
      // of another namespace is marked sealed then and never read again.
      bool ours_ns = t.from != 0;
      Result<uint64_t> read = read_summary(b, t.path, t.from, [&](const segment::Entry& e) {
        switch (e.type) {
          case segment::EntryType::kBegin:
            ours_ns = e.key_hash == ns_id;
            sealed = sealed || !ours_ns;
            break;
          case segment::EntryType::kPut:
            if (ours_ns) {
              record_end = std::max(record_end, e.offset + e.record_bytes);
              // A key put again (a copy forward, a rewrite) is where its latest entry says.
              index.put_relearned({e.key_hash, static_cast<uint32_t>(b), e.record_bytes, t.id,
                                   e.header_bytes, e.offset, e.payload_bytes});
            }
            break;
          case segment::EntryType::kRemove:
            if (ours_ns) index.erase(e.key_hash);
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
    bump(counters.segment_looks);
  }
  if (any_gone) forget_gone_segments();
}

Status Store::Impl::append_entries(uint32_t id, std::span<const segment::Entry> entries,
                                   uint64_t* grown) {
  std::string sum_path;
  uint64_t summary_end;
  size_t b;
  {
    MutexLock lock(seg->mu);
    const SegmentFile& f = seg->files[id];
    sum_path = f.sum_path;
    summary_end = f.summary_end;  // only appends (holding the base's io) move it
    b = f.base;
  }
  std::byte* const buf = seg->bases[b].append_buf.data();
  KVTIER_ASSIGN_OR_RETURN(Target t,
                          agent.open_target(TargetSpec{sum_path, TargetMode::kAppend, 0, {}}));
  if (t.size() > summary_end) {
    return internal_error(fmt::format("summary '{}' is {} bytes; this writer wrote {}", sum_path,
                                      t.size(), summary_end));
  }
  const size_t per_call = kAppendBufBytes / segment::kEntryBytes;
  for (size_t first = 0; first < entries.size(); first += per_call) {
    const size_t n = std::min(per_call, entries.size() - first);
    for (size_t i = 0; i < n; ++i) {
      segment::encode_entry(entries[first + i],
                            std::span<std::byte, segment::kEntryBytes>(
                                buf + i * segment::kEntryBytes, segment::kEntryBytes));
    }
    KVTIER_RETURN_IF_ERROR(object_io::transfer_range(agent, TransferOp::kWrite, t, buf, summary_end,
                                                     n * segment::kEntryBytes));
    summary_end += n * segment::kEntryBytes;
    *grown += n * segment::kEntryBytes;
    MutexLock lock(seg->mu);
    seg->files[id].summary_end = summary_end;
  }
  // The entries (puts, removes, a seal) are durable before anyone acts on them.
  if (seg->sync_appends) KVTIER_RETURN_IF_ERROR(t.sync());
  return ok_status();
}

void Store::Impl::retire_segment(uint32_t id, uint64_t* grown) {
  bool seal;
  {
    MutexLock lock(seg->mu);
    SegmentFile& f = seg->files[id];
    f.retired = true;
    seal = f.in_flight == 0 && !f.sealed;
  }
  if (!seal) return;
  const segment::Entry entry{segment::EntryType::kSeal, 0, {}, 0, 0, 0, wall_ns()};
  // A segment left unsealed is only looked at again by others' refreshes (and reclaimed
  // once a store opens alone and finds it abandoned).
  if (append_entries(id, {&entry, 1}, grown).ok()) {
    MutexLock lock(seg->mu);
    SegmentFile& f = seg->files[id];
    f.sealed = true;
    if (!f.gone) make_reclaimable(id);
  }
}

void Store::Impl::finish_in_flight(uint32_t id, uint64_t* grown) {
  bool retired;
  {
    MutexLock lock(seg->mu);
    SegmentFile& f = seg->files[id];
    if (f.in_flight > 0) --f.in_flight;
    retired = f.retired;
  }
  if (retired) retire_segment(id, grown);
}

Status Store::Impl::roll_segment(size_t slot, uint64_t* grown) {
  std::optional<uint32_t> old;
  uint32_t seq;
  {
    MutexLock lock(seg->mu);
    old = seg->active[slot];
    seg->active[slot].reset();
    seq = seg->next_seq++;
  }
  if (old) retire_segment(*old, grown);
  const size_t b = slot_base(slot);
  SegmentFile f;
  f.name = segment::segment_name(seg->writer, seq);
  f.base = static_cast<uint32_t>(b);
  f.seg_path = segment_dir(router, b) + "/" + f.name + std::string(segment::kSegmentSuffix);
  f.sum_path = segment_dir(router, b) + "/" + f.name + std::string(segment::kSummarySuffix);
  f.ours = true;
  const uint64_t now = wall_ns();
  // The segment first (a header naming it), then its summary, which makes it known. With
  // fsync each is published durably: its data and its directory entry.
  const PublishOptions publish{.durable = config.fsync};
  std::string header(segment::kSegmentHeaderBytes, '\0');
  segment::encode_segment_header(
      {ns_id, seg->writer, seq, now},
      std::span<std::byte>(reinterpret_cast<std::byte*>(header.data()), header.size()));
  KVTIER_RETURN_IF_ERROR(
      object_io::write_object(agent, f.seg_path, router.temp_dir(b), header, publish));
  std::string begin(segment::kEntryBytes, '\0');
  segment::encode_entry({segment::EntryType::kBegin, 0, ns_id, seg->writer, seq, 0, now},
                        std::span<std::byte, segment::kEntryBytes>(
                            reinterpret_cast<std::byte*>(begin.data()), segment::kEntryBytes));
  KVTIER_RETURN_IF_ERROR(
      object_io::write_object(agent, f.sum_path, router.temp_dir(b), begin, publish));
  f.end = segment::kSegmentHeaderBytes;
  f.summary_end = segment::kEntryBytes;
  *grown += segment::kSegmentHeaderBytes + segment::kEntryBytes;
  MutexLock lock(seg->mu);
  const auto id = static_cast<uint32_t>(seg->files.size());
  seg->by_name.emplace(f.name, id);
  seg->files.push_back(std::move(f));
  seg->active[slot] = id;
  return ok_status();
}

void Store::Impl::put_window_segments(std::span<const std::string_view> keys,
                                      std::span<const ConstBuffer> pieces, size_t k,
                                      std::span<Status> out, bool relocating, uint64_t read_ns) {
  if (seg->whole) {
    put_window_whole(keys, pieces, k, out);  // no capacity there: never relocating
    return;
  }
  auto work = plan(keys, pieces, k, out);
  if (!relocating) admit(work, out);  // copies forward are pages already taken
  if (work.empty()) return;
  Result<HeaderPool::Lease> lease = headers.acquire(work.size());
  if (!lease.ok()) {
    for (const auto& w : work) out[w.page] = lease.status();
    bump(counters.put_failures, work.size());
    return;
  }
  // Record shapes first: 4 KiB-aligned page objects where direct I/O is in use (it needs
  // aligned offsets), compact elsewhere. Checksums and headers are made chunk by chunk just
  // before each chunk is written (below), while its pages are still in cache for the copy.
  const uint64_t created = wall_ns();
  for (auto& w : work) {
    const bool aligned = config.direct_io != DirectIo::kOff && dio[w.route.base].has_value();
    w.header_bytes = aligned ? static_cast<uint32_t>(kHeaderBytes)
                             : page::compact_header_bytes(keys[w.page].size());
    w.stored_bytes = page::record_bytes(w.header_bytes, w.payload);
  }
  // The window goes out in runs of about kWriteChunkBytes, dealt to the lanes in turn: each
  // lane appends its runs to a segment of its own, one run after another, and the lanes run
  // side by side. Buffered writes into one file serialize on its inode lock (spreading one
  // file's writes over I/O threads made them wait for each other: 64 KiB pages at 1.9 GB/s
  // against fio's 5.3 on one file); into files of their own they do not.
  struct Chunk {
    std::vector<size_t> pages;  // indexes into `work`
    std::vector<MemDesc> mem;
    std::vector<StorageDesc> sto;
    Result<Transfer> xfer = Transfer();
    Status error;
  };
  std::vector<Chunk> chunks;
  std::vector<size_t> chunk_of(work.size());
  {
    uint64_t chunk_bytes = kWriteChunkBytes;
    for (size_t i = 0; i < work.size(); ++i) {
      if (chunk_bytes + work[i].stored_bytes > kWriteChunkBytes) {
        chunks.emplace_back();
        chunk_bytes = 0;
      }
      chunk_of[i] = chunks.size() - 1;
      chunk_bytes += work[i].stored_bytes;
    }
  }
  const size_t lanes = std::min(seg->lanes, chunks.size());

  // Capacity: what the window can add to this store's files is charged before anything is
  // written (records, alignment, summary entries, and the segments it may start: a segment
  // left for the next holds with the record that did not fit more than segment_bytes, so
  // a window starts at most one per lane and base plus 2 x its bytes / segment_bytes). What
  // it did not add is given back once its entries are written.
  uint64_t reserved = 0;
  if (ledger) {
    uint64_t records = 0;
    for (const auto& w : work) {
      records += w.stored_bytes + segment::kEntryBytes +
                 (w.header_bytes == kHeaderBytes ? kBlockBytes : 0);
    }
    const uint64_t rolls = std::min<uint64_t>(
        work.size(), router.base_count() * lanes + 2 * records / config.segment_bytes + 1);
    reserved = records + rolls * (segment::kSegmentHeaderBytes + 2 * segment::kEntryBytes);
    Status st = reserve_segments(reserved, /*copy_forward=*/!relocating);
    if (!st.ok()) {
      for (const auto& w : work) out[w.page] = st;
      if (!relocating) {
        bump(counters.put_failures, work.size());
        bump(counters.capacity_refusals, work.size());
      }
      return;
    }
  }
  uint64_t grown = 0;

  // Space in this store's active segments, reserved base by base holding the base's `io`
  // (its segments are created and their append targets opened then, outside seg->mu: a
  // base that hangs there holds up no other). Each segment's append target is opened before
  // any space in it is reserved, so its size then (the floor below which the target cannot
  // write) is never past a reserved record.
  struct OpenSeg {
    uint32_t id;
    bool direct;
    Target target;
  };
  std::vector<OpenSeg> open_segs;
  open_segs.reserve(work.size());
  std::vector<size_t> seg_of(work.size(), SIZE_MAX);  // index in open_segs
  struct Used {
    uint32_t id;
    size_t base;
  };
  std::vector<Used> used;  // segments with records of this window
  std::vector<std::vector<size_t>> by_base(router.base_count());
  for (size_t i = 0; i < work.size(); ++i) by_base[work[i].route.base].push_back(i);
  for (size_t b = 0; b < by_base.size(); ++b) {
    if (by_base[b].empty()) continue;
    MutexLock io(seg->bases[b].io);
    for (const size_t i : by_base[b]) {
      auto& w = work[i];
      const size_t slot = relocating ? copy_slot(b) : b * seg->lanes + chunk_of[i] % lanes;
      const bool direct = w.io != PageIo::kBuffered;
      Status st;
      for (int attempt = 0; attempt < 2; ++attempt) {
        st = ok_status();
        bool roll;
        {
          MutexLock lock(seg->mu);
          const std::optional<uint32_t> a = seg->active[slot];
          roll = !a || (seg->files[*a].end > segment::kSegmentHeaderBytes &&
                        align_up(seg->files[*a].end, kBlockBytes) + w.stored_bytes >
                            config.segment_bytes);
        }
        if (roll) {
          st = roll_segment(slot, &grown);
          if (!st.ok()) break;
        }
        uint32_t id;
        std::string seg_path;
        {
          MutexLock lock(seg->mu);
          id = *seg->active[slot];
          seg_path = seg->files[id].seg_path;
        }
        size_t o = 0;
        while (o < open_segs.size() && !(open_segs[o].id == id && open_segs[o].direct == direct)) {
          ++o;
        }
        if (o == open_segs.size()) {
          TargetSpec spec{seg_path, TargetMode::kAppend, 0, {}};
          spec.direct = direct;
          Result<Target> t = agent.open_target(spec);
          if (!t.ok()) {
            st = t.status();
            // Removed under us (a clear elsewhere): start another segment, once.
            if (st.code() == StatusCode::kNotFound) {
              MutexLock lock(seg->mu);
              seg->active[slot].reset();
              seg->files[id].retired = true;
              continue;
            }
            break;
          }
          open_segs.push_back({id, direct, std::move(t).value()});
        }
        MutexLock lock(seg->mu);
        SegmentFile& f = seg->files[id];
        const uint64_t at = w.header_bytes == kHeaderBytes ? align_up(f.end, kBlockBytes) : f.end;
        grown += at + w.stored_bytes - f.end;
        f.end = at + w.stored_bytes;
        if (relocating) f.copies_read_ns = std::max(f.copies_read_ns, read_ns);
        w.at = at;
        w.io_target = &open_segs[o].target;
        seg_of[i] = o;
        if (std::none_of(used.begin(), used.end(), [&](const Used& u) { return u.id == id; })) {
          used.push_back({id, b});
          ++f.in_flight;
        }
        break;
      }
      if (!st.ok()) out[w.page] = std::move(st);
    }
  }

  // Each run's descriptors: its records with space, header, payload pieces (or staging) and
  // padding.
  for (size_t i = 0; i < work.size(); ++i) {
    auto& w = work[i];
    if (seg_of[i] == SIZE_MAX) continue;
    Chunk& c = chunks[chunk_of[i]];
    c.pages.push_back(i);
    w.first_desc = c.mem.size();
    c.mem.push_back(MemDesc{lease->block(i).data(), w.header_bytes});
    c.sto.push_back(StorageDesc{w.io_target, w.at, w.header_bytes});
    const uint64_t body = w.stored_bytes - w.header_bytes;  // payload and padding
    if (w.io == PageIo::kStaged) {
      c.mem.push_back(MemDesc{w.staging.data(), body});
      c.sto.push_back(StorageDesc{w.io_target, w.at + w.header_bytes, body});
    } else {
      uint64_t off = w.at + w.header_bytes;
      for (const ConstBuffer& p : w.pieces) {
        c.mem.push_back(MemDesc{const_cast<void*>(p.data), p.size});
        c.sto.push_back(StorageDesc{w.io_target, off, p.size});
        off += p.size;
      }
      if (body > w.payload) {
        c.mem.push_back(MemDesc{zeros.data(), body - w.payload});
        c.sto.push_back(StorageDesc{w.io_target, off, body - w.payload});
      }
    }
    w.desc_count = c.mem.size() - w.first_desc;
  }
  // A lane writes its runs in order, each run's pages checksummed right before it goes out,
  // so the copy into the page cache finds them still in cache. Runs up to the backend's inline
  // size are written on the lane's own thread.
  auto write_lane = [&](size_t lane) {
    for (size_t ci = lane; ci < chunks.size(); ci += lanes) {
      Chunk& c = chunks[ci];
      if (c.pages.empty()) continue;
      for (size_t i : c.pages)
        encode_put_header(work[i], keys[work[i].page], created, lease->block(i));
      c.xfer = agent.make_request(TransferOp::kWrite, c.mem, c.sto);
      c.error = c.xfer.ok() ? c.xfer->post() : c.xfer.status();
      if (c.error.ok()) c.xfer->wait();
    }
  };
  if (lanes > 1) {
    std::call_once(seg->lane_pool_started,
                   [&] { seg->lane_pool = std::make_unique<WorkerPool>(seg->lanes - 1); });
    seg->lane_pool->parallel_for(lanes, write_lane);
  } else {
    write_lane(0);
  }

  // The records are complete: their summary entries make them known, segment by segment.
  std::vector<std::vector<size_t>> by_seg(open_segs.size());
  for (size_t i = 0; i < work.size(); ++i) {
    if (seg_of[i] == SIZE_MAX) continue;
    auto& w = work[i];
    const Chunk& c = chunks[chunk_of[i]];
    Status st = c.error;
    if (st.ok()) st = page_result(*c.xfer, w);
    out[w.page] = std::move(st);
    if (out[w.page].ok()) by_seg[seg_of[i]].push_back(i);
  }
  if (seg->sync_appends) sync_records(work, by_seg, out);
  // Segment by segment, holding its base's `io`: the caller still waiting is checked right
  // before each segment's entries are appended (a caller gone past its deadline leaves the
  // records without entries, never found; their space is reclaimed with the segment).
  for (size_t b = 0; b < by_base.size(); ++b) {
    if (by_base[b].empty()) continue;
    MutexLock io(seg->bases[b].io);
    for (const Used& u : used) {
      if (u.base != b) continue;
      const uint32_t id = u.id;
      std::vector<segment::Entry> entries;
      std::vector<size_t> pages;
      for (size_t o = 0; o < open_segs.size(); ++o) {
        if (open_segs[o].id != id) continue;
        for (size_t i : by_seg[o]) {
          const auto& w = work[i];
          entries.push_back({segment::EntryType::kPut, static_cast<uint16_t>(w.header_bytes),
                             w.route.key_hash, w.at, w.payload, w.stored_bytes, created});
          pages.push_back(i);
        }
      }
      Status st;
      if (guard::call_abandoned()) {
        st = deadline_exceeded_error("the call's deadline passed before the page was published");
      } else if (!entries.empty()) {
        st = append_entries(id, entries, &grown);
      }
      for (size_t i : pages) {
        const auto& w = work[i];
        if (!st.ok()) {
          out[w.page] = st;
          continue;
        }
        index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base), w.stored_bytes, id,
                   w.header_bytes, w.at, w.payload});
      }
      finish_in_flight(id, &grown);
    }
    if (relocating) {
      // The copies' segment is sealed now, so it joins the clock where their reads put it.
      std::optional<uint32_t> copies;
      {
        MutexLock lock(seg->mu);
        copies = std::exchange(seg->active[copy_slot(b)], std::nullopt);
      }
      if (copies) retire_segment(*copies, &grown);
    }
  }
  settle_segments(reserved, grown);
  for (const auto& w : work) {
    if (!out[w.page].ok()) continue;
    if (relocating) {
      bump(counters.relocated_pages);
      bump(counters.relocated_bytes, w.stored_bytes);
    } else {
      bump(counters.put_pages);
      bump(counters.put_bytes, w.payload);
      count_io(w);
    }
  }
  if (relocating) return;
  for (const Status& s : out) {
    if (!s.ok()) bump(counters.put_failures);
  }
}

void Store::Impl::sync_records(std::span<const PageWork<ConstBuffer>> work,
                               std::span<std::vector<size_t>> by_target, std::span<Status> out) {
  for (std::vector<size_t>& pages : by_target) {
    if (pages.empty()) continue;
    // Every page of a group was written through the same target.
    Status st = work[pages.front()].io_target->sync();
    if (st.ok()) continue;
    for (size_t i : pages) out[work[i].page] = st;
    pages.clear();  // no entries for them: they stay out of the index
  }
}

Status Store::Impl::segments_forget(const Hash128& key_hash, size_t base) {
  if (seg->whole) return forget_whole(key_hash, base);
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
  settle_segments(0, grown);  // an entry or two, charged after the fact
  return st;
}

Status Store::Impl::segments_clear(uint64_t* pages) {
  segments_refresh();
  *pages = index.pages();
  Status result;
  uint64_t freed = 0;
  for (size_t b = 0; b < router.base_count(); ++b) {
    // This store's appends on the base wait; the listing and removal run outside seg->mu.
    MutexLock io(seg->bases[b].io);
    {
      std::vector<std::string> paths;
      std::vector<uint64_t> sizes;
      Status st = agent.list(segment_dir(router, b), ListOptions{.with_details = true},
                             [&](const ObjectInfo& e) {
                               if (segment::is_segment_file(e.name)) {
                                 paths.push_back(segment_dir(router, b) + "/" + e.name);
                                 sizes.push_back(e.size);
                               }
                               return ok_status();
                             });
      if (!st.ok() && st.code() != StatusCode::kNotFound && result.ok()) result = st;
      std::vector<Status> removed = agent.remove_many(paths);
      for (size_t i = 0; i < removed.size(); ++i) {
        const Status& r = removed[i];
        if (r.ok()) freed += sizes[i];
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
  index.clear();
  // The files' bytes as listed; one being appended to meanwhile drifts (healed at a lone
  // open).
  if (ledger) ledger->release(freed).ignore_error();
  return result;
}

}  // namespace kvtier
