// In-memory backend: objects are byte vectors in a map, keyed by path.
//
// Used by tests and as the reference the other backends are held to. Backends created with
// the same `instance` name share one object map for the life of the process (`mem://name`
// opened twice sees the same pages); the map goes away with the last backend using it.
// A read target holds a snapshot: replacing or removing the object does not change what an
// open target reads (as an open file keeps its inode).
//
// Thread-safety: safe for concurrent use by multiple threads.
#pragma once

#include <memory>
#include <string>

#include "kvtier/core/status.h"
#include "kvtier/transfer/backend.h"

namespace kvtier {

struct DramBackendOptions {
  // Backends with the same non-empty name share their objects; empty: private to this backend.
  std::string instance;
};

std::unique_ptr<Backend> make_dram_backend(const DramBackendOptions& options = {});

// Factory for the registry. Parameter: instance.
Result<std::unique_ptr<Backend>> create_dram_backend(const BackendParams& params);
// The parameters create_dram_backend() reads.
std::vector<ParamSpec> dram_backend_params();

}  // namespace kvtier
