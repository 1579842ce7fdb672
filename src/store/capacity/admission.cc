#include "capacity/admission.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "capacity/footprint.h"
#include "naming/routing.h"

namespace kvtier {

namespace {

constexpr uint64_t kShadowPages = 16384;   // sampled pages per shadow, at most (about)
constexpr uint64_t kGhostFactor = 4;       // the ghost list: keys missed once, x shadow pages
constexpr uint64_t kDoorkeeperFactor = 8;  // keys per doorkeeper generation, x capacity pages
constexpr int kProbes = 4;  // with 10 bits a key (footprint.h): about 1% false positives
constexpr uint64_t kDoorkeeperMagic = 0x3144524f4f44564b;  // "KVDOORD1"
constexpr uint64_t kLookupsMagic = 0x3144454b5341564b;     // "KVASKED1"
constexpr uint64_t kWindow = 8;   // hits are halved every kWindow x shadow pages of keys asked
constexpr double kMargin = 1.05;  // the better shadow must lead by 5% ...
constexpr double kSlack = 8;      // ... and by this many hits

// The bit of a filter of `n` bits that probe `i` of `key` sets (double hashing).
uint64_t probe(const Hash128& key, int i, uint64_t n) {
  return (key.low + static_cast<uint64_t>(i) * (key.high | 1)) % n;
}

uint64_t fingerprint(const Hash128& key) {
  return key.low ^ (key.high * 0x9e3779b97f4a7c15ULL);
}

}  // namespace

bool AdmissionPolicy::KeyLru::touch(uint64_t k) {
  auto it = where_.find(k);
  if (it == where_.end()) return false;
  order_.splice(order_.end(), order_, it->second);
  return true;
}

void AdmissionPolicy::KeyLru::add(uint64_t k, size_t capacity) {
  if (touch(k)) return;
  order_.push_back(k);
  where_.emplace(k, std::prev(order_.end()));
  while (order_.size() > capacity) {
    where_.erase(order_.front());
    order_.pop_front();
  }
}

bool AdmissionPolicy::KeyLru::erase(uint64_t k) {
  auto it = where_.find(k);
  if (it == where_.end()) return false;
  order_.erase(it->second);
  where_.erase(it);
  return true;
}

namespace {

uint64_t load(const uint64_t* word) {
  return std::atomic_ref<const uint64_t>(*word).load(std::memory_order_relaxed);
}

}  // namespace

void AdmissionPolicy::Doorkeeper::size_for(uint64_t keys_per_generation) {
  half_words_ = footprint::generation_words(keys_per_generation);
  own_.assign(3 + 2 * half_words_, 0);
  state_ = own_.data();
  words_ = own_.data() + 3;
  state_[2] = std::max<uint64_t>(keys_per_generation, 1);
}

void AdmissionPolicy::Doorkeeper::share(std::unique_ptr<SharedFile> file,
                                        uint64_t keys_per_generation) {
  file_ = std::move(file);
  state_ = file_->user_word(0);
  words_ = static_cast<uint64_t*>(file_->body());
  half_words_ = file_->count() / 2;
  uint64_t unset = 0;
  std::atomic_ref<uint64_t>(state_[2]).compare_exchange_strong(
      unset, std::max<uint64_t>(keys_per_generation, 1), std::memory_order_relaxed);
}

bool AdmissionPolicy::Doorkeeper::in(const uint64_t* bits, const Hash128& key) const {
  for (int i = 0; i < kProbes; ++i) {
    const uint64_t bit = probe(key, i, half_words_ * 64);
    if ((load(&bits[bit / 64]) & (uint64_t{1} << (bit % 64))) == 0) return false;
  }
  return true;
}

bool AdmissionPolicy::Doorkeeper::contains(const Hash128& key) const {
  const uint64_t g = load(&state_[0]);
  return in(half(g), key) || in(half(g + 1), key);
}

void AdmissionPolicy::Doorkeeper::add(const Hash128& key) {
  const uint64_t g = load(&state_[0]);
  uint64_t* bits = half(g);
  for (int i = 0; i < kProbes; ++i) {
    const uint64_t bit = probe(key, i, half_words_ * 64);
    std::atomic_ref<uint64_t>(bits[bit / 64])
        .fetch_or(uint64_t{1} << (bit % 64), std::memory_order_relaxed);
  }
  // The add that fills a generation (one store's, whichever) starts the next: it empties the
  // generation before this one, then makes it the current. Adds meanwhile still go to this
  // one; one store dying half way leaves the next full count to whoever reaches it.
  const uint64_t per = std::max<uint64_t>(load(&state_[2]), 1);
  const uint64_t added =
      std::atomic_ref<uint64_t>(state_[1]).fetch_add(1, std::memory_order_relaxed) + 1;
  if (added % per != 0) return;
  uint64_t* next = half(g + 1);
  for (uint64_t w = 0; w < half_words_; ++w) {
    std::atomic_ref<uint64_t>(next[w]).store(0, std::memory_order_relaxed);
  }
  std::atomic_ref<uint64_t>(state_[0]).store(g + 1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(state_[1]).store(0, std::memory_order_relaxed);
}

Result<std::unique_ptr<SharedFile>> AdmissionPolicy::open_doorkeeper_file(const std::string& dir,
                                                                          uint64_t capacity_bytes) {
  return SharedFile::open(dir + "/" + std::string(routing::kDoorkeeperFile), kDoorkeeperMagic,
                          footprint::doorkeeper_words(capacity_bytes), sizeof(uint64_t));
}

Result<std::unique_ptr<KeyRing>> AdmissionPolicy::open_lookups_file(const std::string& dir,
                                                                    uint64_t capacity_bytes) {
  return KeyRing::open(dir + "/" + std::string(routing::kLookupsFile), kLookupsMagic,
                       footprint::ring_slots(capacity_bytes));
}

AdmissionPolicy::AdmissionPolicy(uint64_t capacity_bytes, std::unique_ptr<SharedFile> written,
                                 std::unique_ptr<KeyRing> asked)
    : capacity_bytes_(capacity_bytes),
      shared_written_(std::move(written)),
      asked_(std::move(asked)) {}

void AdmissionPolicy::size_from(uint64_t charge) {
  const uint64_t pages = std::max<uint64_t>(capacity_bytes_ / std::max<uint64_t>(charge, 1), 1);
  sample_ = std::max<uint64_t>(pages / kShadowPages, 1);
  shadow_pages_ = static_cast<size_t>(std::max<uint64_t>(pages / sample_, 1));
  if (shared_written_) {
    written_.share(std::move(shared_written_), pages * kDoorkeeperFactor);
  } else {
    written_.size_for(pages * kDoorkeeperFactor);
  }
  sized_ = true;
}

void AdmissionPolicy::on_lookup(std::span<const Hash128> keys) {
  MutexLock lock(mu_);
  if (!sized_) return;  // nothing written yet: nothing to compare
  if (asked_) {
    std::vector<Hash128> sampled;
    for (const Hash128& key : keys) {
      if (fingerprint(key) % sample_ == 0) sampled.push_back(key);
    }
    asked_->append(sampled);
    for (const Hash128& key : asked_->drain()) replay(key);
  } else {
    for (const Hash128& key : keys) replay(key);
  }
  if (asked_keys_ >= kWindow * shadow_pages_) {
    all_hits_ /= 2;
    second_hits_ /= 2;
    asked_keys_ = 0;
  }
  decide();
}

void AdmissionPolicy::replay(const Hash128& key) {
  const uint64_t k = fingerprint(key);
  if (k % sample_ != 0) return;  // not sampled (a store of another capacity asked it)
  ++asked_keys_;
  // Every key asked is, after this request, in an LRU cache that takes all it misses ...
  if (all_.touch(k)) {
    all_hits_ += 1;
  } else {
    all_.add(k, shadow_pages_);
  }
  // ... and in one that takes a key the second time it misses it.
  if (second_.touch(k)) {
    second_hits_ += 1;
  } else if (ghost_.erase(k)) {
    second_.add(k, shadow_pages_);
  } else {
    ghost_.add(k, shadow_pages_ * kGhostFactor);
  }
}

void AdmissionPolicy::decide() {
  const bool was = declining_;
  if (!declining_) {
    declining_ = second_hits_ > all_hits_ * kMargin + kSlack;
  } else {
    declining_ = !(all_hits_ > second_hits_ * kMargin + kSlack);
  }
  if (declining_ != was) ++switches_;
}

bool AdmissionPolicy::admit(const Hash128& key, uint64_t charge, bool full) {
  MutexLock lock(mu_);
  if (!sized_) size_from(charge);
  const bool seen = written_.contains(key);
  written_.add(key);
  return !full || !declining_ || seen;
}

bool AdmissionPolicy::declining() const {
  MutexLock lock(mu_);
  return declining_;
}

std::string AdmissionPolicy::describe() const {
  MutexLock lock(mu_);
  return fmt::format(
      "adaptive: {} (recent shadow hits: {:.0f} taking every page, {:.0f} on second sight; "
      "{} switches)",
      declining_ ? "declining first writes when full" : "taking every page", all_hits_,
      second_hits_, switches_);
}

}  // namespace kvtier
