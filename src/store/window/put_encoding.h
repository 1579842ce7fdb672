// A page of a put window encoded chunk by chunk, so that its payload's chunks can be
// checksummed (or sealed) on several threads, each by the thread that writes it next, while
// it is in that core's cache (window/put_runs.h): begin (the header's fixed fields; a sealed
// page's number and sealed key), chunk (one chunk: its CRC-64; sealed into the page's
// staging, or into the buffer of the run that writes it; or copied into the staging of a
// page staged for direct I/O and its CRC-64 taken there), finish (the header completed from
// its chunks). StoreCore::encode_put_header is the three in one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "format/page_format.h"
#include "kvtier/core/status.h"
#include "window/page_work.h"
#include "window/sealing.h"

namespace kvtier::detail {

class PutEncoding {
 public:
  // `h` gives the header's fixed fields (its key_hash the page's name, its key the page key,
  // which must outlive the encoding); `sealing` a sealed store's keys, else null. The page's
  // staging, if it has one (sealed, or staged for direct I/O), has its padding zeroed here. Fails
  // only when a sealed page is too large or its sealing session has no page number left.
  Status begin(const PageSealing* sealing, const page::Header& h, PageWork<ConstBuffer>& w,
               std::span<std::byte, page::kHeaderBytes> block);
  // The payload's chunks: each chunk() covers [c * chunk_bytes(), (c + 1) * chunk_bytes()).
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  size_t chunks() const { return chunks_; }
  // Chunk `c`. Thread-safe for distinct chunks. `into`: where a sealed page that has no
  // staging of its own (sealed run by run) gets the chunk's sealed bytes.
  Status chunk(size_t c, std::byte* into = nullptr);
  // Once every chunk is done: the header completed in `block`.
  void finish();

 private:
  const PageSealing* sealing_ = nullptr;
  page::Header h_;
  PageWork<ConstBuffer>* w_ = nullptr;
  std::span<std::byte, page::kHeaderBytes> block_{static_cast<std::byte*>(nullptr),
                                                  page::kHeaderBytes};
  uint64_t chunk_bytes_ = 0;
  size_t chunks_ = 0;
  std::vector<uint64_t> sums_;  // in the clear: each chunk's CRC-64
  std::optional<PageSealing::SealedPut> sealed_;
};

}  // namespace kvtier::detail
