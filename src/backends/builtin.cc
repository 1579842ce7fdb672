#include "kvtier/backends/builtin.h"

#include <cstdlib>

#include "kvtier/backends/dram/dram_backend.h"
#include "kvtier/backends/posix/posix_backend.h"

namespace kvtier {

const BackendRegistry& builtin_backends() {
  static const BackendRegistry registry = [] {
    BackendRegistry r;
    // Names are distinct and not "auto", so these cannot fail.
    if (!r.add("posix", StorageClass::kFile, 10, create_posix_backend).ok() ||
        !r.add("dram", StorageClass::kMemory, 10, create_dram_backend).ok()) {
      std::abort();
    }
    return r;
  }();
  return registry;
}

}  // namespace kvtier
