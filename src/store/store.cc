#include "kvtier/store/store.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>

#include "kvtier/backends/builtin.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/thread_annotations.h"
#include "object_io.h"
#include "page_format.h"
#include "routing.h"

namespace kvtier {
namespace {

using page::kHeaderBytes;

// Header blocks for in-flight pages: registered once, in chunks, and reused.
class HeaderPool {
 public:
  static constexpr size_t kBlocksPerChunk = 64;

  explicit HeaderPool(Agent& agent) : agent_(agent) {}

  // Blocks go back to the pool when the lease is destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept
        : pool_(std::exchange(o.pool_, nullptr)), blocks_(std::move(o.blocks_)) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_ != nullptr) pool_->release(blocks_);
    }
    std::span<std::byte, kHeaderBytes> block(size_t i) const {
      return std::span<std::byte, kHeaderBytes>(blocks_[i], kHeaderBytes);
    }

   private:
    friend class HeaderPool;
    HeaderPool* pool_ = nullptr;
    std::vector<std::byte*> blocks_;
  };

  Result<Lease> acquire(size_t n) {
    Lease lease;
    if (n == 0) return lease;
    std::lock_guard lock(mu_);
    while (free_.size() < n)
      KVTIER_RETURN_IF_ERROR(grow());
    lease.blocks_.assign(free_.end() - static_cast<ptrdiff_t>(n), free_.end());
    free_.resize(free_.size() - n);
    lease.pool_ = this;
    return lease;
  }

 private:
  struct Chunk {
    AlignedBuffer memory;
    Registration registration;  // declared after memory: released first
  };

  Status grow() KVTIER_REQUIRES(mu_) {
    auto chunk = std::make_unique<Chunk>();
    KVTIER_ASSIGN_OR_RETURN(chunk->memory, AlignedBuffer::allocate(kBlocksPerChunk * kHeaderBytes));
    KVTIER_ASSIGN_OR_RETURN(chunk->registration,
                            agent_.register_memory(chunk->memory.data(), chunk->memory.size()));
    for (size_t i = 0; i < kBlocksPerChunk; ++i) {
      free_.push_back(chunk->memory.data() + i * kHeaderBytes);
    }
    chunks_.push_back(std::move(chunk));
    return ok_status();
  }

  void release(const std::vector<std::byte*>& blocks) {
    std::lock_guard lock(mu_);
    free_.insert(free_.end(), blocks.begin(), blocks.end());
  }

  Agent& agent_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Chunk>> chunks_ KVTIER_GUARDED_BY(mu_);
  std::vector<std::byte*> free_ KVTIER_GUARDED_BY(mu_);
};

struct Counters {
  std::atomic<uint64_t> put_pages{0}, put_bytes{0}, put_failures{0};
  std::atomic<uint64_t> get_hits{0}, get_bytes{0}, get_misses{0}, get_corrupt{0}, get_failures{0};
  std::atomic<uint64_t> corrupt_dropped{0}, exists_queries{0}, removes{0}, cleared{0},
      invalid_requests{0}, temps_swept{0};
};

void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}

// A counting semaphore over open objects (descriptors, on FILE backends), shared by every call
// on the store: however many batches run at once, the store never holds more than `capacity`
// objects open, so a large batch cannot exhaust the process's descriptor table.
class ObjectBudget {
 public:
  explicit ObjectBudget(size_t capacity) : capacity_(capacity), available_(capacity) {}

  size_t capacity() const { return capacity_; }

  // Takes `n` <= capacity() permits, waiting until they are free.
  void acquire(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return available_ >= n; });
    available_ -= n;
  }
  void release(size_t n) {
    {
      std::lock_guard lock(mu_);
      available_ += n;
    }
    cv_.notify_all();
  }

  class Permits {
   public:
    Permits(ObjectBudget& b, size_t n) : budget_(b), n_(n) { budget_.acquire(n_); }
    ~Permits() { budget_.release(n_); }
    Permits(const Permits&) = delete;
    Permits& operator=(const Permits&) = delete;

   private:
    ObjectBudget& budget_;
    size_t n_;
  };

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t available_ KVTIER_GUARDED_BY(mu_);
};

size_t default_open_objects() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1024;
  return std::clamp<size_t>(static_cast<size_t>(rl.rlim_cur) / 4, 8, 1024);
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

}  // namespace

size_t BatchResult::ok_count() const {
  size_t n = 0;
  for (const Status& s : pages)
    n += s.ok() ? 1 : 0;
  return n;
}

size_t BatchResult::ok_prefix() const {
  size_t n = 0;
  while (n < pages.size() && pages[n].ok())
    ++n;
  return n;
}

