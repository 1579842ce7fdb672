#include "capacity/page_index.h"

#include <algorithm>
#include <bit>

namespace kvtier {

size_t PageIndex::slot_of(const Hash128& hash) const {
  // Key hashes are XXH3-128: their low word is already uniformly spread.
  const size_t mask = table_.size() - 1;
  size_t s = static_cast<size_t>(hash.low) & mask;
  while (table_[s] != kNil && nodes_[table_[s]].page.hash != hash) s = (s + 1) & mask;
  return s;
}

void PageIndex::reserve_locked(size_t n) {
  const size_t want = count_ + n;
  if (!table_.empty() && want * 2 <= table_.size()) return;
  const size_t size = std::bit_ceil(std::max<size_t>(want * 2, 1024));
  std::vector<uint32_t, IndexAllocator<uint32_t>> old = std::move(table_);
  table_.assign(size, kNil);
  for (uint32_t idx : old) {
    if (idx != kNil) table_[slot_of(nodes_[idx].page.hash)] = idx;
  }
  // Geometric growth: a long run of put_many calls copies the nodes a few times, not once
  // per call.
  if (want > nodes_.capacity()) nodes_.reserve(std::max(want, nodes_.capacity() * 2));
}

void PageIndex::reserve(size_t n) {
  MutexLock lock(mu_);
  reserve_locked(n);
}

uint32_t PageIndex::new_node(const Page& page) {
  uint32_t n;
  if (free_ != kNil) {
    n = free_;
    free_ = nodes_[n].next;
  } else {
    n = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[n].page = page;
  return n;
}

void PageIndex::link_back(uint32_t n) {
  nodes_[n].prev = tail_;
  nodes_[n].next = kNil;
  if (tail_ != kNil) nodes_[tail_].next = n;
  tail_ = n;
  if (head_ == kNil) head_ = n;
}

void PageIndex::link_front(uint32_t n) {
  nodes_[n].prev = kNil;
  nodes_[n].next = head_;
  if (head_ != kNil) nodes_[head_].prev = n;
  head_ = n;
  if (tail_ == kNil) tail_ = n;
}

void PageIndex::unlink(uint32_t n) {
  Node& x = nodes_[n];
  if (x.prev != kNil) {
    nodes_[x.prev].next = x.next;
  } else {
    head_ = x.next;
  }
  if (x.next != kNil) {
    nodes_[x.next].prev = x.prev;
  } else {
    tail_ = x.prev;
  }
  x.prev = x.next = kNil;
}

PageIndex::Page PageIndex::remove_slot(size_t slot) {
  const uint32_t n = table_[slot];
  unlink(n);
  Page p = nodes_[n].page;
  nodes_[n].page.segment = kNil;  // free: never matched by erase_segments
  nodes_[n].next = free_;
  free_ = n;
  --count_;
  bytes_ -= p.bytes;
  // Backward-shift deletion: move later entries of the probe run into the hole when their
  // home slot does not lie strictly between the hole and them.
  const size_t mask = table_.size() - 1;
  size_t hole = slot;
  size_t s = (slot + 1) & mask;
  while (table_[s] != kNil) {
    const size_t home = static_cast<size_t>(nodes_[table_[s]].page.hash.low) & mask;
    if (((s - home) & mask) >= ((s - hole) & mask)) {
      table_[hole] = table_[s];
      hole = s;
    }
    s = (s + 1) & mask;
  }
  table_[hole] = kNil;
  return p;
}

std::optional<uint64_t> PageIndex::put_locked(const Page& page, bool cold) {
  reserve_locked(1);
  const size_t s = slot_of(page.hash);
  std::optional<uint64_t> old;
  if (table_[s] != kNil) {
    const uint32_t n = table_[s];
    if (cold) return old;
    old = nodes_[n].page.bytes;
    bytes_ -= nodes_[n].page.bytes;
    nodes_[n].page = page;
    bytes_ += page.bytes;
    nodes_[n].page.read_ns = 0;
    unlink(n);
    link_back(n);
    return old;
  }
  const uint32_t n = new_node(page);
  table_[s] = n;
  ++count_;
  bytes_ += page.bytes;
  nodes_[n].page.read_ns = 0;
  if (cold) {
    link_front(n);
  } else {
    link_back(n);
  }
  return old;
}

std::optional<uint64_t> PageIndex::put(const Page& page) {
  MutexLock lock(mu_);
  return put_locked(page, /*cold=*/false);
}

void PageIndex::put_many(std::span<const Page> pages) {
  MutexLock lock(mu_);
  reserve_locked(pages.size());
  // Nothing grows below (room was made above), so the table slot of a page a few ahead, and
  // then the node it holds, can be fetched into cache while earlier pages go in: loading an
  // index is a stream of cache misses otherwise.
  constexpr size_t kSlotAhead = 16;
  constexpr size_t kNodeAhead = 8;
  const size_t mask = table_.size() - 1;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (i + kSlotAhead < pages.size()) {
      __builtin_prefetch(&table_[static_cast<size_t>(pages[i + kSlotAhead].hash.low) & mask]);
    }
    if (i + kNodeAhead < pages.size()) {
      const uint32_t n = table_[static_cast<size_t>(pages[i + kNodeAhead].hash.low) & mask];
      if (n != kNil) __builtin_prefetch(&nodes_[n]);
    }
    (void)put_locked(pages[i], /*cold=*/false);
  }
}

bool PageIndex::put_cold(const Page& page) {
  MutexLock lock(mu_);
  const size_t before = count_;
  (void)put_locked(page, /*cold=*/true);
  return count_ != before;
}

void PageIndex::put_relearned(const Page& page) {
  MutexLock lock(mu_);
  if (count_ != 0) {
    const uint32_t n = table_[slot_of(page.hash)];
    if (n != kNil) {
      Page& p = nodes_[n].page;
      bytes_ = bytes_ - p.bytes + page.bytes;
      p.base = page.base;
      p.bytes = page.bytes;
      p.segment = page.segment;
      p.header_bytes = page.header_bytes;
      p.offset = page.offset;
      p.payload = page.payload;
      p.read_ns = 0;  // put again (or copied forward by its writer): read since, it is not
      return;
    }
  }
  (void)put_locked(page, /*cold=*/true);
}

bool PageIndex::contains(const Hash128& hash) const {
  MutexLock lock(mu_);
  return count_ != 0 && table_[slot_of(hash)] != kNil;
}

std::optional<PageIndex::Page> PageIndex::find(const Hash128& hash) const {
  MutexLock lock(mu_);
  if (count_ == 0) return std::nullopt;
  const uint32_t n = table_[slot_of(hash)];
  if (n == kNil) return std::nullopt;
  return nodes_[n].page;
}

bool PageIndex::touch(const Hash128& hash, uint64_t when_ns) {
  MutexLock lock(mu_);
  if (count_ == 0) return false;
  const uint32_t n = table_[slot_of(hash)];
  if (n == kNil) return false;
  nodes_[n].page.read_ns = std::max<uint64_t>(when_ns, 1);
  if (n != tail_) {
    unlink(n);
    link_back(n);
  }
  return true;
}

std::vector<PageIndex::Page> PageIndex::pages_in_segments(
    const std::function<bool(uint32_t)>& in) const {
  MutexLock lock(mu_);
  std::vector<Page> found;
  for (const Node& node : nodes_) {
    if (node.page.segment != kNil && in(node.page.segment)) found.push_back(node.page);
  }
  return found;
}

std::optional<PageIndex::Page> PageIndex::erase(const Hash128& hash) {
  MutexLock lock(mu_);
  if (count_ == 0) return std::nullopt;
  const size_t s = slot_of(hash);
  if (table_[s] == kNil) return std::nullopt;
  return remove_slot(s);
}

std::optional<PageIndex::Page> PageIndex::pop_oldest() {
  MutexLock lock(mu_);
  if (head_ == kNil) return std::nullopt;
  return remove_slot(slot_of(nodes_[head_].page.hash));
}

std::vector<Hash128> PageIndex::erase_segments(const std::function<bool(uint32_t)>& gone) {
  MutexLock lock(mu_);
  // In array order (sequential memory, unlike the use order); free nodes are marked.
  std::vector<Hash128> doomed;
  for (const Node& node : nodes_) {
    if (node.page.segment != kNil && gone(node.page.segment)) doomed.push_back(node.page.hash);
  }
  for (const Hash128& h : doomed) remove_slot(slot_of(h));
  return doomed;
}

void PageIndex::clear() {
  MutexLock lock(mu_);
  nodes_.clear();
  table_.clear();
  free_ = head_ = tail_ = kNil;
  count_ = 0;
  bytes_ = 0;
}

size_t PageIndex::pages() const {
  MutexLock lock(mu_);
  return count_;
}

uint64_t PageIndex::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

std::optional<Hash128> parse_hash_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  auto word = [](std::string_view s) -> std::optional<uint64_t> {
    uint64_t v = 0;
    for (char c : s) {
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else {
        return std::nullopt;
      }
      v = (v << 4) | static_cast<uint64_t>(d);
    }
    return v;
  };
  auto high = word(hex.substr(0, 16));
  auto low = word(hex.substr(16));
  if (!high || !low) return std::nullopt;
  return Hash128{*high, *low};
}

}  // namespace kvtier
