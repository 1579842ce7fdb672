#include "kvtier/core/dir.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace kvtier {
namespace {

// The record layout getdents64(2) fills in (glibc 2.36 declares no type for it).
struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

DirEntryType to_type(unsigned char d_type) {
  switch (d_type) {
    case DT_REG:
      return DirEntryType::kFile;
    case DT_DIR:
      return DirEntryType::kDir;
    case DT_UNKNOWN:
      return DirEntryType::kUnknown;
    default:
      return DirEntryType::kOther;
  }
}

}  // namespace

Status for_each_dir_entry(BorrowedFd dir, const std::function<Status(const DirEntry&)>& fn) {
  alignas(8) char buf[32 * 1024];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "getdents64");
    }
    if (n == 0) return ok_status();
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const LinuxDirent64*>(buf + off);
      const std::string_view name(buf + off + offsetof(LinuxDirent64, d_name));
      off += d->d_reclen;
      if (name == "." || name == "..") continue;
      KVTIER_RETURN_IF_ERROR(fn(DirEntry{name, to_type(d->d_type)}));
    }
  }
}

}  // namespace kvtier
