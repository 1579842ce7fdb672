#include "kvtier/core/cpus.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace kvtier {

size_t usable_cpus() noexcept {
  // Masks grow until the kernel's fits (EINVAL: a machine with more possible CPUs than bits).
  for (int bits = 1024; bits <= (1 << 20); bits *= 2) {
    cpu_set_t* set = CPU_ALLOC(bits);
    if (set == nullptr) break;
    const size_t bytes = CPU_ALLOC_SIZE(bits);
    CPU_ZERO_S(bytes, set);
    const int rc = sched_getaffinity(0, bytes, set);
    const int count = rc == 0 ? CPU_COUNT_S(bytes, set) : 0;
    CPU_FREE(set);
    if (rc == 0) return static_cast<size_t>(std::max(count, 1));
    if (errno != EINVAL) break;
  }
  return std::max<size_t>(std::thread::hardware_concurrency(), 1);
}

}  // namespace kvtier
