// The page store's facade: Store::Impl, a StoreCore (window/store_core.h: the parts every
// layout shares and the steps every window takes) with what only the facade has: the layout
// it calls (layout/layout.h), the guard, submitted batches and the clear generation. Its files:
//
//   store_open.cc       Store::open: configuration, the layout chosen, index, ledger, guard
//   store.cc            the public Store methods (put/get, exists, remove, clear)
//   store_read.cc       the read path: get windows, step by step, and page verification
//   store_namespace.cc  the namespace on storage: directories, manifest, temporaries
//   store_async.cc      submitted batches: tickets and the pool that runs them
//   store_metrics.cc    stats() and the Prometheus rendering
//
// Nothing here is installed; only src/store/'s own files include it.
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

#include "guard/guard.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/mutex.h"
#include "kvtier/core/process.h"
#include "kvtier/core/worker_pool.h"
#include "kvtier/store/store.h"
#include "layout/layout.h"
#include "naming/clear_generation.h"
#include "window/store_core.h"

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

struct Store::Impl : StoreCore, std::enable_shared_from_this<Store::Impl> {
  Impl(StoreConfig cfg, Agent a, routing::Router r, std::unique_ptr<PageSealing> seal)
      : StoreCore(std::move(cfg), std::move(a), std::move(r), std::move(seal)),
        generation(agent, router.generation_path(), router.temp_dir(0)) {}

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

