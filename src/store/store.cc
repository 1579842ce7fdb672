#include "kvtier/store/store.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "kvtier/backends/builtin.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/worker_pool.h"
#include "ledger.h"
#include "object_io.h"
#include "page_format.h"
#include "page_index.h"
#include "pools.h"
#include "routing.h"

namespace kvtier {
namespace {

using page::kBlockBytes;
using page::kHeaderBytes;
using page::object_bytes;
using pools::HeaderPool;
using pools::ObjectBudget;
using pools::StagingPool;

struct Counters {
  std::atomic<uint64_t> put_pages{0}, put_bytes{0}, put_failures{0};
  std::atomic<uint64_t> get_hits{0}, get_bytes{0}, get_misses{0}, get_corrupt{0}, get_failures{0};
  std::atomic<uint64_t> corrupt_dropped{0}, exists_queries{0}, removes{0}, cleared{0},
      invalid_requests{0}, temps_swept{0};
  std::atomic<uint64_t> direct_pages{0}, staged_pages{0}, direct_fallback_pages{0};
  std::atomic<uint64_t> evicted_pages{0}, evicted_bytes{0}, index_stats{0}, capacity_refusals{0};
  std::atomic<uint64_t> batches_in_flight{0};
  std::array<std::atomic<uint64_t>, 16> errors_by_code{};  // indexed by StatusCode

  struct Histogram {
    std::array<std::atomic<uint64_t>, LatencyHistogram::kBuckets> buckets{};
    std::atomic<uint64_t> count{0}, sum_us{0};
    void add(uint64_t us) {
      size_t b = 0;
      while (b + 1 < buckets.size() && us >= (uint64_t{1} << b)) ++b;
      buckets[b].fetch_add(1, std::memory_order_relaxed);
      count.fetch_add(1, std::memory_order_relaxed);
      sum_us.fetch_add(us, std::memory_order_relaxed);
    }
    LatencyHistogram snapshot() const {
      LatencyHistogram h;
      for (size_t i = 0; i < buckets.size(); ++i) h.buckets[i] = buckets[i].load();
      h.count = count.load();
      h.sum_us = sum_us.load();
      return h;
    }
  };
  Histogram put_latency, get_latency, exists_latency;
};

// Times a batch call into a histogram and counts it in flight while it runs.
class BatchTimer {
 public:
  BatchTimer(Counters& c, Counters::Histogram& h) : c_(c), h_(h), start_(now_ns()) {
    c_.batches_in_flight.fetch_add(1, std::memory_order_relaxed);
  }
  ~BatchTimer() {
    c_.batches_in_flight.fetch_sub(1, std::memory_order_relaxed);
    h_.add((now_ns() - start_) / 1000);
  }
  BatchTimer(const BatchTimer&) = delete;
  BatchTimer& operator=(const BatchTimer&) = delete;

 private:
  Counters& c_;
  Counters::Histogram& h_;
  uint64_t start_;
};

void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}

std::string manifest_json(const NamespaceSpec& ns, const Hash128& id) {
  auto rank = [&](const ParallelRank& r) { return nlohmann::json::array({r.rank, r.size}); };
  nlohmann::json j = {
      {"kvtier_namespace", 1},
      {"id", id.hex()},
      {"format", kPageFormatVersion},
      {"model", ns.model},
      {"dtype", ns.dtype},
      {"layout", ns.layout},
      {"page_tokens", ns.page_tokens},
      {"piece_bytes", ns.piece_bytes},
      {"pieces_per_page", ns.pieces_per_page},
      {"mla", ns.mla},
      {"tp", ns.mla ? nlohmann::json("replicated") : rank(ns.tp)},
      {"pp", rank(ns.pp)},
      {"cp", rank(ns.cp)},
      {"dp", rank(ns.dp)},
      // The salt itself may name a tenant: record only that there is one.
      {"salted", !ns.salt.empty()},
  };
  return j.dump(2) + "\n";
}

// How one page moves between memory and storage.
enum class PageIo : uint8_t {
  kBuffered,  // through the page cache
  kDirect,    // direct I/O in place (memory and size aligned)
  kStaged,    // direct I/O through an aligned staging buffer
};

}  // namespace

std::string_view direct_io_name(DirectIo mode) {
  switch (mode) {
    case DirectIo::kOff:
      return "off";
    case DirectIo::kAuto:
      return "auto";
    case DirectIo::kOn:
      return "on";
  }
  return "?";
}

Result<DirectIo> parse_direct_io(std::string_view text) {
  if (text == "off") return DirectIo::kOff;
  if (text == "auto") return DirectIo::kAuto;
  if (text == "on") return DirectIo::kOn;
  return invalid_argument_error(fmt::format("direct I/O mode '{}' (use off, auto or on)", text));
}

namespace detail {

// A submitted batch: its own copies of the keys and buffer lists, and its result.
struct TicketState {
  bool is_put = false;
  std::vector<std::string> keys;
  std::vector<std::string_view> views;
  std::vector<ConstBuffer> put_pieces;
  std::vector<MutableBuffer> get_pieces;
  BatchCallback callback;
  BatchResult result;
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool done = false;  // guarded by mu
  bool taken = false;
  bool detached = false;
};

}  // namespace detail

size_t BatchResult::ok_count() const {
  size_t n = 0;
  for (const Status& s : pages) n += s.ok() ? 1 : 0;
  return n;
}

size_t BatchResult::ok_prefix() const {
  size_t n = 0;
  while (n < pages.size() && pages[n].ok()) ++n;
  return n;
}

struct Store::Impl {
  Impl(StoreConfig cfg, Agent a, routing::Router r)
      : config(std::move(cfg)),
        agent(std::move(a)),
        router(std::move(r)),
        ns_id(config.ns.id()),
        headers(agent),
        staging(agent, config.staging_bytes),
        budget(config.max_open_objects != 0 ? config.max_open_objects
                                            : ObjectBudget::default_capacity()),
        dio(router.base_count()) {}

  ~Impl() {
    // Submitted batches use this store: let every one finish before anything goes.
    std::unique_lock lock(async_mu);
    async_idle.wait(lock, [&] { return async_pending == 0; });
    lock.unlock();
    async_pool.reset();
  }

