// One isolated base's health, as the guard keeps it (guard.h): whether it serves, why not
// since when, the probe that brings it back, and the log line for each change.
//
// Thread-safety: every member may be used from any thread (atomics, or under `mu`).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kvtier/core/clock.h"
#include "kvtier/core/mutex.h"

namespace kvtier::guard {

// A base's health: failed (a deadline missed, or a probe that did not answer) until a probe
// answers; a probe in the kernel longer than the deadline, or a late task still running on
// it, also counts as not answering.
struct Health {
  std::string name;
  std::string probe_dir;
  uint64_t deadline_ns = 0;
  std::chrono::milliseconds interval{1000};
  std::function<void(std::string_view)> log;
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> probe_since_ns{0};  // when the probe in the kernel started; 0: none
  // Tasks that missed their deadline and run on (a clear, a remove): the base serves again
  // only once each has ended (Guard::run_task).
  std::atomic<size_t> owed{0};
  std::atomic<bool> reported_serving{true};
  Mutex mu;
  std::condition_variable cv;
  bool probing KVTIER_GUARDED_BY(mu) = false;
  bool stop KVTIER_GUARDED_BY(mu) = false;
  // Held while `log` runs; once `closed` is set (the store closing) it is never called again,
  // even by a probe thread that outlives the store.
  Mutex log_mu;
  bool closed KVTIER_GUARDED_BY(log_mu) = false;
  std::string reason KVTIER_GUARDED_BY(mu);
  uint64_t since_ns KVTIER_GUARDED_BY(mu) = 0;  // when it last stopped answering

  bool serving() const {
    if (failed.load(std::memory_order_acquire)) return false;
    if (owed.load(std::memory_order_acquire) != 0) return false;
    const uint64_t s = probe_since_ns.load(std::memory_order_acquire);
    return s == 0 || now_ns() - s <= deadline_ns;
  }

  // Logs a change of state once: the thread that flips `reported_serving` writes the line.
  void report();
  // Stops the probe and the log: returns once no line is being written.
  void shut();
  // The probe thread's body: probes every `interval` until one answers or it is stopped.
  static void probe_loop(const std::shared_ptr<Health>& h);
};

// "12.3 s", for messages.
std::string seconds(uint64_t ns);

}  // namespace kvtier::guard
