// A batch's windows, as every layout's put and get paths run them (StoreCore's templates,
// declared in store_core.h): the batch's shape checked, each page's key and memory validated,
// routed and its I/O chosen (plan), and the batch run in windows that each hold their
// open-object permits (run_batch). Included at the end of store_core.h only.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "window/store_core.h"

namespace kvtier {

template <typename Buffer>
Status StoreCore::validate_page(std::string_view key, std::span<const Buffer> pieces,
                                uint64_t* payload) const {
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  const NamespaceSpec& ns = config.ns;
  if (ns.piece_bytes != 0 && pieces.size() != ns.pieces_per_page) {
    return invalid_argument_error(fmt::format("page has {} pieces; the namespace's pages have {}",
                                              pieces.size(), ns.pieces_per_page));
  }
  uint64_t total = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Buffer& b = pieces[p];
    if (b.data == nullptr || b.size == 0) {
      return invalid_argument_error(
          fmt::format("piece {} is empty (data {}, size {}); pages are never empty", p,
                      fmt::ptr(b.data), b.size));
    }
    if (ns.piece_bytes != 0 && b.size != ns.piece_bytes) {
      return invalid_argument_error(fmt::format(
          "piece {} is {} bytes; the namespace's pieces are {}", p, b.size, ns.piece_bytes));
    }
    // The piece's number is formatted only for a refusal: this runs for every piece of a batch.
    if (Status st = agent.check_registered(b.data, b.size); !st.ok()) {
      return st.with_context(fmt::format("piece {}", p));
    }
    if (b.size > UINT64_MAX / 2 - total) return invalid_argument_error("page size overflows");
    total += b.size;
  }
  if (total == 0) return invalid_argument_error("page has no pieces; pages are never empty");
  *payload = total;
  return ok_status();
}

template <typename Buffer>
Status StoreCore::check_shape(std::span<const std::string_view> keys,
                              std::span<const Buffer> pieces, size_t* per_page) {
  if (keys.empty()) {
    if (!pieces.empty()) {
      return invalid_argument_error(fmt::format("{} pieces for 0 keys", pieces.size()));
    }
    *per_page = 0;
    return ok_status();
  }
  if (pieces.size() % keys.size() != 0 || pieces.empty()) {
    return invalid_argument_error(
        fmt::format("{} pieces for {} keys: expected the same number of pieces for every key",
                    pieces.size(), keys.size()));
  }
  *per_page = pieces.size() / keys.size();
  return ok_status();
}

template <typename Buffer>
Status StoreCore::counted_shape(std::span<const std::string_view> keys,
                                std::span<const Buffer> pieces, size_t* per_page) {
  Status st = check_shape(keys, pieces, per_page);
  if (!st.ok()) bump(counters.invalid_requests);
  return st;
}

template <typename Buffer>
void StoreCore::choose_io(detail::PageWork<Buffer>& w) {
  w.io = PageIo::kBuffered;
  if (config.direct_io == DirectIo::kOff) return;
  const std::optional<DirectIoAlignment>& a = dio[w.route.base];
  if (!a) return;  // the filesystem cannot: the reason is in stats().direct_io
  bool aligned = true;
  for (const Buffer& p : w.pieces) {
    aligned =
        aligned && reinterpret_cast<uintptr_t>(p.data) % a->memory == 0 && p.size % a->offset == 0;
  }
  if (aligned) {
    w.io = PageIo::kDirect;
    return;
  }
  if (config.direct_io == DirectIo::kOn) {
    w.staging = staging.acquire(object_bytes(w.payload) - kHeaderBytes);
    if (w.staging) {
      w.io = PageIo::kStaged;
      return;
    }
  }
  bump(counters.direct_fallback_pages);
}

template <typename Buffer>
std::vector<detail::PageWork<Buffer>> StoreCore::plan(std::span<const std::string_view> keys,
                                                      std::span<const Buffer> pieces, size_t k,
                                                      std::span<Status> out, size_t name) {
  std::vector<detail::PageWork<Buffer>> work;
  work.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto page_pieces = pieces.subspan(i * k, k);
    uint64_t payload = 0;
    Status st = validate_page(keys[i], page_pieces, &payload);
    if (!st.ok()) {
      bump(counters.invalid_requests);
      out[i] = std::move(st);
      continue;
    }
    detail::PageWork<Buffer>& w = work.emplace_back();
    w.page = i;
    w.route = route(keys[i], name);
    w.payload = payload;
    w.pieces = page_pieces;
    choose_io(w);
  }
  return work;
}

template <typename Buffer, typename Window>
BatchResult StoreCore::run_batch(std::span<const std::string_view> keys,
                                 std::span<const Buffer> pieces, Window window, bool touch_earlier,
                                 bool sealed_whole) {
  BatchResult out;
  size_t k = 0;
  out.status = counted_shape(keys, pieces, &k);
  if (!out.status.ok()) return out;
  out.pages.resize(keys.size());
  size_t step = std::min<size_t>(budget.capacity(), 128);
  if constexpr (std::is_same_v<Buffer, ConstBuffer>) {
    // A sealed put seals each page of a window into staging: the window's pages fit it (the
    // batch's first page's size for all; at least one page).
    if (sealing && sealed_whole && k != 0) {
      uint64_t payload = 0;
      for (const Buffer& p : pieces.first(k)) payload += p.size;
      const uint64_t fit =
          config.staging_bytes /
          std::max<uint64_t>(align_up(object_bytes(payload), uint64_t{64} << 10), 1);
      step = std::clamp<size_t>(static_cast<size_t>(std::min<uint64_t>(fit, step)), 1, step);
    }
  }
  size_t last_window = 0;
  for (size_t first = 0; first < keys.size(); first += step) {
    const size_t n = std::min(step, keys.size() - first);
    ObjectBudget::Permits permits(budget, n);
    window(keys.subspan(first, n), pieces.subspan(first * k, n * k), k,
           std::span<Status>(out.pages).subspan(first, n));
    last_window = first;
  }
  // Each window indexes its pages last to first (put_window, index_reads), so that a
  // prefix's first page is the last evicted; across windows that leaves a later window's
  // pages the more recent. The earlier windows' pages are touched again, last to first, so
  // the batch's first page is its most recently used however long the batch.
  if (touch_earlier) {
    const uint64_t now = wall_ns();
    for (size_t i = last_window; i-- > 0;) {
      if (out.pages[i].ok()) index.touch(router.key_hash(keys[i]), now);
    }
  }
  return out;
}

}  // namespace kvtier
