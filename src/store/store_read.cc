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

namespace {

// Get batches spread over the store's threads (Store::Impl::spreads_get) from this size.
constexpr uint64_t kSpreadGetLeastBytes = uint64_t{512} << 10;
// A sealed batch spreads up to the size a FILE backend reads on the caller's thread by default
// (its inline size): larger ones go to the backend's own threads, the cipher with them.
constexpr uint64_t kSpreadSealedMostBytes = uint64_t{4} << 20;
// Pages in the clear spread when each is at most this big: a part then holds several, read
// and hashed by its thread on its own. Larger pages go whole to the backend, which splits them
// itself (the rings' 256 KiB rounds, the store's write runs).
constexpr uint64_t kSpreadPageMostBytes = uint64_t{1} << 20;
// A part is at most about this big: whole on the caller's-thread path (4 MiB, headers
// included), its 1 MiB merged reads hashed while the core's L2 still holds them.
constexpr uint64_t kSpreadPartBytes = uint64_t{2} << 20;
// And at least about this big where the batch allows: on a host of many cores a small batch
// is cut in a few parts, not in a page per thread, each worth its hand-off.
constexpr uint64_t kSpreadPartLeastBytes = uint64_t{256} << 10;

// Chunk `c` of a page read into its pieces, or into staging (direct I/O, the guard).
uint64_t landed_chunk_checksum(const detail::PageWork<MutableBuffer>& w, size_t c, ChunkHash hash) {
  if (w.io == PageIo::kStaged) {
    const MutableBuffer staged{w.staging.data(), w.payload};
    return page::chunk_checksum(std::span<const MutableBuffer>(&staged, 1), w.payload, c, hash);
  }
  return page::chunk_checksum(w.pieces, w.payload, c, hash);
}

}  // namespace

bool Store::Impl::spreads_get(std::span<const std::string_view> keys,
                              std::span<const MutableBuffer> pieces, uint64_t* bytes) const {
  if (guard != nullptr || spread.size() == 0 || keys.size() < 2 ||
      counters.batches_in_flight.load(std::memory_order_relaxed) > 1 ||
      config.location.storage_class != StorageClass::kFile || pieces.size() % keys.size() != 0) {
    return false;
  }
  *bytes = 0;
  for (const MutableBuffer& p : pieces) *bytes += p.size;
  if (*bytes < kSpreadGetLeastBytes) return false;
  if (sealing) return *bytes <= kSpreadSealedMostBytes;
  return *bytes <= kSpreadPageMostBytes * keys.size();
}

BatchResult Store::Impl::get_spread(std::span<const std::string_view> keys,
                                    std::span<const MutableBuffer> pieces, uint64_t bytes) {
  const size_t k = pieces.size() / keys.size();
  // A part per thread while parts stay at least kSpreadPartLeastBytes, or more where they
  // would be larger than kSpreadPartBytes: the threads take the next part as they finish one.
  const uint64_t per_thread = std::min<uint64_t>(spread.size() + 1, bytes / kSpreadPartLeastBytes);
  const size_t parts = std::min<size_t>(
      std::max<uint64_t>(per_thread, (bytes + kSpreadPartBytes - 1) / kSpreadPartBytes),
      keys.size());
  std::vector<BatchResult> got(parts);
  spread.parallel_for(parts, [&](size_t j) {
    const size_t from = keys.size() * j / parts;
    const size_t to = keys.size() * (j + 1) / parts;
    got[j] = run_batch(
        keys.subspan(from, to - from), pieces.subspan(from * k, (to - from) * k),
        [&](std::span<const std::string_view> ks, std::span<const MutableBuffer> ps, size_t kk,
            std::span<Status> out) { get_window(ks, ps, kk, out); },
        /*touch_earlier=*/false);
  });
  BatchResult r;
  for (BatchResult& part : got) {
    if (!part.status.ok()) return std::move(part);  // the batch's shape: the same for all
    r.pages.insert(r.pages.end(), std::make_move_iterator(part.pages.begin()),
                   std::make_move_iterator(part.pages.end()));
  }
  // The parts indexed their hits as they went, side by side: touched again, last to first,
  // so the batch's first page is its most recently used, as in one part.
  if (layout->orders_batches()) {
    const uint64_t now = wall_ns();
    for (size_t i = keys.size(); i-- > 0;) {
      if (r.pages[i].ok()) index.touch(router.key_hash(keys[i]), now);
    }
  }
  return r;
}

