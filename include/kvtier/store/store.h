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
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

// How a FILE or object store lays its pages out (docs/format.md, docs/architecture.md):
//   kFiles     one file (object) per page, published by rename/linkat (a PUT).
//   kSegments  pages appended as records to large segment files, each writer process to its
//              own; an index of summaries finds them. No file is created per page. On an
//              object store each put window's records are uploaded as whole segments (one
//              per lane), each then sealed by its summary.
// "auto" (the default: StoreConfig::layout, the URI) keeps the layout a namespace already
// holds (page files first: they stay readable), and on an empty namespace picks kSegments for
// pages below kAutoSegmentsBelow on FILE, kAutoObjectSegmentsBelow on an object store
// (piece_bytes x pieces_per_page, or StoreConfig::page_bytes where the pieces differ in
// size), with or without fsync; kFiles otherwise and for memory stores. StoreStats::layout
// says which and why (docs/benchmarks.md: segments write 27x faster than page files at 64 KiB,
// 4.6-5x at 1 MiB, 1.7x at 2 MiB, and read as fast or faster; from 4 MiB on the two are even,
// within this VM's noise; on S3, packed 256 KiB pages read 2.4-3x faster than page objects).
enum class StoreLayout : uint8_t { kFiles, kSegments };
inline constexpr uint64_t kAutoSegmentsBelow = uint64_t{4} << 20;
// The same on an object store, where a page object costs a request and a segment's records
// are read back in ranged GETs of 1 MiB: pages below this are packed.
inline constexpr uint64_t kAutoObjectSegmentsBelow = uint64_t{1} << 20;
std::string_view store_layout_name(StoreLayout layout);
// "files" or "segments" ("auto" is resolved by Store::open).
Result<StoreLayout> parse_store_layout(std::string_view text);

