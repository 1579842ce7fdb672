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

class FileBackend : public Backend {
 public:
  // `use_tmpfile`: create new objects as unnamed O_TMPFILEs where the filesystem can.
  explicit FileBackend(bool use_tmpfile);

  StorageClass storage_class() const override { return StorageClass::kFile; }
  Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) override;
  std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs) override;
  Status publish(BackendTarget& target, const PublishOptions& options) override;
  Status make_dirs(std::string_view path) override;
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

  std::atomic<bool> tmpfile_ok_{true};
  std::atomic<uint64_t> temp_seq_{0};
  std::mutex dio_mu_;
  std::unordered_map<dev_t, DirectIoAlignment> dio_by_dev_;
};

}  // namespace kvtier::file
