// What a namespace takes on a FILE location, as `du` counts it (allocation.h).
#include "inspect/allocation.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <string>
#include <vector>

#include "format/segment_format.h"
#include "kvtier/core/dir.h"
#include "kvtier/core/file_access.h"
#include "naming/routing.h"

namespace kvtier::inspect {
namespace {

// Where a file lies decides what it is: a page file in a fan-out directory, a segment or
// summary file in the segment directory; everything else is kept beside the pages.
enum class Place { kNamespace, kFanout, kSegments, kOther };

Status add_tree(BorrowedFd dir, const std::string& path, Place place, Allocation* out) {
  std::vector<std::pair<std::string, Place>> subdirs;
  Status st = for_each_dir_entry(dir, [&](const DirEntry& e) -> Status {
    struct stat s {};
    const std::string name(e.name);
    if (::fstatat(dir.get(), name.c_str(), &s, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return ok_status();  // removed meanwhile
      return errno_status(errno, "fstatat", path + "/" + name);
    }
    const uint64_t bytes = uint64_t(s.st_blocks) * 512;
    const bool page = (place == Place::kFanout && routing::is_page_name(name)) ||
                      (place == Place::kSegments && segment::is_segment_file(name));
    (page ? out->page_bytes : out->metadata_bytes) += bytes;
    if (S_ISDIR(s.st_mode)) {
      Place inner = Place::kOther;
      if (place == Place::kNamespace && routing::is_fanout_name(name)) inner = Place::kFanout;
      if (place == Place::kNamespace && name == segment::kDir) inner = Place::kSegments;
      subdirs.emplace_back(name, inner);
    }
    return ok_status();
  });
  KVTIER_RETURN_IF_ERROR(st);
  for (const auto& [name, inner] : subdirs) {
    Result<UniqueFd> sub = open_no_symlinks(dir, name.c_str(), O_RDONLY | O_DIRECTORY);
    if (!sub.ok() && sub.status().code() == StatusCode::kNotFound) continue;
    KVTIER_RETURN_IF_ERROR(sub.status());
    KVTIER_RETURN_IF_ERROR(add_tree(sub->borrow(), path + "/" + name, inner, out));
  }
  return ok_status();
}

}  // namespace

Result<Allocation> allocation_of(const std::string& ns_dir) {
  KVTIER_ASSIGN_OR_RETURN(
      UniqueFd dir, open_no_symlinks(BorrowedFd(AT_FDCWD), ns_dir.c_str(), O_RDONLY | O_DIRECTORY));
  Allocation out;
  struct stat s {};
  if (::fstat(dir.get(), &s) != 0) return errno_status(errno, "fstat", ns_dir);
  out.metadata_bytes += uint64_t(s.st_blocks) * 512;
  KVTIER_RETURN_IF_ERROR(add_tree(dir.borrow(), ns_dir, Place::kNamespace, &out));
  return out;
}

}  // namespace kvtier::inspect
