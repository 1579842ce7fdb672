// The page-file layout: one object per page, at a path its key's hash decides
// (naming/routing.h), written to a temporary and published whole (renamed, or uploaded), so a
// reader sees a page entire or not at all. Pages of other stores are found by asking storage
// (a stat, or a listing of the namespace); with a capacity, the least recently used pages
// this store knows of are evicted one by one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "capacity/key_ring.h"
#include "capacity/read_marks.h"
#include "kvtier/store/store.h"
#include "layout/layout.h"
#include "window/pools.h"

namespace kvtier {

class PageFiles final : public Layout {
 public:
  explicit PageFiles(StoreCore& store) : s_(store) {}
  // layout=auto: whether `store`'s namespace holds page files.
  static Result<bool> holds_pages(StoreCore& store);

  StoreLayout kind() const override { return StoreLayout::kFiles; }
  bool fans_out() const override { return true; }
  Status open() override;
  Result<uint64_t> charged_bytes() override;
  void with_capacity(bool alone) override;
  void catch_up() override;
  Result<bool> look_up(const routing::Route& route) override;
  size_t look_up_from(std::span<const std::string_view> keys, size_t n) override;
  void put_window(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces,
                  size_t k, std::span<Status> out) override;
  Status remove(const routing::Route& route) override;
  Status clear() override;
  bool orders_batches() const override;
  bool seals_whole_pages() const override;
  bool trusts_sizes() const override;
  void open_for_read(detail::ReadWindow& rw, std::span<Status> out, bool trust_size) override;
  void after_read(const detail::ReadWindow&) override {}
  uint64_t stored_bytes(const page::Header& h) const override;
  Status verify_stored(const page::Header& h, const detail::PageWork<MutableBuffer>& w,
                       std::optional<std::span<const uint64_t>> sums) const override;
  std::string where(const detail::PageWork<MutableBuffer>& w) const override;
  void drop_corrupt(detail::PageWork<MutableBuffer>& w) override;
  void index_hit(const detail::PageWork<MutableBuffer>& w, uint64_t now) override;

 private:
  // Whether put windows go out in runs spread over the store's threads (window/put_runs.h):
  // on a FILE location, where an object is written in place from any offset.
  bool writes_in_runs() const;
  // Lists the namespace's pages into the index: `as_recent` puts them in their modification
  // order as used; otherwise they go in as least recently used (found later).
  Status scan_index(bool as_recent);
  // The bytes `need` fit the capacity: least recently used pages are evicted until they do.
  Status reserve(uint64_t need);
  // A put window's pages written whole, one transfer per object (object stores, memory):
  // pages whose open failed (`opened`) get its status in `out`, the others what their writes
  // and publishing did.
  void write_whole(std::vector<detail::PageWork<ConstBuffer>>& work,
                   std::span<const std::string_view> keys, uint64_t created,
                   const pools::HeaderPool::Lease& lease, std::vector<Result<Target>>& opened,
                   std::span<Status> out);
  // Publishes a page written whole, unless the guarded call it belongs to (`call`,
  // guard::current_call() of the thread that made the call) was abandoned, and counts it.
  // Thread-safe: pages are published by the threads that wrote them.
  Status publish(detail::PageWork<ConstBuffer>& w, const std::atomic<bool>* call);

  StoreCore& s_;
  // With a capacity, on a filesystem that can map them (capacity/): which pages other stores
  // of the namespace on this host read (eviction spares them once), and the pages those
  // stores evicted or removed (each store drops them from its index before it answers a
  // lookup, so it does not report a page another store removed).
  std::unique_ptr<ReadMarks> read_marks_;
  std::unique_ptr<KeyRing> gone_;
};

}  // namespace kvtier
