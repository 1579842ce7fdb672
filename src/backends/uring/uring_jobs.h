// The work a batch becomes on the uring backend's rings (uring_backend.cc): units that each
// become one request (a read or write of one descriptor, or an OPENAT), claimed by whichever
// ring is free and resubmitted until done (a short read or write continues where it stopped).
// A unit is only ever touched by the ring that claimed it, so its progress needs no lock.
#pragma once

#include <fcntl.h>
#include <liburing.h>
#include <linux/openat2.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "../file/file_backend.h"
#include "kvtier/core/mutex.h"

namespace kvtier::uring {

using file::FileTarget;

// The kernel's largest fixed buffer: a region is registered as consecutive fixed-buffer slots
// of at most 1 GiB each.
inline constexpr uint64_t kFixedChunk = uint64_t{1} << 30;

// Work shared by the rings: units that each become one request, resubmitted until done.
class Job {
 public:
  explicit Job(size_t units) : units_(units) {}
  virtual ~Job() = default;

  // Claims the next unit; false when none is left.
  bool claim(size_t* unit) {
    const size_t u = next_.fetch_add(1, std::memory_order_relaxed);
    if (u >= units_) return false;
    *unit = u;
    return true;
  }
  bool exhausted() const { return next_.load(std::memory_order_relaxed) >= units_; }

  // Before the first submission of a claimed unit: false when the unit completed without
  // I/O (cancelled), so no request is made.
  virtual bool start(size_t unit) = 0;
  // Bytes the unit moves (how rings pace their claims).
  virtual uint64_t bytes(size_t unit) const = 0;
  // Fills `sqe` for the unit's remaining bytes.
  virtual void prep(size_t unit, io_uring_sqe* sqe) = 0;
  // Takes a completion; true when the unit must be submitted again.
  virtual bool complete(size_t unit, int res) = 0;

 private:
  const size_t units_;
  std::atomic<size_t> next_{0};
};

// One descriptor of a batch per unit. A unit is only ever touched by the ring that claimed
// it, so its progress needs no lock.
class IoJob final : public Job {
 public:
  IoJob(IoBatch& batch, uint64_t max_io_bytes)
      : Job(batch.descs().size()),
        batch_(batch),
        op_(batch.op()),
        descs_(batch.descs().begin(), batch.descs().end()),
        done_(descs_.size(), 0),
        max_io_bytes_(max_io_bytes) {}

  bool start(size_t unit) override {
    if (!batch_.cancel_requested()) return true;
    finish(unit, cancelled_error(fmt::format("{} of '{}' cancelled before it started",
                                             transfer_op_name(op_), descs_[unit].target->path())));
    return false;
  }

  uint64_t bytes(size_t unit) const override { return descs_[unit].length; }

  void prep(size_t unit, io_uring_sqe* sqe) override {
    const IoDesc& d = descs_[unit];
    const auto* t = static_cast<const FileTarget*>(d.target);
    const uint64_t off = done_[unit];
    uint64_t n = d.length - off;
    if (max_io_bytes_ != 0) {
      const uint64_t step = t->direct() ? t->direct()->offset : 1;
      n = std::min(n, std::max(step, max_io_bytes_ / step * step));
    }
    std::byte* mem = d.mem + off;
    const uint64_t at = d.offset + off;
    const int buf = fixed_index(d, mem, n);
    const auto len = static_cast<unsigned>(std::min<uint64_t>(n, 1u << 30));
    if (op_ == TransferOp::kRead) {
      if (buf >= 0) {
        io_uring_prep_read_fixed(sqe, t->fd(), mem, len, at, buf);
      } else {
        io_uring_prep_read(sqe, t->fd(), mem, len, at);
      }
    } else if (buf >= 0) {
      io_uring_prep_write_fixed(sqe, t->fd(), mem, len, at, buf);
    } else {
      io_uring_prep_write(sqe, t->fd(), mem, len, at);
    }
  }

  bool complete(size_t unit, int res) override {
    const IoDesc& d = descs_[unit];
    if (res == -EAGAIN || res == -EINTR) return true;
    const uint64_t at = d.offset + done_[unit];
    const uint64_t left = d.length - done_[unit];
    if (res < 0) {
      finish(unit, errno_status(-res, op_ == TransferOp::kRead ? "read" : "write", d.target->path(),
                                at, left));
      return false;
    }
    if (res == 0) {
      finish(unit, op_ == TransferOp::kRead
                       ? corrupt_error(fmt::format("'{}' ends at offset {}, {} bytes short",
                                                   d.target->path(), at, left))
                       : unavailable_error(fmt::format("write '{}' offset={} made no progress",
                                                       d.target->path(), at)));
      return false;
    }
    done_[unit] += static_cast<uint64_t>(res);
    if (done_[unit] < d.length) return true;  // short: resume from where it stopped
    finish(unit, ok_status());
    return false;
  }

