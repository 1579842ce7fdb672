#include "kvtier/backends/uring/uring_backend.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "../file/file_backend.h"
#include "kvtier/core/cpus.h"
#include "kvtier/core/mutex.h"
#include "uring_jobs.h"

namespace kvtier {
namespace {

using file::FileTarget;
using uring::IoJob;
using uring::Job;
using uring::kFixedChunk;
using uring::OpenJob;

constexpr uint64_t kWakeTag = ~uint64_t{0};
// Fixed-buffer table entries per ring (a region takes consecutive slots of kFixedChunk each).
constexpr unsigned kFixedSlots = 1024;
// What a ring claims before it submits (see Ring::loop). Page-cache reads complete inside the
// submission and their completions run right after it, where the store hashes each 256 KiB
// checksum chunk: rounds of one chunk hash what was just copied while it is still in the
// core's L2. With 1 MiB rounds verification cost 21% of a hot 4 MiB read, with 256 KiB 11%
// (docs/benchmarks.md).
constexpr uint64_t kRoundBytes = 256 << 10;
constexpr size_t kRoundRequests = 32;
// Batches run on the caller's thread (FileBackend::submit_inline) merge what continues each
// other into calls of up to 1 MiB, which the core's L2 holds until the store hashes it.
constexpr uint64_t kInlineMergeBytes = 1 << 20;
// The most kernel worker threads (io-wq) a ring may have for blocking file I/O.
constexpr unsigned kMaxKernelWorkers = 16;

class UringBackend;

// One io_uring and the thread that owns it.
class Ring {
 public:
  Ring(UringBackend& owner, unsigned depth) : owner_(owner), depth_(depth) {}
  ~Ring();

  // Sets the ring up (and its fixed-buffer table when asked); starts the thread.
  Status start(bool fixed_buffers, std::string* fixed_problem);
  void wake();
  // Points `count` fixed-buffer slots from `slot` at `iov` (iov_base null: clears them).
  Status update_buffers(unsigned slot, const iovec* iov, unsigned count);

 private:
  void loop();
  void arm_wake();
  io_uring_sqe* get_sqe();

  UringBackend& owner_;
  const unsigned depth_;
  io_uring ring_{};
  bool ring_up_ = false;
  UniqueFd event_;
  std::once_flag thread_started_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

class UringBackend final : public file::FileBackend {
 public:
  explicit UringBackend(const UringBackendOptions& o)
      : FileBackend(o.use_tmpfile, o.inline_bytes, o.sharing), options_(o) {}

  ~UringBackend() override {
    rings_.clear();  // each drains its ring and joins its thread
  }

  Status start() {
    size_t n = options_.rings;
    if (n == 0) n = std::clamp<size_t>(usable_cpus(), 2, 8);
    const unsigned depth = std::clamp<uint32_t>(options_.queue_depth, 1, 4096);
    fixed_ = options_.fixed_buffers;
    for (size_t i = 0; i < n; ++i) {
      auto ring = std::make_unique<Ring>(*this, depth);
      std::string problem;
      KVTIER_RETURN_IF_ERROR(ring->start(fixed_, &problem));
      if (!problem.empty() && fixed_) {
        fixed_ = false;
        fixed_problem_ = problem;
      }
      rings_.push_back(std::move(ring));
    }
    return ok_status();
  }

  std::string_view name() const override { return "uring"; }

  std::string describe() const override {
    std::string fixed =
        fixed_ ? "fixed buffers"
               : "no fixed buffers" + (fixed_problem_.empty() ? "" : " (" + fixed_problem_ + ")");
    return fmt::format(
        "uring: {} rings x {} requests, {}{}{}", rings_.size(), options_.queue_depth, fixed,
        options_.max_io_bytes ? fmt::format(", {}-byte requests", options_.max_io_bytes)
                              : std::string(),
        describe_inline());
  }

  Status register_memory(MemoryRecord& region) override {
    if (!fixed_) return ok_status();
    const auto count = static_cast<unsigned>((region.length + kFixedChunk - 1) / kFixedChunk);
    MutexLock lock(slots_mu_);
    const int first = find_slots(count);
    if (first < 0) return ok_status();  // table full: this region uses plain reads/writes
    std::vector<iovec> iov(count);
    for (unsigned i = 0; i < count; ++i) {
      const uint64_t off = i * kFixedChunk;
      iov[i].iov_base = const_cast<std::byte*>(region.base) + off;
      iov[i].iov_len = std::min(kFixedChunk, region.length - off);
    }
    for (size_t r = 0; r < rings_.size(); ++r) {
      Status st = rings_[r]->update_buffers(static_cast<unsigned>(first), iov.data(), count);
      if (!st.ok()) {
        // Pinning refused (RLIMIT_MEMLOCK, ...): undo and move this region without fixed
        // buffers; correctness does not depend on them.
        clear_slots(static_cast<unsigned>(first), count, r);
        return ok_status();
      }
    }
    for (unsigned i = 0; i < count; ++i) slot_used_[first + i] = true;
    region.backend_cookie = static_cast<uint64_t>(first) + 1;
    return ok_status();
  }

