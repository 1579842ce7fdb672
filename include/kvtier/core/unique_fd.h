// UniqueFd: the only owner of a file descriptor in kvtier, and the only place that calls close().
//
// Ownership shows in signatures: a function that takes `UniqueFd` (by value) takes ownership; one
// that takes `BorrowedFd` only uses the descriptor for the duration of the call. Every open in
// kvtier goes through `open_file()`/`open_at()`, which always add O_CLOEXEC.
//
// Thread-safety: a UniqueFd is a value; it needs external synchronization like any other.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstddef>
#include <string_view>
#include <utility>

#include "kvtier/core/status.h"

namespace kvtier {

// A non-owning view of a descriptor. Valid only while its owner is.
class BorrowedFd {
 public:
  constexpr BorrowedFd() noexcept = default;
  constexpr explicit BorrowedFd(int fd) noexcept : fd_(fd) {}
  constexpr int get() const noexcept { return fd_; }
  constexpr bool valid() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// AT_FDCWD as a borrowed descriptor, for *at() calls on absolute or cwd-relative paths.
inline constexpr BorrowedFd kCwdFd{AT_FDCWD};

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  // Takes ownership of `fd` (-1 for none).
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }
  BorrowedFd borrow() const noexcept { return BorrowedFd(fd_); }

  // Closes the held descriptor (errors are ignored: the descriptor is gone either way on Linux)
  // and takes ownership of `fd`.
  void reset(int fd = -1) noexcept;

  // Closes and reports what close() said (EIO on NFS can surface here). The descriptor is
  // released whatever the result; EINTR is not retried, as the descriptor is already freed.
  Status close() &&;

 private:
  int fd_ = -1;
};

// open(2) with O_CLOEXEC added. `path` must be NUL-terminated (a std::string's c_str()).
Result<UniqueFd> open_file(const char* path, int flags, mode_t mode = 0);
// openat(2) with O_CLOEXEC added.
Result<UniqueFd> open_at(BorrowedFd dir, const char* path, int flags, mode_t mode = 0);

// Number of descriptors this process holds now (entries of /proc/self/fd, not counting the
// one used to read it). Used by the CLI and the tests to prove nothing leaks.
Result<size_t> count_open_fds();

}  // namespace kvtier
