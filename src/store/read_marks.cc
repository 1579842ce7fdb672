#include "read_marks.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "kvtier/core/unique_fd.h"
#include "ledger.h"
#include "routing.h"

namespace kvtier {
namespace {

constexpr uint64_t kMagic = 0x32534b52414d4b56;  // "VKMARKS2"
constexpr uint64_t kHeaderBytes = 64;
constexpr uint64_t kMaxSlots = uint64_t{1} << 24;  // 64 MiB of marks at most

struct Header {
  uint64_t magic;
  uint64_t slots;
  uint64_t tags_taken;  // every open takes the next tag
};
static_assert(sizeof(Header) <= kHeaderBytes);
static_assert(kHeaderBytes % alignof(uint32_t) == 0);

}  // namespace

Result<std::unique_ptr<ReadMarks>> ReadMarks::open(const std::string& dir, uint64_t slots) {
  const std::string path = dir + "/" + std::string(routing::kReadMarksFile);
  slots = std::clamp<uint64_t>(slots, 4096, kMaxSlots) / kWays * kWays;
  KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_file(path.c_str(), O_RDWR | O_CREAT, 0644));
  // The first opener sizes the file under the lock; the others map what it made. A file whose
  // header was never written (its maker died first) has never been mapped, and is made again.
  {
    KVTIER_ASSIGN_OR_RETURN(FileLock lock, FileLock::exclusive(fd.get(), path));
    Header h{};
    const ssize_t n = ::pread(fd.get(), &h, sizeof h, 0);
    if (n < 0) return errno_status(errno, "pread", path);
    if (n != ssize_t(sizeof h) || h.magic == 0) {
      const off_t bytes = off_t(kHeaderBytes + slots * 4);
      if (::ftruncate(fd.get(), bytes) != 0) return errno_status(errno, "ftruncate", path);
      // Every block allocated now: a store into a shared mapping that needs a block the
      // filesystem does not have is a SIGBUS, not an error.
      if (const int err = ::posix_fallocate(fd.get(), 0, bytes); err != 0) {
        return errno_status(err, "posix_fallocate", path);
      }
      h = Header{.magic = kMagic, .slots = slots, .tags_taken = 0};
      if (::pwrite(fd.get(), &h, sizeof h, 0) != ssize_t(sizeof h)) {
        return errno_status(errno, "pwrite", path);
      }
    }
  }
  Header h{};
  struct stat st {};
  if (::pread(fd.get(), &h, sizeof h, 0) != ssize_t(sizeof h) || ::fstat(fd.get(), &st) != 0) {
    return corrupt_error(fmt::format("{}: too short for read marks", path));
  }
  if (h.magic != kMagic || h.slots == 0 || h.slots > kMaxSlots || h.slots % kWays != 0 ||
      uint64_t(st.st_size) != kHeaderBytes + h.slots * 4) {
    return corrupt_error(fmt::format("{}: not read marks of this version", path));
  }
  const size_t bytes = kHeaderBytes + h.slots * 4;
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) return errno_status(errno, "mmap", path);
  // The mapping outlives the descriptor, which closes here.
  auto* header = static_cast<Header*>(map);
  const uint64_t n = std::atomic_ref<uint64_t>(header->tags_taken).fetch_add(1);
  auto* words = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(map) + kHeaderBytes);
  return std::unique_ptr<ReadMarks>(
      new ReadMarks(map, bytes, words, h.slots, uint8_t(1 + n % 255)));
}

ReadMarks::~ReadMarks() {
  ::munmap(map_, map_bytes_);
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
