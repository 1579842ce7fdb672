// How a store's pages lie on storage: the one interface the facade (Store::Impl) calls, so it
// never asks which layout it has. Three implement it (docs/architecture.md, "The store's
// rooms"):
//
//   PageFiles       one object per page, published whole (page_files.h)
//   FileSegments    records appended to segment files, each listed in a summary beside it
//   ObjectSegments  the same on an object store: each segment written whole (segments.h)
//
// A layout owns its state and its locks (the segment table, lanes and clock are the segment
// layouts'); what every layout shares (the agent, the router, the page index, the store's
// capacity, the counters) and the steps every window takes are its store's StoreCore
// (window/store_core.h), which a layout holds. It sees nothing of the facade.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "format/page_format.h"
#include "kvtier/core/status.h"
#include "kvtier/store/store.h"
#include "naming/routing.h"
#include "window/page_work.h"

namespace kvtier {

struct StoreCore;  // window/store_core.h

class Layout {
 public:
  virtual ~Layout() = default;
  Layout() = default;
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;

  virtual StoreLayout kind() const = 0;
  // Whether pages fan out over directories of their own, one object each: what the layout
  // keeps beside its pages on storage depends on it (capacity/footprint.h).
  virtual bool fans_out() const = 0;

  // Opening, in this order. open(): creates what the layout keeps on storage and indexes the
  // pages already there. charged_bytes(): what the capacity ledger charges when it starts
  // from nothing (no other store of the namespace open). with_capacity(): the ledger is open;
  // `alone`: no other store of the namespace was.
  virtual Status open() = 0;
  virtual Result<uint64_t> charged_bytes() = 0;
  virtual void with_capacity(bool alone) = 0;

  // Before the page index answers a lookup: it drops what other stores removed since.
  virtual void catch_up() = 0;
  // Lookups the page index could not answer. look_up(): whether the page is on storage now
  // (indexed when it is). look_up_from(): keys[n..] (validated up to the first bad key, which
  // ends the prefix), how many in a row are on storage; exists_queries and index_stats are
  // counted here.
  virtual Result<bool> look_up(const routing::Route& route) = 0;
  virtual size_t look_up_from(std::span<const std::string_view> keys, size_t n) = 0;

  // Changes. put_window(): one window of a put batch (StoreCore::run_batch), `out`
  // per page. remove(): the page, wherever it lies, out of the index too (not indexed nor on
  // storage: kNotFound). clear(): every page of the namespace goes, out of the index, its
  // bytes given back to the ledger, counted as cleared.
  virtual void put_window(std::span<const std::string_view> keys,
                          std::span<const ConstBuffer> pieces, size_t k, std::span<Status> out) = 0;
  virtual Status remove(const routing::Route& route) = 0;
  virtual Status clear() = 0;
  // Batches touch their earlier windows' pages again so the first page is the most recently
  // used (run_batch): only where the index's order decides eviction.
  virtual bool orders_batches() const = 0;
  // Whether a sealed store's put windows seal each page whole into staging before it goes out
  // (StoreCore::stage_for_sealing), so that a window holds no more pages than fit the staging.
  virtual bool seals_whole_pages() const = 0;

  // The read path's steps that depend on where pages lie (store_read.cc runs the rest).
  // trusts_sizes(): pages may be opened without asking their size (an object store's page
  // objects). open_for_read(): opens the window's planned pages; those that open go to
  // rw.reading with their target, offset and stored size; the others get their status.
  // after_read(): the window's reads completed.
  virtual bool trusts_sizes() const = 0;
  virtual void open_for_read(detail::ReadWindow& rw, std::span<Status> out, bool trust_size) = 0;
  virtual void after_read(const detail::ReadWindow& rw) = 0;
  // Verifying a page read: what a stored page of header `h` occupies; whether its header and
  // payload agree with what was read (`sums`: the payload's chunk checksums, when verified);
  // where it lies, for an error.
  virtual uint64_t stored_bytes(const page::Header& h) const = 0;
  virtual Status verify_stored(const page::Header& h, const detail::PageWork<MutableBuffer>& w,
                               std::optional<std::span<const uint64_t>> sums) const = 0;
  virtual std::string where(const detail::PageWork<MutableBuffer>& w) const = 0;
  // After the read: a page found corrupt goes (config.drop_corrupt), and a hit is indexed
  // as just used at `now`.
  virtual void drop_corrupt(detail::PageWork<MutableBuffer>& w) = 0;
  virtual void index_hit(const detail::PageWork<MutableBuffer>& w, uint64_t now) = 0;
};

// Which layout a store opens with (choice.cc). named_layout(): the one StoreConfig::layout
// (or the URI's) names, checked against the configuration before anything is created;
// nullopt for "auto". choose_layout(): that one, or layout=auto's choice on the store's
// location and namespace (a namespace keeps the layout it holds; an empty one gets segments
// for pages below kAutoSegmentsBelow, kAutoObjectSegmentsBelow on an object store).
// make_layout(): the layout `kind` for `store` (segments on an object store are written
// whole), not yet open.
struct LayoutChoice {
  StoreLayout kind;
  std::string summary;  // StoreStats::layout: the layout and, for auto, why
};
Result<std::optional<StoreLayout>> named_layout(const StoreConfig& config);
Result<LayoutChoice> choose_layout(StoreCore& store, std::optional<StoreLayout> named);
std::unique_ptr<Layout> make_layout(StoreCore& store, StoreLayout kind);
// Whether `store`'s namespace already holds pages laid out as `kind`.
Result<bool> holds_pages(StoreCore& store, StoreLayout kind);

}  // namespace kvtier
