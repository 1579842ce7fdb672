// A fixed set of worker threads that run jobs. A job is shared by the workers it is handed
// to; each claims work items from it until none remain, so one large batch spreads over every
// worker and many small batches run side by side.
//
// Its threads start with the first job that needs them: a pool that only ever sees work the
// caller runs alone (parallel_for of one item) starts none.
//
// Thread-safety: schedule() and parallel_for() may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/core/mutex.h"

namespace kvtier {

class PoolJob {
 public:
  virtual ~PoolJob() = default;
  // Claims and runs work items until none are left. Called by up to `parallelism` workers at
  // once; must be safe for that.
  virtual void run() = 0;
};

class WorkerPool {
 public:
  // `name`: what its threads are called (`top -H`, /proc/<pid>/task/*/comm; at most 15
  // characters), or the process's name.
  explicit WorkerPool(size_t threads, std::string name = {})
      : size_(threads), name_(std::move(name)) {}
  ~WorkerPool();  // joins; jobs still queued are dropped without running
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // The threads it runs on once started.
  size_t size() const { return size_; }

  // Hands `job` to up to `parallelism` workers.
  void schedule(const std::shared_ptr<PoolJob>& job, size_t parallelism);

  // Runs fn(0..n-1) on the pool and the calling thread; returns when all have run.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

 private:
  void worker_loop();

  const size_t size_;
  const std::string name_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<PoolJob>> queue_ KVTIER_GUARDED_BY(mu_);
  bool stop_ KVTIER_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier
