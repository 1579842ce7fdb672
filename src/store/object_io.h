// Whole small objects through an agent (namespace manifests, inspection): each call
// registers a staging buffer, moves the bytes, and releases everything before returning.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/core/status.h"
#include "kvtier/transfer/agent.h"

namespace kvtier::object_io {

// Writes `bytes` as the object at `path` (atomically replacing it).
Status write_object(Agent& agent, const std::string& path, const std::string& temp_dir,
                    std::string_view bytes);

// Reads the whole object at `path`; kInvalidArgument when it exceeds `max_bytes`.
Result<std::string> read_object(Agent& agent, const std::string& path, uint64_t max_bytes);

}  // namespace kvtier::object_io
