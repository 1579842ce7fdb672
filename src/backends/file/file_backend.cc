#include "file_backend.h"

#include <fmt/format.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

#include "kvtier/core/checksum.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/dir.h"
#include "kvtier/core/file_access.h"

namespace kvtier::file {
namespace {

constexpr std::string_view kTempSuffix = ".kvtmp";
constexpr size_t kMaxIov = IOV_MAX;

std::string_view basename_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

ObjectIdentity identity_of(const struct stat& st) {
  return ObjectIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

uint64_t mtime_ns_of(const struct stat& st) {
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ull +
         static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

// 8 hex digits naming this host in temporary names (a shared filesystem sees several hosts).
const std::string& host_tag() {
  static const std::string tag = [] {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
    return fmt::format("{:08x}", static_cast<uint32_t>(checksum64(name, std::strlen(name))));
  }();
  return tag;
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// Parses "<name>.<host>.<pid>.<seq>.kvtmp" into host and pid.
bool parse_temp_name(std::string_view name, std::string_view* host, long* pid) {
  if (name.size() <= kTempSuffix.size() || !name.ends_with(kTempSuffix)) return false;
  name.remove_suffix(kTempSuffix.size());
  std::string_view parts[3];
  for (int i = 2; i >= 0; --i) {
    const size_t dot = name.rfind('.');
    if (dot == std::string_view::npos) return false;
    parts[i] = name.substr(dot + 1);
    name = name.substr(0, dot);
  }
  *host = parts[0];
  auto [ptr, ec] = std::from_chars(parts[1].data(), parts[1].data() + parts[1].size(), *pid);
  return ec == std::errc() && ptr == parts[1].data() + parts[1].size();
}

// Direct I/O alignment of an open file: what statx(STATX_DIOALIGN) reports, 4096 when the
// kernel does not say (before Linux 6.1), kUnsupported when it says direct I/O is impossible
// (tmpfs reports alignment 0).
Result<DirectIoAlignment> dio_alignment_of(int fd, std::string_view path) {
  struct statx stx;
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) != 0) {
    return errno_status(errno, "statx", path);
  }
  if ((stx.stx_mask & STATX_DIOALIGN) == 0) return DirectIoAlignment{4096, 4096};
  if (stx.stx_dio_offset_align == 0 || stx.stx_dio_mem_align == 0) {
    return unsupported_error(fmt::format(
        "{}: the filesystem does not support direct I/O (statx reports no alignment)", path));
  }
  return DirectIoAlignment{stx.stx_dio_mem_align, stx.stx_dio_offset_align};
}

Status sync_dir(const std::string& dir) {
  KVTIER_ASSIGN_OR_RETURN(UniqueFd fd,
                          open_no_symlinks(kCwdFd, dir.c_str(), O_RDONLY | O_DIRECTORY));
  if (::fsync(fd.get()) != 0) return errno_status(errno, "fsync", dir);
  return std::move(fd).close();
}

}  // namespace

std::string dirname_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string p(dir);
  if (p.empty() || p.back() != '/') p += '/';
  p += name;
  return p;
}

std::vector<SyncRun> merge_runs(std::span<const IoDesc> descs, uint64_t max_merge_bytes) {
  std::vector<SyncRun> runs;
  runs.reserve(descs.size());
  uint64_t run_bytes = 0;
  for (uint32_t i = 0; i < descs.size(); ++i) {
    const IoDesc& d = descs[i];
    const int fd = static_cast<const FileTarget*>(d.target)->fd();
    if (!runs.empty()) {
      SyncRun& last = runs.back();
      const IoDesc& prev = descs[last.first + last.count - 1];
      if (last.fd == fd && prev.offset + prev.length == d.offset && last.count < kMaxIov &&
          run_bytes + d.length <= max_merge_bytes) {
        ++last.count;
        run_bytes += d.length;
        continue;
      }
    }
    runs.push_back(SyncRun{fd, d.offset, i, 1});
    run_bytes = d.length;
  }
  return runs;
}

namespace {

Status move_run(TransferOp dir, const SyncRun& run, std::span<const IoDesc> descs,
                const FileTarget& target, uint64_t max_io_bytes) {
  uint64_t total = 0;
  for (const IoDesc& d : descs) total += d.length;
  uint64_t done = 0;
  iovec iov[kMaxIov];
  while (done < total) {
    uint64_t budget = total - done;
    if (max_io_bytes != 0) {
      // Direct I/O needs every call aligned: cap at a multiple of the alignment.
      const uint64_t unit = target.direct() ? target.direct()->offset : 1;
      budget = std::min(budget, std::max(unit, max_io_bytes / unit * unit));
    }
    uint64_t skip = done;
    int n = 0;
    for (const IoDesc& d : descs) {
      if (skip >= d.length) {
        skip -= d.length;
        continue;
      }
      const uint64_t take = std::min(d.length - skip, budget);
      iov[n++] = iovec{d.mem + skip, static_cast<size_t>(take)};
      budget -= take;
      skip = 0;
      if (budget == 0 || n == static_cast<int>(kMaxIov)) break;
    }
    const off_t at = static_cast<off_t>(run.offset + done);
    const ssize_t r =
        dir == TransferOp::kRead ? ::preadv(run.fd, iov, n, at) : ::pwritev(run.fd, iov, n, at);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno_status(errno, dir == TransferOp::kRead ? "preadv" : "pwritev", target.path(),
                          run.offset + done, total - done);
    }
    if (r == 0) {
      if (dir == TransferOp::kRead) {
        return corrupt_error(fmt::format("'{}' ends at offset {}, {} bytes short", target.path(),
                                         run.offset + done, total - done));
      }
      return unavailable_error(
          fmt::format("pwritev '{}' offset={} made no progress", target.path(), run.offset + done));
    }
    done += static_cast<uint64_t>(r);
  }
  return ok_status();
}

}  // namespace

