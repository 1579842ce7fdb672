// Synchronous object I/O through an agent, for the store's slow paths (namespace manifests,
// inspection). The whole-object calls register a staging buffer, move the bytes, and release
// everything before returning.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/core/status.h"
#include "kvtier/transfer/agent.h"

namespace kvtier::object_io {

// Moves [offset, offset+length) of `target` to or from `mem` (inside a live registration) as
// one request, and waits for it.
Status transfer_range(Agent& agent, TransferOp op, const Target& target, std::byte* mem,
                      uint64_t offset, uint64_t length);

// Writes `bytes` as the object at `path` (atomically replacing it), published with `options`
// (durable: the data and the directory entry are on stable storage when it returns).
Status write_object(Agent& agent, const std::string& path, const std::string& temp_dir,
                    std::string_view bytes, const PublishOptions& options = {});

// Reads the whole object at `path`; kInvalidArgument when it exceeds `max_bytes`.
Result<std::string> read_object(Agent& agent, const std::string& path, uint64_t max_bytes);

}  // namespace kvtier::object_io