  void deregister_memory(MemoryRecord& region) noexcept override {
    if (region.backend_cookie == 0) return;
    const auto first = static_cast<unsigned>(region.backend_cookie - 1);
    const auto count = static_cast<unsigned>((region.length + kFixedChunk - 1) / kFixedChunk);
    MutexLock lock(slots_mu_);
    clear_slots(first, count, rings_.size());
    for (unsigned i = 0; i < count; ++i) slot_used_[first + i] = false;
    region.backend_cookie = 0;
  }

  std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs) override {
    if (open_inline(specs.size())) return FileBackend::open_batch(specs);
    // One OPENAT per object, all submitted together. New objects are unnamed O_TMPFILEs;
    // whatever needs more than one call (a missing temporary directory, a filesystem without
    // O_TMPFILE or O_DIRECT) takes the synchronous path, which handles it.
    std::vector<OpenJob::Open> opens;
    std::vector<size_t> unit_of(specs.size(), SIZE_MAX);
    for (size_t i = 0; i < specs.size(); ++i) {
      const TargetSpec& s = specs[i];
      const int direct = s.direct ? O_DIRECT : 0;
      if (s.path.empty()) continue;
      if (s.mode == TargetMode::kRead) {
        unit_of[i] = opens.size();
        opens.push_back({s.path, O_RDONLY | direct, true});
      } else if (s.mode == TargetMode::kCreate && tmpfile_enabled()) {
        unit_of[i] = opens.size();
        opens.push_back({temp_dir_for(s), O_TMPFILE | O_RDWR | direct});
      }
    }
    std::shared_ptr<OpenJob> job;
    if (!opens.empty()) {
      job = std::make_shared<OpenJob>(std::move(opens), options_.sharing);
      enqueue(job);
      job->wait();
    }
    std::vector<Result<std::unique_ptr<BackendTarget>>> out;
    out.reserve(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const TargetSpec& s = specs[i];
      const size_t u = unit_of[i];
      if (u == SIZE_MAX) {
        out.push_back(FileBackend::open(s));
      } else if (UniqueFd fd = job->take_fd(u); fd.valid()) {
        if (s.mode == TargetMode::kRead) {
          Result<struct stat> st = job->stat(u);
          out.push_back(st.ok() ? adopt_read(s, std::move(fd), *st) : std::move(st).status());
        } else {
          out.push_back(adopt_created(s, std::move(fd), temp_dir_for(s)));
        }
      } else if (job->error(u) == ELOOP) {
        out.push_back(symlink_refused(s.mode == TargetMode::kRead ? s.path : temp_dir_for(s)));
      } else if (s.mode == TargetMode::kRead && job->error(u) != ENOSYS &&
                 job->error(u) != EINVAL) {
        out.push_back(errno_status(job->error(u), "open", s.path));
      } else {
        // Creates, and kernels whose rings have no OPENAT2, take the synchronous path.
        out.push_back(FileBackend::open(s));
      }
    }
    return out;
  }

  void submit(IoBatch& batch) override {
    if (submit_inline(batch, kInlineMergeBytes, options_.max_io_bytes)) return;
    enqueue(std::make_shared<IoJob>(batch, options_.max_io_bytes));
  }

  // The ring threads' source of work: the oldest job with unclaimed units (null when none,
  // or when that is `current`, the job the caller just found exhausted).
  std::shared_ptr<Job> next_job(const std::shared_ptr<Job>& current) {
    MutexLock lock(jobs_mu_);
    while (!jobs_.empty() && jobs_.front()->exhausted()) jobs_.pop_front();
    if (jobs_.empty() || jobs_.front() == current) return nullptr;
    return jobs_.front();
  }

 private:
  void enqueue(std::shared_ptr<Job> job) {
    {
      MutexLock lock(jobs_mu_);
      jobs_.push_back(std::move(job));
    }
    for (auto& r : rings_) r->wake();
  }

  int find_slots(unsigned count) KVTIER_REQUIRES(slots_mu_) {
    for (unsigned start = 0; start + count <= kFixedSlots; ++start) {
      bool free = true;
      for (unsigned i = 0; i < count && free; ++i) free = !slot_used_[start + i];
      if (free) return static_cast<int>(start);
    }
    return -1;
  }

  // Clears `count` slots from `first` on the first `rings` rings.
  void clear_slots(unsigned first, unsigned count, size_t rings) KVTIER_REQUIRES(slots_mu_) {
    std::vector<iovec> none(count, iovec{nullptr, 0});
    for (size_t r = 0; r < rings; ++r) {
      rings_[r]->update_buffers(first, none.data(), count).ignore_error();
    }
  }

  const UringBackendOptions options_;
  bool fixed_ = false;
  std::string fixed_problem_;
  Mutex slots_mu_;
  std::vector<bool> slot_used_ = std::vector<bool>(kFixedSlots, false);
  Mutex jobs_mu_;
  std::deque<std::shared_ptr<Job>> jobs_ KVTIER_GUARDED_BY(jobs_mu_);
  // Last member: destroyed (rings drained, threads joined) first.
  std::vector<std::unique_ptr<Ring>> rings_;
};

// ---- Ring ----

Status Ring::start(bool fixed_buffers, std::string* fixed_problem) {
  io_uring_params p{};
  p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL;
  int rc = io_uring_queue_init_params(depth_ + 2, &ring_, &p);
  if (rc == -EINVAL) {  // kernels before 5.19 lack those flags
    p = io_uring_params{};
    rc = io_uring_queue_init_params(depth_ + 2, &ring_, &p);
  }
  if (rc < 0) return errno_status(-rc, "io_uring_setup").with_context("io_uring unavailable");
  ring_up_ = true;
  // Requests the kernel cannot run without blocking go to its worker threads for this ring
  // (io-wq): on a mount that hangs each one holds a thread in the kernel, so they are capped
  // (kernels without the call keep their own cap, 4 per CPU).
  unsigned workers[2] = {0, 0};
  if (io_uring_register_iowq_max_workers(&ring_, workers) == 0 &&
      (workers[0] == 0 || workers[0] > kMaxKernelWorkers)) {
    workers[0] = kMaxKernelWorkers;
    workers[1] = 0;  // unbounded work (sockets): left as it is
    (void)io_uring_register_iowq_max_workers(&ring_, workers);
  }
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) return errno_status(errno, "eventfd");
  event_ = UniqueFd(efd);
  if (fixed_buffers) {
    rc = io_uring_register_buffers_sparse(&ring_, kFixedSlots);
    if (rc < 0) *fixed_problem = errno_status(-rc, "io_uring_register_buffers").to_string();
  }
  arm_wake();
  return ok_status();
}

Ring::~Ring() {
  stop_.store(true);
  std::call_once(thread_started_, [] {});  // never started: it will not be now
  if (thread_.joinable()) {
    wake();
    thread_.join();  // the loop drains every request in flight before it returns
  }
  if (ring_up_) io_uring_queue_exit(&ring_);
}

void Ring::wake() {
  // The ring's thread starts with the first batch it is handed: a store that only ever runs
  // batches on its callers' threads (inline) starts none.
  std::call_once(thread_started_, [this] {
    thread_ = std::thread([this] { loop(); });
    pthread_setname_np(thread_.native_handle(), "kvtier-ring");
  });
  const uint64_t one = 1;
  // A full counter (never, in practice) still leaves the ring awake: nothing is lost.
  (void)!::write(event_.get(), &one, sizeof(one));
}

Status Ring::update_buffers(unsigned slot, const iovec* iov, unsigned count) {
  const int rc = io_uring_register_buffers_update_tag(&ring_, slot, iov, nullptr, count);
  if (rc < 0) return errno_status(-rc, "io_uring_register_buffers_update");
  return ok_status();
}

io_uring_sqe* Ring::get_sqe() {
  // The queue has room for every slot plus the wake poll, so this only submits what is
  // already prepared when an earlier submission failed part way.
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {
    (void)io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void Ring::arm_wake() {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_poll_multishot(sqe, event_.get(), POLLIN);
  io_uring_sqe_set_data64(sqe, kWakeTag);
}

void Ring::loop() {
  struct Slot {
    std::shared_ptr<Job> job;
    size_t unit = 0;
  };
  std::vector<Slot> slots(depth_);
  std::vector<uint32_t> free_slots;
  for (uint32_t i = depth_; i > 0; --i) free_slots.push_back(i - 1);
  std::vector<uint32_t> resubmit;
  std::shared_ptr<Job> current;
  size_t in_flight = 0;
  bool rearm = false;

  for (;;) {
    if (rearm) {
      arm_wake();
      rearm = false;
    }
    // Short transfers first, from where they stopped; then new units while there is room.
    for (uint32_t s : resubmit) {
      io_uring_sqe* sqe = get_sqe();
      slots[s].job->prep(slots[s].unit, sqe);
      io_uring_sqe_set_data64(sqe, s);
    }
    resubmit.clear();
    // Claim about 256 KiB (or 32 requests) per round, then submit without waiting while more
    // work is there: page-cache reads complete inside the submission, so small rounds let
    // every ring take its share of a batch instead of the first awake taking all of it.
    uint64_t claimed_bytes = 0;
    size_t claimed = 0;
    bool round_full = false;
    while (!free_slots.empty() && !stop_.load(std::memory_order_relaxed)) {
      if (claimed_bytes >= kRoundBytes || claimed >= kRoundRequests) {
        round_full = true;
        break;
      }
      size_t unit;
      if (!current || !current->claim(&unit)) {
        current = owner_.next_job(current);
        if (!current) break;
        continue;
      }
      if (!current->start(unit)) continue;
      const uint32_t s = free_slots.back();
      free_slots.pop_back();
      slots[s] = Slot{current, unit};
      io_uring_sqe* sqe = get_sqe();
      current->prep(unit, sqe);
      io_uring_sqe_set_data64(sqe, s);
      ++in_flight;
      ++claimed;
      claimed_bytes += current->bytes(unit);
    }
    current.reset();  // do not keep a finished job (and its batch reference) alive
    if (stop_.load() && in_flight == 0) break;

    if (round_full && !free_slots.empty()) {
      (void)io_uring_submit(&ring_);
    } else if (io_uring_submit_and_wait(&ring_, 1) < 0 && io_uring_cq_ready(&ring_) == 0) {
      // One blocking wait: a completion, or the wake poll when new work arrives. Should the
      // submission itself fail (EBUSY with a full completion queue, ENOMEM), the requests
      // stay queued: wait for a completion and submit again. Requests the kernel holds are
      // never abandoned, since they still write into their owners' memory.
      io_uring_cqe* first = nullptr;
      (void)io_uring_wait_cqe(&ring_, &first);
    }

    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kWakeTag) {
        uint64_t count;
        while (::read(event_.get(), &count, sizeof(count)) > 0) {
        }
        if ((cqe->flags & IORING_CQE_F_MORE) == 0) rearm = true;
        continue;
      }
      Slot& slot = slots[tag];
      if (slot.job->complete(slot.unit, cqe->res)) {
        resubmit.push_back(static_cast<uint32_t>(tag));
      } else {
        slot.job.reset();
        free_slots.push_back(static_cast<uint32_t>(tag));
        --in_flight;
      }
    }
    io_uring_cq_advance(&ring_, seen);
  }
}

}  // namespace

