// A namespace's clear generation: one small object, rewritten with a value never used before
// by every clear of the namespace (Store::clear, `kvtier clear`), and watched by every store
// open on it. A store that sees it change drops its page index, so a clear made by any process
// is seen by all of them on their next call (see store.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kvtier/core/mutex.h"
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

// What one store last saw of its namespace's generation, at `path` (temporaries for a new one
// in `temp_dir`). Thread-safe.
class Watch {
 public:
  Watch(Agent& agent, std::string path, std::string temp_dir)
      : agent_(agent), path_(std::move(path)), temp_dir_(std::move(temp_dir)) {}

  // At open: the generation now is the one this store starts from.
  void start() KVTIER_EXCLUDES(mu_);
  // Whether the namespace was cleared since this store last looked: `on_cleared` runs (once
  // per new generation, under the watch's lock) when it was. Storage is asked at most once
  // per `max_age_ns` (each ask is a stat, or a HEAD on an object store); when it cannot tell
  // now, the next call asks again.
  void observe(uint64_t max_age_ns, const std::function<void()>& on_cleared) KVTIER_EXCLUDES(mu_);
  // Rewrites the generation with a value never used before (a clear by this store), and
  // remembers it, so this store does not take its own clear for another's.
  Status publish() KVTIER_EXCLUDES(mu_);

 private:
  Agent& agent_;
  const std::string path_;
  const std::string temp_dir_;
  Mutex mu_;
  Generation seen_ KVTIER_GUARDED_BY(mu_);
  // When the last read that answered began (now_ns()); 0: none since start.
  std::atomic<uint64_t> read_ns_{0};
};

}  // namespace kvtier::clear_generation