struct Store::Impl {
  Impl(StoreConfig cfg, Agent a, routing::Router r)
      : config(std::move(cfg)),
        agent(std::move(a)),
        router(std::move(r)),
        ns_id(config.ns.id()),
        headers(agent),
        budget(config.max_open_objects != 0 ? config.max_open_objects : default_open_objects()) {}

  StoreConfig config;
  Agent agent;
  routing::Router router;
  Hash128 ns_id;
  HeaderPool headers;  // after agent: its registrations go first
  ObjectBudget budget;
  Counters counters;

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
      if (b.size > UINT64_MAX - kHeaderBytes - total) {
        return invalid_argument_error("page size overflows");
      }
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

  // Removes a corrupt object if it is still the one that was read.
  void drop(const std::string& path, const ObjectIdentity& identity) {
    if (!config.drop_corrupt) return;
    if (agent.remove(path, identity.valid() ? &identity : nullptr).ok()) {
      bump(counters.corrupt_dropped);
    }
  }

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

  // One valid page of a window, and what is opened for it.
  template <typename Buffer>
  struct PageWork {
    size_t page;  // index in the window
    routing::Route route;
    uint64_t payload;
    std::span<const Buffer> pieces;
    Target target;
    bool header_only = false;  // reads: the object's size does not fit the buffers
  };

  // Validates every page of a window: invalid pages get their status in `out`, valid ones
  // come back routed.
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
      work.push_back(PageWork<Buffer>{i, router.route(keys[i]), payload, page_pieces, {}});
    }
    return work;
  }

  // The first failure among a page's `count` descriptors starting at `first`, or OK.
  static Status page_result(const Transfer& xfer, size_t first, size_t count) {
    const auto results = xfer.results();
    for (size_t d = first; d < first + count; ++d) {
      if (!results[d].ok()) return results[d];
    }
    return ok_status();
  }

  void put_window(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces,
                  size_t k, std::span<Status> out);
  void get_window(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces,
                  size_t k, std::span<Status> out);
  // Checks a page whose descriptors all completed: header, then payload checksum.
  Status verify_page(const PageWork<MutableBuffer>& wk, std::string_view key,
                     std::span<const std::byte, kHeaderBytes> block) const;
  Status open_namespace();
};

Status Store::Impl::open_namespace() {
  const std::string manifest = manifest_json(config.ns, ns_id);
  for (size_t b = 0; b < router.base_count(); ++b) {
    KVTIER_RETURN_IF_ERROR(agent.make_dirs(router.temp_dir(b)));
    const std::string path = router.manifest_path(b);
    Result<ObjectInfo> existing = agent.stat(path);
    if (existing.status().code() == StatusCode::kNotFound) {
      KVTIER_RETURN_IF_ERROR(object_io::write_object(agent, path, router.temp_dir(b), manifest));
    } else if (!existing.ok()) {
      return existing.status();
    }
    KVTIER_ASSIGN_OR_RETURN(size_t swept,
                            agent.sweep_temporaries(router.temp_dir(b), config.stale_temp_age_s));
    bump(counters.temps_swept, swept);
  }
  return ok_status();
}

void Store::Impl::put_window(std::span<const std::string_view> keys,
                             std::span<const ConstBuffer> pieces, size_t k, std::span<Status> out) {
  auto work = plan(keys, pieces, k, out);

  Result<HeaderPool::Lease> lease = headers.acquire(work.size());
  if (!lease.ok()) {
    for (const auto& w : work)
      out[w.page] = lease.status();
    bump(counters.put_failures, work.size());
    return;
  }

  std::vector<TargetSpec> specs;
  specs.reserve(work.size());
  for (const auto& w : work) {
    specs.push_back(TargetSpec{w.route.path, TargetMode::kCreate, kHeaderBytes + w.payload,
                               router.temp_dir(w.route.base)});
  }
  std::vector<Result<Target>> opened = agent.open_targets(specs);

  // Pages go out in chunks that grow from 1 MiB to 16 MiB: while the backend writes one
  // chunk, this thread checksums the next, so checksumming overlaps the copy.
  struct Chunk {
    std::vector<size_t> pages;  // indexes into `work`
    std::vector<size_t> first_desc;
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
      Checksum64Stream sum;
      for (const ConstBuffer& p : w.pieces)
        sum.update(p.data, p.size);
      page::Header h;
      h.namespace_id = ns_id;
      h.key_hash = w.route.key_hash;
      h.payload_bytes = w.payload;
      h.payload_checksum = sum.digest();
      h.piece_count = static_cast<uint32_t>(w.pieces.size());
      h.piece_bytes = page::uniform_piece_bytes(w.pieces);
      h.created_ns = created;
      h.key = keys[w.page];
      page::encode(h, lease->block(next));

      c.pages.push_back(next);
      c.first_desc.push_back(mem.size());
      mem.push_back(MemDesc{lease->block(next).data(), kHeaderBytes});
      sto.push_back(StorageDesc{&w.target, 0, kHeaderBytes});
      uint64_t off = kHeaderBytes;
      for (const ConstBuffer& p : w.pieces) {
        mem.push_back(MemDesc{const_cast<void*>(p.data), p.size});
        sto.push_back(StorageDesc{&w.target, off, p.size});
        off += p.size;
      }
      bytes += w.payload;
    }
    chunk_target = std::min<uint64_t>(chunk_target * 2, 16 << 20);
    if (mem.empty()) continue;
    c.xfer = agent.make_request(TransferOp::kWrite, mem, sto);
    c.error = c.xfer.ok() ? c.xfer->post() : c.xfer.status();
  }

  for (Chunk& c : chunks) {
    if (c.error.ok() && c.xfer->valid()) c.xfer->wait();
    for (size_t i = 0; i < c.pages.size(); ++i) {
      auto& w = work[c.pages[i]];
      Status st = c.error;
      if (st.ok()) st = page_result(*c.xfer, c.first_desc[i], 1 + w.pieces.size());
      if (st.ok()) st = w.target.publish(PublishOptions{.durable = config.fsync});
      if (st.ok()) {
        bump(counters.put_pages);
        bump(counters.put_bytes, w.payload);
      }
      out[w.page] = std::move(st);
    }
  }
  for (const Status& s : out) {
    if (!s.ok()) bump(counters.put_failures);
  }
}