void Store::Impl::get_window(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces, size_t k, std::span<Status> out,
                             const PageDone* done, size_t first, bool trust_size, size_t name) {
  ReadWindow rw;
  rw.keys = keys;
  rw.done = done;
  rw.first = first;
  rw.work = plan(keys, pieces, k, out, name);
  rw.rejects.assign(keys.size(), Reject::kNone);
  const bool trusted = trust_size && layout->trusts_sizes();
  layout->open_for_read(rw, out, trusted);
  build_read_descriptors(rw);
  run_read(rw);
  layout->after_read(rw);
  collect_read_results(rw, out);
  const auto read_these_again = [&](StatusCode code) {
    std::vector<size_t> again;
    for (const auto& w : rw.work) {
      if (out[w.page].code() != code || rw.rereading(w.page)) continue;
      again.push_back(w.page);
      // Absent under this name: its index entry, if any, was stale.
      if (code == StatusCode::kNotFound) index.erase(w.route.key_hash);
    }
    if (!again.empty()) rw.reread.resize(keys.size(), false);
    for (const size_t p : again) rw.reread[p] = true;  // counted, dropped and indexed there
    return again;
  };
  if (trusted) {
    // Opened on trust, a hit, a miss and a fault are what they say. A page that did not
    // check out (an object of another size, as a caller's wrong buffers find it; a damaged
    // or replaced one) is read again through a HEAD, which knows the object's size and
    // identity: only then is it told apart, counted and dropped. (Faults are not read again:
    // a deadline is not spent twice.)
    const std::vector<size_t> again = read_these_again(StatusCode::kCorrupt);
    if (!again.empty()) read_again(keys, pieces, k, out, done, first, again, false, name);
  }
  if (name + 1 < names_of()) {
    // Absent under this name: perhaps sealed before the key file's current key was, under
    // the name of the key current then.
    const std::vector<size_t> absent = read_these_again(StatusCode::kNotFound);
    if (!absent.empty())
      read_again(keys, pieces, k, out, done, first, absent, trust_size, name + 1);
  }
  account_reads(rw, out);
  index_reads(rw, out);
}

