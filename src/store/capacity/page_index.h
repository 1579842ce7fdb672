// The pages of a store's namespace this process knows of: key hash -> base, object bytes,
// in access order (least recently used first), for exists() without a system call and for
// eviction.
//
// Built on open from a listing of the namespace directories and kept up to date by the
// store's own puts, reads, removes and evictions. Other processes' changes arrive lazily: a
// page another process wrote is found by a stat when the index misses (and then indexed); a
// page another store on this host evicted or removed leaves the index at this store's next
// exists() or eviction (page files with a capacity: the `evicted` ring, key_ring.h); one
// removed on another host stays indexed until a read misses it.
//
// Memory: about 80 bytes per page: the entries live in one array, linked in use order by
// 32-bit indexes (no allocation per page), found through an open-addressing table of indexes
// (linear probing, at most half full). put_many() loads ten million in well under a second
// when the memory is warm (docs/architecture.md).
// Thread-safety: safe for concurrent use.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/core/checksum.h"
#include "kvtier/core/mutex.h"

namespace kvtier {

// Allocates large arrays (4 MiB and more) on 2 MiB boundaries and asks for transparent huge
// pages: the index of ten million pages is about 800 MB, and touching it for the first time
// a 4 KiB page at a time costs more than filling it.
template <typename T>
struct IndexAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{2} << 20;
  IndexAllocator() = default;
  template <typename U>
  IndexAllocator(const IndexAllocator<U>&) noexcept {}
  static bool big(size_t n) { return n * sizeof(T) >= 2 * kHuge; }
  T* allocate(size_t n) {
    if (!big(n)) return std::allocator<T>().allocate(n);
    const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
    if (p == nullptr) throw std::bad_alloc();
    (void)::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: plain pages work too
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (!big(n)) {
      std::allocator<T>().deallocate(p, n);
    } else {
      std::free(p);
    }
  }
  friend bool operator==(const IndexAllocator&, const IndexAllocator&) { return true; }
};

class PageIndex {
 public:
  struct Page {
    Hash128 hash;
    uint32_t base = 0;
    uint64_t bytes = 0;  // object (record) bytes, header and padding included
    // The segment layout: where the record lies (files: unused, zero).
    uint32_t segment = 0;  // the store's number for the segment file
    uint32_t header_bytes = 0;
    uint64_t offset = 0;
    uint64_t payload = 0;
    // When it was last read (touched) since it was last put (wall clock); 0: not since.
    uint64_t read_ns = 0;
  };

  // Inserts or replaces `page` as the most recently used; returns the bytes of the page it
  // replaced, if any.
  std::optional<uint64_t> put(const Page& page);
  // put() of each page in order (the last is the most recently used), under one lock, with
  // room made for them first: how a store loads its index on open.
  void put_many(std::span<const Page> pages);
  // Makes room for `n` more pages (a store about to load that many).
  void reserve(size_t n);
  // Inserts `page` as the least recently used (pages found on disk whose use is unknown),
  // unless it is already indexed. Returns whether it was inserted.
  bool put_cold(const Page& page);
  // A page another writer put again elsewhere (a later summary entry): an indexed page
  // takes the new location and keeps its place in the use order; otherwise put_cold.
  void put_relearned(const Page& page);
  bool contains(const Hash128& hash) const;
  // The page's entry, if indexed (its use is not recorded).
  std::optional<Page> find(const Hash128& hash) const;
  // Marks a page as just used (read at `when_ns`, the wall clock); false when not indexed.
  bool touch(const Hash128& hash, uint64_t when_ns);
  // The pages whose record lies in a segment for which `in(segment)` is true. One pass.
  std::vector<Page> pages_in_segments(const std::function<bool(uint32_t)>& in) const;
  std::optional<Page> erase(const Hash128& hash);
  // The least recently used page, removed from the index.
  std::optional<Page> pop_oldest();
  // The segment layout: removes every page whose record lies in a segment for which
  // `gone(segment)` is true (segments reclaimed or removed); returns their key hashes. One
  // pass over the index.
  std::vector<Hash128> erase_segments(const std::function<bool(uint32_t)>& gone);
  void clear();

  size_t pages() const;
  uint64_t bytes() const;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Node {
    Page page;
    uint32_t prev = kNil;  // towards the least recently used
    uint32_t next = kNil;  // towards the most recently used (free nodes: the next free one)
  };

  // The table slot holding `hash`, or the empty slot where it would go.
  size_t slot_of(const Hash128& hash) const KVTIER_REQUIRES(mu_);
  // Room for `n` more pages without growing the table past half full.
  void reserve_locked(size_t n) KVTIER_REQUIRES(mu_);
  std::optional<uint64_t> put_locked(const Page& page, bool cold) KVTIER_REQUIRES(mu_);
  uint32_t new_node(const Page& page) KVTIER_REQUIRES(mu_);
  void link_back(uint32_t n) KVTIER_REQUIRES(mu_);
  void link_front(uint32_t n) KVTIER_REQUIRES(mu_);
  void unlink(uint32_t n) KVTIER_REQUIRES(mu_);
  // Frees the node in table slot `slot` (backward-shift deletion keeps probing correct).
  Page remove_slot(size_t slot) KVTIER_REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<Node, IndexAllocator<Node>> nodes_ KVTIER_GUARDED_BY(mu_);
  // Node indexes; kNil: empty.
  std::vector<uint32_t, IndexAllocator<uint32_t>> table_ KVTIER_GUARDED_BY(mu_);
  uint32_t free_ KVTIER_GUARDED_BY(mu_) = kNil;  // first free node
  uint32_t head_ KVTIER_GUARDED_BY(mu_) = kNil;  // least recently used
  uint32_t tail_ KVTIER_GUARDED_BY(mu_) = kNil;  // most recently used
  size_t count_ KVTIER_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ KVTIER_GUARDED_BY(mu_) = 0;
};

// "0123...ef" (32 lowercase hex digits, high word first) -> hash; nullopt when malformed.
std::optional<Hash128> parse_hash_hex(std::string_view hex);

}  // namespace kvtier
