// The write path: a put window validates its pages, reserves their bytes against the
// capacity (evicting as needed), encodes their headers and writes them in growing chunks,
// then publishes each page.
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

void Store::Impl::put_window(std::span<const std::string_view> keys,
                             std::span<const ConstBuffer> pieces, size_t k, std::span<Status> out) {
  auto work = plan(keys, pieces, k, out);
  admit(work, out);

  Result<HeaderPool::Lease> lease = headers.acquire(work.size());
  if (!lease.ok()) {
    for (const auto& w : work) out[w.page] = lease.status();
    bump(counters.put_failures, work.size());
    return;
  }
  // Capacity: the window's bytes are reserved (evicting as needed) before anything is written.
  uint64_t reserved = 0;
  if (ledger && !work.empty()) {
    for (const auto& w : work) reserved += object_bytes(w.payload);
    Status st = reserve(reserved);
    if (!st.ok()) {
      for (const auto& w : work) out[w.page] = st;
      bump(counters.put_failures, work.size());
      bump(counters.capacity_refusals, work.size());
      return;
    }
  }

  std::vector<TargetSpec> specs;
  specs.reserve(work.size());
  for (const auto& w : work) {
    TargetSpec spec;
    spec.path = w.route.path;
    spec.mode = TargetMode::kCreate;
    spec.size_hint = object_bytes(w.payload);
    spec.temp_dir = router.temp_dir(w.route.base);
    spec.direct = w.io != PageIo::kBuffered;
    specs.push_back(std::move(spec));
  }
  std::vector<Result<Target>> opened = agent.open_targets(specs);
  // A namespace whose directories were removed under the store (by hand) gets them again, but
  // only under a base directory that is still there: a base that is gone may be a filesystem
  // that is gone (a network mount detached), and what lies beneath is not the store's.
  std::vector<bool> remade(router.base_count(), false);
  for (size_t i = 0; i < work.size(); ++i) {
    const size_t b = work[i].route.base;
    if (opened[i].ok() || opened[i].status().code() != StatusCode::kNotFound) continue;
    if (!remade[b]) {
      remade[b] = true;
      Result<ObjectInfo> base = agent.stat(router.base(b));
      if (!base.ok() || !base->is_dir || !agent.make_dirs(router.temp_dir(b)).ok()) continue;
    }
    opened[i] = agent.open_target(specs[i]);
  }

  // Pages go out in chunks that grow from 1 MiB to 16 MiB: while the backend writes one
  // chunk, this thread checksums the next, so checksumming overlaps the copy.
  struct Chunk {
    std::vector<size_t> pages;  // indexes into `work`
    Result<Transfer> xfer = Transfer();
    Status error;  // the chunk's request could not be made or posted
  };
  std::vector<Chunk> chunks;
  const uint64_t created = wall_ns();
  uint64_t chunk_target = 1 << 20;
  size_t next = 0;
  while (next < work.size()) {
    Chunk& c = chunks.emplace_back();
    uint64_t bytes = 0;
    std::vector<MemDesc> mem;
    std::vector<StorageDesc> sto;
    for (; next < work.size() && (c.pages.empty() || bytes < chunk_target); ++next) {
      auto& w = work[next];
      if (!opened[next].ok()) {
        out[w.page] = std::move(opened[next]).status();
        continue;
      }
      w.target = std::move(opened[next]).value();
      encode_put_header(w, keys[w.page], created, lease->block(next));
      const uint64_t padded = object_bytes(w.payload) - kHeaderBytes;

      c.pages.push_back(next);
      w.first_desc = mem.size();
      mem.push_back(MemDesc{lease->block(next).data(), kHeaderBytes});
      sto.push_back(StorageDesc{&w.target, 0, kHeaderBytes});
      if (w.io == PageIo::kStaged) {
        mem.push_back(MemDesc{w.staging.data(), padded});
        sto.push_back(StorageDesc{&w.target, kHeaderBytes, padded});
      } else {
        uint64_t off = kHeaderBytes;
        for (const ConstBuffer& p : w.pieces) {
          mem.push_back(MemDesc{const_cast<void*>(p.data), p.size});
          sto.push_back(StorageDesc{&w.target, off, p.size});
          off += p.size;
        }
        if (padded > w.payload) {
          mem.push_back(MemDesc{zeros.data(), padded - w.payload});
          sto.push_back(StorageDesc{&w.target, off, padded - w.payload});
        }
      }
      w.desc_count = mem.size() - w.first_desc;
      bytes += w.payload;
    }
    chunk_target = std::min<uint64_t>(chunk_target * 2, 16 << 20);
    if (mem.empty()) continue;
    c.xfer = agent.make_request(TransferOp::kWrite, mem, sto);
    c.error = c.xfer.ok() ? c.xfer->post() : c.xfer.status();
  }

  for (Chunk& c : chunks) {
    if (c.error.ok() && c.xfer->valid()) c.xfer->wait();
    for (size_t i : c.pages) {
      auto& w = work[i];
      Status st = c.error;
      if (st.ok()) st = page_result(*c.xfer, w);
      // A call whose caller has gone (its deadline passed) publishes nothing: the temporary
      // goes with the target.
      if (st.ok() && guard::call_abandoned()) {
        st = deadline_exceeded_error("the call's deadline passed before the page was published");
      }
      if (st.ok()) st = w.target.publish(PublishOptions{.durable = config.fsync});
      if (st.ok()) {
        bump(counters.put_pages);
        bump(counters.put_bytes, w.payload);
        count_io(w);
      }
      out[w.page] = std::move(st);
    }
  }
  for (const Status& s : out) {
    if (!s.ok()) bump(counters.put_failures);
  }
  // Published pages are indexed as just used, the last of the batch first: engines put a
  // prompt's pages in prefix order, and a later page is worth nothing once an earlier one is
  // gone, so the earlier ones are the more recently used (evicted after them). Bytes reserved
  // for pages that were not published, and those of pages a publish replaced, go back to the
  // budget.
  uint64_t give_back = 0;
  for (auto it = work.rbegin(); it != work.rend(); ++it) {
    const auto& w = *it;
    const uint64_t bytes = object_bytes(w.payload);
    if (out[w.page].ok()) {
      const std::optional<uint64_t> old =
          index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base), bytes});
      if (old) give_back += *old;
    } else {
      give_back += bytes;
    }
  }
  if (reserved != 0) ledger->release(give_back).ignore_error();  // drift only: healed on restart
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