Status Store::Impl::verify_page(const PageWork<MutableBuffer>& wk, std::string_view key,
                                std::span<const std::byte, kHeaderBytes> block) const {
  Result<page::Header> h = page::decode(block);
  if (!h.ok()) return h.status();
  const page::Expectation expect{ns_id, key, wk.payload, static_cast<uint32_t>(wk.pieces.size()),
                                 page::uniform_piece_bytes(wk.pieces)};
  Status st = page::check(*h, expect);
  if (!st.ok()) {
    if (h->namespace_id == ns_id && h->key == key &&
        wk.target.size() == kHeaderBytes + h->payload_bytes) {
      // An intact page of this key, asked for with buffers of another size or layout: the
      // caller's mistake, not damage. Not data, not dropped.
      return invalid_argument_error(fmt::format(
          "stored page is {} bytes in {} pieces; the buffers hold {} bytes in {} pieces",
          h->payload_bytes, h->piece_count, wk.payload, wk.pieces.size()));
    }
    return st;
  }
  if (wk.header_only) {
    return corrupt_error(fmt::format("object is {} bytes; its header says {}", wk.target.size(),
                                     kHeaderBytes + h->payload_bytes));
  }
  Checksum64Stream sum;
  for (const MutableBuffer& p : wk.pieces)
    sum.update(p.data, p.size);
  if (sum.digest() != h->payload_checksum) return corrupt_error("payload checksum mismatch");
  return ok_status();
}