void execute_run(IoBatch& batch, const SyncRun& run, uint64_t max_io_bytes) {
  const TransferOp dir = batch.op();
  const auto descs = batch.descs().subspan(run.first, run.count);
  const auto* target = static_cast<const FileTarget*>(descs.front().target);
  Status st = batch.cancel_requested()
                  ? cancelled_error(fmt::format("{} of '{}' cancelled before it started",
                                                transfer_op_name(dir), target->path()))
                  : move_run(dir, run, descs, *target, max_io_bytes);
  const uint32_t first = run.first;
  const uint32_t count = run.count;
  for (uint32_t k = 0; k < count; ++k) batch.complete(first + k, st);
}

// The directory `path` is in, opened to create, link, rename or unlink its entry without a link
// in the way.
Result<UniqueFd> open_parent(std::string_view path) {
  const std::string dir = dirname_of(path);
  return open_no_symlinks(kCwdFd, dir.c_str(), O_PATH | O_DIRECTORY);
}

FileBackend::FileBackend(bool use_tmpfile, uint64_t inline_bytes, Sharing sharing)
    : inline_bytes_(inline_bytes), modes_(create_modes(sharing)) {
  // Linking an O_TMPFILE into place goes through /proc/self/fd.
  struct stat st;
  tmpfile_ok_.store(use_tmpfile && ::stat("/proc/self/fd", &st) == 0);
}

void FileBackend::run_parallel(size_t n, const std::function<void(size_t)>& fn) {
  for (size_t i = 0; i < n; ++i) fn(i);
}

bool FileBackend::submit_inline(IoBatch& batch, uint64_t max_merge_bytes, uint64_t max_io_bytes) {
  if (inline_bytes_ == 0) return false;
  uint64_t bytes = 0;
  bool direct = false;
  for (const IoDesc& d : batch.descs()) {
    bytes += d.length;
    direct = direct || static_cast<const FileTarget*>(d.target)->direct().has_value();
  }
  if (bytes > inline_bytes_) return false;
  const std::vector<SyncRun> runs = merge_runs(batch.descs(), max_merge_bytes);
  if (direct && runs.size() > 1) return false;
  for (const SyncRun& run : runs) execute_run(batch, run, max_io_bytes);
  return true;
}

