#include "kvtier/backends/posix/posix_backend.h"

#include <fmt/format.h>
#include <limits.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

#include "../file/file_backend.h"
#include "kvtier/core/worker_pool.h"

namespace kvtier {
namespace {

using file::FileTarget;

constexpr size_t kMaxIov = IOV_MAX;

// A run of descriptors that continue each other in one file: one vectored system call.
struct PosixOp {
  int fd;
  uint64_t offset;
  uint32_t first;  // index of the first descriptor
  uint32_t count;
};

class PosixBackend;

class BatchJob final : public PoolJob {
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

class PosixBackend final : public file::FileBackend {
 public:
  explicit PosixBackend(const PosixBackendOptions& options)
      : FileBackend(options.use_tmpfile),
        options_(options),
        pool_(thread_count(options.io_threads)) {}

  std::string_view name() const override { return "posix"; }
  std::string describe() const override {
    return fmt::format("posix: {} threads{}", pool_.size(),
                       options_.max_io_bytes ? fmt::format(", {}-byte calls", options_.max_io_bytes)
                                             : std::string());
  }

  void submit(IoBatch& batch) override {
    const auto descs = batch.descs();
    std::vector<PosixOp> ops;
    ops.reserve(descs.size());
    uint64_t op_bytes = 0;
    for (uint32_t i = 0; i < descs.size(); ++i) {
      const IoDesc& d = descs[i];
      const int fd = static_cast<FileTarget*>(d.target)->fd();
      if (!ops.empty()) {
        PosixOp& last = ops.back();
        const IoDesc& prev = descs[last.first + last.count - 1];
        // Merge what continues the previous descriptor, up to max_merge_bytes: descriptors
        // complete (and their owners' callbacks run) while their bytes are in cache.
        if (last.fd == fd && prev.offset + prev.length == d.offset && last.count < kMaxIov &&
            op_bytes + d.length <= options_.max_merge_bytes) {
          ++last.count;
          op_bytes += d.length;
          continue;
        }
      }
      ops.push_back(PosixOp{fd, d.offset, i, 1});
      op_bytes = d.length;
    }
    auto job = std::make_shared<BatchJob>(*this, batch, std::move(ops));
    pool_.schedule(job, job->op_count());
  }

  // Runs one op and completes its descriptors. The batch must not be touched after the last
  // completion.
  void execute(IoBatch& batch, const PosixOp& op) {
    const TransferOp dir = batch.op();
    const auto descs = batch.descs().subspan(op.first, op.count);
    const auto* target = static_cast<const FileTarget*>(descs.front().target);
    Status st = batch.cancel_requested()
                    ? cancelled_error(fmt::format("{} of '{}' cancelled before it started",
                                                  transfer_op_name(dir), target->path()))
                    : run_io(dir, op, descs, *target);
    const uint32_t first = op.first;
    const uint32_t count = op.count;
    for (uint32_t k = 0; k < count; ++k) batch.complete(first + k, st);
  }

 protected:
  void run_parallel(size_t n, const std::function<void(size_t)>& fn) override {
    pool_.parallel_for(n, fn);
  }

 private:
  static size_t thread_count(size_t requested) {
    if (requested != 0) return std::min<size_t>(requested, 64);
    const size_t hw = std::max<size_t>(1, std::thread::hardware_concurrency());
    return std::clamp<size_t>(2 * hw, 4, 64);
  }

  Status run_io(TransferOp dir, const PosixOp& op, std::span<const IoDesc> descs,
                const FileTarget& target) const {
    uint64_t total = 0;
    for (const IoDesc& d : descs) total += d.length;
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
  // Last member: destroyed (workers joined) first.
  WorkerPool pool_;
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
  KVTIER_ASSIGN_OR_RETURN(o.max_merge_bytes, param_u64(params, "max_merge_bytes", 1 << 20));
  KVTIER_ASSIGN_OR_RETURN(o.use_tmpfile, param_bool(params, "use_tmpfile", true));
  return make_posix_backend(o);
}

}  // namespace kvtier
