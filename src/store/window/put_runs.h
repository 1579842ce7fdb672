// A put window's page objects written in runs that the store's threads encode and write side
// by side (docs/architecture.md, "Every core a batch is given"). Each run is about 1 MiB of
// payload: several small pages whole (each header, payload and padding), or one part of a
// larger page. A thread takes the next run, encodes its chunks (the CRC-64 of each; sealed
// into the run's buffer; or copied into staging for direct I/O: window/put_encoding.h) and
// writes it at once, so the write's copy finds those bytes still in the core's cache and, at
// 1 MiB, the backend runs it on that same thread (its inline path). A sealed page has no
// staging of its own here: each run is sealed into a buffer of StoreCore::seal_staging that
// the thread holds while it writes that run (at most the staging's share per thread, at
// least one chunk), so a few buffers go round in cache whatever the window's size. A large
// page's header goes out last, from the thread that finished its last run, once every chunk
// is known.
//
// For objects written in place from any offset (FILE stores); an object that must be written
// in one transfer (an object store's upload) is not for this.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "kvtier/core/status.h"
#include "window/page_work.h"
#include "window/pools.h"

namespace kvtier {

struct StoreCore;

namespace detail {

// The payload a run holds (at most; a large page's chunk may be larger when sealed).
inline constexpr uint64_t kPutRunBytes = uint64_t{1} << 20;

// Writes each page of `work` (its target open, its I/O chosen, its staging held when it has
// one) to its object: the header block `blocks.block(i)` for work[i], encoded here as `keys`
// (indexed by each page's w.page) written at `created_ns`, then its payload and padding.
// A page whose results[i] is not OK on entry is skipped. Once every byte of work[i] is
// written, `written(i)` runs on the thread that wrote its last bytes (publishing it there,
// beside the other pages' writes) and its status is results[i]; a page that did not write
// gets why not.
void write_in_runs(StoreCore& s, std::span<PageWork<ConstBuffer>> work,
                   std::span<const std::string_view> keys, uint64_t created_ns,
                   const pools::HeaderPool::Lease& blocks,
                   const std::function<Status(size_t)>& written, std::span<Status> results);

}  // namespace detail
}  // namespace kvtier
