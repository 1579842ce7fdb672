#include "guard/isolation.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>

#include "kvtier/core/unique_fd.h"

namespace kvtier::guard {
namespace {

struct FsKind {
  uint64_t magic;
  std::string_view name;
};
// statfs f_type of filesystems whose calls can block for as long as a server is gone.
constexpr FsKind kCanHang[] = {
    {0x6969, "nfs"},      {0x65735546, "fuse"}, {0x00c36400, "ceph"},   {0x517b, "smb"},
    {0xfe534d42, "smb2"}, {0xff534d42, "cifs"}, {0x0bd00bd0, "lustre"}, {0x47504653, "gpfs"},
    {0x01021997, "9p"},   {0x5346414f, "afs"},  {0x6b414653, "kafs"},   {0x7461636f, "ocfs2"},
    {0x01161970, "gfs2"}, {0x73757245, "coda"}, {0x564c, "ncp"},
};
// Local filesystems, named in the reason.
constexpr FsKind kLocal[] = {
    {0xef53, "ext4"},      {0x58465342, "xfs"},     {0x9123683e, "btrfs"}, {0x01021994, "tmpfs"},
    {0x858458f6, "ramfs"}, {0x794c7630, "overlay"}, {0x2fc12fc1, "zfs"},   {0xf2f52010, "f2fs"},
};

std::string_view fs_name(uint64_t magic, std::span<const FsKind> kinds) {
  for (const FsKind& k : kinds) {
    if (k.magic == magic) return k.name;
  }
  return {};
}

}  // namespace

Result<Isolation> decide_isolation(const std::string& dir, std::string_view mode) {
  if (mode == "on") return Isolation{true, "on"};
  if (mode == "off") return Isolation{false, "off"};
  if (mode != "auto") {
    return invalid_argument_error(fmt::format("isolate '{}' (use auto, on or off)", mode));
  }
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) {
    // Not a directory of this machine's (a memory backend on a FILE location): nothing there
    // can hang.
    return Isolation{false,
                     fmt::format("off (auto: no filesystem at {}: {})", dir, std::strerror(errno))};
  }
  const auto magic = static_cast<uint64_t>(static_cast<uint32_t>(fs.f_type));
  if (std::string_view name = fs_name(magic, kCanHang); !name.empty()) {
    return Isolation{true, fmt::format("on (auto: {}, which can hang)", name)};
  }
  std::string_view name = fs_name(magic, kLocal);
  return Isolation{false, name.empty() ? fmt::format("off (auto: local filesystem 0x{:x})", magic)
                                       : fmt::format("off (auto: {}, local)", name)};
}

Status probe_once(const std::string& dir) {
  static std::atomic<uint64_t> seq{0};
  const std::string path = fmt::format("{}/probe.{}.{}", dir, ::getpid(), seq.fetch_add(1));
  UniqueFd fd(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
  if (!fd.valid()) return errno_status(errno, "open", path);
  const ssize_t n = ::write(fd.get(), "k", 1);
  const int write_err = errno;
  fd.reset();
  const int unlinked = ::unlink(path.c_str());
  const int unlink_err = errno;
  if (n != 1) return errno_status(write_err, "write", path);
  if (unlinked != 0) return errno_status(unlink_err, "unlink", path);
  return ok_status();
}

bool answered(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk:
    case StatusCode::kPermissionDenied:
    case StatusCode::kResourceExhausted:
    case StatusCode::kAlreadyExists:
      return true;
    default:
      return false;
  }
}

}  // namespace kvtier::guard
