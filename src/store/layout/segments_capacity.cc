// The segment layout's capacity (docs/architecture.md, "Segment layout", capacity and
// eviction): a put window reserves an upper bound of what it adds under the shared ledger,
// whole sealed segments are reclaimed oldest first (their recently used pages copied
// forward; a segment other stores read since it last went to the back of the queue gets a
// second chance), and the unused part is given back afterwards.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <tuple>

#include "layout/segments.h"
#include "window/store_core.h"

namespace kvtier {

void SegmentLayout::make_reclaimable(uint32_t id) {
  SegmentFile& f = seg->files[id];
  if (f.in_clock || f.gone) return;
  if (f.ours && !f.sealed) return;  // this store still appends to it
  f.in_clock = true;
  f.clock_ns = wall_ns();
  // Copies forward join where their latest read puts them, as an LRU would keep them: ahead
  // of the segments written since, behind those before (copies that went to the back kept a
  // page read once just after it was put for two rounds of the clock, and held 0.94 of an
  // LRU's hits: docs/benchmarks.md). Everything else, a second chance included, goes to the
  // back.
  f.order_ns = f.copies_read_ns != 0 ? std::min(f.copies_read_ns, f.clock_ns) : f.clock_ns;
  f.copies_read_ns = 0;
  auto at = seg->clock.end();
  while (at != seg->clock.begin() && seg->files[*std::prev(at)].order_ns > f.order_ns) --at;
  seg->clock.insert(at, id);
}

void SegmentLayout::segments_adopt_abandoned() {
  MutexLock lock(seg->mu);
  for (uint32_t id = 0; id < seg->files.size(); ++id) {
    if (!seg->files[id].ours && !seg->files[id].sealed) make_reclaimable(id);
  }
}

size_t SegmentLayout::forget_gone_segments() {
  std::vector<bool> gone;
  {
    MutexLock lock(seg->mu);
    gone.reserve(seg->files.size());
    for (const SegmentFile& f : seg->files) gone.push_back(f.gone);
  }
  const std::vector<Hash128> erased =
      s_.index.erase_segments([&](uint32_t id) { return id < gone.size() && gone[id]; });
  s_.capacity.evictions().add(erased);
  return erased.size();
}

Result<uint64_t> SegmentLayout::segment_file_bytes() {
  uint64_t bytes = 0;
  for (size_t b = 0; b < s_.router.base_count(); ++b) {
    Status st = s_.agent.list(segment_dir(s_.router, b), ListOptions{.with_details = true},
                              [&](const ObjectInfo& e) {
                                if (segment::is_segment_file(e.name)) {
                                  bytes += s_.capacity.charge_appended(e.size);
                                }
                                return ok_status();
                              });
    if (st.code() != StatusCode::kNotFound) KVTIER_RETURN_IF_ERROR(st);
  }
  return bytes;
}

// Copy-forward. Segments are reclaimed whole, in the order they were written; alone, that
// drops the pages read since they were written along with the rest (an LRU cache keeps
// them), and a second chance for a whole segment that was read keeps its unread pages too
// (8-16% fewer hits than LRU on serving traces: docs/benchmarks.md). So before a segment
// goes, the pages of it this store read since they were put are read, verified and written
// again, into a segment that joins the clock at their last read (make_reclaimable: a clock
// per page, which approximates LRU): a copy not read again goes with the segment that holds
// it. What other stores read is known per segment only (its
// access time), and buys that segment a second chance.
SegmentLayout::CopyForward SegmentLayout::read_for_copy_forward(std::span<const uint32_t> victims) {
  CopyForward cf;
  if (victims.empty()) return cf;
  std::vector<PageIndex::Page> pages = s_.index.pages_in_segments(
      [&](uint32_t s) { return std::find(victims.begin(), victims.end(), s) != victims.end(); });
  uint64_t total = 0;
  for (const PageIndex::Page& p : pages) {
    if (p.read_ns == 0) continue;
    cf.records.push_back({.page = p, .at = total});
    total += align_up(p.bytes, kBlockBytes);  // each record starts block-aligned in `bytes`
  }
  if (cf.records.empty()) return cf;
  std::sort(cf.records.begin(), cf.records.end(), [](const auto& a, const auto& b) {
    return std::tie(a.page.segment, a.page.offset) < std::tie(b.page.segment, b.page.offset);
  });
  uint64_t at = 0;
  for (auto& r : cf.records) {
    r.at = at;
    at += align_up(r.page.bytes, kBlockBytes);
  }
  auto give_up = [&]() {
    cf.records.clear();
    return std::move(cf);
  };
  Result<AlignedBuffer> buf = AlignedBuffer::allocate(total);
  if (!buf.ok()) return give_up();
  cf.bytes = std::move(buf).value();
  Result<Registration> reg = s_.agent.register_memory(cf.bytes.data(), cf.bytes.size());
  if (!reg.ok()) return give_up();
  cf.reg = std::move(reg).value();

  // One read request for every record, each segment opened once.
  std::vector<TargetSpec> specs;
  std::vector<uint32_t> spec_segment;
  {
    MutexLock lock(seg->mu);
    for (const auto& r : cf.records) {
      if (!spec_segment.empty() && spec_segment.back() == r.page.segment) continue;
      specs.push_back(TargetSpec{seg->files[r.page.segment].seg_path, TargetMode::kRead, 0, {}});
      spec_segment.push_back(r.page.segment);
    }
  }
  std::vector<Result<Target>> targets = s_.agent.open_targets(specs);
  std::vector<MemDesc> mem;
  std::vector<StorageDesc> sto;
  std::vector<size_t> record_of;
  size_t t = 0;
  for (size_t i = 0; i < cf.records.size(); ++i) {
    const auto& r = cf.records[i];
    while (spec_segment[t] != r.page.segment) ++t;
    if (!targets[t].ok() || r.page.offset + r.page.bytes > targets[t]->size()) continue;
    mem.push_back(MemDesc{cf.bytes.data() + r.at, r.page.bytes});
    sto.push_back(StorageDesc{&*targets[t], r.page.offset, r.page.bytes});
    record_of.push_back(i);
  }
  std::vector<bool> read(cf.records.size(), false);
  if (!mem.empty()) {
    Result<Transfer> x = s_.agent.make_request(TransferOp::kRead, mem, sto);
    if (x.ok() && x->post().ok()) {
      x->wait();
      const auto results = x->results();
      for (size_t d = 0; d < record_of.size(); ++d) read[record_of[d]] = results[d].ok();
    }
  }

  // Only intact records of this namespace and key go forward (a damaged one is a miss, as
  // it would be read).
  std::vector<CopyForward::Record> kept;
  for (size_t i = 0; i < cf.records.size(); ++i) {
    auto& r = cf.records[i];
    if (!read[i] || r.page.header_bytes == 0 || r.page.header_bytes > r.page.bytes) continue;
    std::byte* rec = cf.bytes.data() + r.at;
    alignas(64) std::array<std::byte, kHeaderBytes> block{};
    std::memcpy(block.data(), rec, r.page.header_bytes);
    page::SealedView view;
    Result<page::Header> h = s_.sealing ? page::decode_sealed(block, view) : page::decode(block);
    if (!h.ok() || h->namespace_id != s_.ns_id || h->key_hash != r.page.hash ||
        h->header_bytes != r.page.header_bytes || h->payload_bytes != r.page.payload ||
        !page::verify_record(*h, r.page.bytes, std::nullopt).ok()) {
      continue;
    }
    const MutableBuffer payload{rec + h->header_bytes, h->payload_bytes};
    if (s_.sealing) {
      // Opened here and sealed again as it is put (under the current key, and its name).
      Result<std::string> key = s_.sealing->page_key(*h, view);
      if (!key.ok() ||
          !s_.sealing->open(view, *key, h->payload_bytes, std::span(&payload, 1)).ok()) {
        continue;
      }
      r.key = std::move(key).value();
    } else {
      const ConstBuffer in{payload.data, payload.size};
      const std::span<const ConstBuffer> one(&in, 1);
      std::vector<uint64_t> sums(page::chunk_count(h->payload_bytes));
      for (size_t c = 0; c < sums.size(); ++c) {
        sums[c] = page::chunk_checksum(one, h->payload_bytes, c, h->chunk_hash);
      }
      if (!page::verify_record(*h, r.page.bytes, sums).ok()) continue;
      r.key = std::string(h->key);
    }
    r.piece_count = h->piece_count;
    r.piece_bytes = h->piece_bytes;
    kept.push_back(std::move(r));
  }
  cf.records = std::move(kept);
  return cf;
}

size_t SegmentLayout::copy_forward(CopyForward& cf) {
  // Pages go out in windows of one piece count (put windows take k pieces a page), their
  // payloads cut as they were (pieces of differing sizes: any cut of differing sizes, which
  // is all a header records of them).
  std::vector<size_t> order(cf.records.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // In the order they were read, so each window's segment holds pages read about together.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(cf.records[a].piece_count, cf.records[a].page.read_ns) <
           std::tie(cf.records[b].piece_count, cf.records[b].page.read_ns);
  });
  size_t written = 0;
  constexpr size_t kWindow = 128;
  for (size_t first = 0; first < order.size();) {
    const uint32_t k = cf.records[order[first]].piece_count;
    size_t last = first;
    while (last < order.size() && last - first < kWindow &&
           cf.records[order[last]].piece_count == k) {
      ++last;
    }
    std::vector<std::string_view> keys;
    std::vector<ConstBuffer> pieces;
    uint64_t read_ns = 0;
    for (size_t j = first; j < last; ++j) {
      const auto& r = cf.records[order[j]];
      keys.push_back(r.key);
      read_ns = std::max(read_ns, r.page.read_ns);
      const std::byte* payload = cf.bytes.data() + r.at + r.page.header_bytes;
      const uint64_t n = r.page.payload;
      for (uint32_t p = 0; p < k; ++p) {
        uint64_t off, size;
        if (r.piece_bytes != 0) {
          off = p * r.piece_bytes;
          size = r.piece_bytes;
        } else {  // differing sizes: the rest, then one byte each
          off = p == 0 ? 0 : n - (k - p);
          size = p == 0 ? n - (k - 1) : 1;
        }
        pieces.push_back(ConstBuffer{payload + off, size});
      }
    }
    std::vector<Status> out(keys.size());
    if (k != 0) put_window_segments(keys, pieces, k, out, /*relocating=*/true, read_ns);
    // Put again, each copy is unread until it is read.
    for (size_t j = first; j < last; ++j) written += k != 0 && out[j - first].ok();
    first = last;
  }
  return written;
}

