// Admission: which new pages a store at its capacity takes (StoreConfig::admission).
//
// A full store evicts a page for every page it takes. When most pages written are never asked
// for again (one-off documents, the last turn of a conversation), each of them pushes out a
// page that would have been: declining a page the first time it is written, and taking it the
// second time (it was asked for again, missed, and written again), keeps those. When pages are
// asked for again soon after their first write, declining loses a hit on each. Which is better
// depends on the workload and changes with it, so the policy measures both, online:
//
//   two shadow caches of keys (no data), each as many pages as the capacity holds, replay what
//   the engine asks for (exists calls: one request's prefix, in order) as an LRU cache would:
//   one takes every page it misses, the other only a page it has missed before (a ghost list
//   of keys missed once, four times its size). Their hits, halved every eight capacities of
//   keys asked, decide: while the second-sight shadow has 5% more, the store declines first
//   writes; otherwise it takes every page.
//
// The store's "written before" is a doorkeeper: two generations of Bloom filters, each
// holding the keys of eight capacities of writes (about 1% false positives: a one-off page
// let in now and then), so a page's second write is taken, even when it comes 8-16
// capacities of writes after its first (with four, a page coming back that late was declined
// again: 0.03-0.05 of LRU's hits lower on Mooncake's synthetic trace at 2-5%;
// docs/benchmarks.md). The namespace's stores on one
// host share it (a file beside the ledger, mapped by each: shared_file.h), so a page first
// written through one store and again through another is taken the second time too (each
// store's own filter declined it twice: two stores on Mooncake's synthetic trace at 2% of its
// distinct pages held 0.94 of an LRU's hits where `always` held 1.01; docs/benchmarks.md). Only a
// page the store does not hold, written while the store is evicting to make room, is asked about: a
// store with room takes everything, and `admission=always` turns the policy off.
//
// The shadows replay what the engine asked every store of the namespace on this host for, not
// only this one: each store appends the keys it is asked for (those the shadows sample, in the
// order asked) to a ring in a shared file beside the doorkeeper (key_ring.h), and replays the
// ring from where it left off, its own keys and the others'. Shadows fed only their own
// store's share of the requests undervalue second sight, which needs a page missed twice and
// then asked for again through the same store: two stores taking turns on Mooncake's
// synthetic trace at 2% of its distinct pages declined 28,000 first writes where one store
// seeing every request declined 63,000; replaying every store's lookups, they decline 63,000
// (docs/benchmarks.md).
//
// Bounds: the shadows sample keys (those whose hash is 0 modulo S, S = pages / 16,384, at
// least 1; spatial sampling keeps hit ratios), so they hold at most ~100,000 keys whatever the
// capacity; the doorkeeper takes ~10 bits per page of eight capacities, per generation (at
// most 64 MiB in all); the ring holds the last sampled keys asked, a slot per 32 KiB of
// capacity (1,024 to 65,536: footprint.h): a store idle while the others were asked for more
// replays what it still holds. Across hosts (FUSE)
// both are per process: each decides from what it sees (docs/architecture.md, "Admission").
//
// Thread-safety: safe for concurrent use (one mutex; a lookup or write batch takes it once).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "capacity/key_ring.h"
#include "capacity/shared_file.h"
#include "kvtier/core/checksum.h"
#include "kvtier/core/mutex.h"

namespace kvtier {

class AdmissionPolicy {
 public:
  // `capacity_bytes`: the store's capacity (> 0), which the shadows and the doorkeeper are
  // sized from once the first write says how large a page is. `written`: the doorkeeper's
  // file, shared with the namespace's other stores on this host (open_doorkeeper_file());
  // null: this store's own. `asked`: the ring of keys asked, likewise (open_lookups_file());
  // null: this store's own lookups only.
  explicit AdmissionPolicy(uint64_t capacity_bytes, std::unique_ptr<SharedFile> written = nullptr,
                           std::unique_ptr<KeyRing> asked = nullptr);
  // Maps the namespace's doorkeeper in `dir` (creating it, sized for `capacity_bytes` of
  // pages of 16 KiB or more).
  static Result<std::unique_ptr<SharedFile>> open_doorkeeper_file(const std::string& dir,
                                                                  uint64_t capacity_bytes);
  // Maps the namespace's ring of keys asked in `dir` (creating it, sized for `capacity_bytes`:
  // footprint.h, key_ring.h).
  static Result<std::unique_ptr<KeyRing>> open_lookups_file(const std::string& dir,
                                                            uint64_t capacity_bytes);
  AdmissionPolicy(const AdmissionPolicy&) = delete;
  AdmissionPolicy& operator=(const AdmissionPolicy&) = delete;