struct StoreConfig {
  StoreLocation location;
  NamespaceSpec ns;
  // "auto" or a backend name; overrides location.backend when not empty.
  std::string backend;
  // "files", "segments" or "auto"; overrides location.layout when not empty.
  std::string layout;
  // layout=auto: the size of a page when the namespace does not fix one (pieces of unequal
  // sizes, piece_bytes 0). 0: unknown (auto then keeps one file per page).
  uint64_t page_bytes = 0;
  // kSegments: a writer starts a new segment file once its current one holds this many bytes.
  uint64_t segment_bytes = uint64_t{256} << 20;
  // kSegments: segment files a writer appends to side by side on each base. A put window of
  // more than about 1 MiB is cut in 1 MiB runs dealt to them in turn and written on as many
  // threads (buffered writes into one file wait on its lock; into several they run side by
  // side). 0: one per CPU the process may use (usable_cpus()), at most 4.
  size_t segment_lanes = 0;
  // FILE stores: the most threads one batch's work runs on: a put window of page files is cut
  // into runs of about 1 MiB that this many threads (the caller and cpus - 1 of the store's)
  // checksum or seal and write side by side, each run written right after it is encoded,
  // while it is in that core's cache. The threads start with the first window that has more
  // than one run. 0: the URI's `cpus`, else the CPUs the process may run on (its affinity
  // mask, usable_cpus()).
  size_t cpus = 0;
  // How stale a lookup may be. Exists calls see another store's clear (any layout) by reading
  // the namespace's clear generation; in the segment layout, a key this store has not indexed
  // (exists, batch_exists, a get, a remove) makes it look at what other writers appended on
  // the key's base. Each is done at most once per `refresh_ms` (per base), so a page another
  // process wrote, or a clear, is seen within refresh_ms: until then a miss, or a page found
  // that then reads as a miss, which a cache can afford. Concurrent lookups share one look.
  // Unset: the URI's `refresh_ms`, else 1000 on an object store (there each is a request on
  // every exists call: a HEAD; a LIST per 1,000 segments) and 0 on FILE (a small read; a stat of
  // the segment directory, listed again only when it changed).
  std::optional<uint64_t> refresh_ms;
  // Make each page durable before a put reports success. kFiles: fdatasync each page file,
  // then fsync its directory. kSegments: fdatasync the segments a batch wrote, then its
  // summaries once the entries are appended (docs/format.md, "With fsync").
  bool fsync = false;
  DirectIo direct_io = DirectIo::kOff;
  // Most memory held in staging buffers for direct I/O (kOn) and for sealing pages (a sealed
  // put seals page files run by run into buffers of about 1 MiB, and segments and object
  // stores' pages whole into staging, a batch's windows cut to fit it).
  uint64_t staging_bytes = uint64_t{256} << 20;
  // Sealed pages (docs/security.md): a key file (`<key id> <64 hex digits>` per line, the
  // first current; owner-only) seals every page with AES-256-GCM under the tenant's keys and
  // names it by a keyed hash, so the storage sees neither its bytes nor its key. Empty: the
  // file named by $KVTIER_KEY_FILE when that is set, else pages in the clear. Never a URI
  // parameter: `key=` and `key_file=` in a URI are refused.
  std::string key_file;
  // Whose keys seal and open pages: 1-64 of [A-Za-z0-9._-]. Empty: the URI's tenant=, else
  // "default". Tenants of one key file and store see misses for each other's pages. Needs a
  // key file.
  std::string tenant;
  // How a put hashes each 256 KiB chunk of a page in the clear (its payload checksum):
  // "crc64" (ISA-L's CRC-64), "xxh3" (XXH3-64) or "auto", the faster of the two on this CPU
  // (fastest_chunk_hash(): CRC-64 where ISA-L has its AVX-512 code, XXH3 on AVX2 CPUs).
  // Pages say which in their header and reads check either. Builds that predate XXH3 chunks
  // see those pages as misses, so a fleet that still runs them pins crc64. Empty: the URI's
  // `chunk_hash`, else auto. (Sealed pages are checked by their seals.)
  std::string chunk_hash;
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
  // Capacity (FILE stores): what the namespace keeps on storage never takes more than
  // `capacity_bytes` (0: no limit) plus one page, counted as `du` counts it: its pages as the
  // filesystem allocates them, and what it keeps beside them (directories, the capacity ledger,
  // the shared files of eviction and admission), which the store sets aside when it opens
  // (StoreStats::metadata_bytes: a fixed part, 1 MiB of it the page-file layout's 256 fan-out
  // directories, and 0.35% of the capacity; docs/architecture.md, "Capacity and eviction"). A
  // capacity that does not hold that and one page is refused (kInvalidArgument). Writes leave at
  // least `min_free_bytes` free on the first base's filesystem (0: no floor). Least recently used
  // pages (reads count) are evicted to make room; the segment layout charges its segment files and
  // reclaims whole sealed segments, oldest first, writing the pages read since they were put
  // forward first (segment_bytes is then at most 1/64 of the capacity). Every process opening the
  // namespace shares one budget (see docs/architecture.md).
  uint64_t capacity_bytes = 0;
  uint64_t min_free_bytes = 0;
  // Which new pages a store at its capacity takes (docs/architecture.md, "What is admitted"):
  //   "adaptive"  measures, online, whether declining a page the first time it is written
  //               (and taking it the second) keeps more hits than taking every page, and does
  //               whichever does; a declined page's put reports success (a miss later), and
  //               StoreStats counts admitted_pages and declined_pages.
  //   "always"    takes every page (least recently used pages make room).
  // Only pages the store does not hold, written while it must evict to make room, are asked
  // about. Empty: the URI's `admission`, else adaptive. Stores without a capacity_bytes
  // take everything.
  std::string admission;
  // Locations that can hang (docs/architecture.md, "Locations that hang"). FILE stores only.
  // `isolate`: which bases run their I/O on the store's own threads, through staging it owns,
  // so that a call returns by its deadline whatever the kernel does: "auto" (network and FUSE
  // filesystems, told by statfs), "on" or "off". Empty: the URI's `isolate`, else auto.
  std::string isolate;
  // The longest a put, get or exists call waits for an isolated base: its pages not done by
  // then are DEADLINE_EXCEEDED and the base stops serving until a probe answers. Unset: the
  // URI's `deadline_ms`, else 10000. 0: no deadline (no base is isolated).
  std::optional<uint64_t> deadline_ms;
  // How often a base that stopped answering is probed. Unset: the URI's `probe_interval_ms`,
  // else 1000.
  std::optional<uint64_t> probe_interval_ms;
  // Threads per isolated base (and for exists calls): the most that can be blocked in the
  // kernel on one hung base.
  size_t guard_threads = 4;
  // Called with one line for each change of a base's health (stopped answering, answers
  // again); empty: the line goes to stderr. Called on a store thread, never after the Store
  // is destroyed; it may call the store (stats()).
  std::function<void(std::string_view)> on_health_change;
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
// writes the caller's page memory; detach() lets it finish alone. In a forked child a ticket
// of the parent's is done (the batch cannot finish there): take() reports why, and destroying
// it waits for nothing.
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
  // Blocks (no polling) until done or `timeout` passes: OK when done, kDeadlineExceeded otherwise.
  Status wait(std::chrono::nanoseconds timeout) const;
  void wait() const;
  // The result, moved out. REQUIRES: done(), once.
  BatchResult take();
  // The batch finishes without this ticket; its callback is the only report. The page memory
  // must stay valid until the callback has run.
  void detach() noexcept;

