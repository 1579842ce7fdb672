#include "capacity/key_ring.h"

#include <atomic>

namespace kvtier {

Result<std::unique_ptr<KeyRing>> KeyRing::open(const std::string& path, uint64_t magic,
                                               uint64_t slots) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SharedFile> file,
                          SharedFile::open(path, magic, slots, sizeof(Slot)));
  return std::unique_ptr<KeyRing>(new KeyRing(std::move(file)));
}

KeyRing::KeyRing(std::unique_ptr<SharedFile> file)
    : file_(std::move(file)),
      slots_(static_cast<Slot*>(file_->body())),
      tag_(std::atomic_ref<uint64_t>(*file_->user_word(1)).fetch_add(1, std::memory_order_relaxed) +
           1),
      next_(appended()) {}

uint64_t KeyRing::appended() const {
  return std::atomic_ref<const uint64_t>(*file_->user_word(0)).load(std::memory_order_acquire);
}

void KeyRing::append(std::span<const Hash128> keys) {
  if (keys.empty()) return;
  const uint64_t first = std::atomic_ref<uint64_t>(*file_->user_word(0))
                             .fetch_add(keys.size(), std::memory_order_relaxed);
  for (size_t i = 0; i < keys.size(); ++i) {
    Slot& slot = slots_[(first + i) % file_->count()];
    std::atomic_ref<uint64_t>(slot.low).store(keys[i].low, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(slot.high).store(keys[i].high, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(slot.tag).store(tag_, std::memory_order_relaxed);
    std::atomic_ref<uint64_t>(slot.seq).store(first + i + 1, std::memory_order_release);
  }
}

std::vector<Hash128> KeyRing::drain(Whose whose) {
  MutexLock lock(mu_);
  const uint64_t end = appended();
  const uint64_t count = file_->count();
  if (end - next_ > count) next_ = end - count;  // fell behind: what the ring still holds
  std::vector<Hash128> out;
  out.reserve(end - next_);
  for (; next_ < end; ++next_) {
    Hash128 key;
    uint64_t tag = 0;
    if (read(next_, &key, &tag) && (whose == Whose::kEvery || tag != tag_)) out.push_back(key);
  }
  return out;
}

bool KeyRing::read(uint64_t i, Hash128* key, uint64_t* tag) const {
  const Slot& slot = slots_[i % file_->count()];
  if (std::atomic_ref<const uint64_t>(slot.seq).load(std::memory_order_acquire) != i + 1) {
    return false;
  }
  key->low = std::atomic_ref<const uint64_t>(slot.low).load(std::memory_order_relaxed);
  key->high = std::atomic_ref<const uint64_t>(slot.high).load(std::memory_order_relaxed);
  *tag = std::atomic_ref<const uint64_t>(slot.tag).load(std::memory_order_relaxed);
  return true;
}

}  // namespace kvtier
