// The read path: a get window opens its pages' objects, reads each header into a header
// block and the payload straight into the caller's memory (or a staging buffer), verifies
// every page on the thread that completed it, then counts, drops and indexes what it found.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "store_impl.h"

namespace kvtier {

// One get window on its way through the read path: what each step leaves for the next.
// Members go in reverse order: the transfer (last) before the header blocks, targets and
// staging buffers it refers to.
struct Store::Impl::ReadWindow {
  // Marks a descriptor that reads a page's header rather than a checksum chunk.
  static constexpr uint32_t kNoChunk = UINT32_MAX;
  // What a descriptor reads: a page (index in `reading`) and a chunk of it.
  struct DescRef {
    uint32_t page;
    uint32_t chunk;  // or kNoChunk for the header
  };

  std::span<const std::string_view> keys;
  std::vector<PageWork<MutableBuffer>> work;       // the window's valid pages
  std::vector<PageWork<MutableBuffer>*> reading;   // those whose objects opened
  std::vector<Target> segment_targets;             // segments: the window's open segments
  std::vector<uint32_t> segment_ids;               // and the store's numbers for them
  Status batch_error;                              // fails every page being read
  std::optional<HeaderPool::Lease> header_blocks;  // one per page being read
  std::vector<MemDesc> mem;
  std::vector<StorageDesc> sto;
  std::vector<DescRef> refs;  // per descriptor
  // Page r's chunks are chunk_sums[first_chunk[r] .. first_chunk[r + 1]).
  std::vector<size_t> first_chunk;
  std::vector<Status> verdicts;                            // verify_page's, per page being read
  std::vector<uint64_t> chunk_sums;                        // CRC-64 of each chunk, once read
  std::unique_ptr<std::atomic<uint32_t>[]> chunk_pending;  // descriptors left, per chunk
  std::unique_ptr<std::atomic<uint32_t>[]> pending;        // descriptors left, per page
  std::unique_ptr<std::atomic<bool>[]> failed;             // a descriptor failed, per page
  Result<Transfer> xfer = Transfer();
  // Called with (first + page) as each page checks out (PageDone).
  const PageDone* done = nullptr;
  size_t first = 0;
  // Pages read again the careful way (get_window's trust_size), counted there.
  std::vector<bool> reread;
  bool rereading(size_t page) const { return page < reread.size() && reread[page]; }
};

void Store::Impl::get_window(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces, size_t k, std::span<Status> out,
                             const PageDone* done, size_t first, bool trust_size) {
  ReadWindow rw;
  rw.keys = keys;
  rw.done = done;
  rw.first = first;
  rw.work = plan(keys, pieces, k, out);
  trust_size = trust_size && layout == StoreLayout::kFiles &&
               config.location.storage_class == StorageClass::kObject;
  if (layout == StoreLayout::kSegments) {
    open_records(rw, out);
  } else {
    open_for_read(rw, out, trust_size);
  }
  build_read_descriptors(rw);
  run_read(rw);
  if (!rw.segment_ids.empty()) {
    // The access times these reads set (below, and the kernel's own on a relatime mount) are
    // this store's: only a later one tells of another store's read.
    const uint64_t now = wall_ns();
    MutexLock lock(seg->mu);
    for (const uint32_t id : rw.segment_ids) seg->files[id].touched_ns = now;
  }
  collect_read_results(rw, out);
  if (trust_size) {
    // Opened on trust, a hit, a miss and a fault are what they say. A page that did not
    // check out (an object of another size, as a caller's wrong buffers find it; a damaged
    // or replaced one) is read again through a HEAD, which knows the object's size and
    // identity: only then is it told apart, counted and dropped. (Faults are not read again:
    // a deadline is not spent twice.)
    std::vector<size_t> again;
    for (const auto& w : rw.work) {
      if (out[w.page].code() == StatusCode::kCorrupt) again.push_back(w.page);
    }
    if (!again.empty()) {
      rw.reread.assign(keys.size(), false);
      for (const size_t p : again) rw.reread[p] = true;
      // Counted, dropped and indexed there.
      reread_carefully(keys, pieces, k, out, done, first, again);
    }
  }
  account_reads(rw, out);
  index_reads(rw, out);
}

void Store::Impl::reread_carefully(std::span<const std::string_view> keys,
                                   std::span<const MutableBuffer> pieces, size_t k,
                                   std::span<Status> out, const PageDone* done, size_t first,
                                   std::span<const size_t> pages) {
  std::vector<std::string_view> ks;
  std::vector<MutableBuffer> ps;
  for (const size_t p : pages) {
    ks.push_back(keys[p]);
    ps.insert(ps.end(), pieces.begin() + p * k, pieces.begin() + (p + 1) * k);
  }
  std::vector<Status> sub(pages.size());
  PageDone mapped;
  if (done != nullptr) mapped = [&](size_t i) { (*done)(first + pages[i]); };
  get_window(ks, ps, k, sub, done != nullptr ? &mapped : nullptr, 0, /*trust_size=*/false);
  for (size_t i = 0; i < pages.size(); ++i) out[pages[i]] = std::move(sub[i]);
}

void Store::Impl::open_for_read(ReadWindow& rw, std::span<Status> out, bool trust_size) {
  std::vector<TargetSpec> specs;
  specs.reserve(rw.work.size());
  for (const auto& w : rw.work) {
    TargetSpec spec;
    spec.path = w.route.path;
    spec.direct = w.io != PageIo::kBuffered;
    if (trust_size) spec.expected_size = object_bytes(w.payload);
    specs.push_back(std::move(spec));
  }
  std::vector<Result<Target>> opened = agent.open_targets(specs);

  rw.reading.reserve(rw.work.size());
  for (size_t i = 0; i < rw.work.size(); ++i) {
    auto& w = rw.work[i];
    if (!opened[i].ok()) {
      out[w.page] = std::move(opened[i]).status();
      continue;
    }
    w.target = std::move(opened[i]).value();
    w.io_target = &w.target;
    const uint64_t size = w.target.size();
    w.stored_bytes = size;
    if (size < kHeaderBytes) {
      out[w.page] = corrupt_error(
          fmt::format("'{}' is {} bytes, shorter than a page header", w.route.path, size));
      continue;
    }
    w.header_only = size != object_bytes(w.payload);
    rw.reading.push_back(&w);
  }
}

void Store::Impl::build_read_descriptors(ReadWindow& rw) {
  Result<HeaderPool::Lease> lease = headers.acquire(rw.reading.size());
  rw.batch_error = lease.status();
  if (lease.ok()) rw.header_blocks.emplace(std::move(lease).value());
  // Pieces are split at checksum chunk boundaries: each chunk is hashed by the thread that
  // completes it, while it is still in that core's cache, in parallel with other reads; the
  // thread that completes a page's last descriptor verifies the page.
  rw.first_chunk.assign(rw.reading.size() + 1, 0);
  auto add = [&](void* m, const Target* t, uint64_t off, uint64_t n, uint32_t r, uint32_t c) {
    rw.mem.push_back(MemDesc{m, n});
    rw.sto.push_back(StorageDesc{t, rw.reading[r]->at + off, n});
    rw.refs.push_back(ReadWindow::DescRef{r, c});
  };
  if (rw.batch_error.ok()) {
    for (size_t r = 0; r < rw.reading.size(); ++r) {
      auto& w = *rw.reading[r];
      const auto page = static_cast<uint32_t>(r);
      rw.first_chunk[r + 1] =
          rw.first_chunk[r] + (w.header_only ? 0 : page::chunk_count(w.payload));
      w.first_desc = rw.mem.size();
      add(rw.header_blocks->block(r).data(), w.io_target, 0, w.header_bytes, page,
          ReadWindow::kNoChunk);
      if (w.header_only) {
        // Only the header: it tells a caller error from damage.
      } else if (w.io == PageIo::kStaged) {
        const uint64_t n = align_up(w.payload, dio[w.route.base]->offset);
        for (uint64_t off = 0; off < n; off += page::kChecksumChunkBytes) {
          add(w.staging.data() + off, w.io_target, kHeaderBytes + off,
              std::min<uint64_t>(page::kChecksumChunkBytes, n - off), page,
              static_cast<uint32_t>(off / page::kChecksumChunkBytes));
        }
      } else {
        uint64_t base = 0;  // payload offset of the piece
        for (const MutableBuffer& p : w.pieces) {
          for (uint64_t pos = 0; pos < p.size;) {
            const uint64_t at = base + pos;
            const uint64_t chunk = at / page::kChecksumChunkBytes;
            const uint64_t n = std::min(p.size - pos, (chunk + 1) * page::kChecksumChunkBytes - at);
            add(static_cast<std::byte*>(p.data) + pos, w.io_target, w.header_bytes + at, n, page,
                static_cast<uint32_t>(chunk));
            pos += n;
          }
          base += p.size;
        }
      }
      w.desc_count = rw.mem.size() - w.first_desc;
    }
  }
}

void Store::Impl::run_read(ReadWindow& rw) {
  rw.verdicts.resize(rw.reading.size());
  rw.chunk_sums.resize(rw.first_chunk.back());
  rw.chunk_pending = std::make_unique<std::atomic<uint32_t>[]>(rw.chunk_sums.size());
  rw.pending = std::make_unique<std::atomic<uint32_t>[]>(rw.reading.size());
  rw.failed = std::make_unique<std::atomic<bool>[]>(rw.reading.size());
  for (size_t c = 0; c < rw.chunk_sums.size(); ++c) rw.chunk_pending[c].store(0);
  for (size_t r = 0; r < rw.reading.size(); ++r) {
    rw.pending[r].store(static_cast<uint32_t>(rw.reading[r]->desc_count));
    rw.failed[r].store(false);
  }
  for (const ReadWindow::DescRef& ref : rw.refs) {
    if (ref.chunk != ReadWindow::kNoChunk) {
      rw.chunk_pending[rw.first_chunk[ref.page] + ref.chunk].fetch_add(1);
    }
  }
  TransferCallbacks callbacks;
  callbacks.on_descriptor = [this, &rw](size_t d, const Status& st) {
    on_read_descriptor(rw, d, st);
  };

  if (rw.batch_error.ok()) {
    rw.xfer = agent.make_request(TransferOp::kRead, rw.mem, rw.sto);
    rw.batch_error = rw.xfer.status();
  }
  if (rw.batch_error.ok() && !rw.mem.empty()) {
    rw.batch_error = rw.xfer->post(std::move(callbacks));
    if (rw.batch_error.ok()) rw.xfer->wait();
  }
}

void Store::Impl::on_read_descriptor(ReadWindow& rw, size_t d, const Status& st) {
  const ReadWindow::DescRef ref = rw.refs[d];
  const auto& w = *rw.reading[ref.page];
  if (!st.ok()) {
    rw.failed[ref.page].store(true, std::memory_order_relaxed);
  } else if (ref.chunk != ReadWindow::kNoChunk && config.verify_payload) {
    const size_t g = rw.first_chunk[ref.page] + ref.chunk;
    if (rw.chunk_pending[g].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (w.io == PageIo::kStaged) {
        const MutableBuffer staged{w.staging.data(), w.payload};
        rw.chunk_sums[g] =
            page::chunk_checksum(std::span<const MutableBuffer>(&staged, 1), w.payload, ref.chunk);
      } else {
        rw.chunk_sums[g] = page::chunk_checksum(w.pieces, w.payload, ref.chunk);
      }
    }
  }
  if (rw.pending[ref.page].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (rw.failed[ref.page].load(std::memory_order_relaxed)) return;  // the page's status says why
  const auto sums = std::span<const uint64_t>(rw.chunk_sums)
                        .subspan(rw.first_chunk[ref.page],
                                 rw.first_chunk[ref.page + 1] - rw.first_chunk[ref.page]);
  rw.verdicts[ref.page] = verify_page(w, rw.keys[w.page], rw.header_blocks->block(ref.page), sums);
  if (rw.done != nullptr && rw.verdicts[ref.page].ok()) (*rw.done)(rw.first + w.page);
}

Status Store::Impl::verify_page(const PageWork<MutableBuffer>& w, std::string_view key,
                                std::span<const std::byte, kHeaderBytes> block,
                                std::span<const uint64_t> chunk_checksums) const {
  Result<page::Header> h = page::decode(block);
  if (!h.ok()) return h.status();
  const page::Expectation expect{ns_id, key, w.payload, static_cast<uint32_t>(w.pieces.size()),
                                 page::uniform_piece_bytes(w.pieces)};
  Status st = page::check(*h, expect);
  if (!st.ok()) {
    const uint64_t expected = layout == StoreLayout::kSegments
                                  ? page::record_bytes(h->header_bytes, h->payload_bytes)
                                  : object_bytes(h->payload_bytes);
    if (h->namespace_id == ns_id && h->key == key && w.stored_bytes == expected &&
        h->header_bytes == w.header_bytes) {
      // An intact page of this key, asked for with buffers of another size or layout: the
      // caller's mistake, not damage. Not data, not dropped.
      auto pieces = [](uint64_t bytes, uint64_t count, uint64_t piece_bytes) {
        return piece_bytes != 0
                   ? fmt::format("{} bytes in {} pieces of {}", bytes, count, piece_bytes)
                   : fmt::format("{} bytes in {} pieces of unequal sizes", bytes, count);
      };
      return invalid_argument_error(
          fmt::format("stored page is {}; the buffers hold {}",
                      pieces(h->payload_bytes, h->piece_count, h->piece_bytes),
                      pieces(w.payload, w.pieces.size(), page::uniform_piece_bytes(w.pieces))));
    }
    return st;
  }
  // The header is this page's, so its size differs from the object's only when the read
  // stopped at the header (header_only), and then no chunk was read.
  const auto sums = config.verify_payload ? std::optional(chunk_checksums) : std::nullopt;
  if (layout == StoreLayout::kSegments) {
    if (h->header_bytes != w.header_bytes) {
      return corrupt_error(fmt::format("record header of {} bytes; its summary says {}",
                                       h->header_bytes, w.header_bytes));
    }
    KVTIER_RETURN_IF_ERROR(page::verify_record(*h, w.stored_bytes, sums));
  } else {
    KVTIER_RETURN_IF_ERROR(page::verify_object(*h, w.stored_bytes, sums));
  }
  if (w.io == PageIo::kStaged) {
    // Verified in the staging buffer: only now does it reach the caller's memory.
    const std::byte* src = w.staging.data();
    for (const MutableBuffer& p : w.pieces) {
      std::memcpy(p.data, src, p.size);
      src += p.size;
    }
  }
  return ok_status();
}

void Store::Impl::collect_read_results(ReadWindow& rw, std::span<Status> out) {
  for (size_t r = 0; r < rw.reading.size(); ++r) {
    auto& w = *rw.reading[r];
    Status& st = out[w.page];
    st = rw.batch_error;
    if (st.ok()) st = page_result(*rw.xfer, w);
    if (st.ok()) st = std::move(rw.verdicts[r]);
    if (st.code() == StatusCode::kCorrupt) {
      st = st.with_context(layout == StoreLayout::kSegments
                               ? fmt::format("record at {} of '{}'", w.at, w.io_target->path())
                               : fmt::format("page '{}'", w.route.path));
    }
  }
}

void Store::Impl::account_reads(ReadWindow& rw, std::span<const Status> out) {
  for (size_t p = 0; p < out.size(); ++p) {
    if (rw.rereading(p)) continue;
    switch (out[p].code()) {
      case StatusCode::kOk:
        break;
      case StatusCode::kNotFound:
        bump(counters.get_misses);
        break;
      case StatusCode::kCorrupt:
        bump(counters.get_corrupt);
        break;
      default:
        bump(counters.get_failures);
        break;
    }
  }
  for (auto& w : rw.work) {
    if (rw.rereading(w.page)) continue;
    const Status& st = out[w.page];
    if (st.ok()) {
      bump(counters.get_hits);
      bump(counters.get_bytes, w.payload);
      count_io(w);
    } else if (st.code() == StatusCode::kCorrupt && layout == StoreLayout::kSegments) {
      // Records are never rewritten in place: the key is forgotten instead, by this store's
      // index and, through a remove entry, by every other.
      index.erase(w.route.key_hash);
      if (config.drop_corrupt && segments_forget(w.route.key_hash, w.route.base).ok()) {
        bump(counters.corrupt_dropped);
      }
    } else if (st.code() == StatusCode::kCorrupt && w.target.valid()) {
      const ObjectIdentity id = w.target.identity();
      const uint64_t bytes = w.target.size();
      w.target.reset();
      drop(w.route, id, bytes);
    }
  }
}

void Store::Impl::drop(const routing::Route& route, const ObjectIdentity& identity,
                       uint64_t bytes) {
  if (!config.drop_corrupt) return;
  if (agent.remove(route.path, identity.valid() ? &identity : nullptr).ok()) {
    bump(counters.corrupt_dropped);
    index.erase(route.key_hash);
    if (ledger) ledger->release(bytes).ignore_error();  // drift only: healed on restart
  }
}

void Store::Impl::index_reads(const ReadWindow& rw, std::span<const Status> out) {
  // The last page first, so the window's first page is the most recently used (a prefix's
  // earlier pages outlast its later ones, as in put_window).
  const uint64_t now = wall_ns();
  for (auto it = rw.work.rbegin(); it != rw.work.rend(); ++it) {
    const auto& w = *it;
    if (rw.rereading(w.page)) continue;
    const Status& st = out[w.page];
    if (st.ok()) {
      if (read_marks) read_marks->mark(w.route.key_hash);
      // A segment record is indexed with its location before it can be read.
      if (!index.touch(w.route.key_hash, now) && layout == StoreLayout::kFiles) {
        index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base), object_bytes(w.payload)});
      }
    } else if (st.code() == StatusCode::kNotFound) {
      index.erase(w.route.key_hash);
    }
  }
}

