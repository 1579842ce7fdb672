#include "kvtier/backends/builtin.h"

#include <cstdlib>

#include "kvtier/backends/dram/dram_backend.h"
#include "kvtier/backends/posix/posix_backend.h"
#if KVTIER_WITH_URING
#include "kvtier/backends/uring/uring_backend.h"
#endif
#if KVTIER_WITH_S3
#include "kvtier/backends/s3/s3_backend.h"
#endif

namespace kvtier {

const BackendRegistry& builtin_backends() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    // Names are distinct and not "auto", so these cannot fail.
    if (!r.add("posix", StorageClass::kFile, 10, create_posix_backend, posix_backend_params())
             .ok() ||
        !r.add("dram", StorageClass::kMemory, 10, create_dram_backend, dram_backend_params())
             .ok()) {
      std::abort();
    }
#if KVTIER_WITH_URING
    if (!r.add("uring", StorageClass::kFile, 20, create_uring_backend, uring_backend_params()).ok())
      std::abort();
#endif
#if KVTIER_WITH_S3
    if (!r.add("s3", StorageClass::kObject, 10, create_s3_backend, s3_backend_params()).ok())
      std::abort();
#endif
    return r;
  }();
  return registry;
}

}  // namespace kvtier
