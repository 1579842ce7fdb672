// Mutexes the thread-safety analysis understands: std::mutex and std::shared_mutex wrapped as
// clang capabilities, with scoped locks. Members they guard say so with KVTIER_GUARDED_BY, and
// the clang-tsa build checks every access (kvtier/core/thread_annotations.h).
//
//   Mutex mu_;
//   bool done_ KVTIER_GUARDED_BY(mu_) = false;
//   ...
//   MutexLock lock(mu_);
//   lock.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return done_; });
//
// A wait predicate runs with the mutex held, but the analysis sees a lambda as a function of
// its own: the lambda says KVTIER_REQUIRES(mu) so that its body is checked as holding it.
//
// Thread-safety: Mutex and SharedMutex are what they are; a lock object belongs to one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "kvtier/core/thread_annotations.h"

namespace kvtier {

class KVTIER_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() KVTIER_ACQUIRE() { mu_.lock(); }
  void unlock() KVTIER_RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope; may be unlocked and locked again, and waited on with a
// std::condition_variable.
class KVTIER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) KVTIER_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() KVTIER_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() KVTIER_ACQUIRE() { lock_.lock(); }
  void unlock() KVTIER_RELEASE() { lock_.unlock(); }

  // cv.wait(), with the mutex released while blocked and held again on return.
  void wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <class Pred>
  void wait(std::condition_variable& cv, Pred pred) KVTIER_NO_THREAD_SAFETY_ANALYSIS {
    cv.wait(lock_, std::move(pred));
  }
  template <class Rep, class Period>
  std::cv_status wait_for(std::condition_variable& cv,
                          const std::chrono::duration<Rep, Period>& timeout) {
    return cv.wait_for(lock_, timeout);
  }
  // Returns pred() at the end: false when the time ran out first.
  template <class Rep, class Period, class Pred>
  bool wait_for(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& timeout,
                Pred pred) KVTIER_NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_for(lock_, timeout, std::move(pred));
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

class KVTIER_CAPABILITY("shared mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void lock() KVTIER_ACQUIRE() { mu_.lock(); }
  void unlock() KVTIER_RELEASE() { mu_.unlock(); }
  void lock_shared() KVTIER_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() KVTIER_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex exclusively for its scope.
class KVTIER_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) KVTIER_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~WriterLock() KVTIER_RELEASE() { mu_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex shared for its scope.
class KVTIER_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) KVTIER_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~ReaderLock() KVTIER_RELEASE() { mu_.unlock_shared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace kvtier
