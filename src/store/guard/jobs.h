// The guard's pieces (guard.h): one guarded call, the jobs it is cut into, and the lanes of
// threads that run them. Seen by guard.cc alone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "guard/guard.h"
#include "guard/health.h"
#include "guard/threads.h"
#include "kvtier/core/mutex.h"

namespace kvtier::guard {

// One guarded call: its jobs report here, and the caller marks it abandoned when it leaves.
struct Guard::Call {
  Mutex mu;
  std::condition_variable cv;
  size_t pending KVTIER_GUARDED_BY(mu) = 0;
  // Jobs touch the caller's memory (copy a put's pages in, a get's pages out) holding `live`
  // shared, and only while `abandoned` is false; the caller sets it holding `live` exclusively
  // before it returns, so no copy runs past the return.
  SharedMutex live;
  std::atomic<bool> abandoned{false};
};

// Pages of one call on one base (or an exists query), run on that base's lane.
struct Guard::Job {
  std::shared_ptr<void> owner;  // first: released last
  std::shared_ptr<void> staging;
  std::shared_ptr<Call> call;
  const Ops* ops = nullptr;
  size_t base = 0;  // the lane: a base, or the exists lane
  enum class Kind : uint8_t { kPut, kGet, kExists, kTask } kind = Kind::kGet;
  std::function<void()> task;  // kTask
  // kTask: set by a caller that gave up on it while it ran (under call->mu): the bases whose
  // `owed` it holds, released when it ends.
  std::vector<std::shared_ptr<Health>> owing;
  std::vector<size_t> pages;  // indexes in the caller's batch
  std::vector<std::string> keys;
  std::vector<std::string_view> views;
  std::vector<ConstBuffer> put_pieces;    // in staging
  std::vector<MutableBuffer> get_pieces;  // in staging
  std::vector<ConstBuffer> from;          // put: the caller's pieces
  std::vector<MutableBuffer> to;          // get: the caller's pieces
  std::vector<char> copied;               // get: per page, copied to the caller
  BatchResult result;                     // written before `done`
  size_t exists_found = 0;
  std::optional<Result<bool>> exists_one;  // kExists of one key (Guard::exists)
  bool done = false;                       // under call->mu
  bool started = false;                    // under the lane's mutex

  void execute() {
    if (kind == Kind::kTask) {
      run_to_end();
      return;
    }
    if (!call->abandoned.load(std::memory_order_acquire)) {
      enter_call(&call->abandoned);
      switch (kind) {
        case Kind::kPut:
          if (copy_in()) result = ops->put(views, put_pieces);
          break;
        case Kind::kGet: {
          // Each page goes to the caller as it checks out, from the thread that read and
          // hashed it (still in that core's caches), while other pages are being read.
          copied.assign(pages.size(), 0);
          const PageDone done = [this](size_t j) { copy_page(j); };
          result = ops->get(views, get_pieces, &done);
          copy_out();
          break;
        }
        case Kind::kExists:
          if (exists_one) {
            exists_one = ops->exists(views.front());
          } else {
            exists_found = ops->batch_exists(views);
          }
          break;
        case Kind::kTask:
          break;  // run_to_end()
      }
      enter_call(nullptr);
    }
    {
      MutexLock lock(call->mu);
      done = true;
      --call->pending;
    }
    call->cv.notify_all();
  }

  // A task runs to its end once started, even when its caller gave up meanwhile (a clear or
  // remove half done is worse than one done late); the bases it owes serve again after.
  void run_to_end() {
    enter_call(&call->abandoned);
    task();
    task = nullptr;  // what it captured goes now (the store's state, maybe its last reference)
    enter_call(nullptr);
    std::vector<std::shared_ptr<Health>> owed;
    {
      MutexLock lock(call->mu);
      done = true;
      --call->pending;
      owed = std::move(owing);
    }
    call->cv.notify_all();
    for (const auto& h : owed) {
      h->owed.fetch_sub(1, std::memory_order_acq_rel);
      h->report();
    }
  }

  // The caller's pages into staging, while its call is live; false when it is not.
  bool copy_in() {
    ReaderLock lock(call->live);
    if (call->abandoned.load(std::memory_order_relaxed)) return false;
    for (size_t p = 0; p < from.size(); ++p) {
      std::memcpy(const_cast<void*>(put_pieces[p].data), from[p].data, from[p].size);
    }
    return true;
  }
  // Page j from staging to the caller, while its call is live.
  void copy_page(size_t j) {
    const size_t k = to.size() / pages.size();
    ReaderLock lock(call->live);
    if (call->abandoned.load(std::memory_order_relaxed)) return;
    for (size_t p = j * k; p < (j + 1) * k; ++p) {
      std::memcpy(to[p].data, get_pieces[p].data, to[p].size);
    }
    copied[j] = 1;
  }
  // Pages that checked out but were not copied as they did.
  void copy_out() {
    if (!result.status.ok()) return;
    for (size_t j = 0; j < pages.size() && j < result.pages.size(); ++j) {
      if (result.pages[j].ok() && !copied[j]) copy_page(j);
    }
  }
};

// The threads of one base (or of exists calls): started on demand, at most `max_threads`.
struct Guard::Lane {
  explicit Lane(size_t max) : max_threads(max) {}
  const size_t max_threads;
  Mutex mu;
  std::condition_variable cv;      // work or stop
  std::condition_variable exited;  // a thread ended
  std::deque<std::shared_ptr<Job>> queue KVTIER_GUARDED_BY(mu);
  std::vector<const Job*> running KVTIER_GUARDED_BY(mu);
  size_t threads KVTIER_GUARDED_BY(mu) = 0;
  bool stop KVTIER_GUARDED_BY(mu) = false;

  static void loop(const std::shared_ptr<Lane>& lane) {
    MutexLock lock(lane->mu);
    for (;;) {
      lock.wait(lane->cv,
                [&]() KVTIER_REQUIRES(lane->mu) { return lane->stop || !lane->queue.empty(); });
      if (lane->queue.empty()) break;  // stopping, nothing left
      std::shared_ptr<Job> job = std::move(lane->queue.front());
      lane->queue.pop_front();
      job->started = true;
      lane->running.push_back(job.get());
      lock.unlock();
      job->execute();
      lock.lock();
      std::erase(lane->running, job.get());
      lock.unlock();
      // Outside the lock: the job's reference may be the store's last, whose close stops
      // this lane.
      job.reset();
      changed();
      lock.lock();
    }
    --lane->threads;
    lane->exited.notify_all();
  }
};

}  // namespace kvtier::guard