 private:
  friend class Store;
  // A ticket done at once with `status` (a submission refused), after `on_done` has run.
  static BatchTicket refused(Status status, BatchCallback on_done);
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

// The store's statistics, described once; StoreStats, the store's counters, stats(), the
// Prometheus text and Python's Store.stats() are all derived from these lists.
//
// Counters, X(name, help): events since the store opened (Prometheus kvtier_<name>_total).
#define KVTIER_STORE_COUNTERS(X)                                                        \
  X(put_pages, "Pages written and published.")                                          \
  X(put_bytes, "Payload bytes of published pages.")                                     \
  X(put_failures, "Pages that failed to be written.")                                   \
  X(get_hits, "Pages read and verified.")                                               \
  X(get_bytes, "Payload bytes of pages read.")                                          \
  X(get_misses, "Pages not present.")                                                   \
  X(get_corrupt, "Pages that failed verification (misses).")                            \
  X(get_failures, "Reads that failed (faults, caller errors).")                         \
  X(corrupt_dropped, "Corrupt pages removed from storage.")                             \
  X(exists_queries, "Keys asked about by exists calls.")                                \
  X(removes, "Pages removed by remove calls.")                                          \
  X(cleared, "Pages removed by clear().")                                               \
  X(invalid_requests, "Caller errors (batch or page level).")                           \
  X(temps_swept, "Stale temporaries removed at open.")                                  \
  X(direct_pages, "Pages moved by direct I/O in place.")                                \
  X(staged_pages, "Pages moved by direct I/O through staging buffers.")                 \
  X(direct_fallback_pages, "Pages that went buffered though direct I/O was asked for.") \
  X(evicted_pages, "Pages evicted to stay within capacity.")                            \
  X(evicted_bytes, "Object bytes evicted.")                                             \
  X(relocated_pages, "Pages read since put, copied out of segments being reclaimed.")   \
  X(relocated_bytes, "Record bytes copied out of segments being reclaimed.")            \
  X(kept_for_others, "Pages spared at eviction: another store on this host read them.") \
  X(capacity_refusals, "Pages refused: no room even after evicting.")                   \
  X(admitted_pages, "New pages a full store took, asked of the admission policy.")      \
  X(declined_pages, "New pages the admission policy declined (the put succeeded).")     \
  X(index_stats, "Exists checks the index could not answer (a stat each).")             \
  X(segment_looks, "Looks at what other writers appended (segment layout).")            \
  X(deadline_misses, "Pages (and exists calls) whose location missed the deadline.")    \
  X(unhealthy_refusals, "Pages refused at once: their location is not answering.")
// Gauges, X(name, help): sampled when stats() is taken (Prometheus kvtier_<name>).
#define KVTIER_STORE_GAUGES(X)                                                       \
  X(pages, "Pages in this process's index.")                                         \
  X(bytes, "Object bytes in this process's index.")                                  \
  X(used_bytes, "Bytes used against the capacity (all processes).")                  \
  X(capacity_bytes, "The capacity (0: none).")                                       \
  X(metadata_bytes, "Of the capacity, set aside for what is kept beside the pages.") \
  X(min_free_bytes, "Free space kept on the filesystem (0: none).")                  \
  X(batches_in_flight, "Batch calls running now.")                                   \
  X(objects_open, "Objects (descriptors) held open now.")                            \
  X(locations_unhealthy, "Isolated locations not answering now.")                    \
  X(threads_stuck, "Guard threads still busy for a call whose deadline passed.")
// Latency histograms of batch calls, X(name, metric, help) (Prometheus
// kvtier_<metric>_seconds; put/get: whole batches, single pages included; exists: batches).
#define KVTIER_STORE_HISTOGRAMS(X)                                   \
  X(put_latency, "put_batch", "Latency of put and batch_put calls.") \
  X(get_latency, "get_batch", "Latency of get and batch_get calls.") \
  X(exists_latency, "exists_batch", "Latency of batch_exists calls.")

// What a statistic is, for those that render all of them (Prometheus, Python).
enum class StatKind : uint8_t {
  kCounter,    // uint64_t
  kGauge,      // uint64_t
  kText,       // std::string (not a Prometheus metric)
  kHistogram,  // LatencyHistogram
  kByCode,     // std::map<std::string, uint64_t>: a counter labelled with the status code
  kByReason,   // std::map<std::string, uint64_t>: a counter labelled with a reason
};
struct StatInfo {
  std::string_view name;  // the StoreStats field and the Python key
  StatKind kind;
  std::string_view metric;  // the Prometheus name, without "kvtier_"
  std::string_view help;
};

struct StoreStats {
#define KVTIER_STAT_FIELD(name, help) uint64_t name = 0;
  KVTIER_STORE_COUNTERS(KVTIER_STAT_FIELD)
  KVTIER_STORE_GAUGES(KVTIER_STAT_FIELD)
#undef KVTIER_STAT_FIELD
  // Direct I/O: "off", "on (512-byte alignment)", or "off: <why it could not be used>".
  std::string direct_io;
  // The layout, and for layout=auto why: "segments (auto: pages of 131072 B, below 4 MiB)".
  std::string layout;
  // Per base, whether its I/O is isolated and why: "/mnt/kv: on (auto: fuse, which can hang)".
  std::string isolation;
  // "answering", or which bases are not and why.
  std::string health;
  // The admission policy: "always" (and why), or "adaptive: ..." with what it does now.
  std::string admission;
  // "off", or how pages are sealed: "AES-256-GCM, tenant alpha, key id 2 (of 2 in the key
  // file)". Never key material.
  std::string sealing;
  // How puts hash pages' chunks: "xxh3 (auto: the faster on this CPU)", "crc64
  // (chunk_hash=crc64)", ...; sealed stores: "none: sealed pages are checked by their seals".
  std::string chunk_hash;
#define KVTIER_STAT_FIELD(name, metric, help) LatencyHistogram name;
  KVTIER_STORE_HISTOGRAMS(KVTIER_STAT_FIELD)
#undef KVTIER_STAT_FIELD
  // Failed pages by status code name ("NOT_FOUND" excluded: misses are counted above).
  std::map<std::string, uint64_t> errors_by_code;
  // Pages read and refused (each a miss: get_corrupt, or get_misses for key_id), by why:
  // "header" (not a page header, or a damaged one), "sealing" (a sealed page where pages are
  // in the clear, or the reverse), "namespace" (another model's or layout's namespace),
  // "place" (another key's page), "layout" (another size or shape of pieces), "torn" (the
  // object or record is not the size its header says), "checksum" (a payload CRC differs),
  // "tag" (a sealed chunk did not open: forged, moved or under another tenant's key),
  // "key_id" (sealed under a key the key file no longer holds). Reasons never seen are absent.
  std::map<std::string, uint64_t> pages_rejected;

