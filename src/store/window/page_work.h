// A window of a batch on its way through the store: each valid page as it is planned, opened
// and moved (PageWork), and what a get window's steps leave for the next (ReadWindow). Windows
// are planned and run by StoreCore (store_core.h, plan.h) and read by the facade
// (store_read.cc); a layout (layout/layout.h) fills in where each page lies.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "format/page_format.h"
#include "format/sealed_page.h"
#include "guard/guard.h"
#include "kvtier/core/status.h"
#include "kvtier/transfer/agent.h"
#include "naming/routing.h"
#include "window/counters.h"
#include "window/pools.h"

namespace kvtier::detail {

// How one page moves between memory and storage.
enum class PageIo : uint8_t {
  kBuffered,        // through the page cache
  kDirect,          // direct I/O in place (memory and size aligned)
  kStaged,          // direct I/O through an aligned staging buffer
  kStagedBuffered,  // buffered I/O from a staging buffer (a sealed store's puts: the page is
                    // sealed into it)
};

// Whether a page's payload moves through a staging buffer: its own (PageWork::staging), or,
// for a sealed page written in runs (window/put_runs.h), the buffer of each run.
inline bool through_staging(PageIo io) {
  return io == PageIo::kStaged || io == PageIo::kStagedBuffered;
}
// Whether a page's object is opened for direct I/O.
inline bool opens_direct(PageIo io) {
  return io == PageIo::kDirect || io == PageIo::kStaged;
}

// One valid page of a window, and what is opened for it.
template <typename Buffer>
struct PageWork {
  size_t page;  // index in the window
  routing::Route route;
  uint64_t payload;
  std::span<const Buffer> pieces;
  Target target;
  // Where the page's bytes are: `target` from offset 0 (files), or a record inside a segment
  // target the window shares (segments), with its header size and stored bytes.
  const Target* io_target = nullptr;
  uint64_t at = 0;
  uint32_t header_bytes = page::kHeaderBytes;
  uint64_t stored_bytes = 0;
  bool header_only = false;  // reads: the object's size does not fit the buffers
  PageIo io = PageIo::kBuffered;
  pools::StagingPool::Lease staging;  // through_staging(io), unless sealed run by run
  size_t first_desc = 0;
  size_t desc_count = 0;
};

// One get window on its way through the read path: what each step leaves for the next.
// Members go in reverse order: the transfer (last) before the header blocks, targets and
// staging buffers it refers to.
struct ReadWindow {
  // Marks a descriptor that reads a page's header rather than a checksum chunk.
  static constexpr uint32_t kNoChunk = UINT32_MAX;
  // What a descriptor reads: a page (index in `reading`) and a chunk of it.
  struct DescRef {
    uint32_t page;
    uint32_t chunk;  // or kNoChunk for the header
  };

  std::span<const std::string_view> keys;
  std::vector<PageWork<MutableBuffer>> work;              // the window's valid pages
  std::vector<PageWork<MutableBuffer>*> reading;          // those whose objects opened
  std::vector<Target> segment_targets;                    // segments: the window's open segments
  std::vector<uint32_t> segment_ids;                      // and the store's numbers for them
  Status batch_error;                                     // fails every page being read
  std::optional<pools::HeaderPool::Lease> header_blocks;  // one per page being read
  std::vector<MemDesc> mem;
  std::vector<StorageDesc> sto;
  std::vector<DescRef> refs;  // per descriptor
  // Page r's chunks are chunk_sums[first_chunk[r] .. first_chunk[r + 1]).
  std::vector<size_t> first_chunk;
  std::vector<Status> verdicts;                            // verify_page's, per page being read
  std::vector<uint64_t> chunk_sums;                        // CRC-64 of each chunk, once read
  std::unique_ptr<std::atomic<uint32_t>[]> chunk_pending;  // descriptors left, per chunk
  std::unique_ptr<std::atomic<uint32_t>[]> pending;        // descriptors left, per page
  std::unique_ptr<std::atomic<bool>[]> failed;             // a descriptor failed, per page
  Result<Transfer> xfer = Transfer();
  // Called with (first + page) as each page checks out (PageDone).
  const guard::PageDone* done = nullptr;
  size_t first = 0;
  // Pages read again (the careful way, or under an earlier name), counted there.
  std::vector<bool> reread;
  bool rereading(size_t page) const { return page < reread.size() && reread[page]; }
  // Why each page (by index in `keys`) that was read was refused; set by the thread that
  // found it, read once the read completed.
  std::vector<Reject> rejects;
  void reject(size_t page, Reject why) { rejects[page] = why; }
  // A sealed store's pages being read (store_read.cc, open_as_landed): each one's header,
  // decoded by the thread that completed its read (`sealed_header`: 1 once it names this
  // page, 2 when not; `sealed_views`), so that each payload chunk that lands after it is
  // opened there and then, in cache (`chunk_opened`, by chunk as `chunk_sums`); the first
  // chunk that did not open, its status code (`chunk_refused`, per page; 0: none).
  std::unique_ptr<std::atomic<uint8_t>[]> sealed_header;
  std::vector<page::SealedView> sealed_views;
  std::vector<uint8_t> chunk_opened;
  std::unique_ptr<std::atomic<uint8_t>[]> chunk_refused;
};

}  // namespace kvtier::detail
