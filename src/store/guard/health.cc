#include "guard/health.h"

#include <fmt/format.h>

#include "guard/isolation.h"
#include "guard/threads.h"

namespace kvtier::guard {

std::string seconds(uint64_t ns) {
  return fmt::format("{:.1f} s", static_cast<double>(ns) / 1e9);
}

void Health::report() {
  const bool now = serving();
  bool before = !now;
  if (!reported_serving.compare_exchange_strong(before, now)) return;
  std::string line;
  {
    MutexLock lock(mu);
    if (!now) {
      since_ns = now_ns();
      if (!failed.load() && owed.load() == 0) {
        reason = "a probe has had no answer within the deadline";
      }
      line = fmt::format(
          "kvtier: location {} is not answering ({}); its pages are misses until a probe "
          "answers (every {} ms)",
          name, reason, interval.count());
    } else {
      line = fmt::format("kvtier: location {} answers again after {}; serving its pages", name,
                         seconds(now_ns() - since_ns));
    }
  }
  {
    MutexLock lock(log_mu);
    if (log && !closed) log(line);
  }
  changed();
}

void Health::shut() {
  {
    MutexLock lock(mu);
    stop = true;
    cv.notify_all();
  }
  MutexLock lock(log_mu);
  closed = true;
}

void Health::probe_loop(const std::shared_ptr<Health>& h) {
  for (;;) {
    h->probe_since_ns.store(now_ns(), std::memory_order_release);
    changed();  // a waiter learns when it stops serving if the probe does not return
    const Status st = probe_once(h->probe_dir);
    h->probe_since_ns.store(0, std::memory_order_release);
    if (answered(st)) {
      h->failed.store(false, std::memory_order_release);
      h->report();
      break;
    }
    {
      MutexLock lock(h->mu);
      h->reason = fmt::format("probe: {}", st.to_string());
    }
    h->failed.store(true, std::memory_order_release);
    h->report();
    MutexLock lock(h->mu);
    if (lock.wait_for(h->cv, h->interval, [&]() KVTIER_REQUIRES(h->mu) { return h->stop; })) {
      break;
    }
  }
  MutexLock lock(h->mu);
  h->probing = false;
}

}  // namespace kvtier::guard
