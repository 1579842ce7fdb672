// The public Store methods. The store's parts live beside this file (see store_impl.h for
// the map): the write path, the read path, the namespace on storage, submitted batches and
// metrics.
#include "kvtier/store/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "kvtier/backends/builtin.h"
#include "store_impl.h"

namespace kvtier {

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

std::string_view store_layout_name(StoreLayout layout) {
  return layout == StoreLayout::kSegments ? "segments" : "files";
}

Result<StoreLayout> parse_store_layout(std::string_view text) {
  if (text == "files") return StoreLayout::kFiles;
  if (text == "segments") return StoreLayout::kSegments;
  return invalid_argument_error(fmt::format("layout '{}' (use files or segments)", text));
}

Result<DirectIo> parse_direct_io(std::string_view text) {
  if (text == "off") return DirectIo::kOff;
  if (text == "auto") return DirectIo::kAuto;
  if (text == "on") return DirectIo::kOn;
  return invalid_argument_error(fmt::format("direct I/O mode '{}' (use off, auto or on)", text));
}

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

Store::Store(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() {
  if (!impl_) return;
  if (!impl_->owner.here()) {
    abandon(impl_);  // a forked child's copy: the threads to wait for are not here
    return;
  }
  impl_->close();
}

namespace {

// How a refusal in a forked child names the store (OwningProcess::check).
constexpr std::string_view kStoreName = "this kvtier Store";

// The ring of pages removed (key_ring.h): the last 65,536 (2 MiB), many windows of evictions
// between two exists() calls of a store; one that falls further behind keeps the pages it
// missed indexed until a read misses them, as across hosts.
constexpr uint64_t kGoneMagic = 0x315443495645564b;  // "KVEVICT1"
constexpr uint64_t kGoneSlots = 65536;

Status check_segments_config(const StoreConfig& config) {
  if (config.location.storage_class == StorageClass::kMemory) {
    return unsupported_error(fmt::format(
        "{}: the segment layout needs a FILE or object store; memory keeps one object per page",
        config.location.uri()));
  }
  if (config.segment_lanes > 64) {
    return invalid_argument_error(
        fmt::format("segment_lanes {} is more than 64", config.segment_lanes));
  }
  if (config.segment_bytes < (uint64_t{1} << 20)) {
    return invalid_argument_error(fmt::format(
        "segment_bytes {} is below the smallest segment (1 MiB)", config.segment_bytes));
  }
  return ok_status();
}

// segment_lanes of a FILE or object store's URI (StoreLocation::store_params): used where
// the config does not set it.
Status resolve_segment_lanes(StoreConfig& cfg) {
  const BackendParams& params = cfg.location.store_params;
  if (auto it = params.find("segment_lanes"); it != params.end() && cfg.segment_lanes == 0) {
    const std::string& v = it->second;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), cfg.segment_lanes);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || cfg.segment_lanes == 0 ||
        cfg.segment_lanes > 64) {
      return invalid_argument_error(
          fmt::format("segment_lanes='{}' is not a whole number from 1 to 64", v));
    }
  }
  return ok_status();
}

// A milliseconds parameter of a store's URI (StoreLocation::store_params), where the config
// does not set it; else `fallback`.
Status take_ms(const BackendParams& params, const std::string& name, std::optional<uint64_t>& field,
               uint64_t fallback) {
  if (auto it = params.find(name); it != params.end()) {
    const std::string& v = it->second;
    uint64_t ms = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size()) {
      return invalid_argument_error(
          fmt::format("{}='{}' is not a whole number of milliseconds", name, v));
    }
    if (!field) field = ms;
  }
  if (!field) field = fallback;
  return ok_status();
}

// refresh_ms of a FILE or object store (StoreConfig::refresh_ms).
Status resolve_refresh_ms(StoreConfig& cfg) {
  return take_ms(cfg.location.store_params, "refresh_ms", cfg.refresh_ms,
                 cfg.location.storage_class == StorageClass::kObject ? 1000 : 0);
}

// deadline_ms, probe_interval_ms, isolate and admission of a FILE store's URI
// (StoreLocation::store_params): used where the config does not set them.
Status resolve_guard_params(StoreConfig& cfg) {
  const BackendParams& params = cfg.location.store_params;
  KVTIER_RETURN_IF_ERROR(take_ms(params, "deadline_ms", cfg.deadline_ms, 10000));
  KVTIER_RETURN_IF_ERROR(take_ms(params, "probe_interval_ms", cfg.probe_interval_ms, 1000));
  if (*cfg.probe_interval_ms == 0) {
    return invalid_argument_error("probe_interval_ms is 0 (a probe needs an interval)");
  }
  if (auto it = params.find("isolate"); it != params.end() && cfg.isolate.empty()) {
    cfg.isolate = it->second;
  }
  if (auto it = params.find("admission"); it != params.end() && cfg.admission.empty()) {
    cfg.admission = it->second;
  }
  if (cfg.isolate.empty()) cfg.isolate = "auto";
  if (cfg.isolate != "auto" && cfg.isolate != "on" && cfg.isolate != "off") {
    return invalid_argument_error(fmt::format("isolate '{}' (use auto, on or off)", cfg.isolate));
  }
  return ok_status();
}

}  // namespace

// What layout=auto resolves to. A namespace that already holds page files keeps the files
// layout (its pages stay readable); one that holds segments keeps segments; an empty one gets
// segments when its pages are below kAutoSegmentsBelow (kAutoObjectSegmentsBelow on an
// object store; fixed by the namespace, or the caller's page_bytes when its pieces differ in
// size), files otherwise.
Result<Store::Impl::AutoLayout> Store::Impl::choose_layout() {
  if (config.location.storage_class == StorageClass::kMemory) {
    return AutoLayout{StoreLayout::kFiles, "memory: one object per page"};
  }
  const bool object = config.location.storage_class == StorageClass::kObject;
  const uint64_t below = object ? kAutoObjectSegmentsBelow : kAutoSegmentsBelow;
  // The first page file found ends the walk (a sentinel status, never returned).
  bool page_files = false;
  for (size_t b = 0; b < router.base_count() && !page_files; ++b) {
    Status st = for_each_fanout(b, /*with_details=*/false,
                                [&](const std::string&, const std::vector<ObjectInfo>& pages) {
                                  for (const ObjectInfo& e : pages) {
                                    if (parse_hash_hex(e.name)) {
                                      page_files = true;
                                      return cancelled_error("found");
                                    }
                                  }
                                  return ok_status();
                                });
    if (!st.ok() && !page_files) return st;
  }
  if (page_files) {
    return AutoLayout{StoreLayout::kFiles, "the namespace already holds page files"};
  }
  bool segments = false;
  for (size_t b = 0; b < router.base_count() && !segments; ++b) {
    KVTIER_RETURN_IF_ERROR(
        list_summaries(b, [&](const std::string&, uint64_t) { segments = true; }));
  }
  if (segments) {
    return AutoLayout{StoreLayout::kSegments, "the namespace already holds segments"};
  }
  const uint64_t page = config.ns.piece_bytes != 0
                            ? config.ns.piece_bytes * config.ns.pieces_per_page
                            : config.page_bytes;
  if (page == 0) {
    return AutoLayout{StoreLayout::kFiles, "page size unknown (pieces of unequal sizes)"};
  }
  const std::string_view where = object ? " on an object store" : "";
  if (page < below) {
    return AutoLayout{StoreLayout::kSegments,
                      fmt::format("pages of {} B, below {} MiB{}", page, below >> 20, where)};
  }
  return AutoLayout{StoreLayout::kFiles,
                    fmt::format("pages of {} B, {} MiB or more{}", page, below >> 20, where)};
}

Result<std::unique_ptr<Store>> Store::open(const StoreConfig& config) {
  KVTIER_RETURN_IF_ERROR(config.ns.validate());
  if (config.location.bases.empty()) {
    return invalid_argument_error("store location has no base directory");
  }
  // Refused before anything is created or written.
  if ((config.capacity_bytes != 0 || config.min_free_bytes != 0) &&
      config.location.storage_class != StorageClass::kFile) {
    return unsupported_error(fmt::format(
        "{}: capacity_bytes and min_free_bytes need a FILE store (directories); object stores "
        "bound their size with the bucket's own lifecycle rules",
        config.location.uri()));
  }
  const std::string_view layout_name =
      config.layout.empty() ? std::string_view(config.location.layout) : config.layout;
  const bool auto_layout = layout_name == "auto";
  StoreLayout layout = StoreLayout::kFiles;
  if (!auto_layout) {
    KVTIER_ASSIGN_OR_RETURN(layout, parse_store_layout(layout_name));
    if (layout == StoreLayout::kSegments) {
      KVTIER_RETURN_IF_ERROR(check_segments_config(config));
    }
  }
  // Segment lanes (and a FILE store's deadline and isolation) are the store's parameters,
  // not the backend's.
  StoreConfig cfg = config;
  KVTIER_RETURN_IF_ERROR(resolve_segment_lanes(cfg));
  KVTIER_RETURN_IF_ERROR(resolve_refresh_ms(cfg));
  if (cfg.location.storage_class == StorageClass::kFile) {
    KVTIER_RETURN_IF_ERROR(resolve_guard_params(cfg));
  }
  AgentConfig ac;
  ac.backend = cfg.backend.empty() ? cfg.location.backend : cfg.backend;
  ac.storage_class = cfg.location.storage_class;
  ac.params = cfg.location.params;
  ac.registry = &builtin_backends();
  ac.decorate = config.decorate;
  KVTIER_ASSIGN_OR_RETURN(Agent agent, Agent::create(ac));
  routing::Router router(config.location.bases, config.ns.id());
  auto impl = std::make_shared<Impl>(cfg, std::move(agent), std::move(router));
  impl->layout = layout;
  impl->layout_summary = std::string(store_layout_name(layout));
  if (auto_layout) {
    KVTIER_ASSIGN_OR_RETURN(Impl::AutoLayout chosen, impl->choose_layout());
    if (chosen.layout == StoreLayout::kSegments) {
      KVTIER_RETURN_IF_ERROR(check_segments_config(config));
    }
    impl->layout = layout = chosen.layout;
    impl->layout_summary =
        fmt::format("{} (auto: {})", store_layout_name(chosen.layout), chosen.reason);
  }
  if (layout == StoreLayout::kSegments && config.capacity_bytes != 0) {
    // Capacity is reclaimed a segment at a time: segments of at most 1/64 of it (1 MiB at
    // least) keep the budget's grain fine.
    impl->config.segment_bytes =
        std::min(config.segment_bytes, std::max<uint64_t>(config.capacity_bytes / 64, 1 << 20));
  }
  KVTIER_RETURN_IF_ERROR(impl->open_namespace().with_context(
      fmt::format("opening store at {}", config.location.uri())));
  KVTIER_RETURN_IF_ERROR(
      (layout == StoreLayout::kSegments ? impl->segments_open()
                                        : impl->scan_index(/*as_recent=*/true))
          .with_context(fmt::format("indexing the store at {}", config.location.uri())));
  if (std::optional<clear_generation::Generation> g = impl->read_generation()) {
    MutexLock lock(impl->generation_mu);  // not shared yet: uncontended
    impl->seen_generation = *g;
  }
  if (config.capacity_bytes != 0 || config.min_free_bytes != 0) {
    // What is charged: page objects (files), or every segment and summary file (segments).
    uint64_t scanned = impl->index.bytes();
    if (layout == StoreLayout::kSegments) {
      KVTIER_ASSIGN_OR_RETURN(scanned, impl->segment_file_bytes());
    }
    KVTIER_ASSIGN_OR_RETURN(impl->ledger, Ledger::open(impl->router.namespace_dir(0), scanned));
    if (layout == StoreLayout::kFiles && config.capacity_bytes != 0 &&
        !on_fuse_filesystem(impl->router.namespace_dir(0))) {
      // One slot per 16 KiB of capacity: four per page of 64 KiB. Marks are hints: a store
      // that cannot map them evicts by its own reads alone, as it does across hosts.
      if (Result<std::unique_ptr<ReadMarks>> marks =
              ReadMarks::open(impl->router.namespace_dir(0), config.capacity_bytes / 16384);
          marks.ok()) {
        impl->read_marks = std::move(marks).value();
      }
      if (Result<std::unique_ptr<KeyRing>> gone =
              KeyRing::open(impl->router.namespace_dir(0) + "/" + std::string(routing::kGoneFile),
                            kGoneMagic, kGoneSlots);
          gone.ok()) {
        impl->gone = std::move(gone).value();
      }
    }
    // Alone: segments nobody sealed belong to writers that are gone, and can be reclaimed.
    if (layout == StoreLayout::kSegments && impl->ledger->reset_on_open()) {
      impl->segments_adopt_abandoned();
    }
  }
  if (cfg.admission.empty()) cfg.admission = "adaptive";
  if (cfg.admission != "adaptive" && cfg.admission != "always") {
    return invalid_argument_error(
        fmt::format("admission '{}' (use adaptive or always)", cfg.admission));
  }
  if (cfg.admission == "always") {
    impl->admission_summary = "always";
  } else if (config.capacity_bytes == 0 || !impl->ledger) {
    impl->admission_summary = "always (adaptive needs a capacity_bytes)";
  } else {
    // One doorkeeper and one ring of keys asked for the namespace's stores on this host (not
    // across hosts: see read marks above); a store that cannot map them keeps its own.
    std::unique_ptr<SharedFile> written;
    std::unique_ptr<KeyRing> asked;
    if (const std::string& dir = impl->router.namespace_dir(0); !on_fuse_filesystem(dir)) {
      if (auto f = AdmissionPolicy::open_doorkeeper_file(dir, config.capacity_bytes); f.ok()) {
        written = std::move(f).value();
      }
      if (auto f = AdmissionPolicy::open_lookups_file(dir); f.ok()) asked = std::move(f).value();
    }
    impl->admission = std::make_unique<AdmissionPolicy>(config.capacity_bytes, std::move(written),
                                                        std::move(asked));
  }
  KVTIER_RETURN_IF_ERROR(impl->start_guard());
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Status Store::Impl::start_guard() {
  const StoreConfig& c = config;
  if (c.location.storage_class != StorageClass::kFile || *c.deadline_ms == 0) return ok_status();
  guard::GuardConfig gc;
  gc.deadline = std::chrono::milliseconds(*c.deadline_ms);
  gc.probe_interval = std::chrono::milliseconds(*c.probe_interval_ms);
  gc.threads_per_lane = c.guard_threads;
  gc.on_health_change = c.on_health_change;
  if (!gc.on_health_change) {
    gc.on_health_change = [](std::string_view line) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    };
  }
  bool any = false;
  for (size_t b = 0; b < router.base_count(); ++b) {
    KVTIER_ASSIGN_OR_RETURN(guard::Isolation iso,
                            guard::decide_isolation(router.namespace_dir(b), c.isolate));
    any = any || iso.on;
    gc.isolation.push_back(std::move(iso));
    gc.probe_dirs.push_back(router.temp_dir(b));
    gc.base_names.push_back(router.base(b));
  }
  if (any) {
    // A store is as bounded as its slowest base: the bases share locks and files (the segment
    // table, the capacity ledger and the clear generation on base 0), so one that hangs can
    // hold a call to another. Every base then runs through the guard.
    for (guard::Isolation& iso : gc.isolation) {
      if (!iso.on) iso = {true, fmt::format("on (another base can hang; here {})", iso.why)};
    }
  }
  isolation_summary.clear();
  for (size_t b = 0; b < gc.isolation.size(); ++b) {
    isolation_summary +=
        fmt::format("{}{}: {}", b ? "; " : "", gc.base_names[b], gc.isolation[b].why);
  }
  if (!any) return ok_status();
  guard::Guard::Ops ops;
  Impl* p = this;
  ops.put = [p](std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces) {
    return p->put_here(keys, pieces);
  };
  ops.get = [p](std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces,
                const guard::PageDone* done) { return p->get_here(keys, pieces, done); };
  ops.batch_exists = [p](std::span<const std::string_view> keys) {
    return p->batch_exists_here(keys);
  };
  ops.exists = [p](std::string_view key) { return p->exists_here(key); };
  ops.validate = [p](std::string_view key, std::span<const ConstBuffer> pieces, uint64_t* payload) {
    Status st = p->validate_page(key, pieces, payload);
    if (!st.ok()) {
      bump(p->counters.invalid_requests);
      p->count_error(st);
    }
    return st;
  };
  ops.indexed = [p](const Hash128& h) { return p->index.contains(h); };
  ops.base_of = [p](const Hash128& h) { return p->router.pick_base(h); };
  ops.staging = [p](uint64_t bytes, std::byte** data) -> std::shared_ptr<void> {
    StagingPool::Lease lease = p->staging.acquire(bytes);
    if (!lease) return nullptr;
    *data = lease.data();
    return std::make_shared<StagingPool::Lease>(std::move(lease));
  };
  ops.count_failure = [p](bool put, const Status& st) {
    bump(put ? p->counters.put_failures : p->counters.get_failures);
    p->count_error(st);
  };
  guard_deadline = gc.deadline;
  guard = std::make_unique<guard::Guard>(std::move(gc), std::move(ops),
                                         std::weak_ptr<void>(shared_from_this()));
  return ok_status();
}

