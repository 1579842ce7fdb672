#include "capacity/read_marks.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "naming/routing.h"

namespace kvtier {
namespace {

constexpr uint64_t kMagic = 0x32534b52414d4b56;    // "VKMARKS2"
constexpr uint64_t kMaxSlots = uint64_t{1} << 24;  // 64 MiB of marks at most

}  // namespace

Result<std::unique_ptr<ReadMarks>> ReadMarks::open(const std::string& dir, uint64_t slots) {
  const std::string path = dir + "/" + std::string(routing::kReadMarksFile);
  slots = std::clamp<uint64_t>(slots, kWays, kMaxSlots) / kWays * kWays;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SharedFile> file,
                          SharedFile::open(path, kMagic, slots, sizeof(uint32_t)));
  if (file->count() > kMaxSlots || file->count() % kWays != 0) {
    return corrupt_error(fmt::format("{}: not read marks of this version", path));
  }
  // Every open takes the next tag.
  const uint64_t n = std::atomic_ref<uint64_t>(*file->user_word(0)).fetch_add(1);
  return std::unique_ptr<ReadMarks>(new ReadMarks(std::move(file), uint8_t(1 + n % 255)));
}

void ReadMarks::mark(const Hash128& hash) {
  uint32_t* b = bucket(hash);
  const uint32_t print = print_of(hash);
  const uint32_t mine = print | tag_;
  int empty = -1;
  for (int i = 0; i < kWays; ++i) {
    std::atomic_ref<uint32_t> s(b[i]);
    const uint32_t seen = s.load(std::memory_order_relaxed);
    if (seen != 0 && (seen & ~0xffu) == print) {
      // Only a change dirties the line (and the file's page).
      if (seen != mine) s.store(mine, std::memory_order_relaxed);
      return;
    }
    if (seen == 0 && empty < 0) empty = i;
  }
  uint32_t free_slot = 0;
  if (empty >= 0 && std::atomic_ref<uint32_t>(b[empty]).compare_exchange_strong(
                        free_slot, mine, std::memory_order_relaxed)) {
    return;
  }
  // A full bucket: the page's hash picks the mark it replaces (that page loses its spare).
  std::atomic_ref<uint32_t>(b[hash.high % kWays]).store(mine, std::memory_order_relaxed);
}

// The slot of the page's bucket that holds a mark of it, with the mark; nullptr if none.
uint32_t* ReadMarks::find(const Hash128& hash, uint32_t* seen) const {
  uint32_t* b = bucket(hash);
  for (int i = 0; i < kWays; ++i) {
    *seen = std::atomic_ref<uint32_t>(b[i]).load(std::memory_order_relaxed);
    if (*seen != 0 && (*seen & ~0xffu) == print_of(hash)) return &b[i];
  }
  return nullptr;
}

bool ReadMarks::take_others(const Hash128& hash) {
  uint32_t seen = 0;
  uint32_t* s = find(hash, &seen);
  if (s == nullptr || (seen & 0xff) == tag_) return false;
  return std::atomic_ref<uint32_t>(*s).compare_exchange_strong(seen, 0, std::memory_order_relaxed);
}

void ReadMarks::clear(const Hash128& hash) {
  uint32_t seen = 0;
  if (uint32_t* s = find(hash, &seen)) {
    std::atomic_ref<uint32_t>(*s).compare_exchange_strong(seen, 0, std::memory_order_relaxed);
  }
}

}  // namespace kvtier
