// What a namespace takes on a FILE location as `du` counts it (st_blocks): its pages (page
// files, segment and summary files) and everything else under its directory (directories, the
// manifest, the capacity ledger, the shared files, temporaries): the figures a capacity_bytes
// bounds (capacity/footprint.h).
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/core/status.h"

namespace kvtier::inspect {

struct Allocation {
  uint64_t page_bytes = 0;
  uint64_t metadata_bytes = 0;
};

// Walks `ns_dir` without following a symbolic link. kNotFound when it does not exist.
Result<Allocation> allocation_of(const std::string& ns_dir);

}  // namespace kvtier::inspect