  // The process that opened the store: every call from another (a forked child) is refused
  // before it takes a lock, and its Store releases nothing there (core/process.h).
  OwningProcess owner;
  // How pages lie on storage (layout/layout.h): page files or segments, chosen at open.
  std::unique_ptr<Layout> layout;
  // The namespace's clear generation as this store last saw it (naming/clear_generation.h).
  // A change means another store, or `kvtier clear`, cleared the namespace.
  clear_generation::Watch generation;
  // Locations that hang (guard.h): set up by start_guard() where a base is isolated. Last
  // member: it goes first.
  std::chrono::milliseconds guard_deadline{0};
  std::string isolation_summary;    // StoreStats::isolation
  std::string dio_summary = "off";  // StoreStats::direct_io
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
  BatchResult get(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces) {
    BatchTimer timer(counters, counters.get_latency);
    return guard ? guarded(keys, pieces) : get_here(keys, pieces);
  }
  // The same on this thread, in windows, failures counted.
  BatchResult put_here(std::span<const std::string_view> keys,
                       std::span<const ConstBuffer> pieces) {
    BatchResult r = run_batch(
        keys, pieces, [this](auto&&... args) { layout->put_window(args...); },
        layout->orders_batches(), layout->seals_whole_pages());
    count_errors(r);
    return r;
  }
  // `done`: called with a page's index (on the thread that completed its last read) as each
  // page checks out, before the call returns (the guard copies it out of staging then).
  BatchResult get_here(std::span<const std::string_view> keys,
                       std::span<const MutableBuffer> pieces, const PageDone* done = nullptr) {
    uint64_t bytes = 0;
    if (done == nullptr && spreads_get(keys, pieces, &bytes)) {
      BatchResult r = get_spread(keys, pieces, bytes);
      count_errors(r);
      return r;
    }
    BatchResult r = run_batch(
        keys, pieces,
        [&](std::span<const std::string_view> ks, std::span<const MutableBuffer> ps, size_t k,
            std::span<Status> out) {
          get_window(ks, ps, k, out, done, static_cast<size_t>(ks.data() - keys.data()));
        },
        layout->orders_batches());
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
  // exists/batch_exists on this thread (Store::exists and Store::batch_exists go through the
  // guard where a base is isolated).
  Result<bool> exists_here(std::string_view key);
  // Whether `key` is indexed or on storage under any name it may have (names_of()).
  Result<bool> stored_under_any_name(std::string_view key);
  size_t batch_exists_here(std::span<const std::string_view> keys);
  // remove and clear on this thread (Store::remove and Store::clear go through the guard
  // where a base is isolated).
  Status remove_here(std::string_view key);
  Status clear_here();
  // `body` (a remove or clear, `what`) on the guard's maintenance lane: its result by the
  // deadline, else DEADLINE_EXCEEDED while it runs on to its end, `bases` not serving until
  // then (Guard::run_task); UNAVAILABLE at once when one of `bases` is not answering.
  Status maintain(std::vector<size_t> bases, std::string_view what, std::function<Status()> body);
  // The capacity ledger's used bytes, by the deadline where there is a guard (stats()).
  Result<uint64_t> ledger_used();
  // Sets up the guard when a base is isolated and the deadline is not 0 (store_open.cc).
  Status start_guard();
  // Copies a batch into a ticket's state and runs it on the async pool (store_async.cc).
  template <typename Buffer>
  BatchTicket submit(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                     BatchCallback on_done);
  class TicketJob;

  template <typename Buffer>
  using PageWork = detail::PageWork<Buffer>;
  using ReadWindow = detail::ReadWindow;

  // A FILE store's get batch of at least 512 KiB, while no other call is in flight
  // (counters.batches_in_flight), is cut in parts that the caller and the store's threads each
  // run (read, hashed or opened, verified) side by side, the pages touched in the index in
  // batch order after: on one thread a batch is copied, hashed and opened on one core. In the
  // clear, batches of pages of up to 1 MiB, in parts of 256 KiB to about 2 MiB (one client
  // thread's 64 KiB pages on two cores: 1.18-1.71x); larger pages go whole to the backend, which
  // splits them itself. Sealed, batches of up to 4 MiB, a part per thread (64 KiB pages: 1.57x);
  // larger ones go to the backend's threads, the cipher with them. Not for a guarded store (its
  // lanes run the batch), nor beside other calls (they keep the other cores busy: two client
  // threads' sealed batches of 2 MiB read 0.9x as fast spread).
  // `bytes`: the batch's, summed on the way (for get_spread).
  bool spreads_get(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces,
                   uint64_t* bytes) const;
  BatchResult get_spread(std::span<const std::string_view> keys,
                         std::span<const MutableBuffer> pieces, uint64_t bytes);

  // The read path (store_read.cc): get_window runs the steps below in order; a ReadWindow
  // (declared above) carries what each step leaves for the next.
  // `trust_size`: an object store's page objects open without asking their size (no HEAD
  // per page: TargetSpec::expected_size); pages that then fail other than absent are read
  // again, opened the careful way, before anything is counted, dropped or said.
  // `name`: the pages are looked for under their names by the key file's `name`-th key
  // (StoreCore::route); those absent under it are looked for under the next one, in the same
  // call, so that a rotation leaves earlier pages readable.
  void get_window(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces,
                  size_t k, std::span<Status> out, const PageDone* done = nullptr, size_t first = 0,
                  bool trust_size = true, size_t name = 0);
  // get_window of `pages` (indexes into keys) alone; their statuses replace those in `out`.
  void read_again(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces,
                  size_t k, std::span<Status> out, const PageDone* done, size_t first,
                  std::span<const size_t> pages, bool trust_size, size_t name);
  // Takes a header block per page and lays out its descriptors, cut at checksum chunks.
  void build_read_descriptors(ReadWindow& rw);
  // Posts the read and waits for it; chunks are hashed and pages verified as they complete.
  void run_read(ReadWindow& rw);
  // Runs on the thread that completed descriptor `d`: hashes its chunk once the chunk is
  // complete, and verifies its page once the page is.
  void on_read_descriptor(ReadWindow& rw, size_t d, const Status& st);
  // Checks a page whose descriptors all completed: header, then payload checksum; a staged
  // page is copied out to the caller's pieces once it checks out. A page refused is a miss,
  // and `why` says why (a caller's mistake is not a refusal).
  Status verify_page(const PageWork<MutableBuffer>& w, std::string_view key,
                     std::span<const std::byte, kHeaderBytes> block,
                     std::span<const uint64_t> chunk_checksums, detail::Reject& why) const;
  // A sealed store's read descriptor `ref`, completed: the header decoded, or the chunk
  // opened in place while in this core's cache (once the header named the page).
  void open_as_landed(ReadWindow& rw, const ReadWindow::DescRef& ref);
  // verify_page for a sealed store's page `r` (an index in `reading`): the sealed header,
  // then the payload's chunks that open_as_landed did not open, in place.
  Status verify_sealed_page(ReadWindow& rw, size_t r) const;
  // What verify_stored found wrong with a page whose header is its own: its size, or (in the
  // clear) its payload checksum.
  detail::Reject stored_reject(const page::Header& h, const PageWork<MutableBuffer>& w) const {
    return w.stored_bytes != layout->stored_bytes(h) || h.header_bytes != w.header_bytes
               ? detail::Reject::kTorn
               : detail::Reject::kChecksum;
  }
  // A page of this key whose header differs from the caller's buffers: kInvalidArgument when
  // the page is intact as stored (the caller asked with the wrong sizes), else OK.
  Status caller_mistake(const page::Header& h, const PageWork<MutableBuffer>& w) const;
  // A staged read's payload, checked, into the caller's pieces.
  static void copy_from_staging(const PageWork<MutableBuffer>& w);
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
