#include "capacity/shared_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "capacity/ledger.h"
#include "kvtier/core/file_access.h"
#include "kvtier/core/unique_fd.h"

namespace kvtier {
namespace {

struct Header {
  uint64_t magic;
  uint64_t count;
  uint64_t user[SharedFile::kUserWords];
};
static_assert(sizeof(Header) == SharedFile::kHeaderBytes);

}  // namespace

Result<std::unique_ptr<SharedFile>> SharedFile::open(const std::string& path, uint64_t magic,
                                                     uint64_t count, size_t element_bytes) {
  KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_own_file(path, O_RDWR));
  {
    KVTIER_ASSIGN_OR_RETURN(FileLock lock, FileLock::exclusive(fd.get(), path));
    Header h{};
    const ssize_t n = ::pread(fd.get(), &h, sizeof h, 0);
    if (n < 0) return errno_status(errno, "pread", path);
    if (n != ssize_t(sizeof h) || h.magic == 0) {
      const off_t bytes = off_t(kHeaderBytes + count * element_bytes);
      if (::ftruncate(fd.get(), bytes) != 0) return errno_status(errno, "ftruncate", path);
      if (const int err = ::posix_fallocate(fd.get(), 0, bytes); err != 0) {
        return errno_status(err, "posix_fallocate", path);
      }
      h = Header{.magic = magic, .count = count, .user = {}};
      if (::pwrite(fd.get(), &h, sizeof h, 0) != ssize_t(sizeof h)) {
        return errno_status(errno, "pwrite", path);
      }
    }
  }
  Header h{};
  struct stat st {};
  if (::pread(fd.get(), &h, sizeof h, 0) != ssize_t(sizeof h) || ::fstat(fd.get(), &st) != 0) {
    return corrupt_error(fmt::format("{}: too short", path));
  }
  if (h.magic != magic || h.count == 0 ||
      uint64_t(st.st_size) != kHeaderBytes + h.count * element_bytes) {
    return corrupt_error(fmt::format("{}: not of this kind or version", path));
  }
  const size_t bytes = kHeaderBytes + h.count * element_bytes;
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) return errno_status(errno, "mmap", path);
  // The mapping outlives the descriptor, which closes here.
  return std::unique_ptr<SharedFile>(new SharedFile(map, bytes, h.count));
}

SharedFile::~SharedFile() {
  ::munmap(map_, bytes_);
}

}  // namespace kvtier
