#include "kvtier/core/file_access.h"

#include <fmt/format.h>
#include <grp.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>

namespace kvtier {
namespace {

// Cleared for good the first time the kernel says it has no openat2.
std::atomic<bool> g_openat2{true};

}  // namespace

Status symlink_refused(std::string_view path) {
  return Status(StatusCode::kPermissionDenied,
                fmt::format("'{}' is or passes through a symbolic link: refused (kvtier follows "
                            "no links inside a store)",
                            path));
}

namespace {

bool in_our_groups(gid_t gid) {
  if (gid == ::getegid()) return true;
  const int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  const int got = ::getgroups(n, groups.data());
  for (int i = 0; i < got; ++i) {
    if (groups[static_cast<size_t>(i)] == gid) return true;
  }
  return false;
}

std::string mode_text(mode_t m) {
  return fmt::format("{:04o}", m & 07777);
}

}  // namespace

Result<Sharing> parse_sharing(std::string_view value) {
  if (value == "private") return Sharing::kPrivate;
  if (value == "group") return Sharing::kGroup;
  return invalid_argument_error(
      fmt::format("share={} (use private, the default, or group)", value));
}

std::string_view sharing_name(Sharing s) {
  return s == Sharing::kGroup ? "group" : "private";
}

CreateModes create_modes(Sharing s) {
  if (s == Sharing::kGroup) return CreateModes{0660, 02770, true};
  return CreateModes{0600, 0700, false};
}

Result<UniqueFd> open_no_symlinks(BorrowedFd dir, const char* path, int flags, mode_t mode) {
  if (g_openat2.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
    // openat2 refuses a mode without O_CREAT or O_TMPFILE.
    how.mode = (flags & (O_CREAT | O_TMPFILE)) != 0 ? mode : 0;
    how.resolve = RESOLVE_NO_SYMLINKS;
    long fd;
    do {
      fd = ::syscall(SYS_openat2, dir.get(), path, &how, sizeof(how));
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno == ELOOP) return symlink_refused(path);
    // No openat2 here (ENOSYS; EPERM from a seccomp filter that refuses what it does not know).
    if (errno != ENOSYS && errno != EPERM) return errno_status(errno, "open", path);
    if (errno == EPERM) {
      // openat2 refused where openat is not: a filter; a real EPERM repeats below.
      Result<UniqueFd> again = open_at(dir, path, flags | O_NOFOLLOW, mode);
      if (again.ok()) g_openat2.store(false, std::memory_order_relaxed);
      return again;
    }
    g_openat2.store(false, std::memory_order_relaxed);
  }
  Result<UniqueFd> fd = open_at(dir, path, flags | O_NOFOLLOW, mode);
  if (!fd.ok() && errno == ELOOP) return symlink_refused(path);
  return fd;
}

Result<UniqueFd> open_own_file(const std::string& path, int flags) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return errno_status(errno, "stat", dir);
  const CreateModes modes =
      create_modes((st.st_mode & S_ISGID) != 0 && (st.st_mode & S_IWGRP) != 0 ? Sharing::kGroup
                                                                              : Sharing::kPrivate);
  KVTIER_ASSIGN_OR_RETURN(UniqueFd fd,
                          open_no_symlinks(kCwdFd, path.c_str(), flags | O_CREAT, modes.file));
  if (modes.exact) {
    struct stat fst;
    // Only the owner may change the mode; the file may be another group member's.
    if (::fstat(fd.get(), &fst) == 0 && fst.st_uid == ::geteuid() &&
        (fst.st_mode & 0777) != modes.file) {
      KVTIER_RETURN_IF_ERROR(finish_created(fd.get(), modes.file, modes, path));
    }
  }
  return fd;
}

Status finish_created(int fd, mode_t mode, const CreateModes& modes, std::string_view path) {
  if (!modes.exact) return ok_status();
  if (::fchmod(fd, mode) != 0) return errno_status(errno, "fchmod", path);
  return ok_status();
}

Status make_dir(const char* path, const CreateModes& modes) {
  if (::mkdir(path, modes.dir) == 0) {
    if (!modes.exact) return ok_status();
    KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_no_symlinks(kCwdFd, path, O_RDONLY | O_DIRECTORY));
    return finish_created(fd.get(), modes.dir, modes, path);
  }
  if (errno != EEXIST) return errno_status(errno, "mkdir", path);
  struct stat st;
  if (::lstat(path, &st) != 0) return errno_status(errno, "mkdir", path);
  if (S_ISLNK(st.st_mode)) return symlink_refused(path);
  if (!S_ISDIR(st.st_mode)) return errno_status(ENOTDIR, "mkdir", path);
  return ok_status();
}

Status check_store_root(const std::string& dir, Sharing sharing) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return errno_status(errno, "stat", dir);
  if (S_ISLNK(st.st_mode)) return symlink_refused(dir);
  if (!S_ISDIR(st.st_mode)) return errno_status(ENOTDIR, "stat", dir);
  const auto refuse = [&](std::string why) {
    return Status(StatusCode::kPermissionDenied,
                  fmt::format("store root '{}' (mode {}, owner uid {}, gid {}): {}", dir,
                              mode_text(st.st_mode), st.st_uid, st.st_gid, why));
  };
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return refuse(
        "anyone may write it and it lacks the sticky bit, so anyone could replace what kvtier "
        "keeps there; use a directory of your own (chmod o-w, or +t)");
  }
  if (st.st_uid == ::geteuid()) return ok_status();
  if (sharing == Sharing::kGroup && in_our_groups(st.st_gid) && (st.st_mode & S_IWOTH) == 0) {
    return ok_status();
  }
  return refuse(fmt::format(
      "owned by another user (this process runs as uid {}), who could read and change every "
      "page{}",
      ::geteuid(),
      sharing == Sharing::kGroup
          ? "; with share=group the directory's group must be one of this process's groups"
          : "; hosts that share a root as one group use share=group"));
}

Status check_own_dir(const std::string& dir, const CreateModes& modes) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return errno_status(errno, "stat", dir);
  if (S_ISLNK(st.st_mode)) return symlink_refused(dir);
  if (!S_ISDIR(st.st_mode)) return errno_status(ENOTDIR, "stat", dir);
  const bool group = modes.exact;
  if (st.st_uid != ::geteuid()) {
    if (group && in_our_groups(st.st_gid) && (st.st_mode & S_IWOTH) == 0) return ok_status();
    return Status(StatusCode::kPermissionDenied,
                  fmt::format("'{}' (mode {}) belongs to uid {}, not to this process's uid {}: "
                              "someone else made the store's own directory",
                              dir, mode_text(st.st_mode), st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & 07777 & ~modes.dir) != 0 && ::chmod(dir.c_str(), modes.dir) != 0) {
    return errno_status(errno, "chmod", dir);
  }
  return ok_status();
}

}  // namespace kvtier
