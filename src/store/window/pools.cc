#include "window/pools.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>

namespace kvtier::pools {

// ---- HeaderPool ----

HeaderPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->release(blocks_);
}

Result<HeaderPool::Lease> HeaderPool::acquire(size_t n) {
  Lease lease;
  if (n == 0) return lease;
  MutexLock lock(mu_);
  while (free_.size() < n) KVTIER_RETURN_IF_ERROR(grow());
  lease.blocks_.assign(free_.end() - static_cast<ptrdiff_t>(n), free_.end());
  free_.resize(free_.size() - n);
  lease.pool_ = this;
  return lease;
}

Status HeaderPool::grow() {
  auto chunk = std::make_unique<Chunk>();
  KVTIER_ASSIGN_OR_RETURN(chunk->memory,
                          AlignedBuffer::allocate(kBlocksPerChunk * page::kHeaderBytes));
  KVTIER_ASSIGN_OR_RETURN(chunk->registration,
                          agent_.register_memory(chunk->memory.data(), chunk->memory.size()));
  for (size_t i = 0; i < kBlocksPerChunk; ++i) {
    free_.push_back(chunk->memory.data() + i * page::kHeaderBytes);
  }
  chunks_.push_back(std::move(chunk));
  return ok_status();
}

void HeaderPool::release(const std::vector<std::byte*>& blocks) {
  MutexLock lock(mu_);
  free_.insert(free_.end(), blocks.begin(), blocks.end());
}

// ---- StagingPool ----

StagingPool::Lease& StagingPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (pool_ != nullptr && slot_) pool_->release(std::move(slot_));
    pool_ = std::exchange(o.pool_, nullptr);
    slot_ = std::move(o.slot_);
  }
  return *this;
}

StagingPool::Lease::~Lease() {
  if (pool_ != nullptr && slot_) pool_->release(std::move(slot_));
}

std::byte* StagingPool::Lease::data() const {
  return slot_->memory.data();
}
uint64_t StagingPool::Lease::size() const {
  return slot_->memory.size();
}

StagingPool::Lease StagingPool::acquire(uint64_t bytes) {
  constexpr uint64_t kStep = 64 << 10;
  const uint64_t want = align_up(std::max<uint64_t>(bytes, 1), kStep);
  Lease lease;
  MutexLock lock(mu_);
  // A free buffer that fits without wasting more than half of itself.
  if (auto it = free_.lower_bound(want); it != free_.end() && it->first <= 2 * want) {
    lease.slot_ = std::move(it->second);
    free_.erase(it);
    lease.pool_ = this;
    ++leased_;
    return lease;
  }
  // Make room by dropping idle buffers of other sizes, largest first.
  while (total_ + want > capacity_ && !free_.empty()) {
    auto last = std::prev(free_.end());
    total_ -= last->first;
    free_.erase(last);
  }
  if (total_ + want > capacity_) return lease;
  total_ += want;  // reserved while allocating outside the lock
  ++leased_;
  lock.unlock();
  auto slot = std::make_unique<Slot>();
  Result<AlignedBuffer> mem = AlignedBuffer::allocate(want, 4096, /*zero=*/false);
  Result<Registration> reg = mem.ok() ? agent_.register_memory(mem->data(), mem->size())
                                      : Result<Registration>(mem.status());
  if (!reg.ok()) {
    MutexLock relock(mu_);
    total_ -= want;
    --leased_;
    return lease;
  }
  slot->memory = std::move(mem).value();
  slot->registration = std::move(reg).value();
  lease.slot_ = std::move(slot);
  lease.pool_ = this;
  return lease;
}

void StagingPool::release(std::unique_ptr<Slot> slot) {
  {
    MutexLock lock(mu_);
    const uint64_t size = slot->memory.size();
    free_.emplace(size, std::move(slot));
    --leased_;
    ++releases_;
  }
  released_.notify_all();
}

Result<StagingPool::Lease> StagingPool::acquire_waiting(uint64_t bytes, size_t held) {
  constexpr uint64_t kStep = 64 << 10;
  if (align_up(std::max<uint64_t>(bytes, 1), kStep) > capacity_) {
    return resource_exhausted_error(
        fmt::format("a staging buffer of {} bytes: the staging limit is {}", bytes, capacity_));
  }
  for (;;) {
    uint64_t seen;
    {
      MutexLock lock(mu_);
      seen = releases_;
    }
    Lease lease = acquire(bytes);
    if (lease) return lease;
    MutexLock lock(mu_);
    if (leased_ <= held && releases_ == seen) {
      return resource_exhausted_error(
          fmt::format("no staging buffer of {} bytes (limit {}, {} held by this call)", bytes,
                      capacity_, held),
          /*retryable=*/true);
    }
    lock.wait(released_, [&]() KVTIER_REQUIRES(mu_) { return releases_ != seen; });
  }
}

// ---- ObjectBudget ----

ObjectBudget::Permits::Permits(ObjectBudget& b, size_t n) : budget_(b), n_(n) {
  MutexLock lock(budget_.mu_);
  lock.wait(budget_.cv_, [&]() KVTIER_REQUIRES(budget_.mu_) { return budget_.available_ >= n_; });
  budget_.available_ -= n_;
}

ObjectBudget::Permits::~Permits() {
  {
    MutexLock lock(budget_.mu_);
    budget_.available_ += n_;
  }
  budget_.cv_.notify_all();
}

size_t ObjectBudget::default_capacity() {
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1024;
  return std::clamp<size_t>(static_cast<size_t>(rl.rlim_cur) / 4, 8, 1024);
}

}  // namespace kvtier::pools
