// Which pages another process read, for the page-file layout's eviction: a file beside the
// capacity ledger, mapped shared by every process of the namespace on this host, so that
// eviction by one process does not throw out what another is reading.
//
//   <namespace dir>/reads     header (magic, slot count, tag counter), then 4 bytes a slot
//
// Each store takes a tag (1-255) when it opens. A read hit stores the reader's tag and 24 bits
// of the page's key hash in a slot of the page's bucket (four slots, chosen by the key hash;
// plain stores into the mapping, no system call). A store that is about to evict a page asks
// whether its bucket holds another store's read of that page: its own reads already order its
// own index, another's do not (each process keeps its own LRU; docs/architecture.md, "Capacity
// and eviction"), so such a page is kept a second time round and its mark cleared. Evicting a
// page clears its mark. A mark is a hint: a fifth page read into a full bucket replaces one
// of the four marks there (that page is evicted as if unmarked, never kept by another's mark,
// short of a 1 in 2^24 chance of equal hash bits), and two stores that drew the same tag
// ignore each other's reads, as before marks existed. Buckets, not single slots: every read
// marks, so with one slot per mark other pages' reads wrote over many marks before they were
// needed (two writers on Mooncake's synthetic trace held 0.95 of LRU's hits at a quarter of
// its distinct pages; with buckets, 0.98).
//
// On one host the mapping is coherent for every process. Across hosts it is not, so marks are
// not made on a FUSE filesystem (ceph-fuse), where the ledger works around a page cache other
// hosts do not invalidate. The segment layout does without them: every store there indexes
// every page from the summaries, reclaim copies forward what the reclaiming store read, and a
// segment another store read (its access time) gets a second chance. Marks in its copy-forward
// were measured: hits moved by -0.02 to +0.01 of LRU's, and 3-9% more of the bytes put were
// copied (docs/benchmarks.md, "On serving traces").
//
// Thread-safety: safe for concurrent use (atomic loads, stores and compare-exchanges of the
// mapping's 4-byte slots, relaxed: a mark is a hint, ordered with nothing else).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "capacity/shared_file.h"
#include "kvtier/core/checksum.h"
#include "kvtier/core/status.h"

namespace kvtier {

class ReadMarks {
 public:
  // Maps (creating) the marks of the namespace in `dir`, with about `slots` slots when this
  // call creates the file (an existing file keeps its count). Holds no descriptor open.
  static Result<std::unique_ptr<ReadMarks>> open(const std::string& dir, uint64_t slots);
  ReadMarks(const ReadMarks&) = delete;
  ReadMarks& operator=(const ReadMarks&) = delete;

  // This store read the page.
  void mark(const Hash128& hash);
  // Whether the page's bucket holds another store's read of it; the mark is cleared when it
  // does (the read has bought its second chance).
  bool take_others(const Hash128& hash);
  // The page left the store: any mark of it goes (other pages' marks in its bucket stay).
  void clear(const Hash128& hash);

  uint8_t tag() const { return tag_; }
  uint64_t slots() const { return slots_; }

 private:
  ReadMarks(std::unique_ptr<SharedFile> file, uint8_t tag)
      : file_(std::move(file)),
        slot_words_(static_cast<uint32_t*>(file_->body())),
        slots_(file_->count()),
        tag_(tag) {}
  static constexpr int kWays = 4;
  uint32_t* bucket(const Hash128& hash) const {
    return slot_words_ + hash.low % (slots_ / kWays) * kWays;
  }
  uint32_t* find(const Hash128& hash, uint32_t* seen) const;
  // A mark: the key hash's top 24 bits, then the reader's tag (never 0: 0 is no mark).
  static uint32_t print_of(const Hash128& hash) { return uint32_t(hash.high >> 40) << 8; }

  std::unique_ptr<SharedFile> file_;  // header (tags taken), then the slots
  uint32_t* slot_words_;
  uint64_t slots_;
  uint8_t tag_;
};

}  // namespace kvtier
