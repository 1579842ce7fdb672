#include "kvtier/transfer/agent.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <unordered_set>

#include "kvtier/core/mutex.h"
#include "kvtier/core/process.h"

namespace kvtier {
namespace detail {

// A registered region and its lifecycle. `live` turns false when its Registration is released;
// the backend deregistration waits until no posted transfer uses it.
struct RegionState : MemoryRecord {
  Mutex mu;
  std::condition_variable drained;
  bool live KVTIER_GUARDED_BY(mu) = true;
  uint64_t inflight KVTIER_GUARDED_BY(mu) = 0;
};

struct TargetState {
  explicit TargetState(std::unique_ptr<BackendTarget> t) : impl(std::move(t)) {}
  std::unique_ptr<BackendTarget> impl;
  std::atomic<uint32_t> writes_inflight{0};
  std::atomic<bool> published{false};
};

struct AgentCore {
  // Declared first so it is destroyed last. Every handle holds a reference to the core, so
  // the backend outlives every target and transfer it produced.
  std::unique_ptr<Backend> backend;
  BackendSelection selection;
  // The process that created the agent. In another (a forked child) every call is refused,
  // and the agent and its handles release nothing: the backend's threads, rings and
  // registrations are the parent's (core/process.h).
  OwningProcess owner;

  // Serializes register_memory() calls, so the overlap check and the insertion are one step.
  Mutex register_mu;
  mutable SharedMutex regions_mu;
  std::map<const std::byte*, std::shared_ptr<RegionState>> regions KVTIER_GUARDED_BY(regions_mu);
  std::atomic<uint64_t> next_region_id{1};

  std::shared_ptr<RegionState> find_region(const std::byte* p, uint64_t len) const {
    ReaderLock lock(regions_mu);
    auto it = regions.upper_bound(p);
    if (it == regions.begin()) return nullptr;
    --it;
    const RegionState& r = *it->second;
    const uint64_t off = static_cast<uint64_t>(p - r.base);
    if (p < r.base || off > r.length || len > r.length - off) return nullptr;
    return it->second;
  }

  bool overlaps_locked(const std::byte* p, size_t len) const KVTIER_REQUIRES_SHARED(regions_mu) {
    auto it = regions.lower_bound(p);
    if (it != regions.end() && it->first < p + len) return true;
    if (it != regions.begin()) {
      --it;
      if (it->first + it->second->length > p) return true;
    }
    return false;
  }

  void deregister(RegionState& region) noexcept {
    {
      WriterLock lock(regions_mu);
      regions.erase(region.base);
    }
    {
      MutexLock lock(region.mu);
      region.live = false;
      lock.wait(region.drained, [&]() KVTIER_REQUIRES(region.mu) { return region.inflight == 0; });
    }
    backend->deregister_memory(region);
  }
};

// One request: the descriptors, what keeps their memory and targets alive, and the results.
struct TransferImpl final : IoBatch {
  std::shared_ptr<AgentCore> core;
  TransferOp op_ = TransferOp::kRead;
  std::vector<IoDesc> descs_;
  std::vector<std::shared_ptr<RegionState>> regions;  // distinct
  std::vector<std::shared_ptr<TargetState>> targets;  // distinct
  std::vector<Status> results;
  std::atomic<size_t> remaining{0};
  std::atomic<bool> cancel_flag{false};
  TransferCallbacks callbacks;  // set before each post, read by completing threads

  mutable Mutex mu;
  std::condition_variable cv;
  TransferState state KVTIER_GUARDED_BY(mu) = TransferState::kPrepared;

  TransferOp op() const override { return op_; }
  std::span<const IoDesc> descs() const override { return descs_; }
  bool cancel_requested() const override { return cancel_flag.load(std::memory_order_relaxed); }

  void complete(size_t index, Status status) override {
    results[index] = std::move(status);
    if (callbacks.on_descriptor) callbacks.on_descriptor(index, results[index]);
    if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) finish();
  }

