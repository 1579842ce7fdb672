// kvtier bench: write N pages, read them back, verify every byte.
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench_measure.h"
#include "commands.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/unique_fd.h"
#include "kvtier/store/store.h"
#include "progress.h"

namespace kvtier::cli {
namespace {

struct Shape {
  std::string name;
  uint64_t piece_bytes;
  uint32_t pieces;
  uint32_t page_tokens;
  uint64_t page_bytes() const { return piece_bytes * pieces; }
};

Shape shape_for(const BenchOptions& o) {
  if (o.page_bytes != 0) return Shape{fmt::format("{}B", o.page_bytes), o.page_bytes, 1, 0};
  if (o.model == "qwen2.5-72b-tp8") return Shape{o.model, 1310720, 2, 64};
  if (o.model == "deepseek-v3") return Shape{o.model, 4497408, 1, 64};
  return Shape{"llama3-8b", 4194304, 2, 64};
}

// Bytes 0..15 of each piece carry (page, piece, run) so a page returned for the wrong key is
// caught; the rest is a fixed pattern per pool slot, compared byte for byte.
constexpr size_t kStampBytes = 16;

void stamp(std::byte* piece, uint64_t piece_bytes, uint64_t page, uint64_t index, uint64_t run) {
  uint64_t words[2] = {page, (run << 16) ^ index};
  std::memcpy(piece, words, std::min<uint64_t>(kStampBytes, piece_bytes));
}

void fill_reference(std::byte* p, size_t n, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    std::memcpy(p + i, &s, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<std::byte>(s >> (8 * (i % 8)));
}

// Has the kernel read every page of [p, p + n) once, by writing it into a scratch memfd 4 MiB
// at a time. A serving engine's host pool has been read and written by the kernel many times;
// a freshly filled one has not, and on some VMs (shadow page tables) the kernel's first access
// to a user page costs about 6 us: a 512 MiB pool written once from fresh would run at about
// 0.7 GB/s for that alone, whatever the store does. Untimed, like warm_up() before reads.
Status touch_by_kernel(const std::byte* p, size_t n) {
  UniqueFd scratch(::memfd_create("kvtier-bench-touch", MFD_CLOEXEC));
  if (!scratch) return errno_status(errno, "memfd_create");
  constexpr size_t kChunk = size_t{4} << 20;
  for (size_t at = 0; at < n;) {
    const ssize_t got = ::pwrite(scratch.get(), p + at, std::min(kChunk, n - at), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno_status(errno, "pwrite to a memfd");
    if (got == 0) return errno_status(EIO, "pwrite to a memfd wrote nothing");
    at += static_cast<size_t>(got);
  }
  return ok_status();
}

// Host pool pages per batch in flight (--pool-pages): a multiple of the batch, so that a batch
// never wraps.
uint64_t lane_pages(const BenchOptions& o) {
  const uint64_t wanted = std::max(o.pool_pages, o.batch);
  return (wanted + o.batch - 1) / o.batch * o.batch;
}

class Bench {
 public:
  Bench(const BenchOptions& o, Store& store, const Shape& shape)
      : o_(o), store_(store), shape_(shape), run_(now_ns() & 0xffffffffffffull) {}

  uint64_t slots() const { return lane_pages(o_); }

  Status prepare() {
    const uint64_t page = shape_.page_bytes();
    const uint64_t slots = o_.batch;
    KVTIER_ASSIGN_OR_RETURN(reference_, AlignedBuffer::allocate(slots * page, 4096, false));
    for (uint64_t j = 0; j < slots; ++j) fill_reference(reference_.data() + j * page, page, j + 1);
    // One pool slice per lane (client thread x batch in flight), filled (so touched) before
    // it is registered.
    KVTIER_ASSIGN_OR_RETURN(pool_,
                            AlignedBuffer::allocate(lanes() * this->slots() * page, 4096, false));
    for (uint64_t at = 0; at < lanes() * this->slots(); at += slots) {
      std::memcpy(pool_.data() + at * page, reference_.data(), slots * page);
    }
    KVTIER_RETURN_IF_ERROR(touch_by_kernel(pool_.data(), pool_.size()));
    KVTIER_ASSIGN_OR_RETURN(registration_, store_.register_memory(pool_.data(), pool_.size()));
    for (uint64_t i = 0; i < o_.pages; ++i) keys_.push_back(fmt::format("kvtier-bench-{:016x}", i));
    return ok_status();
  }

  uint64_t lanes() const { return o_.threads * o_.in_flight; }

  PhaseResult run(TransferOp op, Progress& progress) {
    PhaseResult total;
    total.began_s = monotonic_s();
    std::mutex mu;
    std::atomic<uint64_t> next{0}, done{0};
    const uint64_t batches = (o_.pages + o_.batch - 1) / o_.batch;
    auto worker = [&](uint64_t t) {
      PhaseResult mine = o_.in_flight > 1 ? run_async(op, t, next, batches, done, progress)
                                          : run_blocking(op, t, next, batches, done, progress);
      std::lock_guard lock(mu);
      total.busy_s = std::max(total.busy_s, mine.busy_s);
      // With several client threads the calls overlap and count each other's CPU: exact for
      // one thread, an upper bound otherwise.
      total.cpu_s += mine.cpu_s;
      total.latency_ms.insert(total.latency_ms.end(), mine.latency_ms.begin(),
                              mine.latency_ms.end());
      total.ok_pages += mine.ok_pages;
      total.misses += mine.misses;
      total.corrupt += mine.corrupt;
      total.errors += mine.errors;
      total.wrong_bytes += mine.wrong_bytes;
      if (total.first_error.empty()) total.first_error = mine.first_error;
    };
    std::vector<std::thread> threads;
    for (uint64_t t = 1; t < o_.threads; ++t) threads.emplace_back(worker, t);
    worker(0);
    for (auto& th : threads) th.join();
    total.ended_s = monotonic_s();
    progress.finish();
    return total;
  }

  // The kernel's first write into each pool page is far slower than later ones on some
  // machines: read one batch into every slot, untimed, as a serving engine's pool would be.
  void warm_up() {
    const uint64_t n = std::min(o_.batch, o_.pages);
    std::vector<std::string_view> keys(keys_.begin(), keys_.begin() + n);
    for (uint64_t l = 0; l < lanes(); ++l) {
      for (uint64_t slot0 = 0; slot0 < slots(); slot0 += o_.batch) {
        std::vector<MutableBuffer> out;
        for (uint64_t j = 0; j < n; ++j) {
          for (uint32_t p = 0; p < shape_.pieces; ++p) {
            out.push_back(MutableBuffer{piece_ptr(l, slot0 + j, p), shape_.piece_bytes});
          }
        }
        (void)store_.batch_get(keys, out);
      }
    }
  }

  // Reads every page again, one blocking batch at a time, untimed, and compares every byte.
  // Comparing them during the timed phase would have the bench's own memcmp, which reads each
  // page twice more, compete with the other threads' calls for the cores and their caches.
  PhaseResult check_every_byte() {
    PhaseResult r;
    Batch b;
    const uint64_t batches = (o_.pages + o_.batch - 1) / o_.batch;
    for (uint64_t i = 0; i < batches && !interrupted(); ++i) {
      fill(b, TransferOp::kRead, 0, i);
      account(r, TransferOp::kRead, 0, b, store_.batch_get(b.keys, b.out), true);
    }
    return r;
  }

 private:
  // One batch's keys and pool slots. A lane is one batch's share of the pool: each client
  // thread owns `in_flight` lanes.
  struct Batch {
    uint64_t first = 0;
    uint64_t n = 0;
    uint64_t slot0 = 0;  // its first page's slot in the lane's part of the pool
    std::vector<std::string_view> keys;
    std::vector<ConstBuffer> in;
    std::vector<MutableBuffer> out;
  };

  void fill(Batch& b, TransferOp op, uint64_t lane, uint64_t index) {
    b.first = index * o_.batch;
    b.n = std::min(o_.batch, o_.pages - b.first);
    b.slot0 = b.first % slots();
    b.keys.assign(keys_.begin() + b.first, keys_.begin() + b.first + b.n);
    b.in.clear();
    b.out.clear();
    for (uint64_t j = 0; j < b.n; ++j) {
      for (uint32_t p = 0; p < shape_.pieces; ++p) {
        std::byte* piece = piece_ptr(lane, b.slot0 + j, p);
        if (op == TransferOp::kWrite) {
          stamp(piece, shape_.piece_bytes, b.first + j, p, run_);
          b.in.push_back(ConstBuffer{piece, shape_.piece_bytes});
        } else {
          b.out.push_back(MutableBuffer{piece, shape_.piece_bytes});
        }
      }
    }
  }

  // Counts a finished batch's pages. Pages a read returned OK have their stamps checked (and
  // every byte when `every_byte`).
  void account(PhaseResult& mine, TransferOp op, uint64_t lane, const Batch& b,
               const BatchResult& r, bool every_byte = false) {
    if (!r.status.ok()) {
      mine.errors += b.n;
      if (mine.first_error.empty()) mine.first_error = r.status.to_string();
    }
    for (uint64_t j = 0; j < r.pages.size(); ++j) {
      const Status& st = r.pages[j];
      if (st.ok()) {
        ++mine.ok_pages;
        if (op == TransferOp::kRead &&
            !page_intact(lane, b.slot0 + j, j, b.first + j, every_byte)) {
          ++mine.wrong_bytes;
        }
      } else if (st.code() == StatusCode::kNotFound) {
        ++mine.misses;
      } else if (st.code() == StatusCode::kCorrupt) {
        ++mine.corrupt;
      } else {
        ++mine.errors;
        if (mine.first_error.empty()) mine.first_error = st.to_string();
      }
    }
  }

  // One blocking batch call at a time: time and CPU inside store calls only.
  PhaseResult run_blocking(TransferOp op, uint64_t t, std::atomic<uint64_t>& next, uint64_t batches,
                           std::atomic<uint64_t>& done, Progress& progress) {
    PhaseResult mine;
    Batch b;
    for (uint64_t i; !interrupted() && (i = next.fetch_add(1)) < batches;) {
      fill(b, op, t, i);
      const double cpu0 = process_cpu_s();
      const Stopwatch sw;
      BatchResult r = op == TransferOp::kWrite ? store_.batch_put(b.keys, b.in)
                                               : store_.batch_get(b.keys, b.out);
      const double s = sw.elapsed_s();
      mine.cpu_s += process_cpu_s() - cpu0;
      mine.busy_s += s;
      mine.latency_ms.push_back(s * 1e3);
      account(mine, op, t, b, r);
      progress.update(done.fetch_add(b.n) + b.n);
    }
    return mine;
  }

  // `in_flight` batches submitted at once (submit_put/submit_get), each resubmitted as soon
  // as it is done and its stamps checked. Time runs from the first submission to the last
  // completion, so it includes those checks where no batch was in flight; CPU excludes this
  // thread's checks. Latency is submission to completion callback.
  PhaseResult run_async(TransferOp op, uint64_t t, std::atomic<uint64_t>& next, uint64_t batches,
                        std::atomic<uint64_t>& done, Progress& progress) {
    struct Lane {
      Batch batch;
      BatchTicket ticket;
      uint64_t submitted_ns = 0;
      std::atomic<uint64_t> done_ns{0};
    };
    const uint64_t k = o_.in_flight;
    std::unique_ptr<Lane[]> lanes(new Lane[k]);
    PhaseResult mine;
    double check_cpu_s = 0;
    auto submit = [&](uint64_t l) {
      if (interrupted()) return;
      const uint64_t i = next.fetch_add(1);
      if (i >= batches) return;
      Lane& lane = lanes[l];
      fill(lane.batch, op, t * k + l, i);
      lane.submitted_ns = now_ns();
      auto on_done = [&lane](const BatchResult&) { lane.done_ns.store(now_ns()); };
      lane.ticket = op == TransferOp::kWrite
                        ? store_.submit_put(lane.batch.keys, lane.batch.in, on_done)
                        : store_.submit_get(lane.batch.keys, lane.batch.out, on_done);
    };
    const double cpu0 = process_cpu_s();
    const Stopwatch sw;
    for (uint64_t l = 0; l < k; ++l) submit(l);
    for (bool any = true; any;) {
      any = false;
      for (uint64_t l = 0; l < k; ++l) {
        Lane& lane = lanes[l];
        if (!lane.ticket.valid()) continue;
        any = true;
        lane.ticket.wait();
        const BatchResult r = lane.ticket.take();
        lane.ticket = BatchTicket();
        mine.latency_ms.push_back(static_cast<double>(lane.done_ns.load() - lane.submitted_ns) *
                                  1e-6);
        const double c0 = thread_cpu_s();
        account(mine, op, t * k + l, lane.batch, r);
        check_cpu_s += thread_cpu_s() - c0;
        progress.update(done.fetch_add(lane.batch.n) + lane.batch.n);
        submit(l);
      }
    }
    mine.busy_s = sw.elapsed_s();
    mine.cpu_s = process_cpu_s() - cpu0 - check_cpu_s;
    return mine;
  }

  std::byte* piece_ptr(uint64_t lane, uint64_t slot, uint32_t piece) {
    return pool_.data() + (lane * slots() + slot) * shape_.page_bytes() +
           piece * shape_.piece_bytes;
  }

  // Whether every piece of the page in (lane, slot) starts with page `page`'s stamp of this
  // run and, when `every_byte`, whether all its other bytes match the reference (its place
  // in the batch, `ref_slot`) too.
  bool page_intact(uint64_t lane, uint64_t slot, uint64_t ref_slot, uint64_t page,
                   bool every_byte) {
    for (uint32_t p = 0; p < shape_.pieces; ++p) {
      std::byte* got = piece_ptr(lane, slot, p);
      const std::byte* ref =
          reference_.data() + ref_slot * shape_.page_bytes() + p * shape_.piece_bytes;
      alignas(8) std::byte expect[kStampBytes];
      std::memcpy(expect, ref, kStampBytes > shape_.piece_bytes ? shape_.piece_bytes : kStampBytes);
      stamp(expect, shape_.piece_bytes, page, p, run_);
      const uint64_t s = std::min<uint64_t>(kStampBytes, shape_.piece_bytes);
      if (std::memcmp(got, expect, s) != 0) return false;
      if (every_byte && std::memcmp(got + s, ref + s, shape_.piece_bytes - s) != 0) return false;
    }
    return true;
  }

  const BenchOptions& o_;
  Store& store_;
  const Shape shape_;
  const uint64_t run_;
  AlignedBuffer reference_;
  AlignedBuffer pool_;
  Registration registration_;  // after pool_: released first
  std::vector<std::string> keys_;
};

}  // namespace

std::string default_bench_dir() {
  const char* tmp = std::getenv("TMPDIR");
  if (tmp != nullptr && *tmp != '\0') return std::string(tmp) + "/kvtier-bench";
  return "kvtier-bench";
}

int run_bench(const BenchOptions& o) {
  const Shape shape = shape_for(o);
  const std::string where = !o.uri.empty() ? o.uri : !o.dir.empty() ? o.dir : default_bench_dir();
  Result<StoreLocation> loc = parse_store_uri(where);
  if (!loc.ok()) {
    fmt::print(stderr, "kvtier bench: {}\n", loc.status().to_string());
    return kExitUsage;
  }
  if (o.io_threads != 0) loc->params["io_threads"] = std::to_string(o.io_threads);
  const uint64_t pool_pages = lane_pages(o);
  const uint64_t pool_bytes = (o.threads * o.in_flight * pool_pages + o.batch) * shape.page_bytes();
  if (pool_bytes > (uint64_t{64} << 30)) {
    fmt::print(stderr,
               "kvtier bench: the host pool would need {}; lower --batch, --threads, "
               "--in-flight or --pool-pages\n",
               human_bytes(pool_bytes));
    return kExitUsage;
  }

  const size_t fds_before = count_open_fds().value_or(0);
  size_t fds_during = 0;
  nlohmann::json out;
  PhaseResult wr, rd, chk;
  std::string backend, selection, uri, backend_description, layout;
  StoreStats store_stats;
  {
    StoreConfig cfg;
    cfg.location = *loc;
    cfg.backend = o.backend;
    cfg.layout = o.layout;
    cfg.fsync = o.fsync;
    cfg.segment_lanes = o.segment_lanes;
    cfg.verify_payload = !o.skip_payload_checksum;
    cfg.capacity_bytes = o.capacity;
    cfg.deadline_ms = o.deadline_ms;
    cfg.isolate = o.isolate;
    cfg.key_file = o.key_file;
    cfg.tenant = o.tenant;
    // Every submitted batch runs at once rather than queueing behind the others.
    cfg.async_threads = std::max<size_t>(cfg.async_threads, o.threads * o.in_flight);
    Result<DirectIo> dio = parse_direct_io(o.direct_io);
    if (!dio.ok()) {
      fmt::print(stderr, "kvtier bench: {}\n", dio.status().to_string());
      return kExitUsage;
    }
    cfg.direct_io = *dio;
    cfg.ns.model = "kvtier-bench:" + shape.name;
    cfg.ns.dtype = "bfloat16";
    cfg.ns.layout = "page_first";
    cfg.ns.page_tokens = shape.page_tokens;
    cfg.ns.piece_bytes = shape.piece_bytes;
    cfg.ns.pieces_per_page = shape.pieces;
    Result<std::unique_ptr<Store>> store = Store::open(cfg);
    if (!store.ok()) {
      fmt::print(stderr, "kvtier bench: cannot open the store at {}: {}\n", loc->uri(),
                 store.status().to_string());
      return kExitUsage;
    }
    backend = (*store)->backend_selection().chosen;
    selection = (*store)->backend_selection().summary();
    backend_description = (*store)->backend_description();
    layout = std::string(store_layout_name((*store)->layout()));
    uri = cfg.location.uri();
    Bench bench(o, **store, shape);
    if (Status st = bench.prepare(); !st.ok()) {
      fmt::print(stderr, "kvtier bench: {}\n", st.to_string());
      return kExitUsage;
    }
    const bool bars = progress_wanted(o.quiet);
    {
      Progress p("write", o.pages, bars);
      wr = bench.run(TransferOp::kWrite, p);
    }
    fds_during = count_open_fds().value_or(0);
    if (!interrupted()) {
      bench.warm_up();
      Progress p("read ", o.pages, bars);
      rd = bench.run(TransferOp::kRead, p);
    }
    store_stats = (*store)->stats();
    if (!interrupted()) chk = bench.check_every_byte();
    // Ctrl-C: the pages written so far are cleared all the same (unless --keep).
    if (!o.keep) {
      if (Status st = (*store)->clear(); !st.ok()) {
        fmt::print(stderr, "kvtier bench: clearing the bench pages failed: {}\n", st.to_string());
      }
    }
  }
  const size_t fds_after = count_open_fds().value_or(0);
  if (interrupted()) {
    fmt::print(stderr,
               "kvtier bench: interrupted: {} of {} pages written, {} read, {} checked; pages "
               "{}\n",
               wr.ok_pages, o.pages, rd.ok_pages, chk.ok_pages,
               o.keep ? "kept (kvtier stat / kvtier verify " + loc->uri() + ")" : "cleared");
    return kExitInterrupted;
  }

  const uint64_t bytes = o.pages * shape.page_bytes();
  // With a capacity, pages evicted before the read phase are misses, not failures: verified
  // means every page was written and no wrong byte was ever returned, by the timed reads
  // (stamps checked) or by the checking ones (every byte compared).
  auto clean = [&](const PhaseResult& r) {
    return r.wrong_bytes == 0 && r.corrupt == 0 && r.errors == 0 &&
           (o.capacity != 0 ? r.ok_pages + r.misses == o.pages : r.ok_pages == o.pages);
  };
  const bool verified = wr.ok_pages == o.pages && clean(rd) && clean(chk);
  const uint64_t wrong_pages = rd.wrong_bytes + chk.wrong_bytes;
  out = {{"write_gbps", phase_json(wr, bytes, o.pages)["gbps"]},
         {"read_gbps", phase_json(rd, bytes, o.pages)["gbps"]},
         {"write", phase_json(wr, bytes, o.pages)},
         {"read", phase_json(rd, bytes, o.pages)},
         {"pages", o.pages},
         {"page_bytes", shape.page_bytes()},
         {"pieces_per_page", shape.pieces},
         {"shape", shape.name},
         {"batch", o.batch},
         {"threads", o.threads},
         {"in_flight", o.in_flight},
         {"pool_pages", pool_pages},
         {"verified", verified},
         {"wrong_bytes_pages", wrong_pages},
         {"byte_exact_pages", chk.ok_pages - chk.wrong_bytes},
         {"fds_before", fds_before},
         {"fds_during", fds_during},
         {"fds_after", fds_after},
         {"backend", backend},
         {"backend_selection", selection},
         {"uri", uri},
         {"fsync", o.fsync},
         {"segment_lanes", o.segment_lanes},
         {"payload_checksum", !o.skip_payload_checksum},
         {"backend_description", backend_description},
         {"layout", layout},
         {"layout_choice", store_stats.layout},
         {"sealing", store_stats.sealing},
         {"chunk_hash", store_stats.chunk_hash},
         {"direct_io", store_stats.direct_io},
         {"direct_pages", store_stats.direct_pages},
         {"staged_pages", store_stats.staged_pages},
         {"direct_fallback_pages", store_stats.direct_fallback_pages},
         {"kept", o.keep},
         {"capacity_bytes", o.capacity},
         {"evicted_pages", store_stats.evicted_pages},
         {"read_misses", rd.misses},
         {"isolation", store_stats.isolation},
         {"health", store_stats.health},
         {"deadline_misses", store_stats.deadline_misses}};
  if (o.json) {
    fmt::print("{}\n", out.dump());
  } else {
    auto line = [&](const char* name, const PhaseResult& r) {
      const Percentiles p = percentiles(r.latency_ms);
      const double gbps = r.busy_s > 0 ? bytes / r.busy_s / 1e9 : 0;
      const double pps = r.busy_s > 0 ? o.pages / r.busy_s : 0;
      fmt::print(
          "  {:<6} {:7.2f} GB/s  {:9.1f} pages/s   batch ms p50 {:.2f}  p90 {:.2f}  p99 {:.2f}  "
          "max {:.2f}\n",
          name, gbps, pps, p.p50, p.p90, p.p99, p.max);
      if (r.cpu_s > 0) {
        fmt::print("         {:.2f} CPU s/GB\n", r.cpu_s / (static_cast<double>(bytes) / 1e9));
      }
      if (r.misses + r.corrupt + r.errors > 0) {
        fmt::print("         {} misses, {} corrupt, {} errors{}{}\n", r.misses, r.corrupt, r.errors,
                   r.first_error.empty() ? "" : "; first: ", r.first_error);
      }
    };
    fmt::print("kvtier bench: {} pages of {} ({} x {} B, {}), batch {}, {} thread{}{}\n", o.pages,
               human_bytes(shape.page_bytes()), shape.pieces, shape.piece_bytes, shape.name,
               o.batch, o.threads, o.threads == 1 ? "" : "s",
               o.in_flight > 1 ? fmt::format(", {} batches in flight each", o.in_flight) : "");
    if (pool_pages > o.batch) {
      fmt::print("  host pool {} pages ({}) per batch in flight\n", pool_pages,
                 human_bytes(pool_pages * shape.page_bytes()));
    }
    fmt::print("  store  {}  backend {}{}\n", uri, selection, o.fsync ? "  fsync" : "");
    fmt::print("         {}\n  layout {}\n", backend_description, store_stats.layout);
    if (store_stats.sealing != "off") {
      fmt::print("  sealed {}\n", store_stats.sealing);
    } else {
      fmt::print("  chunks hashed {}\n", store_stats.chunk_hash);
    }
    if (store_stats.isolation.find(": on") != std::string::npos) {
      fmt::print("  isolated I/O  {}\n", store_stats.isolation);
    }
    if (o.direct_io != "off") {
      fmt::print("  direct I/O {}: {} pages in place, {} staged, {} buffered\n",
                 store_stats.direct_io, store_stats.direct_pages, store_stats.staged_pages,
                 store_stats.direct_fallback_pages);
    }
    line("write", wr);
    line("read", rd);
    fmt::print(
        "  verified {}  ({} of {} pages byte-exact{}{}{})\n", verified ? "yes" : "NO",
        chk.ok_pages - chk.wrong_bytes, o.pages,
        wrong_pages ? fmt::format(", {} with WRONG BYTES", wrong_pages) : "",
        chk.corrupt + chk.errors > 0
            ? fmt::format("; reading them again: {} corrupt, {} errors{}{}", chk.corrupt,
                          chk.errors, chk.first_error.empty() ? "" : "; first: ", chk.first_error)
            : "",
        o.capacity ? fmt::format("; capacity {}: {} evicted, {} read as misses",
                                 human_bytes(o.capacity), store_stats.evicted_pages, rd.misses)
                   : "");
    fmt::print("  fds    before {}  during {}  after {}\n", fds_before, fds_during, fds_after);
    fmt::print("  pages  {}\n",
               o.keep ? "kept (kvtier stat / kvtier verify " + loc->uri() + ")" : "cleared");
  }
  return verified ? kExitOk : kExitFailed;
}

}  // namespace kvtier::cli
