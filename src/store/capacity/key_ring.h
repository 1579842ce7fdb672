// What the namespace's stores on one host did with which keys, in the order they did it: a ring
// of key hashes in a file mapped by each of them (shared_file.h). Each store appends what it
// did and replays, from where it left off, what every store appended since (its own too, or
// only the others'). Two of them:
//
//   <namespace dir>/asked     the keys the engine asked for: the admission policy's shadows
//                             replay every store's lookups (admission.h)
//   <namespace dir>/evicted   the pages a store evicted or removed (page files with a
//                             capacity): the other stores drop them from their indexes, so
//                             their exists() does not promise a page that is gone
//
// Slot i % count holds (i + 1, key, the appending store's tag) once the i-th key appended is
// in it; the header's first word counts the keys appended, the second the tags handed out.
// Appending is one fetch-add and four stores per key, replaying a few loads per slot: no lock
// between processes and no system call. A slot still being written, or already written over by a
// later lap, is skipped (one key fewer replayed), and a store that fell more than a ring behind
// replays what the ring still holds: what it replays is a hint, never trusted for bytes. Coherent
// on one host only (callers do not share it on FUSE).
//
// Thread-safety: safe for concurrent use (the slots through atomic_ref; one store's replay
// position under a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "capacity/shared_file.h"
#include "kvtier/core/checksum.h"
#include "kvtier/core/mutex.h"
#include "kvtier/core/status.h"

namespace kvtier {

class KeyRing {
 public:
  // Maps (creating, with `slots` slots) the ring at `path`; drain() starts from its present
  // end.
  static Result<std::unique_ptr<KeyRing>> open(const std::string& path, uint64_t magic,
                                               uint64_t slots);
  KeyRing(const KeyRing&) = delete;
  KeyRing& operator=(const KeyRing&) = delete;

  void append(std::span<const Hash128> keys);
  enum class Whose { kEvery, kOthers };
  // The keys appended since this store's last call (through every store, or through the
  // others only), oldest first, from the oldest the ring still holds.
  std::vector<Hash128> drain(Whose whose = Whose::kEvery) KVTIER_EXCLUDES(mu_);

 private:
  struct Slot {
    uint64_t seq;
    uint64_t low;
    uint64_t high;
    uint64_t tag;
  };
  explicit KeyRing(std::unique_ptr<SharedFile> file);
  uint64_t appended() const;
  // The key in slot `i` and its store's tag, unless it is being written or was written over.
  bool read(uint64_t i, Hash128* key, uint64_t* tag) const;

  std::unique_ptr<SharedFile> file_;
  Slot* slots_;
  const uint64_t tag_;  // this store's (unique among the ring's stores)
  Mutex mu_;
  uint64_t next_ KVTIER_GUARDED_BY(mu_);  // the next slot this store replays
};

}  // namespace kvtier