  // Acquires the regions and targets for a post. On failure nothing stays acquired.
  Status acquire() {
    size_t acquired = 0;
    Status st;
    for (; acquired < regions.size(); ++acquired) {
      RegionState& r = *regions[acquired];
      MutexLock lock(r.mu);
      if (!r.live) {
        st = invalid_argument_error(fmt::format("memory region {} [{}, +{}) was deregistered", r.id,
                                                fmt::ptr(r.base), r.length));
        break;
      }
      ++r.inflight;
    }
    if (st.ok() && op_ == TransferOp::kWrite) {
      for (const auto& t : targets) {
        if (t->published.load()) {
          st = invalid_argument_error(
              fmt::format("target '{}' is already published", t->impl->path()));
          break;
        }
      }
    }
    if (!st.ok()) {
      release_regions(acquired);
      return st;
    }
    if (op_ == TransferOp::kWrite) {
      for (const auto& t : targets) t->writes_inflight.fetch_add(1);
    }
    return ok_status();
  }

  void release_regions(size_t count) {
    for (size_t i = 0; i < count; ++i) {
      RegionState& r = *regions[i];
      MutexLock lock(r.mu);
      if (--r.inflight == 0) r.drained.notify_all();
    }
  }

  void finish() {
    if (callbacks.on_done) callbacks.on_done();
    release_regions(regions.size());
    if (op_ == TransferOp::kWrite) {
      for (const auto& t : targets) t->writes_inflight.fetch_sub(1);
    }
    // Notify under the lock: once it is released a waiter may destroy this object, and this
    // thread touches nothing after the unlock.
    MutexLock lock(mu);
    state = TransferState::kDone;
    cv.notify_all();
  }

  void wait_done() {
    MutexLock lock(mu);
    lock.wait(cv, [&]() KVTIER_REQUIRES(mu) { return state != TransferState::kInFlight; });
  }
};

}  // namespace detail

using detail::AgentCore;

namespace {
constexpr std::string_view kAgentName = "this kvtier agent";
}  // namespace
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

// ---- Registration ----

Registration::Registration() noexcept = default;
Registration::Registration(Registration&&) noexcept = default;
Registration& Registration::operator=(Registration&& other) noexcept {
  if (this != &other) {
    reset();
    core_ = std::move(other.core_);
    regions_ = std::move(other.regions_);
  }
  return *this;
}
Registration::~Registration() {
  reset();
}

void Registration::reset() noexcept {
  if (core_ && !core_->owner.here()) {
    abandon(core_);  // with it every region it registered: nothing is deregistered
    regions_.clear();
    return;
  }
  for (auto& r : regions_) core_->deregister(*r);
  regions_.clear();
  core_.reset();
}

// ---- Target ----

Target::Target() noexcept = default;
Target::Target(Target&&) noexcept = default;
Target& Target::operator=(Target&& other) noexcept {
  if (this != &other) {
    reset();
    core_ = std::move(other.core_);
    state_ = std::move(other.state_);
  }
  return *this;
}
Target::~Target() {
  reset();
}

void Target::reset() noexcept {
  if (core_ && !core_->owner.here()) {
    abandon(state_);
    abandon(core_);
    return;
  }
  state_.reset();  // before core_: the backend outlives the target
  core_.reset();
}

const std::string& Target::path() const {
  return state_->impl->path();
}
TargetMode Target::mode() const {
  return state_->impl->mode();
}
uint64_t Target::size() const {
  return state_->impl->size();
}
ObjectIdentity Target::identity() const {
  return state_->impl->identity();
}

Status Target::publish(const PublishOptions& options) {
  if (!state_) return invalid_argument_error("publish on an empty Target");
  if (state_->impl->mode() != TargetMode::kCreate) {
    return invalid_argument_error(fmt::format(
        "target '{}' was not opened with kCreate; only kCreate targets publish", path()));
  }
  if (state_->writes_inflight.load() != 0) {
    return invalid_argument_error(
        fmt::format("target '{}' has a write in flight; wait for it before publishing", path()));
  }
  bool expected = false;
  if (!state_->published.compare_exchange_strong(expected, true)) {
    return invalid_argument_error(fmt::format("target '{}' is already published", path()));
  }
  Status st = core_->backend->publish(*state_->impl, options);
  if (!st.ok()) state_->published.store(false);
  return st;
}

Status Target::sync() const {
  if (!state_) return invalid_argument_error("sync on an empty Target");
  if (state_->impl->mode() != TargetMode::kAppend) {
    return invalid_argument_error(fmt::format(
        "target '{}' was not opened with kAppend; only kAppend targets sync (kCreate targets "
        "publish durably)",
        path()));
  }
  if (state_->writes_inflight.load() != 0) {
    return invalid_argument_error(
        fmt::format("target '{}' has a write in flight; wait for it before syncing", path()));
  }
  return core_->backend->sync(*state_->impl);
}

// ---- Transfer ----

Transfer::Transfer() noexcept = default;
Transfer::Transfer(Transfer&&) noexcept = default;
Transfer& Transfer::operator=(Transfer&& other) noexcept {
  if (this != &other) {
    release();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Transfer::~Transfer() {
  release();
}

void Transfer::release() noexcept {
  if (!impl_) return;
  if (!impl_->core->owner.here()) {
    abandon(impl_);  // in flight in the parent, maybe: nothing here will finish it
    return;
  }
  cancel();
  impl_->wait_done();
}

Status Transfer::post(TransferCallbacks callbacks) {
  if (!impl_) return invalid_argument_error("post on an empty Transfer");
  KVTIER_RETURN_IF_ERROR(impl_->core->owner.check(kAgentName));
  {
    MutexLock lock(impl_->mu);
    if (impl_->state == TransferState::kInFlight) {
      return invalid_argument_error("transfer is already in flight");
    }
    KVTIER_RETURN_IF_ERROR(impl_->acquire());
    impl_->callbacks = std::move(callbacks);
    impl_->cancel_flag.store(false);
    impl_->remaining.store(impl_->descs_.size());
    impl_->state = TransferState::kInFlight;
  }
  if (impl_->descs_.empty()) {
    impl_->finish();
  } else {
    impl_->core->backend->submit(*impl_);
  }
  return ok_status();
}

TransferState Transfer::state() const {
  if (!impl_) return TransferState::kPrepared;
  MutexLock lock(impl_->mu);
  return impl_->state;
}

Status Transfer::wait(std::chrono::nanoseconds timeout) {
  if (!impl_) return invalid_argument_error("wait on an empty Transfer");
  MutexLock lock(impl_->mu);
  if (impl_->state == TransferState::kPrepared) {
    return invalid_argument_error("wait on a transfer that was never posted");
  }
  if (!lock.wait_for(impl_->cv, timeout, [&]() KVTIER_REQUIRES(impl_->mu) {
        return impl_->state != TransferState::kInFlight;
      })) {
    return deadline_exceeded_error(
        fmt::format("transfer of {} descriptors still in flight after {} ms", impl_->descs_.size(),
                    std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()));
  }
  return ok_status();
}

void Transfer::wait() {
  if (impl_) impl_->wait_done();
}

void Transfer::cancel() noexcept {
  if (!impl_) return;
  {
    MutexLock lock(impl_->mu);
    if (impl_->state != TransferState::kInFlight) return;
    impl_->cancel_flag.store(true);
  }
  // The batch cannot finish-and-vanish under us: only this handle's owner destroys it, and it
  // is busy here.
  impl_->core->backend->cancel(*impl_);
}

std::span<const Status> Transfer::results() const {
  if (!impl_) return {};
  return impl_->results;
}

Status Transfer::first_error() const {
  for (const Status& s : results()) {
    if (!s.ok()) return s;
  }
  return ok_status();
}

size_t Transfer::size() const {
  return impl_ ? impl_->descs_.size() : 0;
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
