#include "kvtier/backends/posix/posix_backend.h"

#include <fmt/format.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvtier/core/checksum.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/dir.h"
#include "kvtier/core/unique_fd.h"
#include "worker_pool.h"

namespace kvtier {
namespace {

constexpr std::string_view kTempSuffix = ".kvtmp";
constexpr size_t kMaxIov = IOV_MAX;

std::string dirname_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

std::string_view basename_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string p(dir);
  if (p.empty() || p.back() != '/') p += '/';
  p += name;
  return p;
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

class PosixTarget final : public BackendTarget {
 public:
  PosixTarget(std::string path, TargetMode mode, uint64_t size, ObjectIdentity id, UniqueFd fd,
              std::string temp_dir, std::string temp_path)
      : BackendTarget(std::move(path), mode, size, id),
        fd_(std::move(fd)),
        temp_dir_(std::move(temp_dir)),
        temp_path_(std::move(temp_path)) {}

  ~PosixTarget() override {
    // An unpublished named temporary is ours to remove; an unnamed one vanishes with the fd.
    if (!temp_path_.empty()) (void)::unlink(temp_path_.c_str());
  }

  int fd() const { return fd_.get(); }
  const std::string& temp_dir() const { return temp_dir_; }
  const std::string& temp_path() const { return temp_path_; }
  bool anonymous() const { return mode() == TargetMode::kCreate && temp_path_.empty(); }
  void mark_published() { temp_path_.clear(); }
  void set_published_identity(ObjectIdentity id) { set_identity(id); }
  using BackendTarget::set_direct;

 private:
  UniqueFd fd_;
  std::string temp_dir_;
  std::string temp_path_;  // named temporary not yet renamed into place
};

// A run of descriptors that continue each other in one file: one vectored system call.
struct PosixOp {
  int fd;
  uint64_t offset;
  uint32_t first;  // index of the first descriptor
  uint32_t count;
};

class PosixBackend;

class BatchJob final : public posix::PoolJob {
 public:
  BatchJob(PosixBackend& backend, IoBatch& batch, std::vector<PosixOp> ops)
      : backend_(backend), batch_(batch), ops_(std::move(ops)) {}
  void run() override;
  size_t op_count() const { return ops_.size(); }

 private:
  PosixBackend& backend_;
  // Touched only while running an op this worker claimed: until that op's descriptors are
  // completed the batch is alive.
  IoBatch& batch_;
  const std::vector<PosixOp> ops_;
  std::atomic<size_t> next_{0};
};

class PosixBackend final : public Backend {
 public:
  explicit PosixBackend(const PosixBackendOptions& options)
      : options_(options), pool_(thread_count(options.io_threads)) {
    // Linking an O_TMPFILE into place goes through /proc/self/fd.
    struct stat st;
    tmpfile_ok_.store(options.use_tmpfile && ::stat("/proc/self/fd", &st) == 0);
  }

  std::string_view name() const override { return "posix"; }
  StorageClass storage_class() const override { return StorageClass::kFile; }

  Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) override {
    if (spec.path.empty()) return invalid_argument_error("open: empty path");
    if (spec.mode == TargetMode::kRead) return open_read(spec);
    return open_create(spec);
  }

  std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs) override {
    std::vector<std::optional<Result<std::unique_ptr<BackendTarget>>>> slots(specs.size());
    pool_.parallel_for(specs.size(), [&](size_t i) { slots[i].emplace(open(specs[i])); });
    std::vector<Result<std::unique_ptr<BackendTarget>>> out;
    out.reserve(specs.size());
    for (auto& s : slots)
      out.push_back(std::move(*s));
    return out;
  }

  Status publish(BackendTarget& base, const PublishOptions& options) override {
    auto& t = static_cast<PosixTarget&>(base);
    if (t.mode() != TargetMode::kCreate)
      return invalid_argument_error("publish: not a kCreate target");
    if (options.durable && ::fdatasync(t.fd()) != 0) {
      return errno_status(errno, "fdatasync", t.path());
    }
    Status st = t.anonymous() ? link_anonymous(t) : rename_named(t);
    if (st.code() == StatusCode::kNotFound && options.create_parents) {
      KVTIER_RETURN_IF_ERROR(make_dirs(dirname_of(t.path())));
      st = t.anonymous() ? link_anonymous(t) : rename_named(t);
    }
    KVTIER_RETURN_IF_ERROR(st);
    struct stat sb;
    if (::fstat(t.fd(), &sb) == 0) t.set_published_identity(identity_of(sb));
    if (options.durable) KVTIER_RETURN_IF_ERROR(sync_dir(dirname_of(t.path())));
    return ok_status();
  }