  // Calls f(const StatInfo&, const T& value) for every statistic above, in order.
  template <typename F>
  void for_each(F&& f) const {
#define KVTIER_STAT_VISIT(name, help) \
  f(StatInfo{#name, StatKind::kCounter, #name "_total", help}, name);
    KVTIER_STORE_COUNTERS(KVTIER_STAT_VISIT)
#undef KVTIER_STAT_VISIT
#define KVTIER_STAT_VISIT(name, help) f(StatInfo{#name, StatKind::kGauge, #name, help}, name);
    KVTIER_STORE_GAUGES(KVTIER_STAT_VISIT)
#undef KVTIER_STAT_VISIT
    f(StatInfo{"direct_io", StatKind::kText, "", "Direct I/O mode, or why it is off."}, direct_io);
    f(StatInfo{"layout", StatKind::kText, "", "FILE layout, and for layout=auto why."}, layout);
    f(StatInfo{"isolation", StatKind::kText, "", "Per base: isolated I/O, and why."}, isolation);
    f(StatInfo{"health", StatKind::kText, "", "Bases not answering, or \"answering\"."}, health);
    f(StatInfo{"admission", StatKind::kText, "", "Admission policy, and what it does now."},
      admission);
    f(StatInfo{"sealing", StatKind::kText, "", "Sealed pages: cipher, tenant, key id; or off."},
      sealing);
    f(StatInfo{"chunk_hash", StatKind::kText, "", "How puts hash page chunks, and why."},
      chunk_hash);
#define KVTIER_STAT_VISIT(name, metric, help) \
  f(StatInfo{#name, StatKind::kHistogram, metric "_seconds", help}, name);
    KVTIER_STORE_HISTOGRAMS(KVTIER_STAT_VISIT)
#undef KVTIER_STAT_VISIT
    f(StatInfo{"errors_by_code", StatKind::kByCode, "errors_total",
               "Failed pages by status code (misses excluded)."},
      errors_by_code);
    f(StatInfo{"pages_rejected", StatKind::kByReason, "pages_rejected_total",
               "Pages read and refused as misses, by reason."},
      pages_rejected);
  }
};

// Label names and values of Prometheus samples, in order.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Prometheus text exposition of `stats` (counters, gauges, histograms named kvtier_*), with
// `labels` on every sample (values escaped as the text format requires).
std::string to_prometheus(const StoreStats& stats, const MetricLabels& labels = {});
// The same with labels already rendered ("namespace=\"ab12\",rank=\"0\"", or empty; see
// PrometheusWriter::render_labels).
std::string to_prometheus(const StoreStats& stats, std::string_view rendered_labels);

// Writes the Prometheus text exposition format: families (# HELP, # TYPE) and their samples.
// Label values are escaped (backslash, double quote, line feed), as is help text. Used by
// to_prometheus() and by `kvtier stat --prometheus`.
// REQUIRES: external synchronization.
class PrometheusWriter {
 public:
  // `common_labels`: rendered labels put first on every sample (see render_labels()).
  explicit PrometheusWriter(std::string common_labels = {});

  // name="value",... with each value escaped.
  static std::string render_labels(const MetricLabels& labels);

  // Starts a family: type is "counter", "gauge" or "histogram".
  void family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of `name` with the common labels and then `labels`.
  void sample(std::string_view name, uint64_t value, const MetricLabels& labels = {});
  void sample(std::string_view name, double value, const MetricLabels& labels = {});
  // A histogram's samples (_bucket, _sum, _count) in seconds, from microsecond buckets.
  void histogram(std::string_view name, const LatencyHistogram& h);

  const std::string& text() const { return out_; }

 private:
  void start_sample(std::string_view name, const MetricLabels& labels);

  std::string common_labels_;
  std::string out_;
};

// Capacity planning (FILE stores on a filesystem of 4 KiB blocks; docs/architecture.md,
// "Capacity and eviction"). capacity_page_bytes(): what a page file of `object_bytes` is
// charged against a capacity (its blocks and its directory entry). capacity_holding(): the
// smallest capacity_bytes whose pages may take `page_bytes` as charged, beside what a store of
// `layout` on `bases` base directories keeps (StoreStats::metadata_bytes) and, for segments,
// the segment of room that reclaiming needs; capacity_holding(capacity_page_bytes(a page
// object)) is the smallest capacity a store accepts.
uint64_t capacity_page_bytes(uint64_t object_bytes);
uint64_t capacity_holding(uint64_t page_bytes, StoreLayout layout, size_t bases = 1);

// A page store on one location. Safe for concurrent use by the threads of the process that
// opened it. In any other process (a forked child, whose copy has none of its threads and may
// hold their locks) every call is refused at once with kInvalidArgument, and destroying the
// copy releases nothing of the parent's (core/process.h): a child opens a store of its own.
class Store {
 public:
  // Opens (creating directories as needed) the store's namespace at `config.location`, sweeps
  // temporaries left by dead writers, and records the namespace's description beside it. On
  // a FILE location that may hang (deadline_ms not 0, isolate not off) it returns by the
  // deadline: kDeadlineExceeded when the location did not answer by then (the open goes on
  // alone, stops at its next step and closes what it opened).
  static Result<std::unique_ptr<Store>> open(const StoreConfig& config);
  // Waits for submitted batches (each ends by its deadline), then, where the store has a
  // deadline, at most that long for the rest: threads still in the kernel finish alone,
  // holding the store's state, and release it when they return.
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

  // Why a caller asks whether pages exist: kLookup, what an engine asks for (the admission
  // policy learns the workload from lookups), or kCheck, the caller's own look before writing
  // or reading pages it was already asked for, or asking again (not counted as asked again).
  enum class ExistsCall : uint8_t { kLookup, kCheck };

  // Whether a page is stored (not verified: a later get may still find it corrupt). Answered
  // from the index; a key the index lacks is looked up in storage (a page another process
  // wrote) and indexed. A page another process removed is reported until a read misses it,
  // except after a clear(): every call first looks at the namespace's clear generation (one
  // stat per call, not per key) and drops the index when another store cleared since.
  Result<bool> exists(std::string_view key, ExistsCall call = ExistsCall::kLookup);
  // Number of leading keys that exist; stops at the first absent key (or fault).
  size_t batch_exists(std::span<const std::string_view> keys,
                      ExistsCall call = ExistsCall::kLookup);
  // Whether each key is in this process's index, without any I/O (so never blocking): true
  // for pages this store wrote, read or found, and (segment layout) every page of the
  // summaries it has read. False says only "not known here": exists() may still find it.
  // An engine that answers its lookups from here says so with kLookup.
  std::vector<bool> indexed(std::span<const std::string_view> keys,
                            ExistsCall call = ExistsCall::kCheck) const;

  // Pages that left because of capacity: the ones this store evicted (either layout) and,
  // with the segment layout, those in segments another process reclaimed (learnt when this
  // store next reads the namespace's summaries). Each is named by its key's hash128(key):
  // a caller that wants its keys back keeps a map. Off until watch_evictions(), which keeps
  // up to `max_pending` of them (0 turns it off) until take_evicted() takes them; beyond
  // that the oldest are dropped and counted.
  struct Evicted {
    std::vector<Hash128> keys;  // oldest first
    uint64_t dropped = 0;       // left out since the previous take: more than max_pending
  };
  void watch_evictions(size_t max_pending);
  Evicted take_evicted();

  // kNotFound when absent. Where the store has a deadline (a location that may hang), it
  // returns by it: kUnavailable at once when the key's location is not answering (nothing
  // done), kDeadlineExceeded when the removal did not end in time: it goes on to its end once
  // the location answers (the page is then gone), and the location serves no page until then.
  Status remove(std::string_view key);
  // Removes every page of this store's namespace (and no other) from every base directory,
  // then publishes a new clear generation: every store of the namespace, in any process,
  // answers exists/batch_exists from storage again on its next call. With a deadline, as
  // remove(): a clear that misses it is finished once the locations answer, before they serve
  // again, so the namespace is never left half cleared.
  Status clear();

  // Never waits past the deadline: what could not be read in time (used_bytes, from the
  // capacity ledger) is left 0 and named in `health`.
  StoreStats stats() const;
  // Locations that hang (StoreConfig::isolate): waits, without polling, until every location
  // answers and no I/O of a call that gave up is still running (`answering`), or until a
  // location does not answer (!answering). True when that happened within `timeout`. A store
  // with no isolated location always answers.
  bool wait_health(bool answering, std::chrono::nanoseconds timeout);
  const NamespaceSpec& namespace_spec() const;
  Hash128 namespace_id() const;
  const BackendSelection& backend_selection() const;
  // The backend and its configuration ("uring: 2 rings x 64 requests, fixed buffers").
  std::string backend_description() const;
  // The layout the store opened with (StoreConfig::layout, or the URI's; auto resolved).
  StoreLayout layout() const;
  // The directories holding this namespace, one per base.
  std::vector<std::string> namespace_dirs() const;

  // The store's state: opaque, defined in src/store/store_impl.h (never installed), where the
  // store's layouts (src/store/layout/) name it.
  struct Impl;

 private:
  explicit Store(std::shared_ptr<Impl> impl);
  // open()'s steps, on the calling thread (open() runs them on a thread it waits for until
  // the deadline where the location may hang).
  static Result<std::unique_ptr<Store>> open_here(const StoreConfig& config);
  // Shared with the guard's threads while they run (a thread blocked in the kernel keeps the
  // store's state alive after the Store is gone).
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvtier
