// The Agent (agent.h): backend selection, registering memory, opening targets and making
// requests; the state behind them is agent_core.h, the handles it gives out handles.cc.
#include "kvtier/transfer/agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "agent_core.h"
#include "kvtier/core/mutex.h"
#include "kvtier/core/process.h"

namespace kvtier {

using detail::AgentCore;
using detail::RegionState;
using detail::TargetState;
using detail::TransferImpl;

std::string BackendSelection::summary() const {
  std::string s = chosen;
  if (automatic) {
    s += " (auto";
    for (const std::string& r : rejected) s += "; skipped " + r;
    s += ")";
  }
  return s;
}

// ---- Agent ----

Agent::Agent(std::shared_ptr<AgentCore> core) : core_(std::move(core)) {}
Agent::Agent(Agent&&) noexcept = default;
Agent& Agent::operator=(Agent&&) noexcept = default;
Agent::~Agent() {
  if (core_ && !core_->owner.here()) abandon(core_);
}

Result<Agent> Agent::create(const AgentConfig& config) {
  if (config.registry == nullptr) return invalid_argument_error("AgentConfig.registry is null");
  BackendSelection selection;
  std::unique_ptr<Backend> backend;
  if (config.backend.empty() || config.backend == "auto") {
    selection.automatic = true;
    const auto candidates = config.registry->candidates(config.storage_class);
    if (candidates.empty()) {
      return unsupported_error(fmt::format("no backend is built for storage class {}",
                                           storage_class_name(config.storage_class)));
    }
    KVTIER_RETURN_IF_ERROR(check_params(config.params, candidates));
    for (const BackendRegistry::Entry* e : candidates) {
      Result<std::unique_ptr<Backend>> made = e->factory(config.params);
      if (made.ok()) {
        backend = std::move(made).value();
        break;
      }
      // A bad parameter is the caller's mistake, not a backend that cannot start here.
      if (made.status().code() == StatusCode::kInvalidArgument) {
        return made.status().with_context(fmt::format("backend '{}'", e->name));
      }
      selection.rejected.push_back(fmt::format("{}: {}", e->name, made.status().to_string()));
    }
    if (!backend) {
      return unavailable_error(
          fmt::format("no {} backend could start: {}", storage_class_name(config.storage_class),
                      fmt::join(selection.rejected, "; ")),
          false);
    }
  } else {
    const BackendRegistry::Entry* e = config.registry->find(config.backend);
    if (e == nullptr) {
      return invalid_argument_error(fmt::format("unknown backend '{}' (known: auto, {})",
                                                config.backend,
                                                fmt::join(config.registry->names(), ", ")));
    }
    KVTIER_RETURN_IF_ERROR(check_params(config.params, std::span(&e, 1)));
    Result<std::unique_ptr<Backend>> made = e->factory(config.params);
    if (!made.ok()) return made.status().with_context(fmt::format("backend '{}'", e->name));
    backend = std::move(made).value();
  }
  selection.chosen = std::string(backend->name());
  if (config.decorate) backend = config.decorate(std::move(backend));
  auto core = std::make_shared<AgentCore>();
  core->backend = std::move(backend);
  core->selection = std::move(selection);
  return Agent(std::move(core));
}

const BackendSelection& Agent::selection() const {
  return core_->selection;
}
std::string_view Agent::backend_name() const {
  return core_->selection.chosen;
}
std::string Agent::backend_description() const {
  return core_->backend->describe();
}
StorageClass Agent::storage_class() const {
  return core_->backend->storage_class();
}

Result<Registration> Agent::register_memory(void* addr, size_t length) {
  const MemoryRegion r{addr, length};
  return register_memory(std::span<const MemoryRegion>(&r, 1));
}

Result<Registration> Agent::register_memory(std::span<const MemoryRegion> regions) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  if (regions.empty()) return invalid_argument_error("register_memory: no regions");
  MutexLock reg_lock(core_->register_mu);
  Registration out;
  out.core_ = core_;
  for (size_t i = 0; i < regions.size(); ++i) {
    const auto* base = static_cast<const std::byte*>(regions[i].addr);
    const size_t len = regions[i].length;
    if (base == nullptr || len == 0) {
      return invalid_argument_error(
          fmt::format("register_memory: region {} is {} with length {}", i, fmt::ptr(base), len));
    }
    if (reinterpret_cast<uintptr_t>(base) > UINTPTR_MAX - len) {
      return invalid_argument_error(
          fmt::format("register_memory: region {} wraps the address space", i));
    }
    {
      ReaderLock lock(core_->regions_mu);
      if (core_->overlaps_locked(base, len)) {
        return invalid_argument_error(
            fmt::format("register_memory: region {} [{}, +{}) overlaps a registered region", i,
                        fmt::ptr(base), len));
      }
    }
    auto rec = std::make_shared<RegionState>();
    rec->base = base;
    rec->length = len;
    rec->id = core_->next_region_id.fetch_add(1);
    KVTIER_RETURN_IF_ERROR(core_->backend->register_memory(*rec));
    {
      WriterLock lock(core_->regions_mu);
      core_->regions.emplace(base, rec);
    }
    // From here `out` owns it: an early return above releases what was registered so far.
    out.regions_.push_back(std::move(rec));
  }
  return out;
}

Status Agent::check_registered(const void* addr, size_t length) const {
  if (addr == nullptr) return invalid_argument_error("memory address is null");
  if (length == 0) return invalid_argument_error("memory length is zero");
  if (!core_->find_region(static_cast<const std::byte*>(addr), length)) {
    return invalid_argument_error(fmt::format(
        "memory [{}, +{}) is not inside any registered region (register the pool first)",
        fmt::ptr(addr), length));
  }
  return ok_status();
}

size_t Agent::registered_region_count() const {
  ReaderLock lock(core_->regions_mu);
  return core_->regions.size();
}

Result<Target> Agent::open_target(const TargetSpec& spec) {
  auto all = open_targets(std::span<const TargetSpec>(&spec, 1));
  return std::move(all.front());
}

std::vector<Result<Target>> Agent::open_targets(std::span<const TargetSpec> specs) {
  if (Status st = core_->owner.check(kAgentName); !st.ok()) {
    std::vector<Result<Target>> refused;
    refused.reserve(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) refused.emplace_back(st);
    return refused;
  }
  auto opened = core_->backend->open_batch(specs);
  std::vector<Result<Target>> out;
  out.reserve(opened.size());
  for (auto& r : opened) {
    if (!r.ok()) {
      out.emplace_back(std::move(r).status());
      continue;
    }
    Target t;
    t.core_ = core_;
    t.state_ = std::make_shared<TargetState>(std::move(r).value());
    out.emplace_back(std::move(t));
  }
  return out;
}

Result<Transfer> Agent::make_request(TransferOp op, std::span<const MemDesc> mem,
                                     std::span<const StorageDesc> storage) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  if (mem.size() != storage.size()) {
    return invalid_argument_error(fmt::format(
        "descriptor lists differ in length: {} memory, {} storage", mem.size(), storage.size()));
  }
  auto impl = std::make_unique<TransferImpl>();
  impl->core = core_;
  impl->op_ = op;
  impl->descs_.reserve(mem.size());
  impl->results.resize(mem.size());
  std::unordered_set<const RegionState*> seen_regions;
  std::unordered_set<const TargetState*> seen_targets;
  for (size_t i = 0; i < mem.size(); ++i) {
    const MemDesc& m = mem[i];
    const StorageDesc& s = storage[i];
    auto bad = [&](std::string why) {
      return invalid_argument_error(fmt::format("descriptor {}: {}", i, why));
    };
    if (m.length == 0 || m.length != s.length) {
      return bad(fmt::format("lengths must be equal and non-zero (memory {}, storage {})", m.length,
                             s.length));
    }
    if (s.target == nullptr || !s.target->valid()) return bad("no target");
    if (s.target->core_ != core_) return bad("target belongs to another agent");
    const std::shared_ptr<TargetState>& ts = s.target->state_;
    if (s.offset > UINT64_MAX - s.length) return bad("storage offset + length overflows");
    if (op == TransferOp::kWrite && ts->impl->mode() == TargetMode::kRead) {
      return bad(fmt::format("target '{}' was opened for reading", ts->impl->path()));
    }
    if (op == TransferOp::kWrite && ts->impl->mode() == TargetMode::kAppend &&
        s.offset < ts->impl->size()) {
      return bad(fmt::format(
          "[{}, +{}) would change bytes of '{}' that were there when it was opened (size {}); "
          "an append target writes only past them",
          s.offset, s.length, ts->impl->path(), ts->impl->size()));
    }
    if (op == TransferOp::kRead && ts->impl->mode() != TargetMode::kCreate &&
        s.offset + s.length > ts->impl->size()) {
      return bad(fmt::format("[{}, +{}) is beyond the end of '{}' (size {})", s.offset, s.length,
                             ts->impl->path(), ts->impl->size()));
    }
    if (const auto& a = ts->impl->direct()) {
      if (reinterpret_cast<uintptr_t>(m.addr) % a->memory != 0 || s.offset % a->offset != 0 ||
          s.length % a->offset != 0) {
        return bad(fmt::format(
            "direct I/O on '{}' needs memory aligned to {} and offset/length to {} (memory {}, "
            "offset {}, length {})",
            ts->impl->path(), a->memory, a->offset, fmt::ptr(m.addr), s.offset, s.length));
      }
    }
    auto region = core_->find_region(static_cast<const std::byte*>(m.addr), m.length);
    if (!region) {
      return bad(fmt::format("memory [{}, +{}) is not inside any registered region",
                             fmt::ptr(m.addr), m.length));
    }
    impl->descs_.push_back(
        IoDesc{static_cast<std::byte*>(m.addr), m.length, ts->impl.get(), s.offset, region.get()});
    if (seen_regions.insert(region.get()).second) impl->regions.push_back(std::move(region));
    if (seen_targets.insert(ts.get()).second) impl->targets.push_back(ts);
  }
  Transfer t;
  t.impl_ = std::move(impl);
  return t;
}

Status Agent::make_dirs(std::string_view path) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  return core_->backend->make_dirs(path);
}
Status Agent::make_dir(std::string_view path) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  return core_->backend->make_dir(path);
}
Result<ObjectInfo> Agent::stat(std::string_view path) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  return core_->backend->stat(path);
}
Status Agent::remove(std::string_view path, const ObjectIdentity* if_identity) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  return core_->backend->remove(path, if_identity);
}
std::vector<Result<ObjectInfo>> Agent::stat_many(std::span<const std::string> paths,
                                                 bool until_missing) {
  if (Status st = core_->owner.check(kAgentName); !st.ok()) {
    return std::vector<Result<ObjectInfo>>(paths.size(), Result<ObjectInfo>(st));
  }
  return core_->backend->stat_many(paths, until_missing);
}
std::vector<Status> Agent::remove_many(std::span<const std::string> paths) {
  if (Status st = core_->owner.check(kAgentName); !st.ok()) {
    return std::vector<Status>(paths.size(), st);
  }
  return core_->backend->remove_many(paths);
}
Status Agent::list(std::string_view dir, const ListOptions& options,
                   const std::function<Status(const ObjectInfo&)>& fn) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  return core_->backend->list(dir, options, fn);
}
Result<size_t> Agent::sweep_temporaries(std::string_view temp_dir, uint64_t min_age_s) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  return core_->backend->sweep_temporaries(temp_dir, min_age_s);
}
Result<size_t> Agent::count_temporaries(std::string_view temp_dir) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  return core_->backend->count_temporaries(temp_dir);
}
Result<DirectIoAlignment> Agent::probe_direct_io(std::string_view dir) {
  KVTIER_RETURN_IF_ERROR(core_->owner.check(kAgentName));
  return core_->backend->probe_direct_io(dir);
}

}  // namespace kvtier