  StoreConfig config;
  Agent agent;
  routing::Router router;
  Hash128 ns_id;
  HeaderPool headers;  // after agent: its registrations go first
  StagingPool staging;
  ObjectBudget budget;
  Counters counters;
  // The namespace's pages as this process knows them (see page_index.h), and the shared
  // capacity budget when the store has one (see ledger.h).
  PageIndex index;
  std::unique_ptr<Ledger> ledger;
  // kBlockBytes of zeros, registered: the source of every object's tail padding.
  AlignedBuffer zeros;
  Registration zeros_registration;
  // Per base directory: its direct I/O alignment, when direct I/O is on and possible there.
  std::vector<std::optional<DirectIoAlignment>> dio;
  std::string dio_summary = "off";
  // Submitted batches: run on a pool started on first use; the store waits for them on close.
  std::once_flag async_once;
  std::unique_ptr<WorkerPool> async_pool;
  std::mutex async_mu;
  std::condition_variable async_idle;
  size_t async_pending = 0;  // guarded by async_mu
  // The namespace's clear generation as this store last saw it: the generation object's
  // identity, modification time and size (all zero while there is none). A change means
  // another store cleared the namespace, and this store's index is dropped.
  struct Generation {
    ObjectIdentity identity;
    uint64_t mtime_ns = 0;
    uint64_t size = 0;
    friend bool operator==(const Generation&, const Generation&) = default;
  };
  std::mutex generation_mu;
  Generation seen_generation;  // guarded by generation_mu

  // nullopt when storage cannot tell now (the next call asks again).
  std::optional<Generation> read_generation() {
    Result<ObjectInfo> info = agent.stat(router.generation_path());
    if (info.ok()) return Generation{info->identity, info->mtime_ns, info->size};
    if (info.status().code() == StatusCode::kNotFound) return Generation{};
    return std::nullopt;
  }
  // One stat: drops the index when the namespace was cleared since this store last looked.
  void observe_generation() {
    std::optional<Generation> now = read_generation();
    if (!now) return;
    std::lock_guard lock(generation_mu);
    if (*now == seen_generation) return;
    seen_generation = *now;
    index.clear();
  }
  // Rewrites the generation object with a value never used before.
  Status publish_generation() {
    std::random_device rd;
    const std::string token = fmt::format("{:08x}{:08x}{:016x}\n", rd(), rd(), wall_ns());
    KVTIER_RETURN_IF_ERROR(
        object_io::write_object(agent, router.generation_path(), router.temp_dir(0), token));
    if (std::optional<Generation> now = read_generation()) {
      std::lock_guard lock(generation_mu);
      seen_generation = *now;
    }
    return ok_status();
  }

  BatchResult put(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces) {
    BatchTimer timer(counters, counters.put_latency);
    BatchResult r = run_batch(keys, pieces, [this](auto&&... args) { put_window(args...); });
    count_errors(r);
    return r;
  }
  BatchResult get(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces) {
    BatchTimer timer(counters, counters.get_latency);
    BatchResult r = run_batch(keys, pieces, [this](auto&&... args) { get_window(args...); });
    count_errors(r);
    return r;
  }
  void count_errors(const BatchResult& r) {
    for (const Status& st : r.pages) {
      if (!st.ok() && st.code() != StatusCode::kNotFound) {
        bump(counters.errors_by_code[static_cast<size_t>(st.code()) % 16]);
      }
    }
  }
  void submit(std::shared_ptr<detail::TicketState> state);
  class TicketJob;

  // One valid page of a window, and what is opened for it.
  template <typename Buffer>
  struct PageWork {
    size_t page;  // index in the window
    routing::Route route;
    uint64_t payload;
    std::span<const Buffer> pieces;
    Target target;
    bool header_only = false;  // reads: the object's size does not fit the buffers
    PageIo io = PageIo::kBuffered;
    StagingPool::Lease staging;  // kStaged
    size_t first_desc = 0;
    size_t desc_count = 0;
  };

  // Checks one page's key and memory. Page-level caller errors come back here.
  template <typename Buffer>
  Status validate_page(std::string_view key, std::span<const Buffer> pieces,
                       uint64_t* payload) const {
    KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
    const NamespaceSpec& ns = config.ns;
    if (ns.piece_bytes != 0 && pieces.size() != ns.pieces_per_page) {
      return invalid_argument_error(fmt::format("page has {} pieces; the namespace's pages have {}",
                                                pieces.size(), ns.pieces_per_page));
    }
    uint64_t total = 0;
    for (size_t p = 0; p < pieces.size(); ++p) {
      const Buffer& b = pieces[p];
      if (b.data == nullptr || b.size == 0) {
        return invalid_argument_error(
            fmt::format("piece {} is empty (data {}, size {}); pages are never empty", p,
                        fmt::ptr(b.data), b.size));
      }
      if (ns.piece_bytes != 0 && b.size != ns.piece_bytes) {
        return invalid_argument_error(fmt::format(
            "piece {} is {} bytes; the namespace's pieces are {}", p, b.size, ns.piece_bytes));
      }
      KVTIER_RETURN_IF_ERROR(
          agent.check_registered(b.data, b.size).with_context(fmt::format("piece {}", p)));
      if (b.size > UINT64_MAX / 2 - total) return invalid_argument_error("page size overflows");
      total += b.size;
    }
    if (total == 0) return invalid_argument_error("page has no pieces; pages are never empty");
    *payload = total;
    return ok_status();
  }

  template <typename Buffer>
  Status check_shape(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                     size_t* per_page) {
    if (keys.empty()) {
      if (!pieces.empty()) {
        return invalid_argument_error(fmt::format("{} pieces for 0 keys", pieces.size()));
      }
      *per_page = 0;
      return ok_status();
    }
    if (pieces.size() % keys.size() != 0 || pieces.empty()) {
      return invalid_argument_error(
          fmt::format("{} pieces for {} keys: expected the same number of pieces for every key",
                      pieces.size(), keys.size()));
    }
    *per_page = pieces.size() / keys.size();
    return ok_status();
  }

  // Picks buffered, direct or staged I/O for a page (see DirectIo).
  template <typename Buffer>
  void choose_io(PageWork<Buffer>& w) {
    w.io = PageIo::kBuffered;
    if (config.direct_io == DirectIo::kOff) return;
    const std::optional<DirectIoAlignment>& a = dio[w.route.base];
    if (!a) return;  // the filesystem cannot: the reason is in stats().direct_io
    bool aligned = true;
    for (const Buffer& p : w.pieces) {
      aligned = aligned && reinterpret_cast<uintptr_t>(p.data) % a->memory == 0 &&
                p.size % a->offset == 0;
    }
    if (aligned) {
      w.io = PageIo::kDirect;
      return;
    }
    if (config.direct_io == DirectIo::kOn) {
      w.staging = staging.acquire(object_bytes(w.payload) - kHeaderBytes);
      if (w.staging) {
        w.io = PageIo::kStaged;
        return;
      }
    }
    bump(counters.direct_fallback_pages);
  }

  // Validates every page of a window: invalid pages get their status in `out`, valid ones
  // come back routed, with their I/O mode chosen.
  template <typename Buffer>
  std::vector<PageWork<Buffer>> plan(std::span<const std::string_view> keys,
                                     std::span<const Buffer> pieces, size_t k,
                                     std::span<Status> out) {
    std::vector<PageWork<Buffer>> work;
    work.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto page_pieces = pieces.subspan(i * k, k);
      uint64_t payload = 0;
      Status st = validate_page(keys[i], page_pieces, &payload);
      if (!st.ok()) {
        bump(counters.invalid_requests);
        out[i] = std::move(st);
        continue;
      }
      PageWork<Buffer>& w = work.emplace_back();
      w.page = i;
      w.route = router.route(keys[i]);
      w.payload = payload;
      w.pieces = page_pieces;
      choose_io(w);
    }
    return work;
  }

  // The first failure among a page's descriptors, or OK.
  template <typename Buffer>
  static Status page_result(const Transfer& xfer, const PageWork<Buffer>& w) {
    const auto results = xfer.results();
    for (size_t d = w.first_desc; d < w.first_desc + w.desc_count; ++d) {
      if (!results[d].ok()) return results[d];
    }
    return ok_status();
  }

  template <typename Buffer>
  void count_io(const PageWork<Buffer>& w) {
    if (w.io == PageIo::kDirect) bump(counters.direct_pages);
    if (w.io == PageIo::kStaged) bump(counters.staged_pages);
  }

  // Removes a corrupt object if it is still the one that was read.
  void drop(const routing::Route& route, const ObjectIdentity& identity, uint64_t bytes) {
    if (!config.drop_corrupt) return;
    if (agent.remove(route.path, identity.valid() ? &identity : nullptr).ok()) {
      bump(counters.corrupt_dropped);
      index.erase(route.key_hash);
      if (ledger) ledger->release(bytes).ignore_error();  // drift only: healed on restart
    }
  }

  // The bytes `need` fit the capacity: least recently used pages are evicted until they do.
  // kResourceExhausted when they cannot (a page larger than the capacity, or every page this
  // process knows of is gone and a rescan finds no more).
  Status reserve(uint64_t need);
  // Lists the namespace's pages into the index: `as_recent` puts them in their modification
  // order as used; otherwise they go in as least recently used (found later).
  Status scan_index(bool as_recent);
  // Lists base `b`'s namespace directory one fan-out directory at a time: `fn(dir, pages)`
  // gets the page entries of each (directories that vanish meanwhile are skipped).
  Status for_each_fanout(size_t b, bool with_details,
                         const std::function<Status(const std::string& dir,
                                                    const std::vector<ObjectInfo>& pages)>& fn);

  // Runs a batch in windows of at most budget.capacity() pages, each holding its permits.
  template <typename Buffer, typename Window>
  BatchResult run_batch(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                        Window window) {
    BatchResult out;
    size_t k = 0;
    out.status = check_shape(keys, pieces, &k);
    if (!out.status.ok()) {
      bump(counters.invalid_requests);
      return out;
    }
    out.pages.resize(keys.size());
    const size_t step = std::min<size_t>(budget.capacity(), 128);
    for (size_t first = 0; first < keys.size(); first += step) {
      const size_t n = std::min(step, keys.size() - first);
      ObjectBudget::Permits permits(budget, n);
      window(keys.subspan(first, n), pieces.subspan(first * k, n * k), k,
             std::span<Status>(out.pages).subspan(first, n));
    }
    return out;
  }

  void put_window(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces,
                  size_t k, std::span<Status> out);
  void get_window(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces,
                  size_t k, std::span<Status> out);
  // Checks a page whose descriptors all completed: header, then payload checksum; a staged
  // page is copied out to the caller's pieces once it checks out.
  Status verify_page(const PageWork<MutableBuffer>& w, std::string_view key,
                     std::span<const std::byte, kHeaderBytes> block,
                     std::span<const uint64_t> chunk_checksums) const;
  Status open_namespace();
};

Status Store::Impl::open_namespace() {
  KVTIER_ASSIGN_OR_RETURN(zeros, AlignedBuffer::allocate(kBlockBytes));
  KVTIER_ASSIGN_OR_RETURN(zeros_registration, agent.register_memory(zeros.data(), zeros.size()));
  const std::string manifest = manifest_json(config.ns, ns_id);
  std::string dio_reason;
  std::optional<DirectIoAlignment> dio_seen;
  for (size_t b = 0; b < router.base_count(); ++b) {
    const std::string temp_dir = router.temp_dir(b);
    KVTIER_RETURN_IF_ERROR(agent.make_dirs(temp_dir));
    const std::string path = router.manifest_path(b);
    Result<ObjectInfo> existing = agent.stat(path);
    if (existing.status().code() == StatusCode::kNotFound) {
      KVTIER_RETURN_IF_ERROR(object_io::write_object(agent, path, temp_dir, manifest));
    } else if (!existing.ok()) {
      return existing.status();
    }
    KVTIER_ASSIGN_OR_RETURN(size_t swept,
                            agent.sweep_temporaries(temp_dir, config.stale_temp_age_s));
    bump(counters.temps_swept, swept);

    if (config.direct_io == DirectIo::kOff) continue;
    Result<DirectIoAlignment> a = agent.probe_direct_io(temp_dir);
    if (a.ok() && (a->memory > kBlockBytes || a->offset > kBlockBytes)) {
      a = unsupported_error(
          fmt::format("{}: direct I/O alignment {}/{} exceeds the page format's {}-byte blocks",
                      temp_dir, a->memory, a->offset, kBlockBytes));
    }
    if (a.ok()) {
      dio[b] = *a;
      dio_seen = *a;
    } else if (dio_reason.empty()) {
      dio_reason = std::string(a.status().message());
    }
  }
  if (config.direct_io != DirectIo::kOff) {
    if (!dio_seen) {
      dio_summary = "off: " + dio_reason;
    } else {
      dio_summary =
          fmt::format("{} ({}-byte memory, {}-byte offset alignment){}",
                      direct_io_name(config.direct_io), dio_seen->memory, dio_seen->offset,
                      dio_reason.empty() ? "" : "; some bases buffered: " + dio_reason);
    }
  }
  return ok_status();
}

