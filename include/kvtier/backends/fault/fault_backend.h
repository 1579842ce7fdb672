// A decorator that injects failures into any backend: errors on open, read, write, publish,
// remove, stat, list and registration (ENOSPC, EACCES, EIO, EMFILE... whatever errno a rule
// names), and delays before a batch reaches the inner backend (slow storage, cancel while in
// flight). Storage rarely fails on cue; the paths that handle failures are tested through this.
//
// The inner backend does the real work up to the injected failure: a write that "fails with
// ENOSPC" had its target really opened, so the owner's cleanup is exercised for real.
//
// Thread-safety: safe for concurrent use; rules may change while the backend is in use.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
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

// Shared between a test and the decorated backend.
class FaultInjector {
 public:
  void add(FaultRule rule);
  void clear();
  // kRead/kWrite batches wait this long before reaching the inner backend.
  void set_batch_delay(std::chrono::milliseconds delay);
  std::chrono::milliseconds batch_delay() const;
  // Injected failures so far.
  uint64_t injected() const;

  // Returns the errno to inject for this call (0: none), counting the call against the rules.
  int check(FaultOp op, std::string_view path);

 private:
  struct Armed {
    FaultRule rule;
    uint64_t seen = 0;
    uint64_t failed = 0;
  };
  mutable Mutex mu_;
  std::vector<Armed> rules_ KVTIER_GUARDED_BY(mu_);
  std::chrono::milliseconds delay_ KVTIER_GUARDED_BY(mu_){0};
  uint64_t injected_ KVTIER_GUARDED_BY(mu_) = 0;
};

std::unique_ptr<Backend> make_fault_backend(std::unique_ptr<Backend> inner,
                                            std::shared_ptr<FaultInjector> injector);

}  // namespace kvtier