void Store::Impl::read_again(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces, size_t k, std::span<Status> out,
                             const PageDone* done, size_t first, std::span<const size_t> pages,
                             bool trust_size, size_t name) {
  std::vector<std::string_view> ks;
  std::vector<MutableBuffer> ps;
  for (const size_t p : pages) {
    ks.push_back(keys[p]);
    ps.insert(ps.end(), pieces.begin() + p * k, pieces.begin() + (p + 1) * k);
  }
  std::vector<Status> sub(pages.size());
  PageDone mapped;
  if (done != nullptr) mapped = [&](size_t i) { (*done)(first + pages[i]); };
  get_window(ks, ps, k, sub, done != nullptr ? &mapped : nullptr, 0, trust_size, name);
  for (size_t i = 0; i < pages.size(); ++i) out[pages[i]] = std::move(sub[i]);
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
  if (sealing) {
    rw.sealed_header = std::make_unique<std::atomic<uint8_t>[]>(rw.reading.size());
    rw.chunk_refused = std::make_unique<std::atomic<uint8_t>[]>(rw.reading.size());
    for (size_t r = 0; r < rw.reading.size(); ++r) {
      rw.sealed_header[r].store(0);
      rw.chunk_refused[r].store(0);
    }
    rw.sealed_views.resize(rw.reading.size());
    rw.chunk_opened.assign(rw.chunk_sums.size(), 0);
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
  } else if (sealing) {
    open_as_landed(rw, ref);
  } else if (ref.chunk != ReadWindow::kNoChunk && config.verify_payload) {
    const size_t g = rw.first_chunk[ref.page] + ref.chunk;
    if (rw.chunk_pending[g].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      rw.chunk_sums[g] = landed_chunk_checksum(w, ref.chunk, chunk_hash);
    }
  }
  if (rw.pending[ref.page].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (rw.failed[ref.page].load(std::memory_order_relaxed)) return;  // the page's status says why
  const auto sums = std::span<const uint64_t>(rw.chunk_sums)
                        .subspan(rw.first_chunk[ref.page],
                                 rw.first_chunk[ref.page + 1] - rw.first_chunk[ref.page]);
  rw.verdicts[ref.page] = sealing
                              ? verify_sealed_page(rw, ref.page)
                              : verify_page(w, rw.keys[w.page], rw.header_blocks->block(ref.page),
                                            sums, rw.rejects[w.page]);
  if (rw.done != nullptr && rw.verdicts[ref.page].ok()) (*rw.done)(rw.first + w.page);
}

Status Store::Impl::verify_page(const PageWork<MutableBuffer>& w, std::string_view key,
                                std::span<const std::byte, kHeaderBytes> block,
                                std::span<const uint64_t> chunk_checksums, Reject& why) const {
  Result<page::Header> h = page::decode(block);
  if (!h.ok()) {
    why = page::is_sealed(block) ? Reject::kSealing : Reject::kHeader;
    return h.status();
  }
  const page::Expectation expect{ns_id, key, w.payload, static_cast<uint32_t>(w.pieces.size()),
                                 page::uniform_piece_bytes(w.pieces)};
  Status st = page::check(*h, expect);
  if (!st.ok()) {
    if (h->namespace_id == ns_id && h->key == key) {
      KVTIER_RETURN_IF_ERROR(caller_mistake(*h, w));
    }
    why = h->namespace_id != ns_id ? Reject::kNamespace
          : h->key != key          ? Reject::kPlace
                                   : Reject::kLayout;
    return st;
  }
  // Chunks were hashed as they landed the way this store writes them; a page written the
  // other way (another host's CPU, another chunk_hash) is hashed again its own way.
  std::vector<uint64_t> own_way;
  if (config.verify_payload && h->chunk_hash != chunk_hash && !w.header_only) {
    own_way.resize(chunk_checksums.size());
    for (size_t c = 0; c < own_way.size(); ++c) {
      own_way[c] = landed_chunk_checksum(w, c, h->chunk_hash);
    }
    chunk_checksums = own_way;
  }
  // The header is this page's, so its size differs from the object's only when the read
  // stopped at the header (header_only), and then no chunk was read.
  const auto sums = config.verify_payload ? std::optional(chunk_checksums) : std::nullopt;
  st = layout->verify_stored(*h, w, sums);
  if (!st.ok()) {
    why = stored_reject(*h, w);
    return st;
  }
  if (w.io == PageIo::kStaged) copy_from_staging(w);  // verified: only now the caller's
  return ok_status();
}

void Store::Impl::open_as_landed(ReadWindow& rw, const ReadWindow::DescRef& ref) {
  const auto& w = *rw.reading[ref.page];
  // A page staged for direct I/O, or read for its header alone, is opened whole at its end.
  if (w.io == PageIo::kStaged || w.header_only) return;
  if (ref.chunk == ReadWindow::kNoChunk) {
    // The header landed: decoded once here, for the chunks that land after it. What it says
    // is checked again, with reasons, when the page is whole (verify_sealed_page).
    page::SealedView& view = rw.sealed_views[ref.page];
    Result<page::Header> h = page::decode_sealed(rw.header_blocks->block(ref.page), view);
    const bool ours = h.ok() && h->namespace_id == ns_id && h->key_hash == w.route.key_hash &&
                      h->payload_bytes == w.payload && h->piece_count == w.pieces.size() &&
                      h->piece_bytes == page::uniform_piece_bytes(w.pieces) &&
                      view.chunk_bytes == page::kChecksumChunkBytes;
    rw.sealed_header[ref.page].store(ours ? 1 : 2, std::memory_order_release);
    return;
  }
  const size_t g = rw.first_chunk[ref.page] + ref.chunk;
  if (rw.chunk_pending[g].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // A chunk that lands before the header is opened with the page.
  if (rw.sealed_header[ref.page].load(std::memory_order_acquire) != 1) return;
  Status st = sealing->open_chunk(rw.sealed_views[ref.page], rw.keys[w.page], w.payload, w.pieces,
                                  ref.chunk);
  if (st.ok()) {
    rw.chunk_opened[g] = 1;
  } else {
    uint8_t none = 0;
    rw.chunk_refused[ref.page].compare_exchange_strong(none, static_cast<uint8_t>(st.code()));
  }
}

Status Store::Impl::verify_sealed_page(ReadWindow& rw, size_t r) const {
  const auto& w = *rw.reading[r];
  const std::string_view key = rw.keys[w.page];
  Reject& why = rw.rejects[w.page];
  const std::span<const std::byte, kHeaderBytes> block = rw.header_blocks->block(r);
  page::SealedView view;
  Result<page::Header> h = page::decode_sealed(block, view);
  if (!h.ok()) {
    why = page::is_sealed(block) ? Reject::kHeader : Reject::kSealing;
    return h.status();
  }
  // The keyed name stands for the key (which is sealed): the page's own bytes are bound to
  // the key, so a header that names it falsely does not open below.
  if (h->namespace_id != ns_id) {
    why = Reject::kNamespace;
    return corrupt_error(
        fmt::format("namespace {} (expected {})", h->namespace_id.hex(), ns_id.hex()));
  }
  if (h->key_hash != w.route.key_hash) {
    why = Reject::kPlace;
    return corrupt_error("page holds another key");
  }
  if (h->payload_bytes != w.payload || h->piece_count != w.pieces.size() ||
      h->piece_bytes != page::uniform_piece_bytes(w.pieces)) {
    KVTIER_RETURN_IF_ERROR(caller_mistake(*h, w));
    why = Reject::kLayout;
    return corrupt_error(fmt::format("layout {} bytes in {} pieces (expected {} in {})",
                                     h->payload_bytes, h->piece_count, w.payload, w.pieces.size()));
  }
  if (Status st = layout->verify_stored(*h, w, std::nullopt); !st.ok()) {
    why = stored_reject(*h, w);
    return st;
  }
  if (w.io == PageIo::kStaged) copy_from_staging(w);
  // Opened in the caller's memory, where the read put it: the chunks that landed after the
  // header were opened then (open_as_landed), the others are now. Wiped if any tag differs.
  Status st;
  if (const auto code = static_cast<StatusCode>(rw.chunk_refused[r].load());
      code != StatusCode::kOk) {
    for (const MutableBuffer& p : w.pieces) std::memset(p.data, 0, p.size);
    st = code == StatusCode::kNotFound
             ? not_found_error("sealed under a key id the key file does not hold")
             : corrupt_error("a sealed chunk does not open");
  } else {
    const size_t chunks = rw.first_chunk[r + 1] - rw.first_chunk[r];
    st =
        sealing->open(view, key, w.payload, w.pieces,
                      std::span<const uint8_t>(rw.chunk_opened).subspan(rw.first_chunk[r], chunks));
  }
  if (!st.ok()) why = st.code() == StatusCode::kNotFound ? Reject::kKeyId : Reject::kTag;
  return st;
}

void Store::Impl::copy_from_staging(const PageWork<MutableBuffer>& w) {
  const std::byte* src = w.staging.data();
  for (const MutableBuffer& p : w.pieces) {
    std::memcpy(p.data, src, p.size);
    src += p.size;
  }
}

Status Store::Impl::caller_mistake(const page::Header& h, const PageWork<MutableBuffer>& w) const {
  if (w.stored_bytes != layout->stored_bytes(h) || h.header_bytes != w.header_bytes) {
    return ok_status();
  }
  // An intact page of this key, asked for with buffers of another size or layout: the
  // caller's mistake, not damage. Not data, not dropped.
  auto pieces = [](uint64_t bytes, uint64_t count, uint64_t piece_bytes) {
    return piece_bytes != 0 ? fmt::format("{} bytes in {} pieces of {}", bytes, count, piece_bytes)
                            : fmt::format("{} bytes in {} pieces of unequal sizes", bytes, count);
  };
  return invalid_argument_error(
      fmt::format("stored page is {}; the buffers hold {}",
                  pieces(h.payload_bytes, h.piece_count, h.piece_bytes),
                  pieces(w.payload, w.pieces.size(), page::uniform_piece_bytes(w.pieces))));
}

void Store::Impl::collect_read_results(ReadWindow& rw, std::span<Status> out) {
  for (size_t r = 0; r < rw.reading.size(); ++r) {
    auto& w = *rw.reading[r];
    Status& st = out[w.page];
    st = rw.batch_error;
    if (st.ok()) st = page_result(*rw.xfer, w);
    if (st.ok()) st = std::move(rw.verdicts[r]);
    if (!st.ok() && sealing && !w.header_only) {
      // A sealed store's miss gives no bytes: what the read left in the caller's memory
      // (ciphertext, or a foreign page's bytes) is wiped.
      for (const MutableBuffer& p : w.pieces) std::memset(p.data, 0, p.size);
    }
    if (st.code() == StatusCode::kCorrupt) {
      st = st.with_context(layout->where(w));
    }
  }
}

void Store::Impl::account_reads(ReadWindow& rw, std::span<const Status> out) {
  for (size_t p = 0; p < out.size(); ++p) {
    if (rw.rereading(p)) continue;
    if (!out[p].ok() && rw.rejects[p] != Reject::kNone) {
      bump(counters.rejected[static_cast<size_t>(rw.rejects[p])]);
    }
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
    } else if (st.code() == StatusCode::kCorrupt) {
      layout->drop_corrupt(w);
    }
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
      layout->index_hit(w, now);
    } else if (st.code() == StatusCode::kNotFound) {
      index.erase(w.route.key_hash);
    }
  }
}

}  // namespace kvtier