Result<std::unique_ptr<Backend>> make_uring_backend(const UringBackendOptions& options) {
  auto b = std::make_unique<UringBackend>(options);
  Status st = b->start();
  if (!st.ok()) return unavailable_error(std::string(st.message()), false);
  return std::unique_ptr<Backend>(std::move(b));
}

std::vector<ParamSpec> uring_backend_params() {
  return {{"rings", ParamType::kUnsigned},     {"queue_depth", ParamType::kUnsigned},
          {"fixed_buffers", ParamType::kBool}, {"max_io_bytes", ParamType::kUnsigned},
          {"use_tmpfile", ParamType::kBool},   {"inline_bytes", ParamType::kUnsigned},
          {"share", ParamType::kText}};
}

Result<std::unique_ptr<Backend>> create_uring_backend(const BackendParams& params) {
  UringBackendOptions o;
  KVTIER_ASSIGN_OR_RETURN(uint64_t rings, param_u64(params, "rings", 0));
  KVTIER_ASSIGN_OR_RETURN(uint64_t depth, param_u64(params, "queue_depth", 64));
  KVTIER_ASSIGN_OR_RETURN(o.fixed_buffers, param_bool(params, "fixed_buffers", true));
  KVTIER_ASSIGN_OR_RETURN(o.max_io_bytes, param_u64(params, "max_io_bytes", 0));
  KVTIER_ASSIGN_OR_RETURN(o.use_tmpfile, param_bool(params, "use_tmpfile", true));
  KVTIER_ASSIGN_OR_RETURN(o.inline_bytes, param_u64(params, "inline_bytes", o.inline_bytes));
  if (auto it = params.find("share"); it != params.end()) {
    KVTIER_ASSIGN_OR_RETURN(o.sharing, parse_sharing(it->second));
  }
  if (rings > 64) return invalid_argument_error(fmt::format("rings={} (at most 64)", rings));
  if (depth == 0 || depth > 4096) {
    return invalid_argument_error(fmt::format("queue_depth={} (1 to 4096)", depth));
  }
  o.rings = rings;
  o.queue_depth = static_cast<uint32_t>(depth);
  return make_uring_backend(o);
}

}  // namespace kvtier
