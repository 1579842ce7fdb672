// A decorator that injects failures into any backend: errors on open, read, write, publish,
// sync, remove, stat, list and registration (ENOSPC, EACCES, EIO, EMFILE... whatever errno a rule
// names), and delays before a batch reaches the inner backend (slow storage, cancel while in
// flight). Storage rarely fails on cue; the paths that handle failures are tested through this.
//
// A test that needs a batch in flight holds it at a gate rather than delaying it for a while:
//
//   faults->hold_batches();
//   ... post or submit ...                  // cannot complete: held before the inner backend
//   faults->wait_held(1);                   // a batch has reached the backend
//   ... what must hold while it is in flight ...
//   faults->release_batches();
//
// A test that must stop a process between two exact steps of a write (the crash tests kill a
// writer there) sets a trap: the matching call runs the trap's function before it goes on.
//
//   faults->set_trap(fault_trap_at(FaultOp::kPublish, ".seg", 2, [&] { report(); pause(); }));
//
// The inner backend does the real work up to the injected failure: a write that "fails with
// ENOSPC" had its target really opened, so the owner's cleanup is exercised for real.
//
// Thread-safety: safe for concurrent use; rules may change while the backend is in use.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/core/mutex.h"
#include "kvtier/transfer/backend.h"

namespace kvtier {

enum class FaultOp : uint8_t {
  kOpenRead,
  kOpenCreate,
  kRead,
  kWrite,
  kPublish,
  kRemove,
  kStat,
  kList,
  kMakeDirs,
  kRegister,
  kSync,  // Target::sync() of an append target (keep last: it sizes FaultInjector's counts)
};

struct FaultRule {
  FaultOp op = FaultOp::kRead;
  // Matches paths containing this (empty: every path).
  std::string path_contains;
  // errno to inject, mapped through errno_status() like a real failure.
  int error = 5;  // EIO
  // Let this many matching calls through before failing.
  uint64_t skip = 0;
  // Fail this many matching calls, then let the rest through.
  uint64_t count = UINT64_MAX;
};

// One call that reaches the decorator, as a trap sees it (offset and length: kRead/kWrite
// descriptors only; 0 elsewhere).
struct FaultCall {
  FaultOp op;
  std::string_view path;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// A point a test stops at: the first call for which `when` returns true runs `at` on the
// calling thread before the call goes on (kRead/kWrite: before any descriptor of its batch
// reaches the inner backend). It fires once. `when` sees every call, in order, under the
// injector's lock: it may count calls, and must not call the injector.
struct FaultTrap {
  std::function<bool(const FaultCall&)> when;
  std::function<void()> at;
};

// The (skip + 1)-th call of `op` on a path containing `path_contains` (and, with `also`, for
// which `also` returns true too).
FaultTrap fault_trap_at(FaultOp op, std::string path_contains, uint64_t skip,
                        std::function<void()> at,
                        std::function<bool(const FaultCall&)> also = nullptr);

// Shared between a test and the decorated backend.
class FaultInjector {
 public:
  void add(FaultRule rule);
  // One trap at a time: a later one replaces it. clear() removes it too.
  void set_trap(FaultTrap trap);
  void clear();
  // kRead/kWrite batches wait this long before reaching the inner backend.
  void set_batch_delay(std::chrono::milliseconds delay);
  std::chrono::milliseconds batch_delay() const;
  // Injected failures so far.
  uint64_t injected() const;
  // Calls of `op` that reached the decorator so far, failed or not (kRead/kWrite: one per
  // descriptor). Tests count syncs and publishes with it.
  uint64_t calls(FaultOp op) const;

  // From now on kRead/kWrite batches stop before the inner backend, in flight, until
  // release_batches() (or until cancelled: they then complete as kCancelled).
  void hold_batches();
  // Lets every held batch, and every later one, through.
  void release_batches();
  // Blocks until at least `n` batches are held at the gate at once.
  void wait_held(size_t n);
  // Batches held at the gate now.
  size_t held() const;
  bool holding() const;

  // For the backend: the gate's wake-ups and count.
  void on_release(const void* key, std::function<void()> wake);
  void forget(const void* key);
  void note_held(bool entering);

  // Returns the errno to inject for this call (0: none), counting the call against the rules;
  // runs the trap first when this call is the one it waits for.
  int check(FaultOp op, std::string_view path, uint64_t offset = 0, uint64_t length = 0);

 private:
  struct Armed {
    FaultRule rule;
    uint64_t seen = 0;
    uint64_t failed = 0;
  };
  mutable Mutex mu_;
  std::vector<Armed> rules_ KVTIER_GUARDED_BY(mu_);
  std::optional<FaultTrap> trap_ KVTIER_GUARDED_BY(mu_);
  std::chrono::milliseconds delay_ KVTIER_GUARDED_BY(mu_){0};
  uint64_t injected_ KVTIER_GUARDED_BY(mu_) = 0;
  std::array<uint64_t, static_cast<size_t>(FaultOp::kSync) + 1> calls_ KVTIER_GUARDED_BY(mu_){};
  // Read without mu_: the delayer reads it under its backend's lock, and release_batches()
  // takes that lock (through the waker) while holding mu_.
  std::atomic<bool> holding_{false};
  size_t held_ KVTIER_GUARDED_BY(mu_) = 0;
  std::condition_variable held_cv_;
  // Each backend sharing this injector, woken when the gate opens.
  std::vector<std::pair<const void*, std::function<void()>>> wakers_ KVTIER_GUARDED_BY(mu_);
};

std::unique_ptr<Backend> make_fault_backend(std::unique_ptr<Backend> inner,
                                            std::shared_ptr<FaultInjector> injector);

}  // namespace kvtier
