// A store's capacity: the ledger against its limits, admission, and the evictions it keeps
// (store_capacity.h).
#include "capacity/store_capacity.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <utility>

namespace kvtier {

Status StoreCapacity::plan(Limits limits, footprint::Shape shape, uint64_t page_bytes) {
  limits_ = limits;
  shape_ = shape;
  shape_.capacity_bytes = limits.capacity_bytes;
  charging_ = limits.capacity_bytes != 0 || limits.min_free_bytes != 0;
  if (limits.capacity_bytes == 0) return ok_status();
  KVTIER_RETURN_IF_ERROR(footprint::check_floor(shape_, page_bytes));
  metadata_ = footprint::metadata_bytes(shape_);
  return ok_status();
}

void StoreCapacity::account_shared_files() {
  if (!ledger_ || limits_.capacity_bytes == 0) return;
  for (const footprint::SharedFileBytes& f : footprint::shared_files(shape_)) {
    struct stat st {};
    const std::string path = dir_ + "/" + std::string(f.name);
    if (::stat(path.c_str(), &st) == 0 && uint64_t(st.st_blocks) * 512 > f.bytes) {
      metadata_ += uint64_t(st.st_blocks) * 512 - f.bytes;
    }
  }
}

Status StoreCapacity::open(const std::string& dir,
                           const std::function<Result<uint64_t>()>& charged) {
  dir_ = dir;
  if (!charging_) return ok_status();
  KVTIER_ASSIGN_OR_RETURN(const uint64_t bytes, charged());
  KVTIER_ASSIGN_OR_RETURN(ledger_, Ledger::open(dir, bytes));
  return ok_status();
}

Status StoreCapacity::choose_admission(std::string_view mode) {
  if (mode.empty()) mode = "adaptive";
  if (mode != "adaptive" && mode != "always") {
    return invalid_argument_error(fmt::format("admission '{}' (use adaptive or always)", mode));
  }
  if (mode == "always") {
    admission_summary_ = "always";
  } else if (limits_.capacity_bytes == 0 || !ledger_) {
    admission_summary_ = "always (adaptive needs a capacity_bytes)";
  } else {
    // One doorkeeper and one ring of keys asked for the namespace's stores on this host (not
    // across hosts, as read marks: read_marks.h); a store that cannot map them keeps its own.
    std::unique_ptr<SharedFile> written;
    std::unique_ptr<KeyRing> asked;
    if (!on_fuse_filesystem(dir_)) {
      if (auto f = AdmissionPolicy::open_doorkeeper_file(dir_, limits_.capacity_bytes); f.ok()) {
        written = std::move(f).value();
      }
      if (auto f = AdmissionPolicy::open_lookups_file(dir_, limits_.capacity_bytes); f.ok())
        asked = std::move(f).value();
    }
    // Its shadows hold as many pages as the store can: the capacity less its metadata.
    admission_ = std::make_unique<AdmissionPolicy>(limits_.capacity_bytes - metadata_,
                                                   std::move(written), std::move(asked));
  }
  return ok_status();
}

std::string StoreCapacity::describe_admission() const {
  return admission_ ? admission_->describe() : admission_summary_;
}

Result<uint64_t> StoreCapacity::used() const {
  if (!ledger_) return uint64_t{0};
  return ledger_->used();
}

uint64_t StoreCapacity::limit(uint64_t used) const {
  // The metadata's share is set aside: the pages get the rest (plan() made sure some is left,
  // unless larger shared files than this store's took it: account_shared_files()).
  uint64_t limit = UINT64_MAX;
  if (limits_.capacity_bytes != 0) {
    limit = limits_.capacity_bytes > metadata_ ? limits_.capacity_bytes - metadata_ : 0;
  }
  if (limits_.min_free_bytes != 0) {
    struct statvfs fs {};
    if (::statvfs(dir_.c_str(), &fs) == 0) {
      const uint64_t avail = uint64_t{fs.f_bavail} * fs.f_frsize;
      const uint64_t room = avail > limits_.min_free_bytes ? avail - limits_.min_free_bytes : 0;
      limit = std::min(limit, used + room);
    }
  }
  return limit;
}

// Under the ledger lock only the figure changes and victims are chosen; the removals and a
// relearning of what others wrote happen with the lock released, so other writers (threads
// and processes) never wait behind file-system work. The usage is lowered only after the
// removals succeed, so it never reads below what is on storage.
//
// What other processes wrote is learnt again (the files layout lists the namespace, the
// segment layout reads new summaries). Under contention (several writers, processes or hosts,
// sharing a full budget) what one look found may be evicted by its owners first; so the store
// looks again while looks find something, at most kMaxRelearns times, and a window is refused
// only when a look finds nothing left to evict.
Status StoreCapacity::reserve(uint64_t need, const Evictor& evictor) {
  constexpr int kMaxRelearns = 8;
  int relearns = 0;
  bool relearn_found = true;
  for (;;) {
    enum class Next { kDone, kEvict, kRelearn } next = Next::kEvict;
    KVTIER_RETURN_IF_ERROR(ledger_->update([&](uint64_t& used) -> Status {
      const uint64_t limit = this->limit(used);
      if (used + need <= limit) {
        used += need;
        next = Next::kDone;
        // Within 1/16 of the limit counts as full: the segment layout frees whole segments
        // (1/64 of the capacity), after which a few windows fit without evicting.
        full_.store(used > limit - limit / 16, std::memory_order_relaxed);
        return ok_status();
      }
      full_.store(true, std::memory_order_relaxed);
      if (evictor.choose(used + need - limit)) return ok_status();
      if (relearns < kMaxRelearns && relearn_found) {
        next = Next::kRelearn;
        return ok_status();
      }
      return resource_exhausted_error(fmt::format(
          "capacity: {} more bytes do not fit ({} of {} used{}), and {}", need, used, limit,
          limits_.min_free_bytes ? ", keeping min_free_bytes free" : "", evictor.none_left));
    }));
    if (next == Next::kDone) return ok_status();
    if (next == Next::kRelearn) {
      ++relearns;
      KVTIER_ASSIGN_OR_RETURN(relearn_found, evictor.relearn());
      continue;
    }
    uint64_t freed = 0;
    Status failed = evictor.evict(&freed);
    // A fresh statvfs next round sees the space the removals freed.
    if (freed != 0) KVTIER_RETURN_IF_ERROR(ledger_->release(freed));
    KVTIER_RETURN_IF_ERROR(failed);
  }
}

Status StoreCapacity::release(uint64_t bytes) {
  if (!ledger_ || bytes == 0) return ok_status();
  return ledger_->release(bytes);
}

void StoreCapacity::settle(uint64_t reserved, uint64_t used) {
  if (!ledger_ || reserved == used) return;
  if (used < reserved) {
    ledger_->release(reserved - used).ignore_error();
  } else {
    ledger_
        ->update([extra = used - reserved](uint64_t& total) {
          total += extra;
          return ok_status();
        })
        .ignore_error();
  }
}

}  // namespace kvtier