std::string FileBackend::describe_inline() const {
  if (inline_bytes_ == 0) return {};
  return fmt::format(", batches up to {} bytes inline", inline_bytes_);
}

Result<std::unique_ptr<BackendTarget>> FileBackend::open(const TargetSpec& spec) {
  if (spec.path.empty()) return invalid_argument_error("open: empty path");
  if (spec.mode == TargetMode::kRead) return open_read(spec);
  if (spec.mode == TargetMode::kAppend) return open_append(spec);
  return open_create(spec);
}

std::vector<Result<std::unique_ptr<BackendTarget>>> FileBackend::open_batch(
    std::span<const TargetSpec> specs) {
  std::vector<std::optional<Result<std::unique_ptr<BackendTarget>>>> slots(specs.size());
  const auto open_one = [&](size_t i) { slots[i].emplace(open(specs[i])); };
  if (open_inline(specs.size())) {
    for (size_t i = 0; i < specs.size(); ++i) open_one(i);
  } else {
    run_parallel(specs.size(), open_one);
  }
  std::vector<Result<std::unique_ptr<BackendTarget>>> out;
  out.reserve(specs.size());
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

Status FileBackend::publish(BackendTarget& base, const PublishOptions& options) {
  auto& t = static_cast<FileTarget&>(base);
  if (t.mode() != TargetMode::kCreate)
    return invalid_argument_error("publish: not a kCreate target");
  if (options.durable && ::fdatasync(t.fd()) != 0) {
    return errno_status(errno, "fdatasync", t.path());
  }
  Status st = t.anonymous() ? link_anonymous(t) : rename_named(t);
  if (st.code() == StatusCode::kNotFound && options.create_parents) {
    KVTIER_RETURN_IF_ERROR(make_dir_in_place(dirname_of(t.path())));
    st = t.anonymous() ? link_anonymous(t) : rename_named(t);
  }
  KVTIER_RETURN_IF_ERROR(st);
  struct stat sb;
  if (::fstat(t.fd(), &sb) == 0) t.set_published_identity(identity_of(sb));
  if (options.durable) KVTIER_RETURN_IF_ERROR(sync_dir(dirname_of(t.path())));
  return ok_status();
}

Status FileBackend::sync(BackendTarget& base) {
  auto& t = static_cast<FileTarget&>(base);
  if (t.mode() != TargetMode::kAppend) return invalid_argument_error("sync: not a kAppend target");
  int rc;
  do {
    rc = ::fdatasync(t.fd());
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) return errno_status(errno, "fdatasync", t.path());
  return ok_status();
}

// One directory, in a parent that must exist. A missing parent is kNotFound: the directories
// above a store's own (its base, its namespace) exist for as long as the filesystem they are on
// is there, and when one is gone so may be the filesystem (a network mount detached while a
// writer was blocked in it): recreating them would put pages on whatever lies beneath.
Status FileBackend::make_dir_in_place(const std::string& dir) {
  return ::kvtier::make_dir(dir.c_str(), modes_);
}

Status FileBackend::make_dirs(std::string_view path) {
  const std::string p(path);
  if (p.empty()) return invalid_argument_error("make_dirs: empty path");
  Status st = ::kvtier::make_dir(p.c_str(), modes_);
  if (st.code() != StatusCode::kNotFound) return st;
  const std::string parent = dirname_of(p);
  if (parent == p) return st;
  KVTIER_RETURN_IF_ERROR(make_dirs(parent));
  return ::kvtier::make_dir(p.c_str(), modes_);
}

Result<ObjectInfo> FileBackend::stat(std::string_view path) {
  const std::string p(path);
  struct stat st;
  if (::fstatat(AT_FDCWD, p.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno_status(errno, "stat", p);
  }
  if (S_ISLNK(st.st_mode)) return symlink_refused(p);
  return ObjectInfo{p, S_ISDIR(st.st_mode), static_cast<uint64_t>(st.st_size), mtime_ns_of(st),
                    identity_of(st)};
}

Status FileBackend::remove(std::string_view path, const ObjectIdentity* if_identity) {
  const std::string p(path);
  if (if_identity != nullptr) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) return errno_status(errno, "stat", p);
    if (identity_of(st) != *if_identity) {
      return not_found_error(fmt::format("'{}' was replaced; not removed", p));
    }
  }
  KVTIER_ASSIGN_OR_RETURN(UniqueFd dir, open_parent(p));
  const std::string name(basename_of(p));
  if (::unlinkat(dir.get(), name.c_str(), 0) == 0) return ok_status();
  if (errno == EISDIR || errno == EPERM) {
    if (::unlinkat(dir.get(), name.c_str(), AT_REMOVEDIR) == 0) return ok_status();
  }
  return errno_status(errno, "unlink", p);
}

