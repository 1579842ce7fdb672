// The backends built into this library, for Agent and Store to select from.
//
//   name    class  priority
//   posix   FILE   10        pread/pwrite worker pool
//   dram    MEM    10        process memory
#pragma once

#include "kvtier/transfer/backend.h"

namespace kvtier {

// The registry of built-in backends (constructed once, immutable afterwards).
const BackendRegistry& builtin_backends();

}  // namespace kvtier
