// The CPUs a process may run on: what sizes the threads a store spreads a batch's work over
// (docs/architecture.md, "Every core a batch is given").
//
// Thread-safety: safe for concurrent use.
#pragma once

#include <cstddef>

namespace kvtier {

// The CPUs in the calling thread's affinity mask (sched_getaffinity: what `taskset`, cgroup
// cpusets and container limits leave it), at least 1. Not the machine's CPU count: a process
// pinned to 4 of 64 cores that started 64 threads would only make them queue.
size_t usable_cpus() noexcept;

}  // namespace kvtier
