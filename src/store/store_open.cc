// Opening a store: the configuration completed from the location's URI and checked,
// layout=auto decided, the namespace made or found on storage, the page index built, the
// capacity ledger and the other stores' shared files joined, and the guard started where a
// location can hang. Store::open is the one entry; everything it makes is Store::Impl's.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "capacity/footprint.h"
#include "format/page_format.h"
#include "kvtier/backends/builtin.h"
#include "kvtier/core/cpus.h"
#include "kvtier/store/store.h"
#include "naming/store_root.h"
#include "store_impl.h"

namespace kvtier {
namespace {

// A count parameter of a store's URI (StoreLocation::store_params), 1 to `most`, where the
// config does not set it (`field` 0).
Status take_count(const BackendParams& params, const std::string& name, size_t& field,
                  size_t most) {
  auto it = params.find(name);
  if (it == params.end() || field != 0) return ok_status();
  const std::string& v = it->second;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), field);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || field == 0 || field > most) {
    field = 0;
    return invalid_argument_error(
        fmt::format("{}='{}' is not a whole number from 1 to {}", name, v, most));
  }
  return ok_status();
}

// segment_lanes of a FILE or object store's URI, and cpus of a FILE store's (else the CPUs the
// process may run on).
Status resolve_counts(StoreConfig& cfg) {
  const BackendParams& params = cfg.location.store_params;
  KVTIER_RETURN_IF_ERROR(take_count(params, "segment_lanes", cfg.segment_lanes, 64));
  KVTIER_RETURN_IF_ERROR(take_count(params, "cpus", cfg.cpus, 1024));
  if (cfg.cpus == 0) cfg.cpus = usable_cpus();
  return ok_status();
}

// chunk_hash of a FILE or object store's URI, where the config does not set it; else "auto".
Status resolve_chunk_hash(StoreConfig& cfg) {
  const BackendParams& params = cfg.location.store_params;
  if (auto it = params.find("chunk_hash"); it != params.end() && cfg.chunk_hash.empty()) {
    cfg.chunk_hash = it->second;
  }
  if (cfg.chunk_hash.empty()) cfg.chunk_hash = "auto";
  if (!chunk_hash_named(cfg.chunk_hash)) {
    return invalid_argument_error(
        fmt::format("chunk_hash '{}' (use auto, crc64 or xxh3)", cfg.chunk_hash));
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

// How long Store::open may take: the deadline of a FILE store that may be isolated (deciding
// whether it is asks the filesystem, which may hang), else 0: none.
Result<uint64_t> open_deadline_ms(const StoreConfig& config) {
  if (config.location.storage_class != StorageClass::kFile) return uint64_t{0};
  StoreConfig cfg = config;
  KVTIER_RETURN_IF_ERROR(resolve_guard_params(cfg));
  if (cfg.isolate == "off") return uint64_t{0};
  return *cfg.deadline_ms;
}

// Stops an open whose caller gave up (run_alone): it would only be closed again.
Status still_wanted() {
  if (!guard::call_abandoned()) return ok_status();
  return cancelled_error("the open's caller gave up (its deadline passed)");
}

}  // namespace

// Where a location may hang, the open runs on a thread of its own (guard::run_alone) that the
// caller waits for until the deadline; a late open stops at its next step, and a store it
// opened meanwhile is closed on that thread.
Result<std::unique_ptr<Store>> Store::open(const StoreConfig& config) {
  KVTIER_ASSIGN_OR_RETURN(const uint64_t deadline_ms, open_deadline_ms(config));
  if (deadline_ms == 0) return open_here(config);
  std::function<Result<std::unique_ptr<Store>>()> body = [config] { return open_here(config); };
  std::optional<Result<std::unique_ptr<Store>>> opened =
      guard::run_alone(std::chrono::milliseconds(deadline_ms), std::move(body));
  if (opened) return std::move(*opened);
  return deadline_exceeded_error(
      fmt::format("opening store at {}: the location did not answer within the deadline of {} "
                  "ms (deadline_ms)",
                  config.location.uri(), deadline_ms));
}

Result<std::unique_ptr<Store>> Store::open_here(const StoreConfig& config) {
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
  // A layout named is checked before anything is created; layout=auto is decided below, once
  // the store can look at what the namespace holds.
  KVTIER_ASSIGN_OR_RETURN(const std::optional<StoreLayout> named, named_layout(config));
  // Segment lanes (and a FILE store's deadline and isolation) are the store's parameters,
  // not the backend's.
  StoreConfig cfg = config;
  KVTIER_RETURN_IF_ERROR(resolve_counts(cfg));
  KVTIER_RETURN_IF_ERROR(resolve_refresh_ms(cfg));
  KVTIER_RETURN_IF_ERROR(resolve_chunk_hash(cfg));
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
  // A FILE store's paths are built on its bases' real paths, checked before anything is put
  // there (naming/store_root.h); keys are spread by the names the location gives them.
  std::vector<std::string> bases = config.location.bases;
  if (agent.storage_class() == StorageClass::kFile) {
    KVTIER_ASSIGN_OR_RETURN(bases, store_root::prepare(agent, cfg.location, still_wanted));
  }
  KVTIER_RETURN_IF_ERROR(still_wanted());
  // A sealed store names its pages by keyed hashes (window/sealing.h).
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PageSealing> sealing, PageSealing::open(cfg));
  routing::KeyNamer namer;
  if (sealing) namer = [s = sealing.get()](std::string_view key) { return s->name(key); };
  routing::Router router(std::move(bases), config.ns.id(), config.location.bases, std::move(namer));
  auto impl = std::make_shared<Impl>(cfg, std::move(agent), std::move(router), std::move(sealing));
  KVTIER_ASSIGN_OR_RETURN(LayoutChoice chosen, choose_layout(*impl, named));
  impl->layout_summary = std::move(chosen.summary);
  impl->layout = make_layout(*impl, chosen.kind);
  // A capacity holds what the store keeps beside its pages too: a capacity too small for it
  // is refused before anything is made (capacity/footprint.h).
  KVTIER_RETURN_IF_ERROR(impl->capacity.plan(
      {config.capacity_bytes, config.min_free_bytes},
      {.page_files = impl->layout->fans_out(),
       .bases = impl->router.base_count(),
       .unit = config.capacity_bytes != 0 || config.min_free_bytes != 0
                   ? footprint::allocation_unit(impl->router.base(0))
                   : footprint::kBlockBytes},
      config.ns.piece_bytes != 0
          ? page::object_bytes(config.ns.piece_bytes * config.ns.pieces_per_page)
          : 0));
  KVTIER_RETURN_IF_ERROR(still_wanted());  // before it makes the namespace's directories
  KVTIER_RETURN_IF_ERROR(impl->open_namespace().with_context(
      fmt::format("opening store at {}", config.location.uri())));
  KVTIER_RETURN_IF_ERROR(still_wanted());
  KVTIER_RETURN_IF_ERROR(impl->layout->open().with_context(
      fmt::format("indexing the store at {}", config.location.uri())));
  KVTIER_RETURN_IF_ERROR(still_wanted());
  impl->generation.start();
  // What is charged when this store is alone: what its layout holds on storage.
  KVTIER_RETURN_IF_ERROR(impl->capacity.open(impl->router.namespace_dir(0),
                                             [&impl] { return impl->layout->charged_bytes(); }));
  if (impl->capacity.bounded()) impl->layout->with_capacity(impl->capacity.opened_alone());
  KVTIER_RETURN_IF_ERROR(impl->capacity.choose_admission(cfg.admission));
  impl->capacity.account_shared_files();
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
  ops.key_hash = [p](std::string_view key) { return p->router.key_hash(key); };
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
  health = guard.get();
  return ok_status();
}

}  // namespace kvtier
