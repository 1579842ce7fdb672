#include "kvtier/backends/fault/fault_backend.h"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <thread>

#include "kvtier/core/clock.h"

namespace kvtier {

void FaultInjector::add(FaultRule rule) {
  MutexLock lock(mu_);
  rules_.push_back(Armed{std::move(rule)});
}

void FaultInjector::set_trap(FaultTrap trap) {
  MutexLock lock(mu_);
  trap_ = std::move(trap);
}

FaultTrap fault_trap_at(FaultOp op, std::string path_contains, uint64_t skip,
                        std::function<void()> at, std::function<bool(const FaultCall&)> also) {
  return FaultTrap{[op, part = std::move(path_contains), skip, also = std::move(also),
                    seen = uint64_t{0}](const FaultCall& call) mutable {
                     if (call.op != op || call.path.find(part) == std::string_view::npos)
                       return false;
                     if (also && !also(call)) return false;
                     return seen++ == skip;
                   },
                   std::move(at)};
}

void FaultInjector::clear() {
  MutexLock lock(mu_);
  rules_.clear();
  trap_.reset();
  delay_ = std::chrono::milliseconds(0);
}

void FaultInjector::set_batch_delay(std::chrono::milliseconds delay) {
  MutexLock lock(mu_);
  delay_ = delay;
}

std::chrono::milliseconds FaultInjector::batch_delay() const {
  MutexLock lock(mu_);
  return delay_;
}

uint64_t FaultInjector::injected() const {
  MutexLock lock(mu_);
  return injected_;
}

void FaultInjector::hold_batches() {
  holding_.store(true);
}

void FaultInjector::release_batches() {
  MutexLock lock(mu_);
  holding_.store(false);
  // Under mu_, so that a backend cannot go (forget()) meanwhile. The wakers take only their
  // backend's own lock, and a backend never calls in here while holding it.
  for (auto& [key, wake] : wakers_) wake();
}

void FaultInjector::wait_held(size_t n) {
  MutexLock lock(mu_);
  lock.wait(held_cv_, [&]() KVTIER_REQUIRES(mu_) { return held_ >= n; });
}

size_t FaultInjector::held() const {
  MutexLock lock(mu_);
  return held_;
}

bool FaultInjector::holding() const {
  return holding_.load();
}

void FaultInjector::on_release(const void* key, std::function<void()> wake) {
  MutexLock lock(mu_);
  wakers_.emplace_back(key, std::move(wake));
}

void FaultInjector::forget(const void* key) {
  MutexLock lock(mu_);
  std::erase_if(wakers_, [&](const auto& w) { return w.first == key; });
}

void FaultInjector::note_held(bool entering) {
  {
    MutexLock lock(mu_);
    if (entering) {
      ++held_;
    } else {
      --held_;
    }
  }
  held_cv_.notify_all();
}

uint64_t FaultInjector::calls(FaultOp op) const {
  MutexLock lock(mu_);
  return calls_[static_cast<size_t>(op)];
}

int FaultInjector::check(FaultOp op, std::string_view path, uint64_t offset, uint64_t length) {
  std::function<void()> trap;
  int error = 0;
  {
    MutexLock lock(mu_);
    ++calls_[static_cast<size_t>(op)];
    const auto matches = [&](FaultOp want, const std::string& part) {
      return want == op && (part.empty() || path.find(part) != std::string_view::npos);
    };
    if (trap_ && trap_->when(FaultCall{op, path, offset, length})) {
      trap = std::move(trap_->at);
      trap_.reset();
    }
    for (Armed& a : rules_) {
      if (!matches(a.rule.op, a.rule.path_contains)) continue;
      if (a.seen++ < a.rule.skip) continue;
      if (a.failed >= a.rule.count) continue;
      ++a.failed;
      ++injected_;
      error = a.rule.error;
      break;
    }
  }
  // Outside the lock: a trap may never return (it waits to be killed), and other threads of
  // the process go on meanwhile.
  if (trap) trap();
  return error;
}

namespace {

// The descriptors of a parent batch that go on to the inner backend.
class SubBatch final : public IoBatch {
 public:
  SubBatch(IoBatch& parent, std::vector<size_t> index)
      : parent_(parent), index_(std::move(index)), remaining_(index_.size()) {
    descs_.reserve(index_.size());
    for (size_t i : index_) descs_.push_back(parent.descs()[i]);
  }

