// The segment layout's write path (docs/architecture.md, "Segment layout"): a put window's
// records are appended to this store's segments, lane by lane, synced where the location asks
// for it, then listed in the segments' summaries; segments are rolled, retired and sealed
// here. Finding what is on storage (open, scan, refresh), remove and clear are in
// segments.cc; the object-store variant, written whole, in segments_objects.cc.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "layout/segments.h"
#include "naming/object_io.h"
#include "window/store_core.h"

namespace kvtier {
namespace {

// A put window goes out in runs of about this many bytes, each written in one request.
constexpr uint64_t kWriteChunkBytes = 1 << 20;

}  // namespace

Status SegmentLayout::append_entries(uint32_t id, std::span<const segment::Entry> entries,
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
                          s_.agent.open_target(TargetSpec{sum_path, TargetMode::kAppend, 0, {}}));
  if (t.size() > summary_end) {
    return internal_error(fmt::format("summary '{}' is {} bytes; this writer wrote {}", sum_path,
                                      t.size(), summary_end));
  }
  const size_t per_call = seg->bases[b].append_buf.size() / segment::kEntryBytes;
  for (size_t first = 0; first < entries.size(); first += per_call) {
    const size_t n = std::min(per_call, entries.size() - first);
    for (size_t i = 0; i < n; ++i) {
      segment::encode_entry(entries[first + i],
                            std::span<std::byte, segment::kEntryBytes>(
                                buf + i * segment::kEntryBytes, segment::kEntryBytes));
    }
    KVTIER_RETURN_IF_ERROR(object_io::transfer_range(s_.agent, TransferOp::kWrite, t, buf,
                                                     summary_end, n * segment::kEntryBytes));
    summary_end += n * segment::kEntryBytes;
    *grown += n * segment::kEntryBytes;
    MutexLock lock(seg->mu);
    seg->files[id].summary_end = summary_end;
  }
  // The entries (puts, removes, a seal) are durable before anyone acts on them.
  if (seg->sync_appends) KVTIER_RETURN_IF_ERROR(t.sync());
  return ok_status();
}

void SegmentLayout::retire_segment(uint32_t id, uint64_t* grown) {
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

void SegmentLayout::finish_in_flight(uint32_t id, uint64_t* grown) {
  bool retired;
  {
    MutexLock lock(seg->mu);
    SegmentFile& f = seg->files[id];
    if (f.in_flight > 0) --f.in_flight;
    retired = f.retired;
  }
  if (retired) retire_segment(id, grown);
}

Status SegmentLayout::roll_segment(size_t slot, uint64_t* grown) {
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
  f.seg_path = segment_dir(s_.router, b) + "/" + f.name + std::string(segment::kSegmentSuffix);
  f.sum_path = segment_dir(s_.router, b) + "/" + f.name + std::string(segment::kSummarySuffix);
  f.ours = true;
  const uint64_t now = wall_ns();
  // The segment first (a header naming it), then its summary, which makes it known. With
  // fsync each is published durably: its data and its directory entry.
  const PublishOptions publish{.durable = s_.config.fsync};
  std::string header(segment::kSegmentHeaderBytes, '\0');
  segment::encode_segment_header(
      {s_.ns_id, seg->writer, seq, now},
      std::span<std::byte>(reinterpret_cast<std::byte*>(header.data()), header.size()));
  KVTIER_RETURN_IF_ERROR(
      object_io::write_object(s_.agent, f.seg_path, s_.router.temp_dir(b), header, publish));
  std::string begin(segment::kEntryBytes, '\0');
  segment::encode_entry({segment::EntryType::kBegin, 0, s_.ns_id, seg->writer, seq, 0, now},
                        std::span<std::byte, segment::kEntryBytes>(
                            reinterpret_cast<std::byte*>(begin.data()), segment::kEntryBytes));
  KVTIER_RETURN_IF_ERROR(
      object_io::write_object(s_.agent, f.sum_path, s_.router.temp_dir(b), begin, publish));
  f.end = segment::kSegmentHeaderBytes;
  f.summary_end = segment::kEntryBytes;
  // Both files as charged from the start: what they take beyond their bytes is charged now.
  *grown += s_.capacity.charge_appended(segment::kSegmentHeaderBytes) +
            s_.capacity.charge_appended(segment::kEntryBytes);
  MutexLock lock(seg->mu);
  const auto id = static_cast<uint32_t>(seg->files.size());
  seg->by_name.emplace(f.name, id);
  seg->files.push_back(std::move(f));
  seg->active[slot] = id;
  return ok_status();
}

void SegmentLayout::put_window_segments(std::span<const std::string_view> keys,
                                        std::span<const ConstBuffer> pieces, size_t k,
                                        std::span<Status> out, bool relocating, uint64_t read_ns) {
  auto work = s_.plan(keys, pieces, k, out);
  if (!relocating) s_.admit(work, out);  // copies forward are pages already taken
  s_.stage_for_sealing(work, out, seals_whole_pages());
  if (work.empty()) return;
  Result<HeaderPool::Lease> lease = s_.headers.acquire(work.size());
  if (!lease.ok()) {
    for (const auto& w : work) out[w.page] = lease.status();
    bump(s_.counters.put_failures, work.size());
    return;
  }
  // Record shapes first: 4 KiB-aligned page objects where direct I/O is in use (it needs
  // aligned offsets), compact elsewhere. Checksums and headers are made chunk by chunk just
  // before each chunk is written (below), while its pages are still in cache for the copy.
  const uint64_t created = wall_ns();
  for (auto& w : work) {
    const bool aligned = s_.config.direct_io != DirectIo::kOff && s_.dio[w.route.base].has_value();
    w.header_bytes = aligned ? static_cast<uint32_t>(kHeaderBytes)
                             : s_.compact_header_bytes(keys[w.page].size(), w.payload);
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
  if (s_.capacity.bounded()) {
    uint64_t records = 0;
    for (const auto& w : work) {
      records += w.stored_bytes + segment::kEntryBytes +
                 (w.header_bytes == kHeaderBytes ? kBlockBytes : 0);
    }
    const uint64_t rolls = std::min<uint64_t>(
        work.size(), s_.router.base_count() * lanes + 2 * records / s_.config.segment_bytes + 1);
    // A segment started: both its files as charged when made (roll_segment), and its seal.
    reserved = records +
               rolls * (s_.capacity.charge_appended(segment::kSegmentHeaderBytes) +
                        s_.capacity.charge_appended(segment::kEntryBytes) + segment::kEntryBytes);
    Status st = reserve_segments(reserved, /*copy_forward=*/!relocating);
    if (!st.ok()) {
      for (const auto& w : work) out[w.page] = st;
      if (!relocating) {
        bump(s_.counters.put_failures, work.size());
        bump(s_.counters.capacity_refusals, work.size());
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
  std::vector<std::vector<size_t>> by_base(s_.router.base_count());
  for (size_t i = 0; i < work.size(); ++i) by_base[work[i].route.base].push_back(i);
  for (size_t b = 0; b < by_base.size(); ++b) {
    if (by_base[b].empty()) continue;
    MutexLock io(seg->bases[b].io);
    for (const size_t i : by_base[b]) {
      auto& w = work[i];
      const size_t slot = relocating ? copy_slot(b) : b * seg->lanes + chunk_of[i] % lanes;
      const bool direct = opens_direct(w.io);
      Status st;
      for (int attempt = 0; attempt < 2; ++attempt) {
        st = ok_status();
        bool roll;
        {
          MutexLock lock(seg->mu);
          const std::optional<uint32_t> a = seg->active[slot];
          roll = !a || (seg->files[*a].end > segment::kSegmentHeaderBytes &&
                        align_up(seg->files[*a].end, kBlockBytes) + w.stored_bytes >
                            s_.config.segment_bytes);
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
          Result<Target> t = s_.agent.open_target(spec);
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
    if (through_staging(w.io)) {
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
        c.mem.push_back(MemDesc{s_.zeros.data(), body - w.payload});
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
      for (size_t i : c.pages) {
        Status st = s_.encode_put_header(work[i], keys[work[i].page], created, lease->block(i));
        if (!st.ok() && c.error.ok()) c.error = std::move(st);
      }
      if (!c.error.ok()) continue;  // nothing of the run is written or listed
      c.xfer = s_.agent.make_request(TransferOp::kWrite, c.mem, c.sto);
      c.error = c.xfer.ok() ? c.xfer->post() : c.xfer.status();
      if (c.error.ok()) c.xfer->wait();
    }
  };
  if (lanes > 1) {
    std::call_once(seg->lane_pool_started, [&] {
      seg->lane_pool = std::make_unique<WorkerPool>(seg->lanes - 1, "kvtier-lane");
    });
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
    if (st.ok()) st = s_.page_result(*c.xfer, w);
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
        s_.index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base), w.stored_bytes, id,
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
  s_.capacity.settle(reserved, grown);
  for (const auto& w : work) {
    if (!out[w.page].ok()) continue;
    if (relocating) {
      bump(s_.counters.relocated_pages);
      bump(s_.counters.relocated_bytes, w.stored_bytes);
    } else {
      bump(s_.counters.put_pages);
      bump(s_.counters.put_bytes, w.payload);
      s_.count_io(w);
    }
  }
  if (relocating) return;
  for (const Status& s : out) {
    if (!s.ok()) bump(s_.counters.put_failures);
  }
}

void SegmentLayout::sync_records(std::span<const detail::PageWork<ConstBuffer>> work,
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

}  // namespace kvtier