void Store::Impl::get_window(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces, size_t k,
                             std::span<Status> out) {
  auto work = plan(keys, pieces, k, out);

  std::vector<TargetSpec> specs;
  specs.reserve(work.size());
  for (const auto& w : work)
    specs.push_back(TargetSpec{w.route.path, TargetMode::kRead, 0, {}});
  std::vector<Result<Target>> opened = agent.open_targets(specs);

  std::vector<PageWork<MutableBuffer>*> reading;
  reading.reserve(work.size());
  for (size_t w = 0; w < work.size(); ++w) {
    auto& wk = work[w];
    if (!opened[w].ok()) {
      out[wk.page] = std::move(opened[w]).status();
      continue;
    }
    wk.target = std::move(opened[w]).value();
    const uint64_t size = wk.target.size();
    if (size < kHeaderBytes) {
      out[wk.page] = corrupt_error(
          fmt::format("'{}' is {} bytes, shorter than a page header", wk.route.path, size));
      continue;
    }
    wk.header_only = size != kHeaderBytes + wk.payload;
    reading.push_back(&wk);
  }

  Result<HeaderPool::Lease> lease = headers.acquire(reading.size());
  Status batch_error = lease.status();
  std::vector<MemDesc> mem;
  std::vector<StorageDesc> sto;
  std::vector<size_t> first_desc(reading.size());
  std::vector<uint32_t> desc_page;  // descriptor -> index in `reading`
  if (batch_error.ok()) {
    for (size_t r = 0; r < reading.size(); ++r) {
      auto& wk = *reading[r];
      first_desc[r] = mem.size();
      mem.push_back(MemDesc{lease->block(r).data(), kHeaderBytes});
      sto.push_back(StorageDesc{&wk.target, 0, kHeaderBytes});
      if (!wk.header_only) {
        uint64_t off = kHeaderBytes;
        for (const MutableBuffer& p : wk.pieces) {
          mem.push_back(MemDesc{p.data, p.size});
          sto.push_back(StorageDesc{&wk.target, off, p.size});
          off += p.size;
        }
      }
      desc_page.resize(mem.size(), static_cast<uint32_t>(r));
    }
  }

  // Each page is verified by the thread that completes its last descriptor, while its bytes
  // are still in that core's cache, and in parallel with the other pages' reads.
  std::vector<Status> verdicts(reading.size());
  auto pending = std::make_unique<std::atomic<uint32_t>[]>(reading.size());
  auto failed = std::make_unique<std::atomic<bool>[]>(reading.size());
  for (size_t r = 0; r < reading.size(); ++r) {
    const auto& wk = *reading[r];
    pending[r].store(wk.header_only ? 1 : 1 + static_cast<uint32_t>(wk.pieces.size()));
    failed[r].store(false);
  }
  TransferCallbacks callbacks;
  callbacks.on_descriptor = [&](size_t d, const Status& st) {
    const uint32_t r = desc_page[d];
    if (!st.ok()) failed[r].store(true, std::memory_order_relaxed);
    if (pending[r].fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (failed[r].load(std::memory_order_relaxed)) return;  // the failure is the page's status
    verdicts[r] = verify_page(*reading[r], keys[reading[r]->page], lease->block(r));
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
    auto& wk = *reading[r];
    Status& st = out[wk.page];
    st = batch_error;
    if (st.ok()) st = page_result(*xfer, first_desc[r], wk.header_only ? 1 : 1 + wk.pieces.size());
    if (st.ok()) st = std::move(verdicts[r]);
    if (st.code() == StatusCode::kCorrupt) {
      st = st.with_context(fmt::format("page '{}'", wk.route.path));
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
  for (auto& wk : work) {
    const Status& st = out[wk.page];
    if (st.ok()) {
      bump(counters.get_hits);
      bump(counters.get_bytes, wk.payload);
    } else if (st.code() == StatusCode::kCorrupt && wk.target.valid()) {
      const ObjectIdentity id = wk.target.identity();
      wk.target.reset();
      drop(wk.route.path, id);
    }
  }
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
  Impl& impl = *impl_;
  return impl.run_batch(keys, pieces, [&impl](auto&&... args) { impl.put_window(args...); });
}

BatchResult Store::batch_get(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces) {
  Impl& impl = *impl_;
  return impl.run_batch(keys, pieces, [&impl](auto&&... args) { impl.get_window(args...); });
}

Result<bool> Store::exists(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  bump(impl_->counters.exists_queries);
  const routing::Route r = impl_->router.route(key);
  Result<ObjectInfo> info = impl_->agent.stat(r.path);
  if (info.ok()) return !info->is_dir && info->size > kHeaderBytes;
  if (info.status().code() == StatusCode::kNotFound) return false;
  return info.status();
}

size_t Store::batch_exists(std::span<const std::string_view> keys) {
  size_t n = 0;
  for (std::string_view key : keys) {
    Result<bool> e = exists(key);
    if (!e.ok() || !*e) break;
    ++n;
  }
  return n;
}

Status Store::remove(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  const routing::Route r = impl_->router.route(key);
  KVTIER_RETURN_IF_ERROR(impl_->agent.remove(r.path));
  bump(impl_->counters.removes);
  return ok_status();
}

Status Store::clear() {
  Agent& agent = impl_->agent;
  for (size_t b = 0; b < impl_->router.base_count(); ++b) {
    const std::string& ns_dir = impl_->router.namespace_dir(b);
    std::vector<std::string> fanouts;
    Status st = agent.list(ns_dir, ListOptions{}, [&](const ObjectInfo& e) {
      if (e.is_dir && routing::is_fanout_name(e.name)) fanouts.push_back(ns_dir + "/" + e.name);
      return ok_status();
    });
    if (st.code() == StatusCode::kNotFound) continue;
    KVTIER_RETURN_IF_ERROR(st);
    for (const std::string& dir : fanouts) {
      std::vector<std::string> pages;
      st = agent.list(dir, ListOptions{}, [&](const ObjectInfo& e) {
        if (!e.is_dir && routing::is_page_name(e.name)) pages.push_back(dir + "/" + e.name);
        return ok_status();
      });
      if (st.code() == StatusCode::kNotFound) continue;
      KVTIER_RETURN_IF_ERROR(st);
      for (const std::string& p : pages) {
        st = agent.remove(p);
        if (st.ok()) {
          bump(impl_->counters.cleared);
        } else if (st.code() != StatusCode::kNotFound) {
          return st;
        }
      }
    }
  }
  return ok_status();
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
  return s;
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

std::vector<std::string> Store::namespace_dirs() const {
  std::vector<std::string> out;
  for (size_t b = 0; b < impl_->router.base_count(); ++b) {
    out.push_back(impl_->router.namespace_dir(b));
  }
  return out;
}

}  // namespace kvtier
