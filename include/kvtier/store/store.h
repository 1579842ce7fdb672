// The page store: KV-cache pages by key, in one namespace, on any backend.
//
//   StoreConfig cfg;
//   cfg.location = *parse_store_uri("file:///var/cache/kvtier");
//   cfg.ns = {.model = "meta-llama/Llama-3.1-8B@5206a32", .dtype = "bfloat16", ...};
//   auto store = *Store::open(cfg);
//   Registration pool = *store->register_memory(host_pool, host_pool_bytes);  // once
//   BatchResult r = store->batch_get(keys, pieces);   // zero-copy into the pool
//
// Pages: a page is one or more pieces of caller memory stored back to back (the K and V
// halves of a page-first KV page are two pieces). Page memory must lie inside a region
// registered with register_memory(): pages are read and written there directly, never
// copied. Memory outside every registration is rejected with kInvalidArgument.
// An empty page (no bytes) is kInvalidArgument: a KV page always has content, so a zero
// size is a caller bug.
//
// Integrity: every read checks the header (magic, version, header checksum, namespace, key,
// sizes, piece layout) and the payload checksum. A page that fails any check, or whose
// object has the wrong size, is kCorrupt: counted, removed from storage (only if it is still
// the same object), and reported as a miss. Bytes of a failed read may have landed in the
// caller's page memory; its status says they are not data.
//
// Keys: any 1..1024 bytes (SGLang passes 64 hex digits). Keys never become paths.
//
// Writes: a page becomes visible in one step (unnamed temporary linked into place, or a
// unique temporary renamed), so readers see the old page, the new page or a miss, never a
// partial page. With `fsync` set a successful put is durable.
//
// Per-page status: batch calls report each page on its own. kNotFound and kCorrupt are
// misses; kInvalidArgument is a caller bug for that page (bad key, unregistered memory, wrong
// geometry); other codes are storage faults (kResourceExhausted for a full disk, ...).
// A batch-level error (mismatched list lengths) is in BatchResult::status with no pages run.
//
// Thread-safety: Store is safe for concurrent use by multiple threads (a prefetch reader and
// a backup writer at once). Lifetime: registrations returned by register_memory() may outlive
// the Store object; destroying them releases the memory.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/store/namespace.h"
#include "kvtier/store/uri.h"
#include "kvtier/transfer/agent.h"

namespace kvtier {

// One piece of page memory the store reads into.
struct MutableBuffer {
  void* data = nullptr;
  size_t size = 0;
};

// One piece of page memory the store writes from.
struct ConstBuffer {
  const void* data = nullptr;
  size_t size = 0;
};

// Direct I/O (FILE stores), bypassing the page cache:
//   kOff   buffered I/O.
//   kAuto  direct I/O for pages whose memory and size fit the filesystem's alignment;
//          buffered for the others (counted in StoreStats::direct_fallback_pages).
//   kOn    direct I/O for every page: pages that do not fit the alignment (unaligned memory,
//          sizes like 70,272 bytes) go through registered aligned staging buffers
//          (StoreStats::staged_pages); buffered only when the staging pool is full.
// Where the filesystem has no direct I/O (tmpfs, the dram backend) the store runs buffered
// and says why in StoreStats::direct_io.
enum class DirectIo : uint8_t { kOff, kAuto, kOn };
std::string_view direct_io_name(DirectIo mode);
// "off", "auto" or "on".
Result<DirectIo> parse_direct_io(std::string_view text);

struct StoreConfig {
  StoreLocation location;
  NamespaceSpec ns;
  // "auto" or a backend name; overrides location.backend when not empty.
  std::string backend;
  // fsync each page (and its directory entry) before a put reports success.
  bool fsync = false;
  DirectIo direct_io = DirectIo::kOff;
  // Most memory held in staging buffers for direct I/O (kOn).
  uint64_t staging_bytes = uint64_t{256} << 20;
  // Remove corrupt pages when a read finds them.
  bool drop_corrupt = true;
  // Check every read page's payload checksum. Turning this off leaves only the header checks
  // (namespace, key, sizes, header checksum): a flipped payload bit then goes unnoticed. It
  // exists to measure what verification costs (kvtier bench --skip-payload-checksum).
  bool verify_payload = true;
  // Temporaries of other hosts older than this are swept on open.
  uint64_t stale_temp_age_s = 3600;
  // Most objects the store holds open at once, across all concurrent calls; batches run in
  // windows that fit. 0: a quarter of RLIMIT_NOFILE's soft limit, between 8 and 1024.
  size_t max_open_objects = 0;
  // Threads that run submitted batches (submit_put/submit_get), started on first use.
  size_t async_threads = 4;
  // Capacity (FILE stores): the namespace's objects never take more than `capacity_bytes`
  // (0: no limit), and writes leave at least `min_free_bytes` free on the first base's
  // filesystem (0: no floor). Least recently used pages (reads count) are evicted to make
  // room. Every process opening the namespace shares one budget (see docs/architecture.md).
  uint64_t capacity_bytes = 0;
  uint64_t min_free_bytes = 0;
  // Wraps the selected backend (fault injection in tests, metrics).
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> decorate;
};

struct BatchResult {
  // Batch-level outcome; when not OK no page was attempted and `pages` is empty.
  Status status;
  std::vector<Status> pages;

