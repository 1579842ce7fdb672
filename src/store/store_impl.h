// The page store's private parts, shared by the files that implement Store (the facade):
//
//   store_open.cc       Store::open: configuration, layout=auto, index, ledger, guard
//   store.cc            the public Store methods (put/get, exists, remove, clear)
//   store_write.cc      what both layouts' put windows share: admission, headers, capacity
//   store_read.cc       the read path: get windows, step by step, and page verification
//   store_namespace.cc  the namespace on storage: manifest, temporaries, walk, clears
//   store_async.cc      submitted batches: tickets and the pool that runs them
//   store_metrics.cc    stats() and the Prometheus rendering
//
// and the headers it is made of: store_counters.h (counters and histograms), page_work.h (a
// window's pages on their way), store_window.h (the templates that plan and run a batch's
// windows, included at the end). Where pages lie is the layout's (layout/layout.h): the
// facade calls only that interface. Nothing here is installed; only src/store/ includes it.
#pragma once

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "capacity/page_index.h"
#include "capacity/store_capacity.h"
#include "format/page_format.h"
#include "format/segment_format.h"
#include "guard/guard.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/mutex.h"
#include "kvtier/core/process.h"
#include "kvtier/core/worker_pool.h"
#include "kvtier/store/store.h"
#include "layout/layout.h"
#include "naming/clear_generation.h"
#include "naming/namespace_walk.h"
#include "naming/routing.h"
#include "page_work.h"
#include "pools.h"
#include "store_counters.h"

namespace kvtier {

namespace detail {

// A submitted batch: its own copies of the keys and buffer lists, and its result.
struct TicketState {
  // The process that submitted the batch: the only one where it can finish.
  OwningProcess owner;
  bool is_put = false;
  std::vector<std::string> keys;
  std::vector<std::string_view> views;
  std::vector<ConstBuffer> put_pieces;
  std::vector<MutableBuffer> get_pieces;
  BatchCallback callback;
  BatchResult result;
  mutable Mutex mu;
  mutable std::condition_variable cv;
  bool done KVTIER_GUARDED_BY(mu) = false;
  bool taken KVTIER_GUARDED_BY(mu) = false;
};

}  // namespace detail

using detail::BatchTimer;
using detail::bump;
using detail::Counters;
using detail::PageIo;
using guard::PageDone;
using page::kBlockBytes;
using page::kHeaderBytes;
using page::object_bytes;
using pools::HeaderPool;
using pools::ObjectBudget;
using pools::StagingPool;

struct Store::Impl : std::enable_shared_from_this<Store::Impl> {
  Impl(StoreConfig cfg, Agent a, routing::Router r)
      : config(std::move(cfg)),
        agent(std::move(a)),
        router(std::move(r)),
        ns_id(config.ns.id()),
        generation(agent, router.generation_path(), router.temp_dir(0)),
        headers(agent),
        staging(agent, config.staging_bytes),
        budget(config.max_open_objects != 0 ? config.max_open_objects
                                            : ObjectBudget::default_capacity()),
        dio(router.base_count()) {}

  ~Impl() {
    // Submitted batches use this store: let every one finish before anything goes.
    wait_for_submitted();
    async_pool.reset();
  }

  // Before the Store lets go: submitted batches finish (each within its deadline), then the
  // guard's threads get the deadline to end; those still in the kernel finish alone.
  void close() {
    wait_for_submitted();
    if (guard) guard->shut_down(guard_deadline);
  }
  void wait_for_submitted() {
    MutexLock lock(async_mu);
    lock.wait(async_idle, [&]() KVTIER_REQUIRES(async_mu) { return async_pending == 0; });
  }

  StoreConfig config;
  // The process that opened the store: every call from another (a forked child) is refused
  // before it takes a lock, and its Store releases nothing there (core/process.h).
  OwningProcess owner;
  // How pages lie on storage (layout/layout.h): page files or segments, chosen at open.
  std::unique_ptr<Layout> layout;
  Agent agent;
  routing::Router router;
  Hash128 ns_id;
  // The namespace's clear generation as this store last saw it (naming/clear_generation.h).
  // A change means another store, or `kvtier clear`, cleared the namespace.
  clear_generation::Watch generation;
  HeaderPool headers;  // after agent: its registrations go first
  StagingPool staging;
  ObjectBudget budget;
  Counters counters;
  // The namespace's pages as this process knows them (capacity/page_index.h), and what the
  // store may hold and gives up for a new page (capacity/store_capacity.h: the shared ledger,
  // admission, the evictions it keeps).
  PageIndex index;
  StoreCapacity capacity;
  // kBlockBytes of zeros, registered: the source of every object's tail padding.
  AlignedBuffer zeros;
  Registration zeros_registration;
  // Locations that hang (guard.h): set up by start_guard() where a base is isolated. Last
  // member: it goes first.
  std::chrono::milliseconds guard_deadline{0};
  std::string isolation_summary;  // StoreStats::isolation
  // Per base directory: its direct I/O alignment, when direct I/O is on and possible there.
  std::vector<std::optional<DirectIoAlignment>> dio;
  std::string dio_summary = "off";
  // The layout and, for layout=auto, why it was chosen (StoreStats::layout).
  std::string layout_summary;
  // Submitted batches: run on a pool started on first use; the store waits for them on close.
  std::once_flag async_once;
  std::unique_ptr<WorkerPool> async_pool;
  Mutex async_mu;
  std::condition_variable async_idle;
  size_t async_pending KVTIER_GUARDED_BY(async_mu) = 0;
  // Lookups ask the clear generation at most once per config.refresh_ms; when it changed, the
  // index is dropped.
  void observe_generation() {
    if (!serving(0)) return;  // the generation lives on base 0
    generation.observe(lookup_max_age_ns(), [this] { index.clear(); });
  }

  // A put or get batch, timed into its latency histogram: pages of isolated bases go through
  // the guard, the others run on this thread.
  BatchResult put(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces) {
    BatchTimer timer(counters, counters.put_latency);
    return guard ? guarded(keys, pieces) : put_here(keys, pieces);
  }
  // The engine asked for `keys` (exists calls): the admission policy's shadows learn it.
  void note_lookup(std::span<const std::string_view> keys);
  BatchResult get(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces) {
    BatchTimer timer(counters, counters.get_latency);
    return guard ? guarded(keys, pieces) : get_here(keys, pieces);
  }
  // The same on this thread, in windows, failures counted.
  BatchResult put_here(std::span<const std::string_view> keys,
                       std::span<const ConstBuffer> pieces) {
    BatchResult r =
        run_batch(keys, pieces, [this](auto&&... args) { layout->put_window(args...); });
    count_errors(r);
    return r;
  }
  // `done`: called with a page's index (on the thread that completed its last read) as each
  // page checks out, before the call returns (the guard copies it out of staging then).
  BatchResult get_here(std::span<const std::string_view> keys,
                       std::span<const MutableBuffer> pieces, const PageDone* done = nullptr) {
    BatchResult r =
        run_batch(keys, pieces,
                  [&](std::span<const std::string_view> ks, std::span<const MutableBuffer> ps,
                      size_t k, std::span<Status> out) {
                    get_window(ks, ps, k, out, done, static_cast<size_t>(ks.data() - keys.data()));
                  });
    count_errors(r);
    return r;
  }
  template <typename Buffer>
  BatchResult guarded(std::span<const std::string_view> keys, std::span<const Buffer> pieces) {
    BatchResult r;
    size_t k = 0;
    r.status = counted_shape(keys, pieces, &k);
    if (!r.status.ok()) return r;
    if constexpr (std::is_same_v<Buffer, ConstBuffer>) {
      return guard->put(keys, pieces, k);
    } else {
      return guard->get(keys, pieces, k);
    }
  }
  void count_error(const Status& st) {
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      bump(counters.errors_by_code[static_cast<size_t>(st.code()) % 16]);
    }
  }
  // exists/batch_exists on this thread (Store::exists and Store::batch_exists go through the
  // guard where a base is isolated).
  Result<bool> exists_here(std::string_view key);
  size_t batch_exists_here(std::span<const std::string_view> keys);
  // Whether base `b` serves now (a base that is not isolated always does).
  bool serving(size_t b) { return !guard || guard->healthy(b); }
  // Sets up the guard when a base is isolated and the deadline is not 0 (store_open.cc).
  Status start_guard();
  // Failed pages by status code, for stats() (misses are not failures).
  void count_errors(const BatchResult& r) {
    for (const Status& st : r.pages) {
      if (!st.ok() && st.code() != StatusCode::kNotFound) {
        bump(counters.errors_by_code[static_cast<size_t>(st.code()) % 16]);
      }
    }
  }
  // Copies a batch into a ticket's state and runs it on the async pool (store_async.cc).
  template <typename Buffer>
  BatchTicket submit(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                     BatchCallback on_done);
  class TicketJob;

  template <typename Buffer>
  using PageWork = detail::PageWork<Buffer>;
  using ReadWindow = detail::ReadWindow;

