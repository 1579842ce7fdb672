// The evicted pages a store keeps for whoever watches them (eviction_journal.h).
#include "capacity/eviction_journal.h"

namespace kvtier {

void EvictionJournal::watch(size_t max_pending) {
  MutexLock lock(mu_);
  max_pending_ = max_pending;
  trim();
}

void EvictionJournal::add(std::span<const Hash128> evicted) {
  MutexLock lock(mu_);
  if (max_pending_ == 0 || evicted.empty()) return;
  for (const Hash128& h : evicted) keys_.push_back(h);
  trim();
}

EvictionJournal::Taken EvictionJournal::take() {
  Taken out;
  MutexLock lock(mu_);
  out.keys.assign(keys_.begin(), keys_.end());
  out.dropped = dropped_;
  keys_.clear();
  dropped_ = 0;
  return out;
}

void EvictionJournal::trim() {
  while (keys_.size() > max_pending_) {
    keys_.pop_front();
    ++dropped_;
  }
}

}  // namespace kvtier
