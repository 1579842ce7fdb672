#include "kvtier/backends/posix/posix_backend.h"

#include <fmt/format.h>
#include <limits.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <vector>

#include "../file/file_backend.h"
#include "kvtier/core/cpus.h"
#include "kvtier/core/worker_pool.h"

namespace kvtier {
namespace {

using file::SyncRun;

// One batch on the pool: its workers claim runs until none is left.
class BatchJob final : public PoolJob {
 public:
  BatchJob(IoBatch& batch, std::vector<SyncRun> runs, uint64_t max_io_bytes)
      : batch_(batch), runs_(std::move(runs)), max_io_bytes_(max_io_bytes) {}
  void run() override;
  size_t run_count() const { return runs_.size(); }

 private:
  // Touched only while running a run this worker claimed: until that run's descriptors are
  // completed the batch is alive.
  IoBatch& batch_;
  const std::vector<SyncRun> runs_;
  const uint64_t max_io_bytes_;
  std::atomic<size_t> next_{0};
};

class PosixBackend final : public file::FileBackend {
 public:
  explicit PosixBackend(const PosixBackendOptions& options)
      : FileBackend(options.use_tmpfile, options.inline_bytes, options.sharing),
        options_(options),
        pool_(thread_count(options.io_threads), "kvtier-posix") {}

  std::string_view name() const override { return "posix"; }
  std::string describe() const override {
    return fmt::format("posix: {} threads{}{}", pool_.size(),
                       options_.max_io_bytes ? fmt::format(", {}-byte calls", options_.max_io_bytes)
                                             : std::string(),
                       describe_inline());
  }

  void submit(IoBatch& batch) override {
    if (submit_inline(batch, options_.max_merge_bytes, options_.max_io_bytes)) return;
    auto job = std::make_shared<BatchJob>(
        batch, file::merge_runs(batch.descs(), options_.max_merge_bytes), options_.max_io_bytes);
    pool_.schedule(job, job->run_count());
  }

 protected:
  void run_parallel(size_t n, const std::function<void(size_t)>& fn) override {
    pool_.parallel_for(n, fn);
  }

 private:
  static size_t thread_count(size_t requested) {
    if (requested != 0) return std::min<size_t>(requested, 64);
    return std::clamp<size_t>(2 * usable_cpus(), 4, 64);
  }

  const PosixBackendOptions options_;
  // Last member: destroyed (workers joined) first.
  WorkerPool pool_;
};

void BatchJob::run() {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= runs_.size()) return;
    file::execute_run(batch_, runs_[i], max_io_bytes_);
  }
}

}  // namespace

std::unique_ptr<Backend> make_posix_backend(const PosixBackendOptions& options) {
  return std::make_unique<PosixBackend>(options);
}

std::vector<ParamSpec> posix_backend_params() {
  return {{"io_threads", ParamType::kUnsigned},      {"max_io_bytes", ParamType::kUnsigned},
          {"max_merge_bytes", ParamType::kUnsigned}, {"use_tmpfile", ParamType::kBool},
          {"inline_bytes", ParamType::kUnsigned},    {"share", ParamType::kText}};
}

Result<std::unique_ptr<Backend>> create_posix_backend(const BackendParams& params) {
  PosixBackendOptions o;
  KVTIER_ASSIGN_OR_RETURN(o.io_threads, param_u64(params, "io_threads", 0));
  KVTIER_ASSIGN_OR_RETURN(o.max_io_bytes, param_u64(params, "max_io_bytes", 0));
  KVTIER_ASSIGN_OR_RETURN(o.max_merge_bytes, param_u64(params, "max_merge_bytes", 1 << 20));
  KVTIER_ASSIGN_OR_RETURN(o.use_tmpfile, param_bool(params, "use_tmpfile", true));
  KVTIER_ASSIGN_OR_RETURN(o.inline_bytes, param_u64(params, "inline_bytes", o.inline_bytes));
  if (auto it = params.find("share"); it != params.end()) {
    KVTIER_ASSIGN_OR_RETURN(o.sharing, parse_sharing(it->second));
  }
  return make_posix_backend(o);
}

}  // namespace kvtier