  // Checks one page's key and memory. Page-level caller errors come back here.
  template <typename Buffer>
  Status validate_page(std::string_view key, std::span<const Buffer> pieces,
                       uint64_t* payload) const;

  template <typename Buffer>
  Status check_shape(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                     size_t* per_page);

  // check_shape(), a failure counted as a caller error.
  template <typename Buffer>
  Status counted_shape(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                       size_t* per_page);

  // Picks buffered, direct or staged I/O for a page (see DirectIo).
  template <typename Buffer>
  void choose_io(PageWork<Buffer>& w);

  // Validates every page of a window: invalid pages get their status in `out`, valid ones
  // come back routed, with their I/O mode chosen.
  template <typename Buffer>
  std::vector<PageWork<Buffer>> plan(std::span<const std::string_view> keys,
                                     std::span<const Buffer> pieces, size_t k,
                                     std::span<Status> out);

  // Admission (admission.h), in both layouts' put windows once their pages are planned: the
  // pages the store does not hold are asked about; declined ones leave `work`, unwritten, with
  // OK in `out`. Caller errors never get here (plan() reports them).
  void admit(std::vector<PageWork<ConstBuffer>>& work, std::span<Status> out);

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

  // Walks base `b`'s namespace directory (see walk_namespace): `fn(dir, pages)` gets the
  // pages of each fan-out directory; a base without the directory has none.
  Status for_each_fanout(size_t b, bool with_details, const FanoutPagesFn& fn);

  // How old a look at storage may be and still answer a lookup (config.refresh_ms).
  uint64_t lookup_max_age_ns() const { return config.refresh_ms.value_or(0) * 1'000'000; }
  // Runs a batch in windows of at most budget.capacity() pages, each holding its permits.
  template <typename Buffer, typename Window>
  BatchResult run_batch(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                        Window window);

  // Encodes the header of a page being written into `block`: its payload checksum comes from
  // the caller's memory or, for a staged page, from the staging copy made here first (the
  // payload padded with zeros to the object's size). Both layouts (store_write.cc).
  void encode_put_header(PageWork<ConstBuffer>& w, std::string_view key, uint64_t created_ns,
                         std::span<std::byte, page::kHeaderBytes> block) const;

  // The read path (store_read.cc): get_window runs the steps below in order; a ReadWindow
  // (declared above) carries what each step leaves for the next.
  // `trust_size`: an object store's page objects open without asking their size (no HEAD
  // per page: TargetSpec::expected_size); pages that then fail other than absent are read
  // again, opened the careful way, before anything is counted, dropped or said.
  void get_window(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces,
                  size_t k, std::span<Status> out, const PageDone* done = nullptr, size_t first = 0,
                  bool trust_size = true);
  // get_window of `pages` (indexes into keys) alone, without trust_size; their statuses
  // replace those in `out`.
  void reread_carefully(std::span<const std::string_view> keys,
                        std::span<const MutableBuffer> pieces, size_t k, std::span<Status> out,
                        const PageDone* done, size_t first, std::span<const size_t> pages);
  // Takes a header block per page and lays out its descriptors, cut at checksum chunks.
  void build_read_descriptors(ReadWindow& rw);
  // Posts the read and waits for it; chunks are hashed and pages verified as they complete.
  void run_read(ReadWindow& rw);
  // Runs on the thread that completed descriptor `d`: hashes its chunk once the chunk is
  // complete, and verifies its page once the page is.
  void on_read_descriptor(ReadWindow& rw, size_t d, const Status& st);
  // Checks a page whose descriptors all completed: header, then payload checksum; a staged
  // page is copied out to the caller's pieces once it checks out.
  Status verify_page(const PageWork<MutableBuffer>& w, std::string_view key,
                     std::span<const std::byte, kHeaderBytes> block,
                     std::span<const uint64_t> chunk_checksums) const;
  // Each read page's status: the batch's error, else its descriptors', else its verdict.
  void collect_read_results(ReadWindow& rw, std::span<Status> out);
  // Counts hits, misses, corrupt and failed pages, and drops the corrupt ones.
  void account_reads(ReadWindow& rw, std::span<const Status> out);
  // The index follows what reads found: hits are recent, misses are gone.
  void index_reads(const ReadWindow& rw, std::span<const Status> out);

  // Creates the namespace's directories and manifest on every base, sweeps temporaries left
  // by dead writers and probes direct I/O (store_namespace.cc).
  Status open_namespace();

  std::unique_ptr<guard::Guard> guard;  // last: destroyed first
};

}  // namespace kvtier

#include "store_window.h"  // the templates declared above that plan and run windows
