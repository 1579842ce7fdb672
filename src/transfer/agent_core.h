// The state behind an Agent and its handles (agent.h), shared by agent.cc (the Agent) and
// handles.cc (Registration, Target, Transfer): the registered regions, the open targets and
// the requests, each owned by the handle that names it and kept alive by what uses it.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "kvtier/core/mutex.h"
#include "kvtier/core/process.h"
#include "kvtier/transfer/agent.h"

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

// How a refusal in a forked child names the agent (OwningProcess::check).
inline constexpr std::string_view kAgentName = "this kvtier agent";

}  // namespace kvtier