// The protocol is StoreCapacity::reserve()'s (capacity/store_capacity.cc). The victims are
// whole reclaimable segments from the clock's hand, removed with the ledger's lock released
// (their pages this store used recently copied forward first, above); the usage is lowered
// by what this store removed, so it never reads below what is on storage. Two stores
// choosing the same segment both try; the one whose remove succeeds gives the bytes back.
//
// A reader never loses a record under it: a get window opens the segment before it reads,
// and an unlinked file stays readable through descriptors already open; a window that opens
// after the unlink gets kNotFound, a miss, and drops the index entry.
Status SegmentLayout::reserve_segments(uint64_t need, bool copy_forward_pages) {
  // Second chances for segments other stores read (their access time), at most one pass of
  // the clock per call: readers that touch every segment cannot stall a writer.
  std::optional<size_t> chances_left;
  std::vector<uint32_t> victims;
  StoreCapacity::Evictor e;
  e.choose = [&](uint64_t short_by) {
    victims.clear();
    uint64_t freeing = 0;
    std::vector<bool> answering(s_.router.base_count());
    for (size_t b = 0; b < answering.size(); ++b) answering[b] = s_.serving(b);
    MutexLock lock(seg->mu);
    size_t steps = seg->clock.size();
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
      f.in_clock = false;
      freeing += s_.capacity.charge_appended(f.ours ? f.end : f.record_end) +
                 s_.capacity.charge_appended(f.ours ? f.summary_end : f.summary_read);
      victims.push_back(id);
    }
    return !victims.empty();
  };
  e.evict = [&](uint64_t* freed) {
    const uint64_t freed_before = *freed;
    Status failed;
    std::vector<uint32_t> doomed;
    for (const uint32_t id : victims) {
      std::string path;
      uint64_t since;
      {
        MutexLock lock(seg->mu);
        path = seg->files[id].seg_path;
        since = std::max(seg->files[id].clock_ns, seg->files[id].touched_ns);
      }
      // Read by another store since it went to the back of the clock (open_for_read sets the
      // access time): a second chance.
      struct stat st {};
      if (*chances_left > 0 && ::stat(path.c_str(), &st) == 0 &&
          uint64_t(st.st_atim.tv_sec) * 1'000'000'000 + uint64_t(st.st_atim.tv_nsec) > since) {
        --*chances_left;
        MutexLock lock(seg->mu);
        make_reclaimable(id);
        continue;
      }
      doomed.push_back(id);
    }
    CopyForward cf;
    if (copy_forward_pages) cf = read_for_copy_forward(doomed);
    for (const uint32_t id : doomed) {
      std::string paths[2];
      {
        MutexLock lock(seg->mu);
        paths[0] = seg->files[id].seg_path;  // the segment first: a summary left alone by a
        paths[1] = seg->files[id].sum_path;  // crash is still listed, and reclaimed later
      }
      bool removed_all = true;
      for (const std::string& path : paths) {
        // Reclaimable segments never grow, so the size now is the size removed.
        Result<ObjectInfo> info = s_.agent.stat(path);
        Status removed = s_.agent.remove(path);
        if (removed.ok()) {
          *freed += info.ok() ? s_.capacity.charge_appended(info->size) : 0;
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
    bump(s_.counters.evicted_bytes, *freed - freed_before);
    if (!cf.records.empty()) {
      // The copies are charged as any write (a window of their own, which makes its room
      // without copying forward again), so the room the removals made goes back first.
      if (*freed != freed_before) {
        Status released = s_.capacity.release(*freed - freed_before);
        *freed = freed_before;
        if (!released.ok()) return released;
      }
      copy_forward(cf);
    }
    // The copies point at their new records: what is left of the segments is evicted.
    bump(s_.counters.evicted_pages, forget_gone_segments());
    return failed;
  };
  e.relearn = [&]() -> Result<bool> {
    segments_refresh();  // the segments others sealed since this store last looked
    MutexLock lock(seg->mu);
    return !seg->clock.empty();
  };
  e.none_left = "no sealed segment is left to reclaim";
  return s_.capacity.reserve(need, e);
}

}  // namespace kvtier
