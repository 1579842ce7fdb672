#include "kvtier/core/unique_fd.h"

#include <unistd.h>

#include <cerrno>
#include <string>

#include "kvtier/core/dir.h"

namespace kvtier {

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0 && fd_ != fd) {
    // Linux frees the descriptor even when close() fails, so there is nothing to retry.
    (void)::close(fd_);
  }
  fd_ = fd;
}

Status UniqueFd::close() && {
  if (fd_ < 0) return ok_status();
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR) return errno_status(errno, "close");
  return ok_status();
}

Result<UniqueFd> open_file(const char* path, int flags, mode_t mode) {
  return open_at(kCwdFd, path, flags, mode);
}

Result<UniqueFd> open_at(BorrowedFd dir, const char* path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::openat(dir.get(), path, flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno_status(errno, "open", path);
  return UniqueFd(fd);
}

Result<size_t> count_open_fds() {
  KVTIER_ASSIGN_OR_RETURN(UniqueFd dir, open_file("/proc/self/fd", O_RDONLY | O_DIRECTORY));
  const std::string own = std::to_string(dir.get());
  size_t count = 0;
  KVTIER_RETURN_IF_ERROR(for_each_dir_entry(dir.borrow(), [&](const DirEntry& e) {
    if (e.name != own) ++count;
    return ok_status();
  }));
  return count;
}

}  // namespace kvtier
