// The object half of the FILE backends: targets that own their descriptors, and open,
// publish, stat, list, remove, temporaries and the direct I/O probe. The posix and uring
// backends derive from FileBackend and add only their data path (submit), so files are
// created, published and named the same way whichever moves the bytes.
//
// Internal to the backends; not installed.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/core/file_access.h"
#include "kvtier/core/unique_fd.h"
#include "kvtier/transfer/backend.h"

namespace kvtier::file {

std::string dirname_of(std::string_view path);
std::string join_path(std::string_view dir, std::string_view name);

// A file opened by a FILE backend. Owns its descriptor and, until published, its named
// temporary (an unnamed O_TMPFILE vanishes with the descriptor).
class FileTarget final : public BackendTarget {
 public:
  FileTarget(std::string path, TargetMode mode, uint64_t size, ObjectIdentity id, UniqueFd fd,
             std::string temp_dir, std::string temp_path)
      : BackendTarget(std::move(path), mode, size, id),
        fd_(std::move(fd)),
        temp_dir_(std::move(temp_dir)),
        temp_path_(std::move(temp_path)) {}

  ~FileTarget() override {
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

// ---- The synchronous data path: the posix backend's, and both backends' inline one ----

// A run of descriptors that continue each other in one file: one vectored system call.
struct SyncRun {
  int fd;
  uint64_t offset;
  uint32_t first;  // index of the first descriptor
  uint32_t count;
};

// The batch's descriptors as runs, merging each into the previous run when it continues it in
// the same file, up to `max_merge_bytes` a run (so descriptors complete, and their owners'
// callbacks run, while their bytes are still in cache).
std::vector<SyncRun> merge_runs(std::span<const IoDesc> descs, uint64_t max_merge_bytes);

// Moves one run with preadv/pwritev on the calling thread, resuming short transfers and
// retrying EINTR/EAGAIN, then completes its descriptors (kCancelled, without I/O, when the
// batch was cancelled first). `max_io_bytes` caps one call (0: no cap). The batch may be gone
// once this returns from completing the last descriptor.
void execute_run(IoBatch& batch, const SyncRun& run, uint64_t max_io_bytes);

class FileBackend : public Backend {
 public:
  // `use_tmpfile`: create new objects as unnamed O_TMPFILEs where the filesystem can.
  // `inline_bytes`: batches up to this size run on the caller's thread (see submit_inline);
  // 0 sends every batch to the backend's threads.
  // `sharing`: the modes of what it creates (private: 0600 files, 0700 directories; see
  // kvtier/core/file_access.h). Every path is opened without following a symbolic link.
  FileBackend(bool use_tmpfile, uint64_t inline_bytes, Sharing sharing);

  StorageClass storage_class() const override { return StorageClass::kFile; }
  Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) override;
  std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs) override;
  Status publish(BackendTarget& target, const PublishOptions& options) override;
  // fdatasync of the target's descriptor (posix and uring alike: one call, no ring needed).
  Status sync(BackendTarget& target) override;
  Status make_dirs(std::string_view path) override;
  Status make_dir(std::string_view path) override { return make_dir_in_place(std::string(path)); }
  Status make_dir_in_place(const std::string& dir);
  Result<ObjectInfo> stat(std::string_view path) override;
  Status remove(std::string_view path, const ObjectIdentity* if_identity) override;
  Status list(std::string_view dir, const ListOptions& options,
              const std::function<Status(const ObjectInfo&)>& fn) override;
  Result<size_t> sweep_temporaries(std::string_view temp_dir, uint64_t min_age_s) override;
  Result<size_t> count_temporaries(std::string_view temp_dir) override;
  Result<DirectIoAlignment> probe_direct_io(std::string_view dir) override;

 protected:
  // Runs fn(0..n-1), in parallel where the backend has threads for it (open_batch).
  virtual void run_parallel(size_t n, const std::function<void(size_t)>& fn);

  // Small batches run on the caller's thread. Handing a batch to I/O threads and waking its
  // caller again costs tens of microseconds on a VM, more than reading a 70 KB page from the
  // page cache; a batch of a few pages gains nothing from two threads that makes up for it.
  // True when `batch` was small enough (at most inline_bytes, and direct I/O only as one
  // system call, which has no parallelism to lose) and has been completed here.
  bool submit_inline(IoBatch& batch, uint64_t max_merge_bytes, uint64_t max_io_bytes);
  // Whether opening `count` objects runs on the caller's thread (open_batch): up to
  // kInlineOpens, unless inline batches are off.
  bool open_inline(size_t count) const { return inline_bytes_ != 0 && count <= kInlineOpens; }
  // ", batches up to N bytes inline" for describe(), or nothing when inline batches are off.
  std::string describe_inline() const;

  // Targets around descriptors a derived backend opened itself (io_uring OPENAT), finished
  // exactly as open() would finish them. The descriptor must carry O_CLOEXEC, and O_DIRECT
  // when spec.direct is set. `st` is what fstat says of it (the backend may have asked on
  // another thread).
  Result<std::unique_ptr<BackendTarget>> adopt_read(const TargetSpec& spec, UniqueFd fd,
                                                    const struct stat& st);
  // `fd` is an unnamed O_TMPFILE in `temp_dir`.
  Result<std::unique_ptr<BackendTarget>> adopt_created(const TargetSpec& spec, UniqueFd fd,
                                                       const std::string& temp_dir) {
    return finish_create(spec, std::move(fd), temp_dir, std::string());
  }
  bool tmpfile_enabled() const { return tmpfile_ok_.load(std::memory_order_relaxed); }
  static std::string temp_dir_for(const TargetSpec& spec);

 private:
  Result<std::unique_ptr<BackendTarget>> open_read(const TargetSpec& spec);
  Result<std::unique_ptr<BackendTarget>> open_create(const TargetSpec& spec);
  Result<std::unique_ptr<BackendTarget>> open_append(const TargetSpec& spec);
  Result<std::unique_ptr<BackendTarget>> try_create(const TargetSpec& spec,
                                                    const std::string& temp_dir);
  Result<std::unique_ptr<BackendTarget>> finish_create(const TargetSpec& spec, UniqueFd fd,
                                                       const std::string& temp_dir,
                                                       std::string temp_path);
  Status make_direct(FileTarget& t);
  Status make_direct(FileTarget& t, dev_t dev);  // `dev`: the file's st_dev
  Status link_anonymous(FileTarget& t);
  Status rename_named(FileTarget& t);
  std::string temp_name(std::string_view final_path);

  // Opens that run on the caller's thread when inline batches are on: opening a cached
  // object takes a few microseconds, and eight of them about what waking I/O threads and
  // then the caller costs here (docs/benchmarks.md).
  static constexpr size_t kInlineOpens = 8;

  const uint64_t inline_bytes_;
  const CreateModes modes_;
  std::atomic<bool> tmpfile_ok_{true};
  std::atomic<uint64_t> temp_seq_{0};
  std::mutex dio_mu_;
  std::unordered_map<dev_t, DirectIoAlignment> dio_by_dev_;
};

}  // namespace kvtier::file
