// What every layout's windows run on (docs/architecture.md, "The store's rooms"): the parts
// of a store that every layout shares (the agent, the router, the page index, the store's
// capacity, the counters, the header and staging pools) and the steps every window takes:
// its pages validated, routed and their I/O chosen (plan), admitted, their headers encoded;
// a batch cut into windows that hold their open-object permits (run_batch).
//
// Store::Impl (the facade) is a StoreCore with the rest: the layout, the guard, submitted
// batches, the clear generation. A layout (layout/) holds the StoreCore of its store and
// nothing of the facade. Nothing here is installed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/page_index.h"
#include "capacity/store_capacity.h"
#include "format/page_format.h"
#include "guard/guard.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/worker_pool.h"
#include "kvtier/store/store.h"
#include "kvtier/transfer/agent.h"
#include "naming/namespace_walk.h"
#include "naming/routing.h"
#include "window/counters.h"
#include "window/page_work.h"
#include "window/pools.h"
#include "window/sealing.h"

namespace kvtier {

namespace detail {
class PutEncoding;  // window/put_encoding.h
}  // namespace detail

using detail::BatchTimer;
using detail::bump;
using detail::Counters;
using detail::PageIo;
using detail::Reject;
using guard::PageDone;
using page::kBlockBytes;
using page::kHeaderBytes;
using page::object_bytes;
using pools::HeaderPool;
using pools::ObjectBudget;
using pools::StagingPool;

struct StoreCore {
  StoreCore(StoreConfig cfg, Agent a, routing::Router r, std::unique_ptr<PageSealing> seal)
      : config(std::move(cfg)),
        sealing(std::move(seal)),
        agent(std::move(a)),
        router(std::move(r)),
        ns_id(config.ns.id()),
        chunk_hash(chunk_hash_named(config.chunk_hash).value_or(fastest_chunk_hash())),
        headers(agent),
        staging(agent, config.staging_bytes),
        seal_staging(agent, config.staging_bytes),
        budget(config.max_open_objects != 0 ? config.max_open_objects
                                            : ObjectBudget::default_capacity()),
        dio(router.base_count()),
        spread(std::max<size_t>(config.cpus, 1) - 1, "kvtier-spread") {}
  StoreCore(const StoreCore&) = delete;
  StoreCore& operator=(const StoreCore&) = delete;

  StoreConfig config;
  // A sealed store's keys (window/sealing.h), else null. The router names pages by them.
  std::unique_ptr<const PageSealing> sealing;
  Agent agent;
  routing::Router router;
  Hash128 ns_id;
  // How puts hash payload chunks (StoreConfig::chunk_hash resolved); reads hash chunks this
  // way as they land, and again the page's way when its header says otherwise.
  ChunkHash chunk_hash;
  HeaderPool headers;  // after agent: its registrations go first
  StagingPool staging;
  // What a sealed store's puts seal pages into: a pool of its own (so that the guard's and
  // direct I/O's staging never holds what a sealing window waits for). A page written whole
  // (segments, object stores) gets a buffer of its size, taken a window at a time (seal_turn:
  // a window waits only for windows that hold all they need); a page written in runs (page
  // files on a FILE location) is sealed run by run into a buffer of about 1 MiB that the
  // thread writing the run holds for that run alone (window/put_runs.h).
  StagingPool seal_staging;
  Mutex seal_turn;
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
  // Per base directory: its direct I/O alignment, when direct I/O is on and possible there.
  std::vector<std::optional<DirectIoAlignment>> dio;
  // The threads a window's work spreads over besides the caller's (StoreConfig::cpus - 1),
  // started by the first window that needs them (layout/page_files.cc: put runs).
  WorkerPool spread;
  // The guard (guard/guard.h) when a base is isolated, else null: owned by the facade, which
  // lets it go before anything here.
  guard::Guard* health = nullptr;

  // Whether base `b` serves now (a base that is not isolated always does).
  bool serving(size_t b) const { return health == nullptr || health->healthy(b); }
  // How old a look at storage may be and still answer a lookup (config.refresh_ms).
  uint64_t lookup_max_age_ns() const { return config.refresh_ms.value_or(0) * 1'000'000; }

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
  void choose_io(detail::PageWork<Buffer>& w);
  // Validates every page of a window: invalid pages get their status in `out`, valid ones
  // come back routed, with their I/O mode chosen. `name`: routed by their names under the
  // key file's `name`-th key (names_of); 0 for every put.
  template <typename Buffer>
  std::vector<detail::PageWork<Buffer>> plan(std::span<const std::string_view> keys,
                                             std::span<const Buffer> pieces, size_t k,
                                             std::span<Status> out, size_t name = 0);
  // How many names a page key may have on storage: 1, or in a sealed store one per key of
  // its key file (pages sealed before a rotation keep the names of the key current then).
  // route(key, i): the key's route under its i-th name (0: what puts write).
  size_t names_of() const { return sealing ? sealing->name_count() : 1; }
  routing::Route route(std::string_view key, size_t name) const {
    return name == 0 ? router.route(key) : router.route_named(sealing->name(key, name));
  }
  // Runs a batch in windows of at most budget.capacity() pages, each holding its permits:
  // window(keys, pieces, pieces per page, statuses) for each. `touch_earlier`: the earlier
  // windows' pages are touched again in the index so the batch's first page is its most
  // recently used (where the index's order decides eviction). `sealed_whole`: a sealed
  // store's put windows seal each page whole into staging, so a window holds what fits it.
  template <typename Buffer, typename Window>
  BatchResult run_batch(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                        Window window, bool touch_earlier, bool sealed_whole = false);

  // Admission (capacity/admission.h), in every layout's put window once its pages are
  // planned: the pages the store does not hold are asked about; declined ones leave `work`,
  // unwritten, with OK in `out`. Caller errors never get here (plan() reports them).
  void admit(std::vector<detail::PageWork<ConstBuffer>>& work, std::span<Status> out);
  // The engine asked for `keys` (exists calls): the admission policy's shadows learn it.
  void note_lookup(std::span<const std::string_view> keys);
  // Encodes the header of a page being written into `block`: its payload checksum comes from
  // the caller's memory or, for a staged page, from the staging copy made here first (the
  // payload padded with zeros to the object's size). A sealed store seals the page into its
  // staging instead (window/sealing.h); that fails only when the sealing session has no page
  // number left.
  Status encode_put_header(detail::PageWork<ConstBuffer>& w, std::string_view key,
                           uint64_t created_ns,
                           std::span<std::byte, page::kHeaderBytes> block) const;
  // Its first step alone (window/put_encoding.h): the header's fixed fields of page `w`, for
  // a writer that encodes the chunks itself, run by run (window/put_runs.h).
  Status begin_put(detail::PutEncoding& encoding, detail::PageWork<ConstBuffer>& w,
                   std::string_view key, uint64_t created_ns,
                   std::span<std::byte, page::kHeaderBytes> block) const;
  // A segment record's compact header size for a key and payload (sealed ones hold more).
  uint32_t compact_header_bytes(size_t key_bytes, uint64_t payload_bytes) const {
    return sealing ? PageSealing::compact_header_bytes(key_bytes, payload_bytes)
                   : page::compact_header_bytes(key_bytes);
  }
  // A sealed store's put window, once planned: its pages are staged for sealing (their I/O
  // stays direct where it was). `whole`: each page gets a buffer of seal_staging to be sealed
  // into, waiting while other windows hold the memory; otherwise (pages written in runs) each
  // run is sealed into a buffer of its own when it is written. A page that cannot be sealed
  // leaves `work` with its status in `out`. Nothing for a store in the clear.
  void stage_for_sealing(std::vector<detail::PageWork<ConstBuffer>>& work, std::span<Status> out,
                         bool whole);

  // The first failure among a page's descriptors, or OK.
  template <typename Buffer>
  static Status page_result(const Transfer& xfer, const detail::PageWork<Buffer>& w) {
    const auto results = xfer.results();
    for (size_t d = w.first_desc; d < w.first_desc + w.desc_count; ++d) {
      if (!results[d].ok()) return results[d];
    }
    return ok_status();
  }
  template <typename Buffer>
  void count_io(const detail::PageWork<Buffer>& w) {
    if (w.io == PageIo::kDirect) bump(counters.direct_pages);
    if (w.io == PageIo::kStaged) bump(counters.staged_pages);
  }
  // Failed pages by status code, for stats() (misses are not failures).
  void count_error(const Status& st) {
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      bump(counters.errors_by_code[static_cast<size_t>(st.code()) % 16]);
    }
  }
  void count_errors(const BatchResult& r) {
    for (const Status& st : r.pages) count_error(st);
  }

  // Walks base `b`'s namespace directory (see walk_namespace): `fn(dir, pages)` gets the
  // pages of each fan-out directory; a base without the directory has none.
  Status for_each_fanout(size_t b, bool with_details, const FanoutPagesFn& fn);
};

}  // namespace kvtier

#include "window/plan.h"  // the templates declared above
