// The store's registered memory pools and its open-object budget.
//
// HeaderPool: 4096-byte header blocks for pages in flight, registered once in chunks.
// StagingPool: aligned, registered buffers through which direct I/O moves pages whose memory
//   or size is not aligned; bounded, so a caller never makes the store allocate without limit.
// ObjectBudget: how many objects the store may hold open at once, across all calls.
//
// Thread-safety: all three are safe for concurrent use. Leases and permits are released by
// their destructors.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "format/page_format.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/mutex.h"
#include "kvtier/transfer/agent.h"

namespace kvtier::pools {

class HeaderPool {
 public:
  static constexpr size_t kBlocksPerChunk = 64;

  explicit HeaderPool(Agent& agent) : agent_(agent) {}

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept
        : pool_(std::exchange(o.pool_, nullptr)), blocks_(std::move(o.blocks_)) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    std::span<std::byte, page::kHeaderBytes> block(size_t i) const {
      return std::span<std::byte, page::kHeaderBytes>(blocks_[i], page::kHeaderBytes);
    }

   private:
    friend class HeaderPool;
    HeaderPool* pool_ = nullptr;
    std::vector<std::byte*> blocks_;
  };

  // `n` blocks; kResourceExhausted when memory cannot be had.
  Result<Lease> acquire(size_t n);

 private:
  struct Chunk {
    AlignedBuffer memory;
    Registration registration;  // declared after memory: released first
  };
  Status grow() KVTIER_REQUIRES(mu_);
  void release(const std::vector<std::byte*>& blocks);

  Agent& agent_;
  Mutex mu_;
  std::vector<std::unique_ptr<Chunk>> chunks_ KVTIER_GUARDED_BY(mu_);
  std::vector<std::byte*> free_ KVTIER_GUARDED_BY(mu_);
};

class StagingPool {
 public:
  // Buffers are 4096-aligned, sized in 64 KiB steps, and never total more than `capacity`.
  StagingPool(Agent& agent, uint64_t capacity) : agent_(agent), capacity_(capacity) {}
  uint64_t capacity() const { return capacity_; }

  struct Slot {
    AlignedBuffer memory;
    Registration registration;  // declared after memory: released first
  };

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), slot_(std::move(o.slot_)) {}
    Lease& operator=(Lease&& o) noexcept;
    ~Lease();
    explicit operator bool() const { return slot_ != nullptr; }
    std::byte* data() const;
    uint64_t size() const;

   private:
    friend class StagingPool;
    StagingPool* pool_ = nullptr;
    std::unique_ptr<Slot> slot_;
  };

  // A buffer of at least `bytes`, or an empty lease when the pool is at capacity (the caller
  // falls back to buffered I/O and counts it).
  Lease acquire(uint64_t bytes);
  // acquire(), waiting while leases other than the caller's own `held` ones hold the memory
  // it needs (they are given back when their writes end). kResourceExhausted when `bytes`
  // exceeds the capacity, or nothing but the caller's own leases could be waited for.
  Result<Lease> acquire_waiting(uint64_t bytes, size_t held);

 private:
  void release(std::unique_ptr<Slot> slot);

  Agent& agent_;
  const uint64_t capacity_;
  Mutex mu_;
  std::condition_variable released_;
  std::multimap<uint64_t, std::unique_ptr<Slot>> free_ KVTIER_GUARDED_BY(mu_);
  uint64_t total_ KVTIER_GUARDED_BY(mu_) = 0;
  size_t leased_ KVTIER_GUARDED_BY(mu_) = 0;      // leases out
  uint64_t releases_ KVTIER_GUARDED_BY(mu_) = 0;  // leases given back, ever
};

// A counting semaphore over open objects (descriptors, on FILE backends), shared by every call
// on the store: however many batches run at once, the store never holds more than `capacity`
// objects open, so a large batch cannot exhaust the process's descriptor table.
class ObjectBudget {
 public:
  explicit ObjectBudget(size_t capacity) : capacity_(capacity), available_(capacity) {}
  size_t capacity() const { return capacity_; }

  class Permits {
   public:
    // Takes `n` <= capacity() permits, waiting until they are free.
    Permits(ObjectBudget& b, size_t n);
    ~Permits();
    Permits(const Permits&) = delete;
    Permits& operator=(const Permits&) = delete;

   private:
    ObjectBudget& budget_;
    size_t n_;
  };

  // A quarter of RLIMIT_NOFILE's soft limit, between 8 and 1024.
  static size_t default_capacity();
  // Permits held now (objects the store may hold open).
  size_t in_use() {
    MutexLock lock(mu_);
    return capacity_ - available_;
  }

 private:
  const size_t capacity_;
  Mutex mu_;
  std::condition_variable cv_;
  size_t available_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::pools