  TransferOp op() const override { return parent_.op(); }
  std::span<const IoDesc> descs() const override { return descs_; }
  bool cancel_requested() const override { return parent_.cancel_requested(); }

  void complete(size_t j, Status status) override {
    IoBatch* parent = &parent_;
    const size_t i = index_[j];
    const bool last = remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1;
    // The parent is alive: descriptor i of it is not complete yet.
    parent->complete(i, std::move(status));
    if (last) delete this;
  }

 private:
  IoBatch& parent_;
  std::vector<size_t> index_;
  std::vector<IoDesc> descs_;
  std::atomic<size_t> remaining_;
};

class FaultBackend final : public BackendWrapper {
 public:
  FaultBackend(std::unique_ptr<Backend> inner, std::shared_ptr<FaultInjector> injector)
      : BackendWrapper(std::move(inner)), injector_(std::move(injector)) {
    injector_->on_release(this, [this] {
      { MutexLock lock(mu_); }  // orders the wake after the delayer's check, or before its wait
      cv_.notify_all();
    });
  }

  ~FaultBackend() override {
    injector_->forget(this);
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (delayer_.joinable()) delayer_.join();
  }

  Status register_memory(MemoryRecord& region) override {
    if (int e = injector_->check(FaultOp::kRegister, {})) return errno_status(e, "register_memory");
    return BackendWrapper::register_memory(region);
  }

  Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) override {
    const FaultOp op = spec.mode == TargetMode::kRead ? FaultOp::kOpenRead : FaultOp::kOpenCreate;
    if (int e = injector_->check(op, spec.path)) return errno_status(e, "open", spec.path);
    return BackendWrapper::open(spec);
  }

  std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs) override {
    // Through open() one by one, so every spec meets the rules.
    return Backend::open_batch(specs);
  }

  Status publish(BackendTarget& target, const PublishOptions& options) override {
    if (int e = injector_->check(FaultOp::kPublish, target.path())) {
      return errno_status(e, "publish", target.path());
    }
    return BackendWrapper::publish(target, options);
  }

  Status sync(BackendTarget& target) override {
    if (int e = injector_->check(FaultOp::kSync, target.path())) {
      return errno_status(e, "fdatasync", target.path());
    }
    return BackendWrapper::sync(target);
  }

  Status make_dirs(std::string_view path) override {
    if (int e = injector_->check(FaultOp::kMakeDirs, path)) return errno_status(e, "mkdir", path);
    return BackendWrapper::make_dirs(path);
  }
  Status make_dir(std::string_view path) override {
    if (int e = injector_->check(FaultOp::kMakeDirs, path)) return errno_status(e, "mkdir", path);
    return BackendWrapper::make_dir(path);
  }

  Result<ObjectInfo> stat(std::string_view path) override {
    if (int e = injector_->check(FaultOp::kStat, path)) return errno_status(e, "stat", path);
    return BackendWrapper::stat(path);
  }

  Status remove(std::string_view path, const ObjectIdentity* if_identity) override {
    if (int e = injector_->check(FaultOp::kRemove, path)) return errno_status(e, "unlink", path);
    return BackendWrapper::remove(path, if_identity);
  }

  Status list(std::string_view dir, const ListOptions& options,
              const std::function<Status(const ObjectInfo&)>& fn) override {
    if (int e = injector_->check(FaultOp::kList, dir)) return errno_status(e, "list", dir);
    return BackendWrapper::list(dir, options, fn);
  }

  void submit(IoBatch& batch) override {
    const auto delay = injector_->batch_delay();
    const bool held = injector_->holding();
    if (delay.count() > 0 || held) {
      start_delayer();
      if (held) injector_->note_held(true);
      {
        MutexLock lock(mu_);
        delayed_.push_back(Delayed{
            &batch, now_ns() + static_cast<uint64_t>(std::chrono::nanoseconds(delay).count()),
            held});
      }
      cv_.notify_all();
      return;
    }
    forward(batch);
  }

  void cancel(IoBatch& /*batch*/) noexcept override {
    // Delayed batches notice cancel_requested() when woken; forwarded ones through their
    // sub-batch, which reports the parent's flag. Taking the lock first orders this wake
    // after the delayer's check of the flag or before its wait: without it the wake could
    // fall between the two, and the batch would sit out its whole delay.
    { MutexLock lock(mu_); }
    cv_.notify_all();
  }

 private:
  struct Delayed {
    IoBatch* batch;
    uint64_t due_ns;
    bool held;  // at the gate: goes on once the injector releases batches
  };

  // Fails the descriptors the rules pick, hands the rest to the inner backend.
  void forward(IoBatch& batch) {
    const TransferOp op = batch.op();
    const FaultOp fop = op == TransferOp::kRead ? FaultOp::kRead : FaultOp::kWrite;
    const auto descs = batch.descs();
    std::vector<size_t> pass;
    std::vector<std::pair<size_t, Status>> failed;
    for (size_t i = 0; i < descs.size(); ++i) {
      const IoDesc& d = descs[i];
      if (int e = injector_->check(fop, d.target->path(), d.offset, d.length)) {
        failed.emplace_back(i, errno_status(e, op == TransferOp::kRead ? "preadv" : "pwritev",
                                            d.target->path(), d.offset, d.length));
      } else {
        pass.push_back(i);
      }
    }
    if (failed.empty()) {
      inner().submit(batch);
      return;
    }
    SubBatch* sub = pass.empty() ? nullptr : new SubBatch(batch, std::move(pass));
    // While `sub` has work the parent stays alive; without it the last completion below may
    // end the parent, so nothing touches it afterwards.
    for (auto& [i, st] : failed) batch.complete(i, std::move(st));
    if (sub != nullptr) inner().submit(*sub);
  }

  void start_delayer() {
    std::call_once(delayer_once_, [this] { delayer_ = std::thread([this] { delay_loop(); }); });
  }

  void delay_loop() {
    MutexLock lock(mu_);
    while (!stop_) {
      if (delayed_.empty()) {
        lock.wait(cv_);
        continue;
      }
      const uint64_t now = now_ns();
      const bool gate_open = !injector_->holding();
      std::vector<IoBatch*> due;
      std::vector<IoBatch*> cancelled;
      size_t left_gate = 0;
      for (auto it = delayed_.begin(); it != delayed_.end();) {
        const bool cancel = it->batch->cancel_requested();
        const bool go = it->due_ns <= now && (gate_open || !it->held);
        if (cancel || go) {
          (cancel ? cancelled : due).push_back(it->batch);
          if (it->held) ++left_gate;
          it = delayed_.erase(it);
        } else {
          ++it;
        }
      }
      if (due.empty() && cancelled.empty()) {
        uint64_t next = UINT64_MAX;
        for (const Delayed& d : delayed_) {
          if (gate_open || !d.held) next = std::min(next, d.due_ns);
        }
        if (next == UINT64_MAX) {
          lock.wait(cv_);  // only held batches: release_batches() or a cancel wakes this
        } else {
          lock.wait_for(cv_, std::chrono::nanoseconds(next - now));
        }
        continue;
      }
      lock.unlock();
      for (size_t i = 0; i < left_gate; ++i) injector_->note_held(false);
      for (IoBatch* b : cancelled) {
        const size_t n = b->descs().size();
        for (size_t i = 0; i < n; ++i) {
          b->complete(i, cancelled_error("cancelled while delayed by fault injection"));
        }
      }
      for (IoBatch* b : due) forward(*b);
      lock.lock();
    }
  }

  std::shared_ptr<FaultInjector> injector_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<Delayed> delayed_ KVTIER_GUARDED_BY(mu_);
  bool stop_ KVTIER_GUARDED_BY(mu_) = false;
  std::once_flag delayer_once_;
  std::thread delayer_;
};

}  // namespace

std::unique_ptr<Backend> make_fault_backend(std::unique_ptr<Backend> inner,
                                            std::shared_ptr<FaultInjector> injector) {
  return std::make_unique<FaultBackend>(std::move(inner), std::move(injector));
}

}  // namespace kvtier
