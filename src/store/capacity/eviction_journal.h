// The key hashes of the pages a store evicted, kept for whoever watches them (a serving
// engine that drops them from its own index: Store::watch_evictions, Store::take_evicted).
// Off (nothing kept) until watched; at most `max_pending` are kept, the oldest dropped and
// counted first.
//
// Thread-safety: safe for concurrent use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "kvtier/core/checksum.h"
#include "kvtier/core/mutex.h"

namespace kvtier {

class EvictionJournal {
 public:
  struct Taken {
    std::vector<Hash128> keys;  // oldest first
    uint64_t dropped = 0;       // evictions not kept since the last take
  };
  // Keeps the next evictions, at most `max_pending` (0: off); fewer are kept at once if more
  // are pending.
  void watch(size_t max_pending) KVTIER_EXCLUDES(mu_);
  void add(std::span<const Hash128> evicted) KVTIER_EXCLUDES(mu_);
  Taken take() KVTIER_EXCLUDES(mu_);

 private:
  void trim() KVTIER_REQUIRES(mu_);

  Mutex mu_;
  size_t max_pending_ KVTIER_GUARDED_BY(mu_) = 0;
  std::deque<Hash128> keys_ KVTIER_GUARDED_BY(mu_);
  uint64_t dropped_ KVTIER_GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier
