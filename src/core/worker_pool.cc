#include "kvtier/core/worker_pool.h"

#include <pthread.h>

#include <atomic>

namespace kvtier {

WorkerPool::~WorkerPool() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    stop_ = true;
    queue_.clear();
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

void WorkerPool::schedule(const std::shared_ptr<PoolJob>& job, size_t parallelism) {
  if (parallelism == 0 || size_ == 0) return;
  if (parallelism > size_) parallelism = size_;
  {
    MutexLock lock(mu_);
    if (stop_) return;
    if (threads_.empty()) {
      threads_.reserve(size_);
      for (size_t i = 0; i < size_; ++i) {
        std::thread& t = threads_.emplace_back([this] { worker_loop(); });
        // Named here, before anyone can look, rather than by the thread itself.
        if (!name_.empty()) pthread_setname_np(t.native_handle(), name_.substr(0, 15).c_str());
      }
    }
    for (size_t i = 0; i < parallelism; ++i) queue_.push_back(job);
  }
  if (parallelism == 1) {
    cv_.notify_one();
  } else {
    cv_.notify_all();
  }
}

void WorkerPool::worker_loop() {
  for (;;) {
    std::shared_ptr<PoolJob> job;
    {
      MutexLock lock(mu_);
      lock.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job->run();
  }
}

namespace {

class ForJob final : public PoolJob {
 public:
  ForJob(size_t n, const std::function<void(size_t)>& fn) : n_(n), fn_(fn) {}

  void run() override {
    for (;;) {
      const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= n_) return;
      fn_(i);
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
        MutexLock lock(mu_);
        finished_ = true;
        cv_.notify_all();
      }
    }
  }

  void wait() {
    MutexLock lock(mu_);
    lock.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return finished_; });
  }

 private:
  const size_t n_;
  const std::function<void(size_t)>& fn_;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> done_{0};
  Mutex mu_;
  std::condition_variable cv_;
  bool finished_ KVTIER_GUARDED_BY(mu_) = false;
};

}  // namespace

void WorkerPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || size_ == 0) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // The job is shared: a worker that picks it up after every item ran finds nothing to do,
  // and the references it holds keep the (finished) job alive until it lets go. `fn` is only
  // called for claimed items, all of which finish before wait() returns.
  auto job = std::make_shared<ForJob>(n, fn);
  schedule(job, n - 1);
  job->run();
  job->wait();
}

}  // namespace kvtier