void Store::Impl::put_window(std::span<const std::string_view> keys,
                             std::span<const ConstBuffer> pieces, size_t k, std::span<Status> out) {
  auto work = plan(keys, pieces, k, out);

  Result<HeaderPool::Lease> lease = headers.acquire(work.size());
  if (!lease.ok()) {
    for (const auto& w : work) out[w.page] = lease.status();
    bump(counters.put_failures, work.size());
    return;
  }
  // Capacity: the window's bytes are reserved (evicting as needed) before anything is written.
  uint64_t reserved = 0;
  if (ledger && !work.empty()) {
    for (const auto& w : work) reserved += object_bytes(w.payload);
    Status st = reserve(reserved);
    if (!st.ok()) {
      for (const auto& w : work) out[w.page] = st;
      bump(counters.put_failures, work.size());
      bump(counters.capacity_refusals, work.size());
      return;
    }
  }

  std::vector<TargetSpec> specs;
  specs.reserve(work.size());
  for (const auto& w : work) {
    TargetSpec spec;
    spec.path = w.route.path;
    spec.mode = TargetMode::kCreate;
    spec.size_hint = object_bytes(w.payload);
    spec.temp_dir = router.temp_dir(w.route.base);
    spec.direct = w.io != PageIo::kBuffered;
    specs.push_back(std::move(spec));
  }
  std::vector<Result<Target>> opened = agent.open_targets(specs);

  // Pages go out in chunks that grow from 1 MiB to 16 MiB: while the backend writes one
  // chunk, this thread checksums the next, so checksumming overlaps the copy.
  struct Chunk {
    std::vector<size_t> pages;  // indexes into `work`
    Result<Transfer> xfer = Transfer();
    Status error;  // the chunk's request could not be made or posted
  };
  std::vector<Chunk> chunks;
  const uint64_t created = wall_ns();
  uint64_t chunk_target = 1 << 20;
  size_t next = 0;
  while (next < work.size()) {
    Chunk& c = chunks.emplace_back();
    uint64_t bytes = 0;
    std::vector<MemDesc> mem;
    std::vector<StorageDesc> sto;
    for (; next < work.size() && (c.pages.empty() || bytes < chunk_target); ++next) {
      auto& w = work[next];
      if (!opened[next].ok()) {
        out[w.page] = std::move(opened[next]).status();
        continue;
      }
      w.target = std::move(opened[next]).value();
      const uint64_t padded = object_bytes(w.payload) - kHeaderBytes;
      uint64_t checksum;
      if (w.io == PageIo::kStaged) {
        std::byte* dst = w.staging.data();
        for (const ConstBuffer& p : w.pieces) {
          std::memcpy(dst, p.data, p.size);
          dst += p.size;
        }
        std::memset(dst, 0, padded - w.payload);
        const ConstBuffer staged{w.staging.data(), w.payload};
        checksum = page::payload_checksum(std::span<const ConstBuffer>(&staged, 1), w.payload);
      } else {
        checksum = page::payload_checksum(w.pieces, w.payload);
      }
      page::Header h;
      h.namespace_id = ns_id;
      h.key_hash = w.route.key_hash;
      h.payload_bytes = w.payload;
      h.payload_checksum = checksum;
      h.piece_count = static_cast<uint32_t>(w.pieces.size());
      h.piece_bytes = page::uniform_piece_bytes(w.pieces);
      h.created_ns = created;
      h.key = keys[w.page];
      page::encode(h, lease->block(next));

      c.pages.push_back(next);
      w.first_desc = mem.size();
      mem.push_back(MemDesc{lease->block(next).data(), kHeaderBytes});
      sto.push_back(StorageDesc{&w.target, 0, kHeaderBytes});
      if (w.io == PageIo::kStaged) {
        mem.push_back(MemDesc{w.staging.data(), padded});
        sto.push_back(StorageDesc{&w.target, kHeaderBytes, padded});
      } else {
        uint64_t off = kHeaderBytes;
        for (const ConstBuffer& p : w.pieces) {
          mem.push_back(MemDesc{const_cast<void*>(p.data), p.size});
          sto.push_back(StorageDesc{&w.target, off, p.size});
          off += p.size;
        }
        if (padded > w.payload) {
          mem.push_back(MemDesc{zeros.data(), padded - w.payload});
          sto.push_back(StorageDesc{&w.target, off, padded - w.payload});
        }
      }
      w.desc_count = mem.size() - w.first_desc;
      bytes += w.payload;
    }
    chunk_target = std::min<uint64_t>(chunk_target * 2, 16 << 20);
    if (mem.empty()) continue;
    c.xfer = agent.make_request(TransferOp::kWrite, mem, sto);
    c.error = c.xfer.ok() ? c.xfer->post() : c.xfer.status();
  }

  for (Chunk& c : chunks) {
    if (c.error.ok() && c.xfer->valid()) c.xfer->wait();
    for (size_t i : c.pages) {
      auto& w = work[i];
      Status st = c.error;
      if (st.ok()) st = page_result(*c.xfer, w);
      if (st.ok()) st = w.target.publish(PublishOptions{.durable = config.fsync});
      if (st.ok()) {
        bump(counters.put_pages);
        bump(counters.put_bytes, w.payload);
        count_io(w);
      }
      out[w.page] = std::move(st);
    }
  }
  for (const Status& s : out) {
    if (!s.ok()) bump(counters.put_failures);
  }
  // Published pages are indexed as just used; bytes reserved for pages that were not
  // published, and those of pages a publish replaced, go back to the budget.
  uint64_t give_back = 0;
  for (const auto& w : work) {
    const uint64_t bytes = object_bytes(w.payload);
    if (out[w.page].ok()) {
      const std::optional<uint64_t> old =
          index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base), bytes});
      if (old) give_back += *old;
    } else {
      give_back += bytes;
    }
  }
  if (reserved != 0) ledger->release(give_back).ignore_error();  // drift only: healed on restart
}

Status Store::Impl::reserve(uint64_t need) {
  bool rescanned = false;
  const uint64_t capacity = config.capacity_bytes != 0 ? config.capacity_bytes : UINT64_MAX;
  return ledger->update([&](uint64_t& used) -> Status {
    for (;;) {
      uint64_t limit = capacity;
      if (config.min_free_bytes != 0) {
        struct statvfs fs {};
        if (::statvfs(router.namespace_dir(0).c_str(), &fs) == 0) {
          const uint64_t avail = uint64_t{fs.f_bavail} * fs.f_frsize;
          const uint64_t room = avail > config.min_free_bytes ? avail - config.min_free_bytes : 0;
          limit = std::min(limit, used + room);
        }
      }
      if (used + need <= limit) break;
      std::optional<PageIndex::Page> victim = index.pop_oldest();
      if (!victim) {
        if (!rescanned) {
          // Every page this process knew of is gone: learn the ones others wrote.
          rescanned = true;
          KVTIER_RETURN_IF_ERROR(scan_index(/*as_recent=*/false));
          continue;
        }
        return resource_exhausted_error(fmt::format(
            "capacity: {} more bytes do not fit ({} of {} used{}), and there is nothing left "
            "to evict",
            need, used, limit, config.min_free_bytes ? ", keeping min_free_bytes free" : ""));
      }
      // Readers holding the object open keep reading it: unlinking never tears a read.
      Status st = agent.remove(router.page_path(victim->base, victim->hash));
      if (st.ok()) {
        used = used > victim->bytes ? used - victim->bytes : 0;
        bump(counters.evicted_pages);
        bump(counters.evicted_bytes, victim->bytes);
      } else if (st.code() != StatusCode::kNotFound) {
        return st.with_context("evicting a page");
      }
      // kNotFound: another process removed it and gave its bytes back.
      // A fresh statvfs next round sees the space the unlink freed.
    }
    used += need;
    return ok_status();
  });
}

Status Store::Impl::scan_index(bool as_recent) {
  const NamespaceSpec& ns = config.ns;
  // With a fixed page geometry every object has the same size: names alone are enough (one
  // getdents per directory, no stat per page).
  const bool fixed = ns.piece_bytes != 0;
  const uint64_t fixed_bytes = fixed ? object_bytes(ns.piece_bytes * ns.pieces_per_page) : 0;
  struct Found {
    PageIndex::Page page;
    uint64_t mtime_ns;
  };
  std::vector<Found> found;
  for (size_t b = 0; b < router.base_count(); ++b) {
    KVTIER_RETURN_IF_ERROR(for_each_fanout(
        b, /*with_details=*/!fixed, [&](const std::string&, const std::vector<ObjectInfo>& pages) {
          for (const ObjectInfo& e : pages) {
            const std::optional<Hash128> h = parse_hash_hex(e.name);
            if (h && (fixed || e.size > kHeaderBytes)) {
              found.push_back(
                  {{*h, static_cast<uint32_t>(b), fixed ? fixed_bytes : e.size}, e.mtime_ns});
            }
          }
          return ok_status();
        }));
  }
  if (as_recent) {
    std::sort(found.begin(), found.end(),
              [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
    for (const Found& f : found) index.put(f.page);
  } else {
    for (const Found& f : found) index.put_cold(f.page);
  }
  return ok_status();
}

Status Store::Impl::for_each_fanout(
    size_t b, bool with_details,
    const std::function<Status(const std::string& dir, const std::vector<ObjectInfo>& pages)>& fn) {
  const std::string& ns_dir = router.namespace_dir(b);
  std::vector<std::string> fanouts;
  Status st = agent.list(ns_dir, ListOptions{}, [&](const ObjectInfo& e) {
    if (e.is_dir && routing::is_fanout_name(e.name)) fanouts.push_back(ns_dir + "/" + e.name);
    return ok_status();
  });
  if (st.code() == StatusCode::kNotFound) return ok_status();
  KVTIER_RETURN_IF_ERROR(st);
  for (const std::string& dir : fanouts) {
    std::vector<ObjectInfo> pages;
    st = agent.list(dir, ListOptions{.with_details = with_details}, [&](const ObjectInfo& e) {
      if (!e.is_dir && routing::is_page_name(e.name)) pages.push_back(e);
      return ok_status();
    });
    if (st.code() == StatusCode::kNotFound) continue;
    KVTIER_RETURN_IF_ERROR(st);
    KVTIER_RETURN_IF_ERROR(fn(dir, pages));
  }
  return ok_status();
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
    if (h->namespace_id == ns_id && h->key == key &&
        w.target.size() == object_bytes(h->payload_bytes)) {
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
  if (w.header_only) {
    return corrupt_error(fmt::format("object is {} bytes; its header says {}", w.target.size(),
                                     object_bytes(h->payload_bytes)));
  }
  if (config.verify_payload &&
      page::combine_chunk_checksums(chunk_checksums) != h->payload_checksum) {
    return corrupt_error("payload checksum mismatch");
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

void Store::Impl::get_window(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces, size_t k,
                             std::span<Status> out) {
  auto work = plan(keys, pieces, k, out);

  std::vector<TargetSpec> specs;
  specs.reserve(work.size());
  for (const auto& w : work) {
    TargetSpec spec;
    spec.path = w.route.path;
    spec.direct = w.io != PageIo::kBuffered;
    specs.push_back(std::move(spec));
  }
  std::vector<Result<Target>> opened = agent.open_targets(specs);

  std::vector<PageWork<MutableBuffer>*> reading;
  reading.reserve(work.size());
  for (size_t i = 0; i < work.size(); ++i) {
    auto& w = work[i];
    if (!opened[i].ok()) {
      out[w.page] = std::move(opened[i]).status();
      continue;
    }
    w.target = std::move(opened[i]).value();
    const uint64_t size = w.target.size();
    if (size < kHeaderBytes) {
      out[w.page] = corrupt_error(
          fmt::format("'{}' is {} bytes, shorter than a page header", w.route.path, size));
      continue;
    }
    w.header_only = size != object_bytes(w.payload);
    reading.push_back(&w);
  }

  Result<HeaderPool::Lease> lease = headers.acquire(reading.size());
  Status batch_error = lease.status();
  // Pieces are split at checksum chunk boundaries: each chunk is hashed by the thread that
  // completes it, while it is still in that core's cache, in parallel with other reads; the
  // thread that completes a page's last descriptor verifies the page.
  constexpr uint32_t kNoChunk = UINT32_MAX;
  struct DescRef {
    uint32_t page;   // index in `reading`
    uint32_t chunk;  // chunk of that page, or kNoChunk for the header
  };
  std::vector<MemDesc> mem;
  std::vector<StorageDesc> sto;
  std::vector<DescRef> refs;
  std::vector<size_t> first_chunk(reading.size() + 1, 0);
  auto add = [&](void* m, const Target* t, uint64_t off, uint64_t n, uint32_t r, uint32_t c) {
    mem.push_back(MemDesc{m, n});
    sto.push_back(StorageDesc{t, off, n});
    refs.push_back(DescRef{r, c});
  };
  if (batch_error.ok()) {
    for (size_t r = 0; r < reading.size(); ++r) {
      auto& w = *reading[r];
      const auto page = static_cast<uint32_t>(r);
      first_chunk[r + 1] = first_chunk[r] + (w.header_only ? 0 : page::chunk_count(w.payload));
      w.first_desc = mem.size();
      add(lease->block(r).data(), &w.target, 0, kHeaderBytes, page, kNoChunk);
      if (w.header_only) {
        // Only the header: it tells a caller error from damage.
      } else if (w.io == PageIo::kStaged) {
        const uint64_t n = align_up(w.payload, dio[w.route.base]->offset);
        for (uint64_t off = 0; off < n; off += page::kChecksumChunkBytes) {
          add(w.staging.data() + off, &w.target, kHeaderBytes + off,
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
            add(static_cast<std::byte*>(p.data) + pos, &w.target, kHeaderBytes + at, n, page,
                static_cast<uint32_t>(chunk));
            pos += n;
          }
          base += p.size;
        }
      }
      w.desc_count = mem.size() - w.first_desc;
    }
  }

  std::vector<Status> verdicts(reading.size());
  std::vector<uint64_t> chunk_sums(first_chunk.back());
  auto chunk_pending = std::make_unique<std::atomic<uint32_t>[]>(chunk_sums.size());
  auto pending = std::make_unique<std::atomic<uint32_t>[]>(reading.size());
  auto failed = std::make_unique<std::atomic<bool>[]>(reading.size());
  for (size_t c = 0; c < chunk_sums.size(); ++c) chunk_pending[c].store(0);
  for (size_t r = 0; r < reading.size(); ++r) {
    pending[r].store(static_cast<uint32_t>(reading[r]->desc_count));
    failed[r].store(false);
  }
  for (const DescRef& ref : refs) {
    if (ref.chunk != kNoChunk) chunk_pending[first_chunk[ref.page] + ref.chunk].fetch_add(1);
  }
  TransferCallbacks callbacks;
  callbacks.on_descriptor = [&](size_t d, const Status& st) {
    const DescRef ref = refs[d];
    const auto& w = *reading[ref.page];
    if (!st.ok()) {
      failed[ref.page].store(true, std::memory_order_relaxed);
    } else if (ref.chunk != kNoChunk && config.verify_payload) {
      const size_t g = first_chunk[ref.page] + ref.chunk;
      if (chunk_pending[g].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        if (w.io == PageIo::kStaged) {
          const MutableBuffer staged{w.staging.data(), w.payload};
          chunk_sums[g] = page::chunk_checksum(std::span<const MutableBuffer>(&staged, 1),
                                               w.payload, ref.chunk);
        } else {
          chunk_sums[g] = page::chunk_checksum(w.pieces, w.payload, ref.chunk);
        }
      }
    }
    if (pending[ref.page].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (failed[ref.page].load(std::memory_order_relaxed)) return;  // the page's status says why
    const auto sums =
        std::span<const uint64_t>(chunk_sums)
            .subspan(first_chunk[ref.page], first_chunk[ref.page + 1] - first_chunk[ref.page]);
    verdicts[ref.page] = verify_page(w, keys[w.page], lease->block(ref.page), sums);
  };

  Result<Transfer> xfer = Transfer();
  if (batch_error.ok()) {
    xfer = agent.make_request(TransferOp::kRead, mem, sto);
    batch_error = xfer.status();
  }
  if (batch_error.ok() && !mem.empty()) {
    batch_error = xfer->post(std::move(callbacks));
    if (batch_error.ok()) xfer->wait();
  }

  for (size_t r = 0; r < reading.size(); ++r) {
    auto& w = *reading[r];
    Status& st = out[w.page];
    st = batch_error;
    if (st.ok()) st = page_result(*xfer, w);
    if (st.ok()) st = std::move(verdicts[r]);
    if (st.code() == StatusCode::kCorrupt) {
      st = st.with_context(fmt::format("page '{}'", w.route.path));
    }
  }

  for (const Status& st : out) {
    switch (st.code()) {
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
  for (auto& w : work) {
    const Status& st = out[w.page];
    if (st.ok()) {
      bump(counters.get_hits);
      bump(counters.get_bytes, w.payload);
      count_io(w);
    } else if (st.code() == StatusCode::kCorrupt && w.target.valid()) {
      const ObjectIdentity id = w.target.identity();
      const uint64_t bytes = w.target.size();
      w.target.reset();
      drop(w.route, id, bytes);
    }
  }
  // The index follows what reads found: hits are recent, misses are gone.
  for (const auto& w : work) {
    const Status& st = out[w.page];
    if (st.ok()) {
      if (!index.touch(w.route.key_hash)) {
        index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base), object_bytes(w.payload)});
      }
    } else if (st.code() == StatusCode::kNotFound) {
      index.erase(w.route.key_hash);
    }
  }
}

// Runs one submitted batch on the store's async pool.
class Store::Impl::TicketJob final : public PoolJob {
 public:
  TicketJob(Store::Impl& impl, std::shared_ptr<detail::TicketState> state)
      : impl_(impl), state_(std::move(state)) {}

  void run() override {
    if (ran_.exchange(true)) return;
    detail::TicketState& st = *state_;
    st.result = st.is_put ? impl_.put(st.views, st.put_pieces) : impl_.get(st.views, st.get_pieces);
    if (st.callback) {
      // A completion thread must not unwind: an exception from the callback stops here.
      try {
        st.callback(st.result);
      } catch (...) {
      }
    }
    {
      std::lock_guard lock(st.mu);
      st.done = true;
    }
    st.cv.notify_all();
    state_.reset();
    std::lock_guard lock(impl_.async_mu);
    if (--impl_.async_pending == 0) impl_.async_idle.notify_all();
  }

 private:
  Store::Impl& impl_;
  std::shared_ptr<detail::TicketState> state_;
  std::atomic<bool> ran_{false};
};

void Store::Impl::submit(std::shared_ptr<detail::TicketState> state) {
  std::call_once(async_once, [&] {
    async_pool = std::make_unique<WorkerPool>(std::max<size_t>(1, config.async_threads));
  });
  {
    std::lock_guard lock(async_mu);
    ++async_pending;
  }
  async_pool->schedule(std::make_shared<TicketJob>(*this, std::move(state)), 1);
}

// ---- BatchTicket ----

BatchTicket::BatchTicket() noexcept = default;
BatchTicket::BatchTicket(BatchTicket&&) noexcept = default;
BatchTicket& BatchTicket::operator=(BatchTicket&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->detached) wait();
    state_ = std::move(other.state_);
  }
  return *this;
}
BatchTicket::~BatchTicket() {
  if (state_ && !state_->detached) wait();
}

bool BatchTicket::done() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

Status BatchTicket::wait(std::chrono::nanoseconds timeout) const {
  if (!state_) return invalid_argument_error("wait on an empty BatchTicket");
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
    return timeout_error(fmt::format("batch of {} pages still running", state_->keys.size()));
  }
  return ok_status();
}

void BatchTicket::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
}

BatchResult BatchTicket::take() {
  BatchResult out;
  if (!state_) {
    out.status = invalid_argument_error("take on an empty BatchTicket");
    return out;
  }
  std::lock_guard lock(state_->mu);
  if (!state_->done) {
    out.status = invalid_argument_error("take before the batch is done (wait first)");
  } else if (state_->taken) {
    out.status = invalid_argument_error("the result was already taken");
  } else {
    state_->taken = true;
    out = std::move(state_->result);
  }
  return out;
}

void BatchTicket::detach() noexcept {
  if (state_) state_->detached = true;
  state_.reset();
}

// ---- Store ----

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

Result<std::unique_ptr<Store>> Store::open(const StoreConfig& config) {
  KVTIER_RETURN_IF_ERROR(config.ns.validate());
  if (config.location.bases.empty()) {
    return invalid_argument_error("store location has no base directory");
  }
  AgentConfig ac;
  ac.backend = config.backend.empty() ? config.location.backend : config.backend;
  ac.storage_class = config.location.storage_class;
  ac.params = config.location.params;
  ac.registry = &builtin_backends();
  ac.decorate = config.decorate;
  KVTIER_ASSIGN_OR_RETURN(Agent agent, Agent::create(ac));
  routing::Router router(config.location.bases, config.ns.id());
  auto impl = std::make_unique<Impl>(config, std::move(agent), std::move(router));
  KVTIER_RETURN_IF_ERROR(impl->open_namespace().with_context(
      fmt::format("opening store at {}", config.location.uri())));
  KVTIER_RETURN_IF_ERROR(
      impl->scan_index(/*as_recent=*/true)
          .with_context(fmt::format("indexing the store at {}", config.location.uri())));
  if (std::optional<Impl::Generation> g = impl->read_generation()) impl->seen_generation = *g;
  if (config.capacity_bytes != 0 || config.min_free_bytes != 0) {
    if (config.location.storage_class != StorageClass::kFile) {
      return unsupported_error(fmt::format(
          "{}: capacity_bytes and min_free_bytes need a FILE store (directories); object stores "
          "bound their size with the bucket's own lifecycle rules",
          config.location.uri()));
    }
    KVTIER_ASSIGN_OR_RETURN(impl->ledger,
                            Ledger::open(impl->router.namespace_dir(0), impl->index.bytes()));
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Result<Registration> Store::register_memory(void* addr, size_t length) {
  return impl_->agent.register_memory(addr, length);
}

Status Store::put(std::string_view key, std::span<const ConstBuffer> pieces) {
  BatchResult r = batch_put(std::span<const std::string_view>(&key, 1), pieces);
  if (!r.status.ok()) return r.status;
  return r.pages.front();
}

Status Store::put(std::string_view key, const void* data, size_t size) {
  const ConstBuffer piece{data, size};
  return put(key, std::span<const ConstBuffer>(&piece, 1));
}

Status Store::get(std::string_view key, std::span<const MutableBuffer> pieces) {
  BatchResult r = batch_get(std::span<const std::string_view>(&key, 1), pieces);
  if (!r.status.ok()) return r.status;
  return r.pages.front();
}

Status Store::get(std::string_view key, void* data, size_t size) {
  const MutableBuffer piece{data, size};
  return get(key, std::span<const MutableBuffer>(&piece, 1));
}

BatchResult Store::batch_put(std::span<const std::string_view> keys,
                             std::span<const ConstBuffer> pieces) {
  return impl_->put(keys, pieces);
}

BatchResult Store::batch_get(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces) {
  return impl_->get(keys, pieces);
}

namespace {

template <typename Buffer>
std::shared_ptr<detail::TicketState> make_ticket(std::span<const std::string_view> keys,
                                                 std::span<const Buffer> pieces,
                                                 BatchCallback on_done) {
  auto st = std::make_shared<detail::TicketState>();
  st->keys.assign(keys.begin(), keys.end());
  st->views.assign(st->keys.begin(), st->keys.end());
  if constexpr (std::is_same_v<Buffer, ConstBuffer>) {
    st->is_put = true;
    st->put_pieces.assign(pieces.begin(), pieces.end());
  } else {
    st->get_pieces.assign(pieces.begin(), pieces.end());
  }
  st->callback = std::move(on_done);
  return st;
}

}  // namespace

BatchTicket Store::submit_put(std::span<const std::string_view> keys,
                              std::span<const ConstBuffer> pieces, BatchCallback on_done) {
  BatchTicket t;
  t.state_ = make_ticket(keys, pieces, std::move(on_done));
  impl_->submit(t.state_);
  return t;
}

BatchTicket Store::submit_get(std::span<const std::string_view> keys,
                              std::span<const MutableBuffer> pieces, BatchCallback on_done) {
  BatchTicket t;
  t.state_ = make_ticket(keys, pieces, std::move(on_done));
  impl_->submit(t.state_);
  return t;
}

Result<bool> Store::exists(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  bump(impl_->counters.exists_queries);
  impl_->observe_generation();
  const routing::Route r = impl_->router.route(key);
  if (impl_->index.contains(r.key_hash)) return true;
  // Not indexed: perhaps another process wrote it since this one looked.
  bump(impl_->counters.index_stats);
  Result<ObjectInfo> info = impl_->agent.stat(r.path);
  if (info.ok()) {
    if (info->is_dir || info->size <= kHeaderBytes) return false;
    impl_->index.put_cold({r.key_hash, static_cast<uint32_t>(r.base), info->size});
    return true;
  }
  if (info.status().code() == StatusCode::kNotFound) return false;
  return info.status();
}

size_t Store::batch_exists(std::span<const std::string_view> keys) {
  Impl& impl = *impl_;
  BatchTimer timer(impl.counters, impl.counters.exists_latency);
  impl.observe_generation();
  size_t n = 0;
  // Indexed keys cost no system call; from the first one that is not, ask storage.
  for (; n < keys.size(); ++n) {
    if (!routing::validate_key(keys[n]).ok()) {
      bump(impl.counters.exists_queries, n + 1);
      return n;  // a bad key ends the prefix
    }
    if (!impl.index.contains(impl.router.route(keys[n]).key_hash)) break;
  }
  std::vector<routing::Route> rest;
  std::vector<std::string> paths;
  for (size_t i = n; i < keys.size(); ++i) {
    if (!routing::validate_key(keys[i]).ok()) break;
    rest.push_back(impl.router.route(keys[i]));
    paths.push_back(rest.back().path);
  }
  bump(impl.counters.exists_queries, n + paths.size());
  if (paths.empty()) return n;
  // One call for the rest: object stores ask in parallel, files stop at the first absent page.
  std::vector<Result<ObjectInfo>> infos = impl.agent.stat_many(paths, /*until_missing=*/true);
  size_t found = 0;
  for (; found < infos.size(); ++found) {
    const Result<ObjectInfo>& info = infos[found];
    if (!info.ok() || info->is_dir || info->size <= kHeaderBytes) break;
    impl.index.put_cold(
        {rest[found].key_hash, static_cast<uint32_t>(rest[found].base), info->size});
  }
  // The keys the index could not answer, up to and including the one that ended the prefix.
  bump(impl.counters.index_stats, found + (found < infos.size() ? 1 : 0));
  return n + found;
}

Status Store::remove(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  const routing::Route r = impl_->router.route(key);
  uint64_t bytes = 0;
  if (impl_->ledger) {
    Result<ObjectInfo> info = impl_->agent.stat(r.path);
    if (info.ok()) bytes = info->size;
  }
  Status st = impl_->agent.remove(r.path);
  impl_->index.erase(r.key_hash);
  KVTIER_RETURN_IF_ERROR(st);
  if (impl_->ledger) impl_->ledger->release(bytes).ignore_error();
  bump(impl_->counters.removes);
  return ok_status();
}

Status Store::clear() {
  Impl& impl = *impl_;
  const bool ledger = impl.ledger != nullptr;
  uint64_t freed = 0;
  Status result;
  for (size_t b = 0; b < impl.router.base_count() && result.ok(); ++b) {
    result = impl.for_each_fanout(
        b, /*with_details=*/ledger,
        [&](const std::string& dir, const std::vector<ObjectInfo>& pages) {
          std::vector<std::string> paths;
          paths.reserve(pages.size());
          for (const ObjectInfo& e : pages) paths.push_back(dir + "/" + e.name);
          std::vector<Status> removed = impl.agent.remove_many(paths);
          Status first;
          for (size_t i = 0; i < removed.size(); ++i) {
            if (removed[i].ok()) {
              bump(impl.counters.cleared);
              freed += pages[i].size;
            } else if (removed[i].code() != StatusCode::kNotFound && first.ok()) {
              first = removed[i];
            }
          }
          return first;
        });
  }
  impl.index.clear();
  if (ledger) impl.ledger->release(freed).ignore_error();
  // Every other store of the namespace drops its index on its next exists call.
  Status published = impl.publish_generation();
  if (result.ok()) result = published;
  return result;
}

StoreStats Store::stats() const {
  const Counters& c = impl_->counters;
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  StoreStats s;
  s.put_pages = v(c.put_pages);
  s.put_bytes = v(c.put_bytes);
  s.put_failures = v(c.put_failures);
  s.get_hits = v(c.get_hits);
  s.get_bytes = v(c.get_bytes);
  s.get_misses = v(c.get_misses);
  s.get_corrupt = v(c.get_corrupt);
  s.get_failures = v(c.get_failures);
  s.corrupt_dropped = v(c.corrupt_dropped);
  s.exists_queries = v(c.exists_queries);
  s.removes = v(c.removes);
  s.cleared = v(c.cleared);
  s.invalid_requests = v(c.invalid_requests);
  s.temps_swept = v(c.temps_swept);
  s.direct_io = impl_->dio_summary;
  s.direct_pages = v(c.direct_pages);
  s.staged_pages = v(c.staged_pages);
  s.direct_fallback_pages = v(c.direct_fallback_pages);
  s.pages = impl_->index.pages();
  s.bytes = impl_->index.bytes();
  s.capacity_bytes = impl_->config.capacity_bytes;
  s.min_free_bytes = impl_->config.min_free_bytes;
  if (impl_->ledger) {
    Result<uint64_t> used = impl_->ledger->used();
    if (used.ok()) s.used_bytes = *used;
  }
  s.evicted_pages = v(c.evicted_pages);
  s.evicted_bytes = v(c.evicted_bytes);
  s.capacity_refusals = v(c.capacity_refusals);
  s.index_stats = v(c.index_stats);
  s.put_latency = c.put_latency.snapshot();
  s.get_latency = c.get_latency.snapshot();
  s.exists_latency = c.exists_latency.snapshot();
  s.batches_in_flight = v(c.batches_in_flight);
  s.objects_open = impl_->budget.in_use();
  for (size_t code = 1; code < c.errors_by_code.size(); ++code) {
    if (const uint64_t n = v(c.errors_by_code[code]); n != 0) {
      s.errors_by_code[std::string(status_code_name(static_cast<StatusCode>(code)))] = n;
    }
  }
  return s;
}

std::string to_prometheus(const StoreStats& s, std::string_view labels) {
  std::string out;
  const std::string l = labels.empty() ? std::string() : "{" + std::string(labels) + "}";
  auto with = [&](std::string_view extra) {
    if (labels.empty()) return "{" + std::string(extra) + "}";
    return "{" + std::string(labels) + "," + std::string(extra) + "}";
  };
  auto metric = [&](std::string_view name, std::string_view type, std::string_view help,
                    uint64_t value) {
    out += fmt::format("# HELP kvtier_{0} {1}\n# TYPE kvtier_{0} {2}\nkvtier_{0}{3} {4}\n", name,
                       help, type, l, value);
  };
  metric("put_pages_total", "counter", "Pages written and published.", s.put_pages);
  metric("put_bytes_total", "counter", "Payload bytes of published pages.", s.put_bytes);
  metric("put_failures_total", "counter", "Pages that failed to be written.", s.put_failures);
  metric("get_hits_total", "counter", "Pages read and verified.", s.get_hits);
  metric("get_bytes_total", "counter", "Payload bytes of pages read.", s.get_bytes);
  metric("get_misses_total", "counter", "Pages not present.", s.get_misses);
  metric("get_corrupt_total", "counter", "Pages that failed verification (misses).", s.get_corrupt);
  metric("get_failures_total", "counter", "Reads that failed (faults, caller errors).",
         s.get_failures);
  metric("exists_queries_total", "counter", "Keys asked about by exists calls.", s.exists_queries);
  metric("evicted_pages_total", "counter", "Pages evicted to stay within capacity.",
         s.evicted_pages);
  metric("evicted_bytes_total", "counter", "Object bytes evicted.", s.evicted_bytes);
  metric("capacity_refusals_total", "counter", "Pages refused: no room even after evicting.",
         s.capacity_refusals);
  metric("pages", "gauge", "Pages in this process's index.", s.pages);
  metric("bytes", "gauge", "Object bytes in this process's index.", s.bytes);
  metric("used_bytes", "gauge", "Bytes used against the capacity (all processes).", s.used_bytes);
  metric("capacity_bytes", "gauge", "The capacity (0: none).", s.capacity_bytes);
  metric("batches_in_flight", "gauge", "Batch calls running now.", s.batches_in_flight);
  metric("objects_open", "gauge", "Objects (descriptors) held open now.", s.objects_open);
  out +=
      "# HELP kvtier_errors_total Failed pages by status code (misses excluded).\n"
      "# TYPE kvtier_errors_total counter\n";
  for (const auto& [code, n] : s.errors_by_code) {
    out += fmt::format("kvtier_errors_total{} {}\n", with(fmt::format("code=\"{}\"", code)), n);
  }
  auto histogram = [&](std::string_view name, std::string_view help, const LatencyHistogram& h) {
    out += fmt::format("# HELP kvtier_{0}_seconds {1}\n# TYPE kvtier_{0}_seconds histogram\n", name,
                       help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i + 1 < h.buckets.size(); ++i) {
      cumulative += h.buckets[i];
      out +=
          fmt::format("kvtier_{}_seconds_bucket{} {}\n", name,
                      with(fmt::format("le=\"{:g}\"", static_cast<double>(uint64_t{1} << i) / 1e6)),
                      cumulative);
    }
    out += fmt::format("kvtier_{}_seconds_bucket{} {}\n", name, with("le=\"+Inf\""), h.count);
    out += fmt::format("kvtier_{}_seconds_sum{} {:g}\n", name, l, h.sum_us / 1e6);
    out += fmt::format("kvtier_{}_seconds_count{} {}\n", name, l, h.count);
  };
  histogram("put_batch", "Latency of put and batch_put calls.", s.put_latency);
  histogram("get_batch", "Latency of get and batch_get calls.", s.get_latency);
  histogram("exists_batch", "Latency of batch_exists calls.", s.exists_latency);
  return out;
}

const NamespaceSpec& Store::namespace_spec() const {
  return impl_->config.ns;
}
Hash128 Store::namespace_id() const {
  return impl_->ns_id;
}
const BackendSelection& Store::backend_selection() const {
  return impl_->agent.selection();
}

std::string Store::backend_description() const {
  return impl_->agent.backend_description();
}

std::vector<std::string> Store::namespace_dirs() const {
  std::vector<std::string> out;
  for (size_t b = 0; b < impl_->router.base_count(); ++b) {
    out.push_back(impl_->router.namespace_dir(b));
  }
  return out;
}

}  // namespace kvtier