  size_t ok_count() const;
  // Pages OK before the first failure (the prefix a caller can use).
  size_t ok_prefix() const;
  bool all_ok() const { return status.ok() && ok_count() == pages.size(); }
};

namespace detail {
struct TicketState;
}

// Called once when a submitted batch is done, on a store thread, before the ticket reports
// done. It must be quick and must not wait on (or destroy) its own ticket.
using BatchCallback = std::function<void(const BatchResult&)>;

// A batch running in the background (Store::submit_put / submit_get). Move-only.
// Destroying a ticket whose batch is still running waits for it, since the batch reads or
// writes the caller's page memory; detach() lets it finish alone.
// Thread-safety: done() and wait() may be called from several threads at once; take() and
// detach() need external synchronization.
class BatchTicket {
 public:
  BatchTicket() noexcept;
  BatchTicket(BatchTicket&&) noexcept;
  BatchTicket& operator=(BatchTicket&&) noexcept;
  BatchTicket(const BatchTicket&) = delete;
  BatchTicket& operator=(const BatchTicket&) = delete;
  ~BatchTicket();

  bool valid() const noexcept { return state_ != nullptr; }
  bool done() const;
  // Blocks (no polling) until done or `timeout` passes: OK when done, kTimeout otherwise.
  Status wait(std::chrono::nanoseconds timeout) const;
  void wait() const;
  // The result, moved out. REQUIRES: done(), once.
  BatchResult take();
  // The batch finishes without this ticket; its callback is the only report. The page memory
  // must stay valid until the callback has run.
  void detach() noexcept;

