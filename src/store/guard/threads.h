// The guard's threads, in every store of the process: started detached (a thread blocked in
// the kernel on a mount that hangs cannot be joined) and counted while they run, and the one
// signal every waiter of the guard waits on.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <thread>
#include <utility>

#include "kvtier/core/mutex.h"

namespace kvtier::guard {

// Every change a waiter may wait for (a job ended, a base's health changed, a guard thread
// ended), in any store: waiters look at their condition again. A notifier changes its state
// first, then takes `mu`, so a waiter that looked under `mu` and found nothing cannot miss it.
struct Signal {
  Mutex mu;
  std::condition_variable cv;
  std::atomic<size_t> threads{0};  // guard threads (lanes and probes) alive, every store
};
Signal& signal();
// Wakes every waiter (see Signal).
void changed();

// Runs `body` on a guard thread of its own, counted while it runs.
template <typename F>
void spawn(F body) {
  signal().threads.fetch_add(1);
  std::thread([body = std::move(body)]() mutable {
    body();
    signal().threads.fetch_sub(1);
    changed();
  }).detach();
}

// Guard threads (lanes and probes) alive in this process, in every store, and a wait (no
// polling) until they are at most `n`; false when `timeout` passed first.
size_t threads_alive();
bool wait_threads_at_most(size_t n, std::chrono::nanoseconds timeout);

}  // namespace kvtier::guard