Status FileBackend::list(std::string_view dir, const ListOptions& options,
                         const std::function<Status(const ObjectInfo&)>& fn) {
  const std::string d(dir);
  KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_no_symlinks(kCwdFd, d.c_str(), O_RDONLY | O_DIRECTORY));
  ObjectInfo info;
  return for_each_dir_entry(fd.borrow(), [&](const DirEntry& e) -> Status {
    info.name.assign(e.name);
    info.is_dir = e.type == DirEntryType::kDir;
    info.size = 0;
    info.mtime_ns = 0;
    info.identity = {};
    if (options.with_details || e.type == DirEntryType::kUnknown) {
      struct stat st;
      if (::fstatat(fd.get(), info.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return ok_status();  // removed meanwhile
        return errno_status(errno, "stat", join_path(d, info.name));
      }
      info.is_dir = S_ISDIR(st.st_mode);
      info.size = static_cast<uint64_t>(st.st_size);
      info.mtime_ns = mtime_ns_of(st);
      info.identity = identity_of(st);
    }
    return fn(info);
  });
}

Result<size_t> FileBackend::sweep_temporaries(std::string_view temp_dir, uint64_t min_age_s) {
  const uint64_t now = wall_ns();
  size_t removed = 0;
  Status st = list(temp_dir, ListOptions{.with_details = true}, [&](const ObjectInfo& e) {
    std::string_view host;
    long pid = 0;
    if (e.is_dir || !parse_temp_name(e.name, &host, &pid)) return ok_status();
    const bool ours = host == host_tag();
    const bool owner_gone = ours && !process_alive(pid);
    const bool old = now > e.mtime_ns && (now - e.mtime_ns) / 1'000'000'000ull >= min_age_s;
    if (!(owner_gone || old) || (ours && pid == ::getpid())) return ok_status();
    if (remove(join_path(temp_dir, e.name), &e.identity).ok()) ++removed;
    return ok_status();
  });
  if (st.code() == StatusCode::kNotFound) return size_t{0};
  KVTIER_RETURN_IF_ERROR(st);
  return removed;
}

Result<size_t> FileBackend::count_temporaries(std::string_view temp_dir) {
  size_t n = 0;
  Status st = list(temp_dir, ListOptions{}, [&](const ObjectInfo& e) {
    if (!e.is_dir && e.name.ends_with(kTempSuffix)) ++n;
    return ok_status();
  });
  if (st.code() == StatusCode::kNotFound) return size_t{0};
  KVTIER_RETURN_IF_ERROR(st);
  return n;
}

Result<DirectIoAlignment> FileBackend::probe_direct_io(std::string_view dir) {
  // Filesystems report direct I/O alignment per file: ask a throw-away one in `dir`.
  TargetSpec probe;
  probe.path = join_path(dir, ".kvtier-direct-io-probe");
  probe.mode = TargetMode::kCreate;
  probe.temp_dir = std::string(dir);
  probe.direct = true;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<BackendTarget> t, open_create(probe));
  // tmpfs accepts O_DIRECT since Linux 6.6, but its pages are the page cache: there is
  // nothing to bypass, so it is buffered I/O under another name.
  struct statfs fs;
  if (::fstatfs(static_cast<FileTarget&>(*t).fd(), &fs) == 0 &&
      (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) {
    return unsupported_error(
        fmt::format("{} is on tmpfs, which keeps pages in memory: direct I/O does not apply", dir));
  }
  return *t->direct();
}