Result<Registration> Store::register_memory(void* addr, size_t length) {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
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
  if (Status st = impl_->owner.check(kStoreName); !st.ok()) return BatchResult{std::move(st), {}};
  return impl_->put(keys, pieces);
}

BatchResult Store::batch_get(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces) {
  if (Status st = impl_->owner.check(kStoreName); !st.ok()) return BatchResult{std::move(st), {}};
  return impl_->get(keys, pieces);
}

Result<bool> Store::exists(std::string_view key, ExistsCall call) {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  if (call == ExistsCall::kLookup) impl_->note_lookup(std::span<const std::string_view>(&key, 1));
  if (impl_->guard) return impl_->guard->exists(key);
  return impl_->exists_here(key);
}

size_t Store::batch_exists(std::span<const std::string_view> keys, ExistsCall call) {
  if (!impl_->owner.here()) return 0;
  BatchTimer timer(impl_->counters, impl_->counters.exists_latency);
  if (call == ExistsCall::kLookup) impl_->note_lookup(keys);
  return impl_->guard ? impl_->guard->batch_exists(keys) : impl_->batch_exists_here(keys);
}

std::vector<bool> Store::indexed(std::span<const std::string_view> keys, ExistsCall call) const {
  if (!impl_->owner.here()) return std::vector<bool>(keys.size(), false);
  if (call == ExistsCall::kLookup) impl_->note_lookup(keys);
  std::vector<bool> out(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    out[i] = routing::validate_key(keys[i]).ok() && impl_->index.contains(hash128(keys[i]));
  }
  return out;
}

void Store::Impl::EvictionJournal::add(std::span<const Hash128> evicted) {
  MutexLock lock(mu);
  if (max_pending == 0 || evicted.empty()) return;
  for (const Hash128& h : evicted) keys.push_back(h);
  while (keys.size() > max_pending) {
    keys.pop_front();
    ++dropped;
  }
}

void Store::watch_evictions(size_t max_pending) {
  if (!impl_->owner.here()) return;
  Impl::EvictionJournal& j = impl_->evictions;
  MutexLock lock(j.mu);
  j.max_pending = max_pending;
  while (j.keys.size() > max_pending) {
    j.keys.pop_front();
    ++j.dropped;
  }
}

Store::Evicted Store::take_evicted() {
  if (!impl_->owner.here()) return {};
  Impl::EvictionJournal& j = impl_->evictions;
  Evicted out;
  MutexLock lock(j.mu);
  out.keys.assign(j.keys.begin(), j.keys.end());
  out.dropped = j.dropped;
  j.keys.clear();
  j.dropped = 0;
  return out;
}

void Store::Impl::forget_gone() {
  if (gone) {
    // Not its own: those left the index as they were chosen, and one put again since is back.
    for (const Hash128& hash : gone->drain(KeyRing::Whose::kOthers)) index.erase(hash);
  }
}

Result<bool> Store::Impl::exists_here(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  bump(counters.exists_queries);
  observe_generation();
  forget_gone();
  const routing::Route r = router.route(key);
  if (index.contains(r.key_hash)) return true;
  if (layout == StoreLayout::kSegments) {
    // Not indexed: perhaps another writer appended it since this store looked.
    bump(counters.index_stats);
    std::vector<bool> base(router.base_count(), false);
    base[r.base] = true;
    segments_refresh(base, lookup_max_age_ns());
    return index.contains(r.key_hash);
  }
  // Not indexed: perhaps another process wrote it since this one looked.
  bump(counters.index_stats);
  Result<ObjectInfo> info = agent.stat(r.path);
  if (info.ok()) {
    if (info->is_dir || info->size <= kHeaderBytes) return false;
    index.put_cold({r.key_hash, static_cast<uint32_t>(r.base), info->size});
    return true;
  }
  if (info.status().code() == StatusCode::kNotFound) return false;
  return info.status();
}

size_t Store::Impl::batch_exists_here(std::span<const std::string_view> keys) {
  Impl& impl = *this;
  impl.observe_generation();
  impl.forget_gone();
  size_t n = 0;
  // Indexed keys cost no system call; from the first one that is not, ask storage.
  for (; n < keys.size(); ++n) {
    if (!routing::validate_key(keys[n]).ok()) {
      bump(impl.counters.exists_queries, n + 1);
      return n;  // a bad key ends the prefix
    }
    if (!impl.index.contains(hash128(keys[n]))) break;  // the route's key_hash
  }
  if (impl.layout == StoreLayout::kSegments) {
    if (n == keys.size()) {
      bump(impl.counters.exists_queries, n);
      return n;
    }
    // One look at what other writers appended, then the index answers the rest.
    impl.segments_refresh({}, impl.lookup_max_age_ns());
    bump(impl.counters.index_stats);
    for (; n < keys.size(); ++n) {
      if (!routing::validate_key(keys[n]).ok()) break;
      if (!impl.index.contains(hash128(keys[n]))) break;  // the route's key_hash
    }
    bump(impl.counters.exists_queries, std::min(n + 1, keys.size()));
    return n;
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
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  const routing::Route r = impl_->router.route(key);
  if (impl_->layout == StoreLayout::kSegments) {
    if (!impl_->index.contains(r.key_hash)) {
      std::vector<bool> base(impl_->router.base_count(), false);
      base[r.base] = true;
      impl_->segments_refresh(base, impl_->lookup_max_age_ns());
    }
    if (!impl_->index.erase(r.key_hash)) {
      return not_found_error(fmt::format("no page {} to remove", r.key_hash.hex()));
    }
    KVTIER_RETURN_IF_ERROR(impl_->segments_forget(r.key_hash, r.base));
    bump(impl_->counters.removes);
    return ok_status();
  }
  uint64_t bytes = 0;
  if (impl_->ledger) {
    Result<ObjectInfo> info = impl_->agent.stat(r.path);
    if (info.ok()) bytes = info->size;
  }
  Status st = impl_->agent.remove(r.path);
  impl_->index.erase(r.key_hash);
  KVTIER_RETURN_IF_ERROR(st);
  if (impl_->gone) impl_->gone->append({&r.key_hash, 1});
  if (impl_->ledger) impl_->ledger->release(bytes).ignore_error();
  bump(impl_->counters.removes);
  return ok_status();
}

Status Store::clear() {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  Impl& impl = *impl_;
  const bool ledger = impl.ledger != nullptr;
  uint64_t freed = 0;
  Status result;
  if (impl.layout == StoreLayout::kSegments) {
    uint64_t pages = 0;
    result = impl.segments_clear(&pages);
    bump(impl.counters.cleared, pages);
  }
  for (size_t b = 0;
       b < impl.router.base_count() && result.ok() && impl.layout == StoreLayout::kFiles; ++b) {
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

bool Store::wait_health(bool answering, std::chrono::nanoseconds timeout) {
  if (!impl_->owner.here()) return false;
  if (!impl_->guard) return answering;
  return impl_->guard->wait_health(answering, timeout);
}

const NamespaceSpec& Store::namespace_spec() const {
  return impl_->config.ns;
}
Hash128 Store::namespace_id() const {
  return impl_->ns_id;
}
StoreLayout Store::layout() const {
  return impl_->layout;
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