// The files layout evicts the least recently used pages this process knows of, and learns
// others' pages by listing the namespace. Its use order knows only this process's reads: a
// page another store on this host read since (its read mark) is spared once, as the most
// recently used.
Status Store::Impl::reserve(uint64_t need) {
  forget_gone();  // not a victim to choose: another store removed it
  std::vector<PageIndex::Page> victims;
  Evictor e;
  e.choose = [&](uint64_t short_by) {
    victims.clear();
    uint64_t freeing = 0;
    // At most one pass over the index: readers marking pages as fast as they are spared
    // cannot hold a writer.
    size_t spares_left = index.pages();
    while (freeing < short_by) {
      std::optional<PageIndex::Page> victim = index.pop_oldest();
      if (!victim) break;
      if (read_marks && spares_left > 0 && read_marks->take_others(victim->hash)) {
        --spares_left;
        index.put(*victim);
        bump(counters.kept_for_others);
        continue;
      }
      freeing += victim->bytes;
      victims.push_back(*victim);
    }
    return !victims.empty();
  };
  e.evict = [&](uint64_t* freed) {
    Status failed;
    for (const PageIndex::Page& victim : victims) {
      // Readers holding the object open keep reading it: unlinking never tears a read.
      Status st = agent.remove(router.page_path(victim.base, victim.hash));
      if (st.ok()) {
        *freed += victim.bytes;
        if (read_marks) read_marks->clear(victim.hash);
        bump(counters.evicted_pages);
        bump(counters.evicted_bytes, victim.bytes);
      } else if (st.code() != StatusCode::kNotFound && failed.ok()) {
        failed = st.with_context("evicting a page");
      }
      // kNotFound: another process removed it and gave its bytes back. Gone either way, and
      // out of the index (pop_oldest), unless the removal failed.
      if (st.ok() || st.code() == StatusCode::kNotFound) evictions.add({&victim.hash, 1});
      // The other stores' indexes drop it (at once: one that indexes it again after a read
      // misses it, and then puts it, keeps it).
      if (st.ok() && gone) gone->append({&victim.hash, 1});
    }
    return failed;
  };
  e.relearn = [&]() -> Result<bool> {
    // Every page this process knew of is gone: learn the ones others wrote.
    KVTIER_RETURN_IF_ERROR(scan_index(/*as_recent=*/false));
    return index.pages() != 0;
  };
  e.none_left = "there is nothing left to evict";
  return reserve_capacity(need, e);
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