Result<std::unique_ptr<BackendTarget>> FileBackend::open_read(const TargetSpec& spec) {
  KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_no_symlinks(kCwdFd, spec.path.c_str(),
                                                        O_RDONLY | (spec.direct ? O_DIRECT : 0)));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "fstat", spec.path);
  return adopt_read(spec, std::move(fd), st);
}

Result<std::unique_ptr<BackendTarget>> FileBackend::adopt_read(const TargetSpec& spec, UniqueFd fd,
                                                               const struct stat& st) {
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument_error(fmt::format("'{}' is not a regular file", spec.path));
  }
  auto t =
      std::make_unique<FileTarget>(spec.path, TargetMode::kRead, static_cast<uint64_t>(st.st_size),
                                   identity_of(st), std::move(fd), std::string(), std::string());
  if (spec.direct) KVTIER_RETURN_IF_ERROR(make_direct(*t, st.st_dev));
  return std::unique_ptr<BackendTarget>(std::move(t));
}

Result<std::unique_ptr<BackendTarget>> FileBackend::open_append(const TargetSpec& spec) {
  KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_no_symlinks(kCwdFd, spec.path.c_str(),
                                                        O_RDWR | (spec.direct ? O_DIRECT : 0)));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "fstat", spec.path);
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument_error(fmt::format("'{}' is not a regular file", spec.path));
  }
  auto t = std::make_unique<FileTarget>(spec.path, TargetMode::kAppend,
                                        static_cast<uint64_t>(st.st_size), identity_of(st),
                                        std::move(fd), std::string(), std::string());
  if (spec.direct) KVTIER_RETURN_IF_ERROR(make_direct(*t, st.st_dev));
  return std::unique_ptr<BackendTarget>(std::move(t));
}

// Records the alignment of a target opened with O_DIRECT (one statx per filesystem).
Status FileBackend::make_direct(FileTarget& t) {
  struct stat st;
  if (::fstat(t.fd(), &st) != 0) return errno_status(errno, "fstat", t.path());
  return make_direct(t, st.st_dev);
}

Status FileBackend::make_direct(FileTarget& t, dev_t dev) {
  {
    std::lock_guard lock(dio_mu_);
    if (auto it = dio_by_dev_.find(dev); it != dio_by_dev_.end()) {
      t.set_direct(it->second);
      return ok_status();
    }
  }
  KVTIER_ASSIGN_OR_RETURN(DirectIoAlignment a, dio_alignment_of(t.fd(), t.path()));
  std::lock_guard lock(dio_mu_);
  dio_by_dev_[dev] = a;
  t.set_direct(a);
  return ok_status();
}

Result<std::unique_ptr<BackendTarget>> FileBackend::open_create(const TargetSpec& spec) {
  const std::string temp_dir = temp_dir_for(spec);
  Result<std::unique_ptr<BackendTarget>> t = try_create(spec, temp_dir);
  if (t.ok() || t.status().code() != StatusCode::kNotFound) return t;
  // The temporary directory is missing (removed by hand): make it again, once, where it was.
  KVTIER_RETURN_IF_ERROR(make_dir_in_place(temp_dir));
  return try_create(spec, temp_dir);
}

