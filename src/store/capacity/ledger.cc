#include "capacity/ledger.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvtier/core/file_access.h"
#include "naming/routing.h"

namespace kvtier {
namespace {

constexpr uint64_t kMagic = 0x3152474455544b56;  // "VKTUDGR1"
constexpr long kFuseSuperMagic = 0x65735546;     // statfs f_type of every FUSE filesystem

// A FUSE client (ceph-fuse, by default) serves reads from the kernel's page cache, which
// another host's write does not invalidate: under the lock, a host would read a usage figure
// another host has since changed, and the budget would be lost (measured on CephFS: three
// hosts held three times the capacity). So on FUSE the usage file bypasses the page cache
// (O_DIRECT; FUSE takes any size and offset), and every read is the filesystem's current one.
// Local filesystems share one page cache, and NFS revalidates it when a lock is taken.
Status bypass_page_cache_on_fuse(int fd, const std::string& what) {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return errno_status(errno, "fstatfs", what);
  if (fs.f_type != kFuseSuperMagic) return ok_status();
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
    return errno_status(errno, "fcntl(O_DIRECT) on a FUSE filesystem", what);
  }
  return ok_status();
}
}  // namespace

bool on_fuse_filesystem(const std::string& path) {
  struct statfs fs {};
  return ::statfs(path.c_str(), &fs) == 0 && fs.f_type == kFuseSuperMagic;
}

Result<std::unique_ptr<Ledger>> Ledger::open(const std::string& dir, uint64_t scanned_bytes) {
  const std::string usage_path = dir + "/" + std::string(routing::kUsageFile);
  const std::string members_path = dir + "/" + std::string(routing::kMembersFile);
  KVTIER_ASSIGN_OR_RETURN(UniqueFd usage, open_own_file(usage_path, O_RDWR));
  KVTIER_RETURN_IF_ERROR(bypass_page_cache_on_fuse(usage.get(), usage_path));
  KVTIER_ASSIGN_OR_RETURN(UniqueFd members, open_own_file(members_path, O_RDWR));
  std::unique_ptr<Ledger> l(new Ledger(std::move(usage), std::move(members)));
  // Alone? Then this process's scan is the truth. Either way, join as a member.
  if (::flock(l->members_.get(), LOCK_EX | LOCK_NB) == 0) {
    KVTIER_ASSIGN_OR_RETURN(FileLock lock, FileLock::exclusive(l->usage_.get(), usage_path));
    KVTIER_RETURN_IF_ERROR(l->write_locked(scanned_bytes));
    l->reset_on_open_ = true;
  } else if (errno != EWOULDBLOCK) {
    return errno_status(errno, "flock", members_path);
  }
  while (::flock(l->members_.get(), LOCK_SH) != 0) {
    if (errno != EINTR) return errno_status(errno, "flock", members_path);
  }
  // A ledger never written (a first open racing another): start from the scan.
  if (!l->read_locked().ok()) {
    KVTIER_ASSIGN_OR_RETURN(FileLock lock, FileLock::exclusive(l->usage_.get(), usage_path));
    if (!l->read_locked().ok()) KVTIER_RETURN_IF_ERROR(l->write_locked(scanned_bytes));
  }
  return l;
}

Ledger::~Ledger() = default;  // closing the members descriptor leaves the membership

// The buffers are aligned for direct I/O (bypass_page_cache_on_fuse).
Result<uint64_t> Ledger::read_locked() const {
  alignas(4096) uint64_t words[2] = {0, 0};
  const ssize_t n = ::pread(usage_.get(), words, sizeof words, 0);
  if (n < 0) return errno_status(errno, "pread", "usage ledger");
  if (n != sizeof words || words[0] != kMagic) {
    return corrupt_error("the usage ledger is empty or not a ledger");
  }
  return words[1];
}

Status Ledger::write_locked(uint64_t used) {
  alignas(4096) const uint64_t words[2] = {kMagic, used};
  const ssize_t n = ::pwrite(usage_.get(), words, sizeof words, 0);
  if (n < 0) return errno_status(errno, "pwrite", "usage ledger");
  if (n != sizeof words) return resource_exhausted_error("short write to the usage ledger");
  return ok_status();
}

Status Ledger::update(const std::function<Status(uint64_t& used)>& fn) {
  std::lock_guard guard(mu_);
  KVTIER_ASSIGN_OR_RETURN(FileLock lock, FileLock::exclusive(usage_.get(), "usage ledger"));
  KVTIER_ASSIGN_OR_RETURN(uint64_t used, read_locked());
  const uint64_t before = used;
  Status st = fn(used);
  if (used != before) KVTIER_RETURN_IF_ERROR(write_locked(used));
  return st;
}

Status Ledger::release(uint64_t bytes) {
  if (bytes == 0) return ok_status();
  return update([bytes](uint64_t& used) {
    used = used > bytes ? used - bytes : 0;
    return ok_status();
  });
}

Result<uint64_t> Ledger::used() const {
  return read_locked();
}

}  // namespace kvtier
