// What one store may hold, and what it gives up for a new page: the namespace's shared ledger
// (ledger.h) against the store's limits, the admission policy (admission.h), and the journal
// of the pages it evicted (eviction_journal.h). reserve() is the protocol every layout
// shares; a layout says what it would evict (Evictor).
//
// A bounded store charges what its pages take on storage, and sets aside from its capacity what
// it keeps beside them (footprint.h): plan() before anything is indexed, open() once the layout
// has looked at what the namespace holds.
//
// A store without capacity_bytes or min_free_bytes is unbounded: nothing is charged, reserve()
// is never asked, and every page is admitted.
//
// Thread-safety: safe for concurrent use (the ledger and the journal keep their own locks).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "capacity/admission.h"
#include "capacity/eviction_journal.h"
#include "capacity/footprint.h"
#include "capacity/ledger.h"
#include "kvtier/core/status.h"

namespace kvtier {

class StoreCapacity {
 public:
  struct Limits {
    uint64_t capacity_bytes = 0;  // 0: none
    uint64_t min_free_bytes = 0;  // left free on the filesystem of `dir` (0: none)
  };

  // What a layout evicts to make room.
  struct Evictor {
    // Under the ledger's lock: chooses victims worth at least `short_by` bytes (fewer if it
    // knows of no more); false when it chose none.
    std::function<bool(uint64_t short_by)> choose;
    // With the lock released: removes what choose() chose, adding the bytes removed to
    // `*freed` (given back to the ledger even when some removal failed, which it returns).
    std::function<Status(uint64_t* freed)> evict;
    // Learns what other processes wrote since this store last looked: true when that gave
    // choose() anything to choose from.
    std::function<Result<bool>()> relearn;
    std::string_view none_left;  // how a refusal says that nothing is left to evict
  };

  // The store's limits, and its shape on storage (`shape.capacity_bytes` is ignored): what its
  // metadata takes, how a page is charged. kInvalidArgument, before anything is made, for a
  // capacity that does not hold the metadata and one page of `page_bytes` (0: not known).
  Status plan(Limits limits, footprint::Shape shape, uint64_t page_bytes);
  // What an object of `bytes` is charged (footprint::file_bytes), or `bytes` when unbounded.
  uint64_t charge(uint64_t bytes) const {
    return charging_ ? footprint::file_bytes(bytes, shape_.unit) : bytes;
  }
  // What a file appended to is charged at `bytes` (footprint::appended_file_bytes), likewise.
  uint64_t charge_appended(uint64_t bytes) const {
    return charging_ ? footprint::appended_file_bytes(bytes, shape_.unit) : bytes;
  }
  // What a bounded store set aside for its metadata (0: none).
  uint64_t metadata_bytes() const { return metadata_; }

  // Joins the ledger of the namespace directory `dir` when the limits bound the store; alone
  // there (no other store of the namespace open), the usage starts from `charged()`, what
  // the layout holds on storage.
  Status open(const std::string& dir, const std::function<Result<uint64_t>()>& charged);
  // Admission `mode`: "adaptive" (empty: the default) or "always". Adaptive needs a
  // capacity_bytes; without one every page is taken, and describe_admission() says why.
  Status choose_admission(std::string_view mode);
  // Once the shared files are open: any an earlier store made larger than this one would
  // (another capacity, an older kvtier) is set aside at its size.
  void account_shared_files();

  bool bounded() const { return ledger_ != nullptr; }
  // Opened with no other store of the namespace open (Ledger::reset_on_open).
  bool opened_alone() const { return ledger_ && ledger_->reset_on_open(); }
  // The bytes charged now, shared by the namespace's stores.
  Result<uint64_t> used() const;

  // Charges `need` bytes, evicting what `evictor` chooses until they fit. kResourceExhausted
  // when they cannot (larger than the capacity, or nothing is left to evict after relearning
  // what others wrote).
  Status reserve(uint64_t need, const Evictor& evictor);
  // Gives back `bytes` charged before (evicted, removed, or reserved and not written).
  Status release(uint64_t bytes);
  // A window charged `reserved` that grew storage by `used`: the difference is settled
  // either way. Drift only when this fails: healed at the next lone open.
  void settle(uint64_t reserved, uint64_t used);
  // The last reservation had to evict (or could not fit), or left the usage within 1/16 of
  // the limit: a new page now costs an old one.
  bool full() const { return full_.load(std::memory_order_relaxed); }

  // The admission policy when adaptive, else null (every page is taken).
  AdmissionPolicy* admission() const { return admission_.get(); }
  std::string describe_admission() const;

  EvictionJournal& evictions() { return evictions_; }

 private:
  // The limit given the usage now (min_free_bytes leaves room on the filesystem of dir_).
  uint64_t limit(uint64_t used) const;

  std::string dir_;
  Limits limits_;
  footprint::Shape shape_;
  bool charging_ = false;
  uint64_t metadata_ = 0;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<AdmissionPolicy> admission_;
  std::string admission_summary_;
  std::atomic<bool> full_{false};
  EvictionJournal evictions_;
};

}  // namespace kvtier
