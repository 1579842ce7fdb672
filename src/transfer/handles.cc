// The handles an Agent gives out (agent.h): Registration, Target and Transfer, each releasing
// what it names when destroyed, and refusing every call in a process other than the agent's.
#include <fmt/format.h>

#include <algorithm>

#include "agent_core.h"
#include "kvtier/transfer/agent.h"

namespace kvtier {

using detail::AgentCore;
using detail::RegionState;
using detail::TargetState;
using detail::TransferImpl;

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

}  // namespace kvtier
