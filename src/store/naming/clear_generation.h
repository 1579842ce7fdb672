// A namespace's clear generation: one small object, rewritten with a value never used before
// by every clear of the namespace (Store::clear, `kvtier clear`), and watched by every store
// open on it. A store that sees it change drops its page index, so a clear made by any process
// is seen by all of them on their next call (see store.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvtier/core/status.h"
#include "kvtier/transfer/agent.h"

namespace kvtier::clear_generation {

// What identifies one generation: the object's identity, modification time and size (all
// zero while there is none).
struct Generation {
  ObjectIdentity identity;
  uint64_t mtime_ns = 0;
  uint64_t size = 0;
  friend bool operator==(const Generation&, const Generation&) = default;
};

// The generation object at `path` as storage has it now (zeros when there is none); nullopt
// when storage cannot tell now.
std::optional<Generation> read(Agent& agent, const std::string& path);

// Replaces the object at `path` with a new generation (its temporary in `temp_dir`).
Status publish(Agent& agent, const std::string& path, const std::string& temp_dir);

}  // namespace kvtier::clear_generation
