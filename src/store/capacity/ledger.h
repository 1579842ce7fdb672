// The capacity budget of one namespace, shared by every process that opens it (TP ranks,
// several servers on one directory): one usage figure in a small file beside the pages,
// changed only under an exclusive flock, so the budget is one budget, not one per process.
//
//   <namespace dir>/usage     16 bytes: magic, used bytes (the sum of the namespace's objects)
//   <namespace dir>/members   held with a shared flock by every process that has it open
//
// A writer reserves a batch's bytes before writing (evicting least recently used pages until
// they fit), and gives back what it did not publish; an eviction or removal gives back the
// object's bytes. On open, a process that finds no other member (it gets the members lock
// exclusively) replaces the usage with the bytes it just scanned: exact after a restart, and
// self-healing after a crash that left reservations behind. While others are open the figure
// is theirs and is kept.
//
// Why a ledger and not one elected evictor: reservations make the limit hold at every moment
// (within one page) without waiting for an evictor's next round, and flock locks vanish with a
// killed process, so nothing needs electing again. Cost: two flock calls, a pread and a
// pwrite per batch.
//
// Thread-safety: safe for concurrent use (an in-process mutex beside the flock).
// FILE stores only (flock on a local or shared filesystem that supports it).
#pragma once

#include <sys/file.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "kvtier/core/status.h"
#include "kvtier/core/unique_fd.h"

namespace kvtier {

// Whether `path` lies on a FUSE filesystem (ceph-fuse, by default): its page cache is not kept
// coherent across hosts the way a local or NFS one is, so the store works around it.
bool on_fuse_filesystem(const std::string& path);

// An exclusive flock held for a scope (released on every path): the ledger's, and the read
// marks' while their file is made (read_marks.h).
class FileLock {
 public:
  static Result<FileLock> exclusive(int fd, const std::string& what) {
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) return errno_status(errno, "flock", what);
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) ::flock(fd_, LOCK_UN);
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

class Ledger {
 public:
  // Opens (creating) the ledger in `dir`. `scanned_bytes` is the namespace's size as this
  // process just listed it; it becomes the usage when no other process has the namespace open.
  static Result<std::unique_ptr<Ledger>> open(const std::string& dir, uint64_t scanned_bytes);
  ~Ledger();

  // Runs `fn(used)` with the usage locked against every process; `fn` may change it.
  Status update(const std::function<Status(uint64_t& used)>& fn);
  // Gives bytes back (never below zero).
  Status release(uint64_t bytes);
  // The usage now (unlocked read).
  Result<uint64_t> used() const;
  // Whether this process was alone when it opened the ledger (its scan set the usage).
  bool reset_on_open() const { return reset_on_open_; }

 private:
  Ledger(UniqueFd usage, UniqueFd members)
      : usage_(std::move(usage)), members_(std::move(members)) {}
  Result<uint64_t> read_locked() const;
  Status write_locked(uint64_t used);

  UniqueFd usage_;
  UniqueFd members_;
  std::mutex mu_;
  bool reset_on_open_ = false;
};

}  // namespace kvtier
