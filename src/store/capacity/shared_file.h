// A small file of a namespace mapped shared by every store of it on this host: the read marks
// (read_marks.h) and the admission doorkeeper (admission.h). Plain loads and stores into the
// mapping (atomic_ref, relaxed) are seen by every process at once, with no system call.
//
//   header   64 bytes: magic, element count, then words the user keeps (counters)
//   body     count x element bytes
//
// The first opener sizes the file under an exclusive lock (every block allocated: a store
// into a shared mapping that needs a block the filesystem does not have is a SIGBUS, not an
// error); the others map what it made. A file whose header was never written (its maker died
// first) has never been mapped, and is made again. Coherent on one host only: callers do not
// share it on a FUSE filesystem, whose page cache other hosts do not invalidate.
//
// Thread-safety: the mapping is safe for concurrent use through atomic_ref.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/core/status.h"

namespace kvtier {

class SharedFile {
 public:
  static constexpr size_t kHeaderBytes = 64;
  static constexpr size_t kUserWords = 6;  // header words after magic and count

  // Maps `path` (creating it with `count` elements of `element_bytes` when it does not hold
  // a header yet; an existing file keeps its count). kCorrupt when the file has another magic
  // or a size that does not match its header. Holds no descriptor open.
  static Result<std::unique_ptr<SharedFile>> open(const std::string& path, uint64_t magic,
                                                  uint64_t count, size_t element_bytes);
  ~SharedFile();
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;

  uint64_t count() const { return count_; }
  // Header word i (0 <= i < kUserWords), zero in a new file.
  uint64_t* user_word(size_t i) const { return static_cast<uint64_t*>(map_) + 2 + i; }
  void* body() const { return static_cast<uint8_t*>(map_) + kHeaderBytes; }

 private:
  SharedFile(void* map, size_t bytes, uint64_t count) : map_(map), bytes_(bytes), count_(count) {}
  void* map_;
  size_t bytes_;
  uint64_t count_;
};

}  // namespace kvtier