 private:
  friend class Store;
  std::shared_ptr<detail::TicketState> state_;
};

// Batch latencies: bucket i counts calls that took less than 2^i microseconds (and at least
// 2^(i-1)); the last bucket counts everything slower.
struct LatencyHistogram {
  static constexpr size_t kBuckets = 26;  // up to ~33 s
  std::array<uint64_t, kBuckets> buckets{};
  uint64_t count = 0;
  uint64_t sum_us = 0;
};

struct StoreStats {
  uint64_t put_pages = 0;     // pages written and published
  uint64_t put_bytes = 0;     // payload bytes of those
  uint64_t put_failures = 0;  // pages that failed (storage faults and caller errors)
  uint64_t get_hits = 0;      // pages read and verified
  uint64_t get_bytes = 0;     // payload bytes of those
  uint64_t get_misses = 0;    // pages not present
  uint64_t get_corrupt = 0;   // pages that failed verification (also misses)
  uint64_t get_failures = 0;  // storage faults and caller errors on reads
  uint64_t corrupt_dropped = 0;
  uint64_t exists_queries = 0;
  uint64_t removes = 0;
  uint64_t cleared = 0;           // pages removed by clear()
  uint64_t invalid_requests = 0;  // caller errors (batch or page level)
  uint64_t temps_swept = 0;       // stale temporaries removed at open
  // Direct I/O: "off", "on (512-byte alignment)", or "off: <why it could not be used>".
  std::string direct_io;
  uint64_t direct_pages = 0;           // pages moved by direct I/O in place
  uint64_t staged_pages = 0;           // pages moved by direct I/O through staging buffers
  uint64_t direct_fallback_pages = 0;  // pages that went buffered though direct I/O was asked
  // The index: pages (and their object bytes) this process knows to be stored.
  uint64_t pages = 0;
  uint64_t bytes = 0;
  // Capacity: the limits, the shared usage (0 without a limit), and what made room.
  uint64_t capacity_bytes = 0;
  uint64_t min_free_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t evicted_pages = 0;
  uint64_t evicted_bytes = 0;
  uint64_t capacity_refusals = 0;  // pages refused: they did not fit even after evicting
  uint64_t index_stats = 0;        // exists checks the index could not answer (a stat each)
  // Latency of batch calls (put/get: whole batches, single pages included; exists: batches).
  LatencyHistogram put_latency;
  LatencyHistogram get_latency;
  LatencyHistogram exists_latency;
  uint64_t batches_in_flight = 0;  // batch calls running now (all threads)
  uint64_t objects_open = 0;       // objects (descriptors, for files) the store holds open now
  // Failed pages by status code name ("NOT_FOUND" excluded: misses are counted above).
  std::map<std::string, uint64_t> errors_by_code;
};

// Prometheus text exposition of `stats` (counters, gauges, histograms named kvtier_*), with
// `labels` ("namespace=\"ab12\",rank=\"0\"", or empty) on every sample.
std::string to_prometheus(const StoreStats& stats, std::string_view labels = {});

class Store {
 public:
  // Opens (creating directories as needed) the store's namespace at `config.location`, sweeps
  // temporaries left by dead writers, and records the namespace's description beside it.
  static Result<std::unique_ptr<Store>> open(const StoreConfig& config);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Registers caller memory for zero-copy pages (the whole host pool, once).
  Result<Registration> register_memory(void* addr, size_t length);

  Status put(std::string_view key, std::span<const ConstBuffer> pieces);
  Status put(std::string_view key, const void* data, size_t size);
  Status get(std::string_view key, std::span<const MutableBuffer> pieces);
  Status get(std::string_view key, void* data, size_t size);

  // pieces.size() must be a multiple of keys.size(): page i is pieces[i*k .. (i+1)*k).
  BatchResult batch_put(std::span<const std::string_view> keys,
                        std::span<const ConstBuffer> pieces);
  BatchResult batch_get(std::span<const std::string_view> keys,
                        std::span<const MutableBuffer> pieces);

  // The same batches without waiting: the ticket (or the callback) reports the result.
  // Keys are copied; the page memory must stay valid until the batch is done. Many batches
  // may be in flight from many threads; up to `async_threads` run at once, the rest queue.
  // Destroying the Store waits for every submitted batch.
  BatchTicket submit_put(std::span<const std::string_view> keys,
                         std::span<const ConstBuffer> pieces, BatchCallback on_done = {});
  BatchTicket submit_get(std::span<const std::string_view> keys,
                         std::span<const MutableBuffer> pieces, BatchCallback on_done = {});

  // Whether a page is stored (not verified: a later get may still find it corrupt). Answered
  // from the index; a key the index lacks is looked up in storage (a page another process
  // wrote) and indexed. A page another process removed is reported until a read misses it,
  // except after a clear(): every call first looks at the namespace's clear generation (one
  // stat per call, not per key) and drops the index when another store cleared since.
  Result<bool> exists(std::string_view key);
  // Number of leading keys that exist; stops at the first absent key (or fault).
  size_t batch_exists(std::span<const std::string_view> keys);

  // kNotFound when absent.
  Status remove(std::string_view key);
  // Removes every page of this store's namespace (and no other) from every base directory,
  // then publishes a new clear generation: every store of the namespace, in any process,
  // answers exists/batch_exists from storage again on its next call.
  Status clear();

  StoreStats stats() const;
  const NamespaceSpec& namespace_spec() const;
  Hash128 namespace_id() const;
  const BackendSelection& backend_selection() const;
  // The backend and its configuration ("uring: 2 rings x 64 requests, fixed buffers").
  std::string backend_description() const;
  // The directories holding this namespace, one per base.
  std::vector<std::string> namespace_dirs() const;

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