Result<std::unique_ptr<BackendTarget>> FileBackend::try_create(const TargetSpec& spec,
                                                               const std::string& temp_dir) {
  const int direct = spec.direct ? O_DIRECT : 0;
  if (tmpfile_ok_.load(std::memory_order_relaxed)) {
    Result<UniqueFd> fd =
        open_no_symlinks(kCwdFd, temp_dir.c_str(), O_TMPFILE | O_RDWR | direct, modes_.file);
    if (fd.ok()) {
      return finish_create(spec, std::move(fd).value(), temp_dir, std::string());
    }
    const StatusCode c = fd.status().code();
    if (c != StatusCode::kUnsupported && c != StatusCode::kInvalidArgument) return fd.status();
    if (direct != 0 &&
        open_no_symlinks(kCwdFd, temp_dir.c_str(), O_TMPFILE | O_RDWR, modes_.file).ok()) {
      return unsupported_error(fmt::format("{}: the filesystem does not support direct I/O ({})",
                                           temp_dir, fd.status().message()));
    }
    // Filesystems without O_TMPFILE say EOPNOTSUPP (or EISDIR on old kernels): fall back
    // to named temporaries for good.
    tmpfile_ok_.store(false);
  }
  std::string temp_path = join_path(temp_dir, temp_name(spec.path));
  KVTIER_ASSIGN_OR_RETURN(
      UniqueFd fd,
      open_no_symlinks(kCwdFd, temp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | direct, modes_.file));
  return finish_create(spec, std::move(fd), temp_dir, std::move(temp_path));
}

Result<std::unique_ptr<BackendTarget>> FileBackend::finish_create(const TargetSpec& spec,
                                                                  UniqueFd fd,
                                                                  const std::string& temp_dir,
                                                                  std::string temp_path) {
  auto t =
      std::make_unique<FileTarget>(spec.path, TargetMode::kCreate, spec.size_hint, ObjectIdentity{},
                                   std::move(fd), temp_dir, std::move(temp_path));
  // On failure `t` goes, and with it the descriptor and any named temporary.
  KVTIER_RETURN_IF_ERROR(finish_created(t->fd(), modes_.file, modes_, t->path()));
  if (spec.direct) KVTIER_RETURN_IF_ERROR(make_direct(*t));
  return std::unique_ptr<BackendTarget>(std::move(t));
}

// Both publish steps name the destination by its directory, opened without following links, so
// that a link planted in its place is not written through.
Status FileBackend::link_anonymous(FileTarget& t) {
  const std::string proc = fmt::format("/proc/self/fd/{}", t.fd());
  KVTIER_ASSIGN_OR_RETURN(UniqueFd dir, open_parent(t.path()));
  const std::string name(basename_of(t.path()));
  if (::linkat(AT_FDCWD, proc.c_str(), dir.get(), name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
    t.mark_published();
    return ok_status();
  }
  if (errno != EEXIST) return errno_status(errno, "linkat", t.path());
  // Replace an existing object atomically: link under a unique name, rename over it.
  const std::string temp = join_path(t.temp_dir(), temp_name(t.path()));
  KVTIER_ASSIGN_OR_RETURN(UniqueFd temp_dir, open_parent(temp));
  const std::string temp_base(basename_of(temp));
  if (::linkat(AT_FDCWD, proc.c_str(), temp_dir.get(), temp_base.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    return errno_status(errno, "linkat", temp);
  }
  if (::renameat(temp_dir.get(), temp_base.c_str(), dir.get(), name.c_str()) != 0) {
    const int err = errno;
    (void)::unlinkat(temp_dir.get(), temp_base.c_str(), 0);
    return errno_status(err, "rename", t.path());
  }
  t.mark_published();
  return ok_status();
}

Status FileBackend::rename_named(FileTarget& t) {
  KVTIER_ASSIGN_OR_RETURN(UniqueFd dir, open_parent(t.path()));
  const std::string name(basename_of(t.path()));
  if (::renameat(AT_FDCWD, t.temp_path().c_str(), dir.get(), name.c_str()) != 0) {
    const int err = errno;
    // ENOENT means the destination directory is missing (the temporary is ours and there).
    return errno_status(err, "rename", t.path());
  }
  t.mark_published();
  return ok_status();
}

std::string FileBackend::temp_dir_for(const TargetSpec& spec) {
  return spec.temp_dir.empty() ? dirname_of(spec.path) : spec.temp_dir;
}

std::string FileBackend::temp_name(std::string_view final_path) {
  return fmt::format("{}.{}.{}.{}{}", basename_of(final_path), host_tag(), ::getpid(),
                     temp_seq_.fetch_add(1), kTempSuffix);
}

}  // namespace kvtier::file
