// Directory iteration over a descriptor the caller owns (getdents64; no DIR* hand-over, so the
// descriptor never changes owner).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "kvtier/core/status.h"
#include "kvtier/core/unique_fd.h"

namespace kvtier {

enum class DirEntryType : uint8_t { kUnknown, kFile, kDir, kOther };

struct DirEntry {
  std::string_view name;  // valid only during the callback
  DirEntryType type;      // kUnknown when the filesystem does not say (stat it)
};

// Calls `fn` for every entry of `dir` except "." and "..". Stops at the first non-OK status
// from `fn` and returns it. `dir` must be open with O_RDONLY | O_DIRECTORY.
Status for_each_dir_entry(BorrowedFd dir, const std::function<Status(const DirEntry&)>& fn);

}  // namespace kvtier
