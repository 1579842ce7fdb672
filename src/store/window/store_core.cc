// The steps every layout's windows share (store_core.h): the admission of new pages (asking
// capacity/'s policy), the encoding of a page's header, and the walk of a base's namespace.
#include "window/store_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "window/put_encoding.h"

namespace kvtier {

void StoreCore::stage_for_sealing(std::vector<detail::PageWork<ConstBuffer>>& work,
                                  std::span<Status> out, bool whole) {
  if (!sealing) return;
  // Whether page `w` cannot be sealed (its status set); otherwise its I/O goes through
  // staging, direct where it was.
  auto refused = [&](detail::PageWork<ConstBuffer>& w) {
    if (w.payload > page::kMaxSealedPayloadBytes) {
      out[w.page] =
          invalid_argument_error(fmt::format("a page of {} bytes: sealed pages hold at most {}",
                                             w.payload, page::kMaxSealedPayloadBytes));
      return true;
    }
    const bool direct = opens_direct(w.io);
    w.staging = StagingPool::Lease();  // direct I/O's own staging, if any: sealed instead
    w.io = direct ? PageIo::kStaged : PageIo::kStagedBuffered;
    return false;
  };
  if (!whole) {  // sealed run by run (window/put_runs.h)
    std::erase_if(work, refused);
    return;
  }
  MutexLock turn(seal_turn);
  size_t held = 0;
  std::erase_if(work, [&](detail::PageWork<ConstBuffer>& w) {
    if (refused(w)) return true;
    Result<StagingPool::Lease> lease =
        seal_staging.acquire_waiting(object_bytes(w.payload) - kHeaderBytes, held);
    if (!lease.ok()) {
      out[w.page] = std::move(lease).status();
      return true;
    }
    w.staging = std::move(lease).value();
    ++held;
    return false;
  });
}

Status StoreCore::begin_put(detail::PutEncoding& encoding, detail::PageWork<ConstBuffer>& w,
                            std::string_view key, uint64_t created_ns,
                            std::span<std::byte, page::kHeaderBytes> block) const {
  page::Header h;
  h.namespace_id = ns_id;
  h.key_hash = w.route.key_hash;
  h.payload_bytes = w.payload;
  h.piece_count = static_cast<uint32_t>(w.pieces.size());
  h.piece_bytes = page::uniform_piece_bytes(w.pieces);
  h.created_ns = created_ns;
  h.key = key;
  h.header_bytes = w.header_bytes;
  h.chunk_hash = chunk_hash;
  return encoding.begin(sealing.get(), h, w, block);
}

Status StoreCore::encode_put_header(detail::PageWork<ConstBuffer>& w, std::string_view key,
                                    uint64_t created_ns,
                                    std::span<std::byte, page::kHeaderBytes> block) const {
  detail::PutEncoding encoding;
  KVTIER_RETURN_IF_ERROR(begin_put(encoding, w, key, created_ns, block));
  for (size_t c = 0; c < encoding.chunks(); ++c) KVTIER_RETURN_IF_ERROR(encoding.chunk(c));
  encoding.finish();
  return ok_status();
}

void StoreCore::admit(std::vector<detail::PageWork<ConstBuffer>>& work, std::span<Status> out) {
  AdmissionPolicy* const admission = capacity.admission();
  if (admission == nullptr || work.empty()) return;
  const bool full = capacity.full();
  const size_t declines = std::erase_if(work, [&](const detail::PageWork<ConstBuffer>& w) {
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

void StoreCore::note_lookup(std::span<const std::string_view> keys) {
  AdmissionPolicy* const admission = capacity.admission();
  if (admission == nullptr) return;
  std::vector<Hash128> hashes;
  hashes.reserve(keys.size());
  for (const std::string_view key : keys) {
    if (!routing::validate_key(key).ok()) break;
    hashes.push_back(router.key_hash(key));
  }
  admission->on_lookup(hashes);
}

Status StoreCore::for_each_fanout(size_t b, bool with_details, const FanoutPagesFn& fn) {
  Status st = walk_namespace(agent, router.namespace_dir(b), with_details, fn);
  // A base whose namespace directory is gone holds no pages.
  return st.code() == StatusCode::kNotFound ? ok_status() : st;
}

}  // namespace kvtier
