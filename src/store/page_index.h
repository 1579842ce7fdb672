// The pages of a store's namespace this process knows of: key hash -> base, object bytes,
// in access order (least recently used first), for exists() without a system call and for
// eviction.
//
// Built on open from a listing of the namespace directories and kept up to date by the
// store's own puts, reads, removes and evictions. Other processes' changes arrive lazily: a
// page another process wrote is found by a stat when the index misses (and then indexed); a
// page another process removed stays indexed until a read misses it.
//
// Memory: about 100 bytes per page (a list node and a hash-map node).
// Thread-safety: safe for concurrent use.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvtier/core/checksum.h"
#include "kvtier/core/mutex.h"

namespace kvtier {

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
  };

  // Inserts or replaces `page` as the most recently used; returns the bytes of the page it
  // replaced, if any.
  std::optional<uint64_t> put(const Page& page);
  // put() of each page in order (the last is the most recently used), under one lock, with
  // room made for them first: how a store loads its index on open.
  void put_many(std::span<const Page> pages);
  // Inserts `page` as the least recently used (pages found on disk whose use is unknown),
  // unless it is already indexed. Returns whether it was inserted.
  bool put_cold(const Page& page);
  bool contains(const Hash128& hash) const;
  // The page's entry, if indexed (its use is not recorded).
  std::optional<Page> find(const Hash128& hash) const;
  // Marks a page as just used; false when not indexed.
  bool touch(const Hash128& hash);
  std::optional<Page> erase(const Hash128& hash);
  // The least recently used page, removed from the index.
  std::optional<Page> pop_oldest();
  void clear();

  size_t pages() const;
  uint64_t bytes() const;

 private:
  struct HashOf {
    size_t operator()(const Hash128& h) const noexcept { return h.low ^ (h.high * 31); }
  };
  mutable Mutex mu_;
  std::list<Page> order_ KVTIER_GUARDED_BY(mu_);  // front: least recently used
  std::unordered_map<Hash128, std::list<Page>::iterator, HashOf> map_ KVTIER_GUARDED_BY(mu_);
  uint64_t bytes_ KVTIER_GUARDED_BY(mu_) = 0;
};

// "0123...ef" (32 lowercase hex digits, high word first) -> hash; nullopt when malformed.
std::optional<Hash128> parse_hash_hex(std::string_view hex);

}  // namespace kvtier
