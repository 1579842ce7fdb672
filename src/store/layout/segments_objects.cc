// The segment layout on an object store (docs/architecture.md, "Segments on an object
// store"): objects cannot be appended to, so each put window writes its records as whole
// segments (one object per lane and base, its header and records uploaded by one request)
// and then each segment's summary whole (its begin entry, the puts and a seal). A summary
// is written only after its segment is, so a summary that can be listed names records that
// are all there; nothing is ever appended, so every segment is sealed from the start.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "layout/segments.h"
#include "naming/object_io.h"
#include "window/store_core.h"

namespace kvtier {
namespace {

constexpr uint64_t kMiB = 1 << 20;
// A window's pages on one base go out in at least min(lanes, bytes / this) segments, so that
// the lanes' uploads run side by side, and in segments of at most segment_bytes.
constexpr uint64_t kMinObjectBytes = kMiB;

// The whole number of MiB an object is a little past (by up to an eighth), or the object's
// size: put_window_whole cuts segments short of it where that adds few segments. radosgw took
// objects of 1 MiB + 4 KiB at 0.8x the speed of 1 MiB ones, and packed 256 KiB pages put 1.28-1.63x
// faster in segments of at most 4 MiB than just past it (reads: 0.84-0.99x, a ranged GET per MiB of
// each of 9 segments instead of 8), 64 KiB pages 0.89-1.41x faster (docs/benchmarks.md, "Object
// store").
uint64_t short_of_boundary(uint64_t object_bytes) {
  const uint64_t whole = object_bytes / kMiB * kMiB;
  return whole != 0 && object_bytes - whole <= whole / 8 ? whole : object_bytes;
}

}  // namespace

std::vector<SegmentLayout::WholeSegment> SegmentLayout::new_whole_segments(size_t b, size_t count) {
  std::vector<WholeSegment> out;
  out.reserve(count);
  MutexLock lock(seg->mu);
  for (size_t i = 0; i < count; ++i) {
    SegmentFile f;
    const uint32_t seq = seg->next_seq++;
    f.name = segment::segment_name(seg->writer, seq);
    f.base = static_cast<uint32_t>(b);
    f.seg_path = segment_dir(s_.router, b) + "/" + f.name + std::string(segment::kSegmentSuffix);
    f.sum_path = segment_dir(s_.router, b) + "/" + f.name + std::string(segment::kSummarySuffix);
    f.ours = true;
    f.retired = true;  // nothing is ever appended to it
    f.end = segment::kSegmentHeaderBytes;
    const auto id = static_cast<uint32_t>(seg->files.size());
    seg->by_name.emplace(f.name, id);
    seg->files.push_back(std::move(f));
    out.push_back({id, seq, b, {}, segment::kSegmentHeaderBytes});
  }
  return out;
}

std::vector<Status> SegmentLayout::write_whole_summaries(
    std::span<const WholeSegment> segs, std::span<const std::vector<segment::Entry>> entries) {
  std::vector<Status> out(segs.size());
  // Every summary in one buffer and one transfer: the uploads run side by side.
  std::vector<uint64_t> at(segs.size() + 1, 0);
  for (size_t s = 0; s < segs.size(); ++s) {
    at[s + 1] = at[s] + (entries[s].size() + 2) * segment::kEntryBytes;
  }
  Result<AlignedBuffer> buf = AlignedBuffer::allocate(std::max<uint64_t>(at.back(), 1));
  Result<Registration> reg = buf.ok() ? s_.agent.register_memory(buf->data(), buf->size())
                                      : Result<Registration>(buf.status());
  if (!reg.ok()) {
    std::fill(out.begin(), out.end(), reg.status());
    return out;
  }
  const uint64_t now = wall_ns();
  std::vector<Target> targets;
  std::vector<size_t> target_of(segs.size(), SIZE_MAX);
  std::vector<MemDesc> mem;
  std::vector<StorageDesc> sto;
  targets.reserve(segs.size());
  for (size_t s = 0; s < segs.size(); ++s) {
    std::string path;
    {
      MutexLock lock(seg->mu);
      path = seg->files[segs[s].id].sum_path;
    }
    const uint32_t seq = segs[s].seq;
    std::byte* p = buf->data() + at[s];
    auto put = [&](size_t i, const segment::Entry& e) {
      segment::encode_entry(e, std::span<std::byte, segment::kEntryBytes>(
                                   p + i * segment::kEntryBytes, segment::kEntryBytes));
    };
    put(0, {segment::EntryType::kBegin, 0, s_.ns_id, seg->writer, seq, 0, now});
    for (size_t i = 0; i < entries[s].size(); ++i) put(i + 1, entries[s][i]);
    put(entries[s].size() + 1, {segment::EntryType::kSeal, 0, {}, 0, 0, 0, now});
    const uint64_t bytes = at[s + 1] - at[s];
    Result<Target> t = s_.agent.open_target(
        TargetSpec{path, TargetMode::kCreate, bytes, s_.router.temp_dir(segs[s].base)});
    if (!t.ok()) {
      out[s] = t.status();
      continue;
    }
    target_of[s] = targets.size();
    targets.push_back(std::move(t).value());
  }
  // Descriptors point at the targets: built once `targets` has stopped growing.
  for (size_t s = 0; s < segs.size(); ++s) {
    if (target_of[s] == SIZE_MAX) continue;
    mem.push_back(MemDesc{buf->data() + at[s], at[s + 1] - at[s]});
    sto.push_back(StorageDesc{&targets[target_of[s]], 0, at[s + 1] - at[s]});
  }
  if (mem.empty()) return out;
  Result<Transfer> xfer = s_.agent.make_request(TransferOp::kWrite, mem, sto);
  Status posted = xfer.ok() ? xfer->post() : xfer.status();
  if (posted.ok()) xfer->wait();
  size_t d = 0;
  for (size_t s = 0; s < segs.size(); ++s) {
    if (target_of[s] == SIZE_MAX) continue;
    Status st = posted.ok() ? xfer->results()[d] : posted;
    ++d;
    if (st.ok()) st = targets[target_of[s]].publish(PublishOptions{.durable = s_.config.fsync});
    out[s] = std::move(st);
  }
  return out;
}

void SegmentLayout::put_window_whole(std::span<const std::string_view> keys,
                                     std::span<const ConstBuffer> pieces, size_t k,
                                     std::span<Status> out) {
  auto work = s_.plan(keys, pieces, k, out);
  s_.admit(work, out);
  s_.stage_for_sealing(work, out, seals_whole_pages());
  if (work.empty()) return;
  const uint64_t created = wall_ns();
  for (auto& w : work) {
    w.header_bytes = s_.compact_header_bytes(keys[w.page].size(), w.payload);
    w.stored_bytes = page::record_bytes(w.header_bytes, w.payload);
  }
  // The window's segments: each base's pages, in order, cut into about `lanes` segments of
  // at least kMinObjectBytes and at most segment_bytes, none a little past a whole MiB, their
  // bytes about even (a record larger than a segment alone).
  std::vector<WholeSegment> segs;
  std::vector<size_t> seg_of(work.size(), SIZE_MAX);
  {
    std::vector<std::vector<size_t>> by_base(s_.router.base_count());
    for (size_t i = 0; i < work.size(); ++i) by_base[work[i].route.base].push_back(i);
    for (size_t b = 0; b < by_base.size(); ++b) {
      if (by_base[b].empty()) continue;
      uint64_t bytes = 0;
      for (const size_t i : by_base[b]) bytes += work[i].stored_bytes;
      const uint64_t per_lane = (bytes + seg->lanes - 1) / seg->lanes;
      uint64_t object_bytes =
          std::min<uint64_t>(s_.config.segment_bytes,
                             std::max(kMinObjectBytes, per_lane) + segment::kSegmentHeaderBytes);
      const auto segments_of = [bytes](uint64_t object) {
        const uint64_t room = object - segment::kSegmentHeaderBytes;
        return (bytes + room - 1) / room;
      };
      // Cut short of a whole MiB where that adds at most a segment for every four lanes (9
      // segments instead of 8; not 2 instead of 1).
      if (const uint64_t cut = short_of_boundary(object_bytes);
          segments_of(cut) <= segments_of(object_bytes) + seg->lanes / 4) {
        object_bytes = cut;
      }
      const uint64_t room = object_bytes - segment::kSegmentHeaderBytes;
      const uint64_t shares = segments_of(object_bytes);
      // A record starts the next segment when it would overflow this one, or when its middle
      // lies in the next of `shares` even shares of the bytes.
      std::vector<std::vector<size_t>> groups(1);
      uint64_t filled = 0;
      uint64_t before = 0;
      for (const size_t i : by_base[b]) {
        const uint64_t r = work[i].stored_bytes;
        const uint64_t share = (before + r / 2) * shares / bytes;
        if (!groups.back().empty() && (filled + r > room || share >= groups.size())) {
          groups.emplace_back();
          filled = 0;
        }
        groups.back().push_back(i);
        filled += r;
        before += r;
      }
      std::vector<WholeSegment> made = new_whole_segments(b, groups.size());
      for (size_t g = 0; g < groups.size(); ++g) {
        made[g].pages = std::move(groups[g]);
        for (const size_t i : made[g].pages) {
          work[i].at = made[g].end;
          made[g].end += work[i].stored_bytes;
          seg_of[i] = segs.size() + g;
        }
      }
      std::move(made.begin(), made.end(), std::back_inserter(segs));
    }
  }
  // A header block per page and one per segment (its segment header).
  Result<HeaderPool::Lease> lease = s_.headers.acquire(work.size() + segs.size());
  if (!lease.ok()) {
    for (const auto& w : work) out[w.page] = lease.status();
    bump(s_.counters.put_failures, work.size());
    return;
  }
  std::vector<Target> targets;
  targets.reserve(segs.size());
  std::vector<Status> seg_error(segs.size());
  for (size_t s = 0; s < segs.size(); ++s) {
    std::string path;
    {
      MutexLock lock(seg->mu);
      SegmentFile& f = seg->files[segs[s].id];
      f.end = segs[s].end;
      f.record_end = segs[s].end;
      path = f.seg_path;
    }
    const uint32_t seq = segs[s].seq;
    std::span<std::byte, page::kHeaderBytes> block = lease->block(work.size() + s);
    segment::encode_segment_header({s_.ns_id, seg->writer, seq, created}, block);
    Result<Target> t = s_.agent.open_target(
        TargetSpec{path, TargetMode::kCreate, segs[s].end, s_.router.temp_dir(segs[s].base)});
    if (!t.ok()) seg_error[s] = t.status();
    targets.push_back(t.ok() ? std::move(t).value() : Target());
  }
  // One transfer: each segment its header, then its records (header, payload pieces or the
  // staging copy, padding) in order from offset 0, which the backend uploads as one object.
  std::vector<MemDesc> mem;
  std::vector<StorageDesc> sto;
  for (size_t s = 0; s < segs.size(); ++s) {
    if (!seg_error[s].ok()) continue;
    Target* const t = &targets[s];
    mem.push_back(MemDesc{lease->block(work.size() + s).data(), segment::kSegmentHeaderBytes});
    sto.push_back(StorageDesc{t, 0, segment::kSegmentHeaderBytes});
    for (const size_t i : segs[s].pages) {
      auto& w = work[i];
      w.io_target = t;
      // A page that cannot be sealed keeps its segment from being published.
      if (Status st = s_.encode_put_header(w, keys[w.page], created, lease->block(i)); !st.ok()) {
        seg_error[s] = std::move(st);
      }
      w.first_desc = mem.size();
      mem.push_back(MemDesc{lease->block(i).data(), w.header_bytes});
      sto.push_back(StorageDesc{t, w.at, w.header_bytes});
      const uint64_t body = w.stored_bytes - w.header_bytes;
      if (through_staging(w.io)) {
        mem.push_back(MemDesc{w.staging.data(), body});
        sto.push_back(StorageDesc{t, w.at + w.header_bytes, body});
      } else {
        uint64_t off = w.at + w.header_bytes;
        for (const ConstBuffer& p : w.pieces) {
          mem.push_back(MemDesc{const_cast<void*>(p.data), p.size});
          sto.push_back(StorageDesc{t, off, p.size});
          off += p.size;
        }
        if (body > w.payload) {
          mem.push_back(MemDesc{s_.zeros.data(), body - w.payload});
          sto.push_back(StorageDesc{t, off, body - w.payload});
        }
      }
      w.desc_count = mem.size() - w.first_desc;
    }
  }
  Result<Transfer> xfer = mem.empty() ? Result<Transfer>(Transfer())
                                      : s_.agent.make_request(TransferOp::kWrite, mem, sto);
  Status posted = mem.empty() ? ok_status() : (xfer.ok() ? xfer->post() : xfer.status());
  if (posted.ok() && !mem.empty()) xfer->wait();
  // A segment is uploaded whole or not at all; then published, then its summary makes it
  // known. A caller gone past its deadline leaves segments without summaries, never found.
  std::vector<std::vector<segment::Entry>> entries(segs.size());
  for (size_t s = 0; s < segs.size(); ++s) {
    Status st = seg_error[s];
    if (st.ok()) st = posted;
    for (size_t j = 0; st.ok() && j < segs[s].pages.size(); ++j) {
      st = s_.page_result(*xfer, work[segs[s].pages[j]]);
    }
    if (st.ok()) st = targets[s].publish(PublishOptions{.durable = s_.config.fsync});
    if (st.ok() && guard::call_abandoned()) {
      st = deadline_exceeded_error("the call's deadline passed before the page was published");
    }
    seg_error[s] = st;
    if (!st.ok()) continue;
    for (const size_t i : segs[s].pages) {
      const auto& w = work[i];
      entries[s].push_back({segment::EntryType::kPut, static_cast<uint16_t>(w.header_bytes),
                            w.route.key_hash, w.at, w.payload, w.stored_bytes, created});
    }
  }
  std::vector<WholeSegment> written;
  std::vector<std::vector<segment::Entry>> written_entries;
  std::vector<size_t> written_index;
  for (size_t s = 0; s < segs.size(); ++s) {
    if (!seg_error[s].ok()) continue;
    written.push_back(segs[s]);
    written_entries.push_back(std::move(entries[s]));
    written_index.push_back(s);
  }
  const std::vector<Status> summaries = write_whole_summaries(written, written_entries);
  for (size_t n = 0; n < written.size(); ++n) seg_error[written_index[n]] = summaries[n];
  for (size_t s = 0; s < segs.size(); ++s) {
    {
      MutexLock lock(seg->mu);
      SegmentFile& f = seg->files[segs[s].id];
      f.sealed = seg_error[s].ok();
      f.gone = !seg_error[s].ok();  // no summary names it: never read
    }
    for (const size_t i : segs[s].pages) {
      const auto& w = work[i];
      if (!seg_error[s].ok()) {
        out[w.page] = seg_error[s];
        continue;
      }
      out[w.page] = ok_status();
      s_.index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base), w.stored_bytes,
                    segs[s].id, w.header_bytes, w.at, w.payload});
      bump(s_.counters.put_pages);
      bump(s_.counters.put_bytes, w.payload);
      s_.count_io(w);
    }
  }
  for (const Status& s : out) {
    if (!s.ok()) bump(s_.counters.put_failures);
  }
}

Status SegmentLayout::forget_whole(const Hash128& key_hash, size_t base) {
  std::vector<WholeSegment> segs = new_whole_segments(base, 1);
  const std::vector<segment::Entry> entries{
      {segment::EntryType::kRemove, 0, key_hash, 0, 0, 0, wall_ns()}};
  const Status st = write_whole_summaries(segs, {&entries, 1}).front();
  MutexLock lock(seg->mu);
  SegmentFile& f = seg->files[segs.front().id];
  f.sealed = st.ok();
  f.gone = !st.ok();
  return st;
}

void SegmentLayout::apply_whole_summaries(std::span<const uint32_t> ids, bool at_open) {
  struct Read {
    uint32_t id;
    std::string name;
    uint64_t begin_ns = 0;
    bool ours = false;
    std::vector<segment::Entry> entries;
  };
  std::vector<Read> reads;
  std::vector<TargetSpec> specs;
  {
    MutexLock lock(seg->mu);
    for (const uint32_t id : ids) {
      reads.push_back({id, seg->files[id].name});
      TargetSpec spec{seg->files[id].sum_path, TargetMode::kRead, 0, {}};
      spec.expected_size = seg->files[id].listed_bytes;  // 0: asked at open
      specs.push_back(std::move(spec));
    }
  }
  // Opened side by side, then read in one transfer (every GET in flight at once).
  std::vector<Result<Target>> opened = s_.agent.open_targets(specs);
  std::vector<uint64_t> at(reads.size() + 1, 0);
  for (size_t i = 0; i < reads.size(); ++i) {
    const uint64_t size = opened[i].ok() ? opened[i]->size() : 0;
    at[i + 1] = at[i] + size / segment::kEntryBytes * segment::kEntryBytes;
  }
  Result<AlignedBuffer> buf = AlignedBuffer::allocate(std::max<uint64_t>(at.back(), 1));
  if (!buf.ok()) return;  // looked at again next time
  Result<Registration> reg = s_.agent.register_memory(buf->data(), buf->size());
  if (!reg.ok()) return;
  std::vector<MemDesc> mem;
  std::vector<StorageDesc> sto;
  for (size_t i = 0; i < reads.size(); ++i) {
    if (at[i + 1] == at[i]) continue;
    mem.push_back(MemDesc{buf->data() + at[i], at[i + 1] - at[i]});
    sto.push_back(StorageDesc{&*opened[i], 0, at[i + 1] - at[i]});
  }
  std::vector<bool> read_ok(reads.size(), false);
  if (!mem.empty()) {
    Result<Transfer> xfer = s_.agent.make_request(TransferOp::kRead, mem, sto);
    if (!xfer.ok() || !xfer->post().ok()) return;
    xfer->wait();
    size_t d = 0;
    for (size_t i = 0; i < reads.size(); ++i) {
      if (at[i + 1] == at[i]) continue;
      read_ok[i] = xfer->results()[d++].ok();
    }
  }
  for (size_t i = 0; i < reads.size(); ++i) {
    if (!read_ok[i]) continue;
    Read& r = reads[i];
    for (uint64_t o = at[i]; o < at[i + 1]; o += segment::kEntryBytes) {
      const std::optional<segment::Entry> e = segment::decode_entry(
          std::span<const std::byte, segment::kEntryBytes>(buf->data() + o, segment::kEntryBytes));
      if (!e) break;  // written whole: a damaged entry ends what can be trusted
      if (o == at[i]) {
        // The begin entry comes first and says the namespace and when it was written.
        if (e->type != segment::EntryType::kBegin) break;
        r.ours = e->key_hash == s_.ns_id;
        r.begin_ns = e->time_ns;
        continue;
      }
      if (r.ours) r.entries.push_back(*e);
    }
  }
  // The latest write decides: summaries apply in the order they were written (their begin
  // entries' times; an object store lists names, not times), so a remove applies after the
  // put it removes whoever wrote either.
  std::vector<size_t> order;
  for (size_t i = 0; i < reads.size(); ++i) {
    if (read_ok[i]) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reads[a].begin_ns != reads[b].begin_ns ? reads[a].begin_ns < reads[b].begin_ns
                                                  : reads[a].name < reads[b].name;
  });
  std::vector<PageIndex::Page> run;
  for (const size_t i : order) {
    const Read& r = reads[i];
    uint32_t base;
    {
      MutexLock lock(seg->mu);
      base = seg->files[r.id].base;
    }
    uint64_t record_end = segment::kSegmentHeaderBytes;
    for (const segment::Entry& e : r.entries) {
      if (e.type == segment::EntryType::kPut) {
        record_end = std::max(record_end, e.offset + e.record_bytes);
        const PageIndex::Page p{e.key_hash,     base,     e.record_bytes, r.id,
                                e.header_bytes, e.offset, e.payload_bytes};
        if (at_open) {
          run.push_back(p);
        } else {
          s_.index.put_relearned(p);
        }
      } else if (e.type == segment::EntryType::kRemove) {
        s_.index.put_many(run);  // the puts before it first
        run.clear();
        s_.index.erase(e.key_hash);
      }
    }
    MutexLock lock(seg->mu);
    SegmentFile& f = seg->files[r.id];
    f.summary_read = at[i + 1] - at[i];
    f.record_end = std::max(f.record_end, record_end);
    f.sealed = true;  // written whole: nothing more will come
  }
  s_.index.put_many(run);
}

}  // namespace kvtier