 private:
  // The fixed buffer holding [mem, mem+n), or -1 (region not registered as fixed buffers,
  // or the range crosses a 1 GiB slot boundary).
  static int fixed_index(const IoDesc& d, const std::byte* mem, uint64_t n) {
    const uint64_t cookie = d.region->backend_cookie;
    if (cookie == 0) return -1;
    const uint64_t first = static_cast<uint64_t>(mem - d.region->base) / kFixedChunk;
    const uint64_t last = static_cast<uint64_t>(mem + n - 1 - d.region->base) / kFixedChunk;
    if (first != last) return -1;
    return static_cast<int>(cookie - 1 + first);
  }

  // After the last call the batch may be gone: nothing touches it afterwards.
  void finish(size_t unit, Status st) { batch_.complete(unit, std::move(st)); }

  IoBatch& batch_;
  const TransferOp op_;
  const std::vector<IoDesc> descs_;
  std::vector<uint64_t> done_;
  const uint64_t max_io_bytes_;
};

// One OPENAT per unit; the opener waits for all of them.
class OpenJob final : public Job {
 public:
  struct Open {
    std::string path;  // the object (kRead) or the directory of an unnamed temporary (kCreate)
    int flags;
    bool stat = false;  // fstat what was opened (objects to read: their size and identity)
  };

  OpenJob(std::vector<Open> opens, Sharing sharing)
      : Job(opens.size()),
        mode_(create_modes(sharing).file),
        opens_(std::move(opens)),
        fds_(opens_.size()),
        errors_(opens_.size()),
        stats_(opens_.size()) {}

  bool start(size_t) override { return true; }
  uint64_t bytes(size_t) const override { return 0; }

  // OPENAT2 refusing symbolic links in any component, as FileBackend opens (file_access.h).
  // A created file's mode is exact only after FileBackend finishes it (share=group).
  void prep(size_t unit, io_uring_sqe* sqe) override {
    open_how& how = hows_[unit];
    how = open_how{};
    how.flags = static_cast<uint64_t>(opens_[unit].flags | O_CLOEXEC);
    how.mode = (opens_[unit].flags & O_TMPFILE) == O_TMPFILE ? mode_ : 0;
    how.resolve = RESOLVE_NO_SYMLINKS;
    io_uring_prep_openat2(sqe, AT_FDCWD, opens_[unit].path.c_str(), &how);
  }

  bool complete(size_t unit, int res) override {
    if (res == -EAGAIN || res == -EINTR) return true;
    if (res >= 0) {
      fds_[unit] = UniqueFd(res);  // owned from the moment it exists
      // The stat every read target needs, here on the ring's thread, in parallel with the
      // other rings, instead of one after another on the caller's once all are open.
      if (opens_[unit].stat && ::fstat(res, &stats_[unit]) != 0) stat_errors_[unit] = errno;
    } else {
      errors_[unit] = -res;
    }
    if (completed_.fetch_add(1, std::memory_order_acq_rel) + 1 == opens_.size()) {
      MutexLock lock(mu_);
      done_ = true;
      cv_.notify_all();
    }
    return false;
  }

  void wait() {
    MutexLock lock(mu_);
    lock.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return done_; });
  }

  UniqueFd take_fd(size_t unit) { return std::move(fds_[unit]); }
  int error(size_t unit) const { return errors_[unit]; }
  // What fstat said of the unit's descriptor (Open::stat), or its errno.
  Result<struct stat> stat(size_t unit) const {
    if (stat_errors_[unit] != 0) {
      return errno_status(stat_errors_[unit], "fstat", opens_[unit].path);
    }
    return stats_[unit];
  }

 private:
  const mode_t mode_;
  const std::vector<Open> opens_;
  std::vector<open_how> hows_ = std::vector<open_how>(opens_.size());
  std::vector<UniqueFd> fds_;
  std::vector<int> errors_;
  std::vector<struct stat> stats_;
  std::vector<int> stat_errors_ = std::vector<int>(opens_.size(), 0);
  std::atomic<size_t> completed_{0};
  Mutex mu_;
  std::condition_variable cv_;
  bool done_ KVTIER_GUARDED_BY(mu_) = false;
};

}  // namespace kvtier::uring
