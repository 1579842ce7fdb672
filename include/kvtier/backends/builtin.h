// The backends built into this library, for Agent and Store to select from.
//
//   name    class  priority
//   uring   FILE   20        io_uring rings (when built with liburing)
//   posix   FILE   10        pread/pwrite worker pool: the fallback when io_uring cannot start
//   dram    MEM    10        process memory
//   s3      OBJ    10        S3-compatible object stores (when built with libcurl)
#pragma once

#include "kvtier/transfer/backend.h"

namespace kvtier {

// The registry of built-in backends (constructed once, immutable afterwards).
const BackendRegistry& builtin_backends();

}  // namespace kvtier