  // The engine asked for `keys` (one exists call): both shadows replay them.
  void on_lookup(std::span<const Hash128> keys);
  // Whether a page the store does not hold is written. `charge`: the bytes it takes;
  // `full`: taking it needs an eviction. Every such write comes here, whatever the answer
  // (the doorkeeper learns the key).
  bool admit(const Hash128& key, uint64_t charge, bool full);
  // Whether first writes are being declined now.
  bool declining() const;
  // One line for stats(): which rule holds and the shadows' hits behind it.
  std::string describe() const;

 private:
  // Keys only, least recently used first.
  class KeyLru {
   public:
    // Moves `k` to most recent; false when absent.
    bool touch(uint64_t k);
    // Adds `k` as most recent, dropping the least recent beyond `capacity`.
    void add(uint64_t k, size_t capacity);
    bool erase(uint64_t k);

   private:
    std::list<uint64_t> order_;
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
  };

  // Two generations of one Bloom filter: a key added is found until two generations later.
  // Its words are this process's, or a shared file's (atomic_ref, relaxed: a lost bit or
  // count is a key taken or declined once more, never a wrong byte).
  class Doorkeeper {
   public:
    // This process's own filter.
    void size_for(uint64_t keys_per_generation);
    // The shared filter of `file`; `keys_per_generation` is its generation's length unless
    // another store set one first.
    void share(std::unique_ptr<SharedFile> file, uint64_t keys_per_generation);
    bool contains(const Hash128& key) const;
    void add(const Hash128& key);

   private:
    // The half of the words generation `g` adds to (g + 1: the one before it).
    uint64_t* half(uint64_t g) const { return words_ + g % 2 * half_words_; }
    bool in(const uint64_t* bits, const Hash128& key) const;
    std::unique_ptr<SharedFile> file_;
    std::vector<uint64_t> own_;  // when not shared: the state words, then both halves
    // Generation, keys added in it, keys per generation (0: not known yet).
    uint64_t* state_ = nullptr;
    uint64_t* words_ = nullptr;
    uint64_t half_words_ = 0;
  };

  void size_from(uint64_t charge) KVTIER_REQUIRES(mu_);
  void replay(const Hash128& key) KVTIER_REQUIRES(mu_);
  void decide() KVTIER_REQUIRES(mu_);

  const uint64_t capacity_bytes_;
  mutable Mutex mu_;
  std::unique_ptr<SharedFile> shared_written_ KVTIER_GUARDED_BY(mu_);  // until sized
  const std::unique_ptr<KeyRing> asked_;  // null: this store's lookups only
  bool sized_ KVTIER_GUARDED_BY(mu_) = false;
  uint64_t sample_ KVTIER_GUARDED_BY(mu_) = 1;  // a key is in the shadows when hash % sample_ == 0
  size_t shadow_pages_ KVTIER_GUARDED_BY(mu_) = 0;
  KeyLru all_ KVTIER_GUARDED_BY(mu_);     // takes every page
  KeyLru second_ KVTIER_GUARDED_BY(mu_);  // takes a page missed before
  KeyLru ghost_ KVTIER_GUARDED_BY(mu_);   // keys second_ missed once
  double all_hits_ KVTIER_GUARDED_BY(mu_) = 0;
  double second_hits_ KVTIER_GUARDED_BY(mu_) = 0;
  uint64_t asked_keys_ KVTIER_GUARDED_BY(mu_) = 0;  // sampled keys since the hits were halved
  bool declining_ KVTIER_GUARDED_BY(mu_) = false;
  uint64_t switches_ KVTIER_GUARDED_BY(mu_) = 0;
  Doorkeeper written_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier
