#include "page_index.h"

namespace kvtier {

std::optional<uint64_t> PageIndex::put(const Page& page) {
  MutexLock lock(mu_);
  std::optional<uint64_t> old;
  if (auto it = map_.find(page.hash); it != map_.end()) {
    old = it->second->bytes;
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    map_.erase(it);
  }
  order_.push_back(page);
  map_.emplace(page.hash, std::prev(order_.end()));
  bytes_ += page.bytes;
  return old;
}

void PageIndex::put_many(std::span<const Page> pages) {
  MutexLock lock(mu_);
  map_.reserve(map_.size() + pages.size());
  for (const Page& page : pages) {
    auto [it, inserted] = map_.try_emplace(page.hash);
    if (!inserted) {
      bytes_ -= it->second->bytes;
      order_.erase(it->second);
    }
    order_.push_back(page);
    it->second = std::prev(order_.end());
    bytes_ += page.bytes;
  }
}

bool PageIndex::put_cold(const Page& page) {
  MutexLock lock(mu_);
  if (map_.count(page.hash) != 0) return false;
  order_.push_front(page);
  map_.emplace(page.hash, order_.begin());
  bytes_ += page.bytes;
  return true;
}

bool PageIndex::contains(const Hash128& hash) const {
  MutexLock lock(mu_);
  return map_.count(hash) != 0;
}

std::optional<PageIndex::Page> PageIndex::find(const Hash128& hash) const {
  MutexLock lock(mu_);
  auto it = map_.find(hash);
  if (it == map_.end()) return std::nullopt;
  return *it->second;
}

bool PageIndex::touch(const Hash128& hash) {
  MutexLock lock(mu_);
  auto it = map_.find(hash);
  if (it == map_.end()) return false;
  order_.splice(order_.end(), order_, it->second);
  return true;
}

std::optional<PageIndex::Page> PageIndex::erase(const Hash128& hash) {
  MutexLock lock(mu_);
  auto it = map_.find(hash);
  if (it == map_.end()) return std::nullopt;
  Page p = *it->second;
  bytes_ -= p.bytes;
  order_.erase(it->second);
  map_.erase(it);
  return p;
}

std::optional<PageIndex::Page> PageIndex::pop_oldest() {
  MutexLock lock(mu_);
  if (order_.empty()) return std::nullopt;
  Page p = order_.front();
  map_.erase(p.hash);
  order_.pop_front();
  bytes_ -= p.bytes;
  return p;
}

void PageIndex::clear() {
  MutexLock lock(mu_);
  map_.clear();
  order_.clear();
  bytes_ = 0;
}

size_t PageIndex::pages() const {
  MutexLock lock(mu_);
  return map_.size();
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