  Status make_dirs(std::string_view path) override {
    const std::string p(path);
    if (p.empty()) return invalid_argument_error("make_dirs: empty path");
    if (::mkdir(p.c_str(), 0755) == 0) return ok_status();
    if (errno == EEXIST) {
      struct stat st;
      if (::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return ok_status();
      return errno_status(ENOTDIR, "mkdir", p);
    }
    if (errno != ENOENT) return errno_status(errno, "mkdir", p);
    const std::string parent = dirname_of(p);
    if (parent == p) return errno_status(ENOENT, "mkdir", p);
    KVTIER_RETURN_IF_ERROR(make_dirs(parent));
    if (::mkdir(p.c_str(), 0755) == 0 || errno == EEXIST) return ok_status();
    return errno_status(errno, "mkdir", p);
  }

  Result<ObjectInfo> stat(std::string_view path) override {
    const std::string p(path);
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) return errno_status(errno, "stat", p);
    return ObjectInfo{p, S_ISDIR(st.st_mode), static_cast<uint64_t>(st.st_size), mtime_ns_of(st),
                      identity_of(st)};
  }

  Status remove(std::string_view path, const ObjectIdentity* if_identity) override {
    const std::string p(path);
    if (if_identity != nullptr) {
      struct stat st;
      if (::lstat(p.c_str(), &st) != 0) return errno_status(errno, "stat", p);
      if (identity_of(st) != *if_identity) {
        return not_found_error(fmt::format("'{}' was replaced; not removed", p));
      }
    }
    if (::unlink(p.c_str()) == 0) return ok_status();
    if (errno == EISDIR || errno == EPERM) {
      if (::rmdir(p.c_str()) == 0) return ok_status();
    }
    return errno_status(errno, "unlink", p);
  }

  Status list(std::string_view dir, const ListOptions& options,
              const std::function<Status(const ObjectInfo&)>& fn) override {
    const std::string d(dir);
    KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_file(d.c_str(), O_RDONLY | O_DIRECTORY));
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