// The segment layout's open step (the rest of the layout is in store_segments*.cc).
void Store::Impl::open_records(ReadWindow& rw, std::span<Status> out) {
  // Where each page's record is; keys this store has not indexed are looked for once in what
  // other writers appended on their bases since it last looked.
  std::vector<std::optional<PageIndex::Page>> where(rw.work.size());
  std::vector<bool> unindexed;
  for (size_t i = 0; i < rw.work.size(); ++i) {
    where[i] = index.find(rw.work[i].route.key_hash);
    if (!where[i]) {
      unindexed.resize(router.base_count(), false);
      unindexed[rw.work[i].route.base] = true;
    }
  }
  if (!unindexed.empty()) {
    segments_refresh(unindexed, lookup_max_age_ns());
    for (size_t i = 0; i < rw.work.size(); ++i) {
      if (!where[i]) where[i] = index.find(rw.work[i].route.key_hash);
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
      bump(counters.direct_fallback_pages);
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
  std::vector<Result<Target>> opened = agent.open_targets(specs);
  // Segments read are marked for other stores' clocks: their access time is set (one call
  // per segment and window; advice only, so a failure is ignored). This store's own reads
  // count per page instead (copy-forward, store_segments_capacity.cc).
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
      out[w.page] =
          corrupt_error(fmt::format("record [{}, +{}) lies beyond the end of '{}' ({})", w.at,
                                    w.stored_bytes, w.io_target->path(), w.io_target->size()));
      continue;
    }
    rw.reading.push_back(&w);
  }
}

}  // namespace kvtier
