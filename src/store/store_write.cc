// What every layout's put window shares (layout/): the admission of new pages, the encoding
// of a page's header, and the reservation of bytes against the capacity (evicting what the
// layout's Evictor chooses).
#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstring>

#include "store_impl.h"

namespace kvtier {

void Store::Impl::encode_put_header(PageWork<ConstBuffer>& w, std::string_view key,
                                    uint64_t created_ns,
                                    std::span<std::byte, page::kHeaderBytes> block) const {
  uint64_t checksum;
  if (w.io == PageIo::kStaged) {
    const uint64_t padded = object_bytes(w.payload) - kHeaderBytes;
    std::byte* dst = w.staging.data();
    for (const ConstBuffer& p : w.pieces) {
      std::memcpy(dst, p.data, p.size);
      dst += p.size;
    }
    std::memset(dst, 0, padded - w.payload);
    const ConstBuffer staged{w.staging.data(), w.payload};
    checksum = page::payload_checksum(std::span<const ConstBuffer>(&staged, 1), w.payload);
  } else {
    checksum = page::payload_checksum(w.pieces, w.payload);
  }
  page::Header h;
  h.namespace_id = ns_id;
  h.key_hash = w.route.key_hash;
  h.payload_bytes = w.payload;
  h.payload_checksum = checksum;
  h.piece_count = static_cast<uint32_t>(w.pieces.size());
  h.piece_bytes = page::uniform_piece_bytes(w.pieces);
  h.created_ns = created_ns;
  h.key = key;
  h.header_bytes = w.header_bytes;
  page::encode(h, block);
}

uint64_t Store::Impl::capacity_limit(uint64_t used) {
  uint64_t limit = config.capacity_bytes != 0 ? config.capacity_bytes : UINT64_MAX;
  if (config.min_free_bytes != 0) {
    struct statvfs fs {};
    if (::statvfs(router.namespace_dir(0).c_str(), &fs) == 0) {
      const uint64_t avail = uint64_t{fs.f_bavail} * fs.f_frsize;
      const uint64_t room = avail > config.min_free_bytes ? avail - config.min_free_bytes : 0;
      limit = std::min(limit, used + room);
    }
  }
  return limit;
}

// Under the ledger lock only the figure changes and victims are chosen; the removals and a
// relearning of what others wrote happen with the lock released, so other writers (threads
// and processes) never wait behind file-system work. The usage is lowered only after the
// removals succeed, so it never reads below what is on storage.
//
// What other processes wrote is learnt again (the files layout lists the namespace, the
// segment layout reads new summaries). Under contention (several writers, processes or hosts,
// sharing a full budget) what one look found may be evicted by its owners first; so the store
// looks again while looks find something, at most kMaxRelearns times, and a window is refused
// only when a look finds nothing left to evict.
Status Store::Impl::reserve_capacity(uint64_t need, const Evictor& evictor) {
  constexpr int kMaxRelearns = 8;
  int relearns = 0;
  bool relearn_found = true;
  for (;;) {
    enum class Next { kDone, kEvict, kRelearn } next = Next::kEvict;
    KVTIER_RETURN_IF_ERROR(ledger->update([&](uint64_t& used) -> Status {
      const uint64_t limit = capacity_limit(used);
      if (used + need <= limit) {
        used += need;
        next = Next::kDone;
        // Within 1/16 of the limit counts as full: the segment layout frees whole segments
        // (1/64 of the capacity), after which a few windows fit without evicting.
        at_capacity.store(used > limit - limit / 16, std::memory_order_relaxed);
        return ok_status();
      }
      at_capacity.store(true, std::memory_order_relaxed);
      if (evictor.choose(used + need - limit)) return ok_status();
      if (relearns < kMaxRelearns && relearn_found) {
        next = Next::kRelearn;
        return ok_status();
      }
      return resource_exhausted_error(fmt::format(
          "capacity: {} more bytes do not fit ({} of {} used{}), and {}", need, used, limit,
          config.min_free_bytes ? ", keeping min_free_bytes free" : "", evictor.none_left));
    }));
    if (next == Next::kDone) return ok_status();
    if (next == Next::kRelearn) {
      ++relearns;
      KVTIER_ASSIGN_OR_RETURN(relearn_found, evictor.relearn());
      continue;
    }
    uint64_t freed = 0;
    Status failed = evictor.evict(&freed);
    // A fresh statvfs next round sees the space the removals freed.
    if (freed != 0) KVTIER_RETURN_IF_ERROR(ledger->release(freed));
    KVTIER_RETURN_IF_ERROR(failed);
  }
}

void Store::Impl::admit(std::vector<PageWork<ConstBuffer>>& work, std::span<Status> out) {
  if (!admission || work.empty()) return;
  const bool full = at_capacity.load(std::memory_order_relaxed);
  const size_t declines = std::erase_if(work, [&](const PageWork<ConstBuffer>& w) {
    if (index.contains(w.route.key_hash)) return false;  // held: written again as always
    if (admission->admit(w.route.key_hash, object_bytes(w.payload), full)) {
      if (full) bump(counters.admitted_pages);
      return false;
    }
    out[w.page] = ok_status();
    return true;
  });
  bump(counters.declined_pages, declines);
}

void Store::Impl::note_lookup(std::span<const std::string_view> keys) {
  if (!admission) return;
  std::vector<Hash128> hashes;
  hashes.reserve(keys.size());
  for (const std::string_view key : keys) {
    if (!routing::validate_key(key).ok()) break;
    hashes.push_back(hash128(key));
  }
  admission->on_lookup(hashes);
}

}  // namespace kvtier