  Result<size_t> sweep_temporaries(std::string_view temp_dir, uint64_t min_age_s) override {
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
      const std::string p = join_path(temp_dir, e.name);
      if (::unlink(p.c_str()) == 0) ++removed;
      return ok_status();
    });
    if (st.code() == StatusCode::kNotFound) return size_t{0};
    KVTIER_RETURN_IF_ERROR(st);
    return removed;
  }

  Result<size_t> count_temporaries(std::string_view temp_dir) override {
    size_t n = 0;
    Status st = list(temp_dir, ListOptions{}, [&](const ObjectInfo& e) {
      if (!e.is_dir && e.name.ends_with(kTempSuffix)) ++n;
      return ok_status();
    });
    if (st.code() == StatusCode::kNotFound) return size_t{0};
    KVTIER_RETURN_IF_ERROR(st);
    return n;
  }

  Result<DirectIoAlignment> probe_direct_io(std::string_view dir) override {
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
    if (::fstatfs(static_cast<PosixTarget&>(*t).fd(), &fs) == 0 &&
        (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) {
      return unsupported_error(fmt::format(
          "{} is on tmpfs, which keeps pages in memory: direct I/O does not apply", dir));
    }
    return *t->direct();
  }

  void submit(IoBatch& batch) override {
    const auto descs = batch.descs();
    std::vector<PosixOp> ops;
    ops.reserve(descs.size());
    for (uint32_t i = 0; i < descs.size(); ++i) {
      const IoDesc& d = descs[i];
      const int fd = static_cast<PosixTarget*>(d.target)->fd();
      if (!ops.empty()) {
        PosixOp& last = ops.back();
        const IoDesc& prev = descs[last.first + last.count - 1];
        if (last.fd == fd && prev.offset + prev.length == d.offset && last.count < kMaxIov) {
          ++last.count;
          continue;
        }
      }
      ops.push_back(PosixOp{fd, d.offset, i, 1});
    }
    auto job = std::make_shared<BatchJob>(*this, batch, std::move(ops));
    pool_.schedule(job, job->op_count());
  }

  // Runs one op and completes its descriptors. The batch must not be touched after the last
  // completion.
  void execute(IoBatch& batch, const PosixOp& op) {
    const TransferOp dir = batch.op();
    const auto descs = batch.descs().subspan(op.first, op.count);
    const auto* target = static_cast<const PosixTarget*>(descs.front().target);
    Status st = batch.cancel_requested()
                    ? cancelled_error(fmt::format("{} of '{}' cancelled before it started",
                                                  transfer_op_name(dir), target->path()))
                    : run_io(dir, op, descs, *target);
    const uint32_t first = op.first;
    const uint32_t count = op.count;
    for (uint32_t k = 0; k < count; ++k)
      batch.complete(first + k, st);
  }

 private:
  static size_t thread_count(size_t requested) {
    if (requested != 0) return std::min<size_t>(requested, 64);
    const size_t hw = std::max<size_t>(1, std::thread::hardware_concurrency());
    return std::clamp<size_t>(2 * hw, 4, 64);
  }

  Result<std::unique_ptr<BackendTarget>> open_read(const TargetSpec& spec) {
    KVTIER_ASSIGN_OR_RETURN(UniqueFd fd,
                            open_file(spec.path.c_str(), O_RDONLY | (spec.direct ? O_DIRECT : 0)));
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "fstat", spec.path);
    if (!S_ISREG(st.st_mode)) {
      return invalid_argument_error(fmt::format("'{}' is not a regular file", spec.path));
    }
    auto t = std::make_unique<PosixTarget>(spec.path, TargetMode::kRead,
                                           static_cast<uint64_t>(st.st_size), identity_of(st),
                                           std::move(fd), std::string(), std::string());
    if (spec.direct) KVTIER_RETURN_IF_ERROR(make_direct(*t));
    return std::unique_ptr<BackendTarget>(std::move(t));
  }

  // Records the alignment of a target opened with O_DIRECT (one statx per filesystem).
  Status make_direct(PosixTarget& t) {
    struct stat st;
    if (::fstat(t.fd(), &st) != 0) return errno_status(errno, "fstat", t.path());
    {
      std::lock_guard lock(dio_mu_);
      if (auto it = dio_by_dev_.find(st.st_dev); it != dio_by_dev_.end()) {
        t.set_direct(it->second);
        return ok_status();
      }
    }
    KVTIER_ASSIGN_OR_RETURN(DirectIoAlignment a, dio_alignment_of(t.fd(), t.path()));
    std::lock_guard lock(dio_mu_);
    dio_by_dev_[st.st_dev] = a;
    t.set_direct(a);
    return ok_status();
  }

  Result<std::unique_ptr<BackendTarget>> open_create(const TargetSpec& spec) {
    const std::string temp_dir = spec.temp_dir.empty() ? dirname_of(spec.path) : spec.temp_dir;
    Result<std::unique_ptr<BackendTarget>> t = try_create(spec, temp_dir);
    if (t.ok() || t.status().code() != StatusCode::kNotFound) return t;
    // The temporary directory is missing (first use, or removed by hand): make it, once.
    KVTIER_RETURN_IF_ERROR(make_dirs(temp_dir));
    return try_create(spec, temp_dir);
  }

  Result<std::unique_ptr<BackendTarget>> try_create(const TargetSpec& spec,
                                                    const std::string& temp_dir) {
    const int direct = spec.direct ? O_DIRECT : 0;
    if (tmpfile_ok_.load(std::memory_order_relaxed)) {
      Result<UniqueFd> fd = open_file(temp_dir.c_str(), O_TMPFILE | O_RDWR | direct, 0644);
      if (fd.ok()) {
        return finish_create(spec, std::move(fd).value(), temp_dir, std::string());
      }
      const StatusCode c = fd.status().code();
      if (c != StatusCode::kUnsupported && c != StatusCode::kInvalidArgument) return fd.status();
      if (direct != 0 && open_file(temp_dir.c_str(), O_TMPFILE | O_RDWR, 0644).ok()) {
        return unsupported_error(fmt::format("{}: the filesystem does not support direct I/O ({})",
                                             temp_dir, fd.status().message()));
      }
      // Filesystems without O_TMPFILE say EOPNOTSUPP (or EISDIR on old kernels): fall back
      // to named temporaries for good.
      tmpfile_ok_.store(false);
    }
    std::string temp_path =
        join_path(temp_dir, fmt::format("{}.{}.{}.{}{}", basename_of(spec.path), host_tag(),
                                        ::getpid(), temp_seq_.fetch_add(1), kTempSuffix));
    KVTIER_ASSIGN_OR_RETURN(UniqueFd fd,
                            open_file(temp_path.c_str(), O_RDWR | O_CREAT | O_EXCL | direct, 0644));
    return finish_create(spec, std::move(fd), temp_dir, std::move(temp_path));
  }

  Result<std::unique_ptr<BackendTarget>> finish_create(const TargetSpec& spec, UniqueFd fd,
                                                       const std::string& temp_dir,
                                                       std::string temp_path) {
    auto t = std::make_unique<PosixTarget>(spec.path, TargetMode::kCreate, spec.size_hint,
                                           ObjectIdentity{}, std::move(fd), temp_dir,
                                           std::move(temp_path));
    // On failure `t` goes, and with it the descriptor and any named temporary.
    if (spec.direct) KVTIER_RETURN_IF_ERROR(make_direct(*t));
    return std::unique_ptr<BackendTarget>(std::move(t));
  }

  Status link_anonymous(PosixTarget& t) {
    const std::string proc = fmt::format("/proc/self/fd/{}", t.fd());
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, t.path().c_str(), AT_SYMLINK_FOLLOW) == 0) {
      t.mark_published();
      return ok_status();
    }
    if (errno != EEXIST) return errno_status(errno, "linkat", t.path());
    // Replace an existing object atomically: link under a unique name, rename over it.
    const std::string temp =
        join_path(t.temp_dir(), fmt::format("{}.{}.{}.{}{}", basename_of(t.path()), host_tag(),
                                            ::getpid(), temp_seq_.fetch_add(1), kTempSuffix));
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, temp.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      return errno_status(errno, "linkat", temp);
    }
    if (::rename(temp.c_str(), t.path().c_str()) != 0) {
      const int err = errno;
      (void)::unlink(temp.c_str());
      return errno_status(err, "rename", t.path());
    }
    t.mark_published();
    return ok_status();
  }

  Status rename_named(PosixTarget& t) {
    if (::rename(t.temp_path().c_str(), t.path().c_str()) != 0) {
      const int err = errno;
      // ENOENT means the destination directory is missing (the temporary is ours and there).
      return errno_status(err, "rename", t.path());
    }
    t.mark_published();
    return ok_status();
  }

  static Status sync_dir(const std::string& dir) {
    KVTIER_ASSIGN_OR_RETURN(UniqueFd fd, open_file(dir.c_str(), O_RDONLY | O_DIRECTORY));
    if (::fsync(fd.get()) != 0) return errno_status(errno, "fsync", dir);
    return std::move(fd).close();
  }

  Status run_io(TransferOp dir, const PosixOp& op, std::span<const IoDesc> descs,
                const PosixTarget& target) const {
    uint64_t total = 0;
    for (const IoDesc& d : descs)
      total += d.length;
    uint64_t done = 0;
    iovec iov[kMaxIov];
    while (done < total) {
      uint64_t budget = total - done;
      if (options_.max_io_bytes != 0) {
        // Direct I/O needs every call aligned: cap at a multiple of the alignment.
        const uint64_t unit = target.direct() ? target.direct()->offset : 1;
        budget = std::min(budget, std::max(unit, options_.max_io_bytes / unit * unit));
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
      const off_t at = static_cast<off_t>(op.offset + done);
      const ssize_t r =
          dir == TransferOp::kRead ? ::preadv(op.fd, iov, n, at) : ::pwritev(op.fd, iov, n, at);
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return errno_status(errno, dir == TransferOp::kRead ? "preadv" : "pwritev", target.path(),
                            op.offset + done, total - done);
      }
      if (r == 0) {
        if (dir == TransferOp::kRead) {
          return corrupt_error(fmt::format("'{}' ends at offset {}, {} bytes short", target.path(),
                                           op.offset + done, total - done));
        }
        return unavailable_error(fmt::format("pwritev '{}' offset={} made no progress",
                                             target.path(), op.offset + done));
      }
      done += static_cast<uint64_t>(r);
    }
    return ok_status();
  }

  const PosixBackendOptions options_;
  std::atomic<bool> tmpfile_ok_{true};
  std::mutex dio_mu_;
  std::unordered_map<dev_t, DirectIoAlignment> dio_by_dev_;
  std::atomic<uint64_t> temp_seq_{0};
  // Last member: destroyed (workers joined) first.
  posix::WorkerPool pool_;
};

void BatchJob::run() {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= ops_.size()) return;
    backend_.execute(batch_, ops_[i]);
  }
}

}  // namespace

std::unique_ptr<Backend> make_posix_backend(const PosixBackendOptions& options) {
  return std::make_unique<PosixBackend>(options);
}

Result<std::unique_ptr<Backend>> create_posix_backend(const BackendParams& params) {
  PosixBackendOptions o;
  KVTIER_ASSIGN_OR_RETURN(o.io_threads, param_u64(params, "io_threads", 0));
  KVTIER_ASSIGN_OR_RETURN(o.max_io_bytes, param_u64(params, "max_io_bytes", 0));
  KVTIER_ASSIGN_OR_RETURN(o.use_tmpfile, param_bool(params, "use_tmpfile", true));
  return make_posix_backend(o);
}

}  // namespace kvtier
