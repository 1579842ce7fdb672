#include "guard/threads.h"

namespace kvtier::guard {

Signal& signal() {
  static Signal* s = new Signal;  // never destroyed: detached threads may outlive main()
  return *s;
}

void changed() {
  { MutexLock lock(signal().mu); }
  signal().cv.notify_all();
}

size_t threads_alive() {
  return signal().threads.load();
}

bool wait_threads_at_most(size_t n, std::chrono::nanoseconds timeout) {
  MutexLock lock(signal().mu);
  return lock.wait_for(signal().cv, timeout, [&]() KVTIER_NO_THREAD_SAFETY_ANALYSIS {
    return signal().threads.load() <= n;
  });
}

}  // namespace kvtier::guard
