// The page-file layout (page_files.h): each page one object. Writes go through a temporary
// published whole; reads open each page's object; lookups the index cannot answer stat the
// page's path; with a capacity, least recently used pages are evicted.
#include "layout/page_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "capacity/footprint.h"
#include "capacity/page_index.h"
#include "naming/namespace_walk.h"
#include "window/put_runs.h"
#include "window/store_core.h"

namespace kvtier {
namespace {

// The ring of pages removed (capacity/key_ring.h), "KVEVICT1": a slot per 32 KiB of capacity
// (1,024 to 65,536: capacity/footprint.h), many windows of evictions between two exists()
// calls of a store; one that falls further behind keeps the pages it missed indexed until a
// read misses them, as across hosts.
constexpr uint64_t kGoneMagic = 0x315443495645564b;

}  // namespace

Result<bool> PageFiles::holds_pages(StoreCore& s) {
  // The first page file found ends the walk (a sentinel status, never returned).
  bool page_files = false;
  for (size_t b = 0; b < s.router.base_count() && !page_files; ++b) {
    Status st = s.for_each_fanout(b, /*with_details=*/false,
                                  [&](const std::string&, const std::vector<ObjectInfo>& pages) {
                                    for (const ObjectInfo& e : pages) {
                                      if (parse_hash_hex(e.name)) {
                                        page_files = true;
                                        return cancelled_error("found");
                                      }
                                    }
                                    return ok_status();
                                  });
    if (!st.ok() && !page_files) return st;
  }
  return page_files;
}

Status PageFiles::open() {
  return scan_index(/*as_recent=*/true);
}

Result<uint64_t> PageFiles::charged_bytes() {
  return s_.index.bytes();
}

void PageFiles::with_capacity(bool /*alone*/) {
  const std::string& dir = s_.router.namespace_dir(0);
  if (s_.config.capacity_bytes == 0 || on_fuse_filesystem(dir)) return;
  // One slot per 16 KiB of capacity: four per page of 64 KiB. Marks are hints: a store that
  // cannot map them evicts by its own reads alone, as it does across hosts.
  if (Result<std::unique_ptr<ReadMarks>> marks =
          ReadMarks::open(dir, footprint::read_mark_slots(s_.config.capacity_bytes));
      marks.ok()) {
    read_marks_ = std::move(marks).value();
  }
  if (Result<std::unique_ptr<KeyRing>> gone =
          KeyRing::open(dir + "/" + std::string(routing::kGoneFile), kGoneMagic,
                        footprint::ring_slots(s_.config.capacity_bytes));
      gone.ok()) {
    gone_ = std::move(gone).value();
  }
}

void PageFiles::catch_up() {
  if (gone_) {
    // Not its own: those left the index as they were chosen, and one put again since is back.
    for (const Hash128& hash : gone_->drain(KeyRing::Whose::kOthers)) s_.index.erase(hash);
  }
}

Result<bool> PageFiles::look_up(const routing::Route& r) {
  // Not indexed: perhaps another process wrote it since this one looked.
  bump(s_.counters.index_stats);
  Result<ObjectInfo> info = s_.agent.stat(r.path);
  if (info.ok()) {
    if (info->is_dir || info->size <= kHeaderBytes) return false;
    s_.index.put_cold({r.key_hash, static_cast<uint32_t>(r.base), s_.capacity.charge(info->size)});
    return true;
  }
  if (info.status().code() == StatusCode::kNotFound) return false;
  return info.status();
}

size_t PageFiles::look_up_from(std::span<const std::string_view> keys, size_t n) {
  std::vector<routing::Route> rest;
  std::vector<std::string> paths;
  for (size_t i = n; i < keys.size(); ++i) {
    if (!routing::validate_key(keys[i]).ok()) break;
    rest.push_back(s_.router.route(keys[i]));
    paths.push_back(rest.back().path);
  }
  bump(s_.counters.exists_queries, n + paths.size());
  if (paths.empty()) return n;
  // One call for the rest: object stores ask in parallel, files stop at the first absent page.
  std::vector<Result<ObjectInfo>> infos = s_.agent.stat_many(paths, /*until_missing=*/true);
  size_t found = 0;
  for (; found < infos.size(); ++found) {
    const Result<ObjectInfo>& info = infos[found];
    if (!info.ok() || info->is_dir || info->size <= kHeaderBytes) break;
    s_.index.put_cold({rest[found].key_hash, static_cast<uint32_t>(rest[found].base),
                       s_.capacity.charge(info->size)});
  }
  // The keys the index could not answer, up to and including the one that ended the prefix.
  bump(s_.counters.index_stats, found + (found < infos.size() ? 1 : 0));
  return n + found;
}

Status PageFiles::remove(const routing::Route& r) {
  uint64_t bytes = 0;
  if (s_.capacity.bounded()) {
    Result<ObjectInfo> info = s_.agent.stat(r.path);
    if (info.ok()) bytes = s_.capacity.charge(info->size);
  }
  Status st = s_.agent.remove(r.path);
  s_.index.erase(r.key_hash);
  KVTIER_RETURN_IF_ERROR(st);
  if (gone_) gone_->append({&r.key_hash, 1});
  s_.capacity.release(bytes).ignore_error();
  return ok_status();
}

Status PageFiles::clear() {
  Status result;
  uint64_t freed = 0;
  for (size_t b = 0; b < s_.router.base_count() && result.ok(); ++b) {
    result = s_.for_each_fanout(
        b, /*with_details=*/s_.capacity.bounded(),
        [&](const std::string& dir, const std::vector<ObjectInfo>& pages) {
          std::vector<std::string> paths;
          paths.reserve(pages.size());
          for (const ObjectInfo& e : pages) paths.push_back(dir + "/" + e.name);
          std::vector<Status> removed = s_.agent.remove_many(paths);
          Status first;
          for (size_t i = 0; i < removed.size(); ++i) {
            if (removed[i].ok()) {
              bump(s_.counters.cleared);
              freed += s_.capacity.charge(pages[i].size);
            } else if (removed[i].code() != StatusCode::kNotFound && first.ok()) {
              first = removed[i];
            }
          }
          return first;
        });
  }
  s_.index.clear();
  s_.capacity.release(freed).ignore_error();
  return result;
}

bool PageFiles::orders_batches() const {
  return s_.capacity.bounded();  // order matters only to eviction
}

bool PageFiles::writes_in_runs() const {
  return s_.config.location.storage_class == StorageClass::kFile;
}

bool PageFiles::seals_whole_pages() const {
  return !writes_in_runs();
}

bool PageFiles::trusts_sizes() const {
  return s_.config.location.storage_class == StorageClass::kObject;
}

uint64_t PageFiles::stored_bytes(const page::Header& h) const {
  return object_bytes(h.payload_bytes);
}

Status PageFiles::verify_stored(const page::Header& h, const detail::PageWork<MutableBuffer>& w,
                                std::optional<std::span<const uint64_t>> sums) const {
  return page::verify_object(h, w.stored_bytes, sums);
}

std::string PageFiles::where(const detail::PageWork<MutableBuffer>& w) const {
  return fmt::format("page '{}'", w.route.path);
}

void PageFiles::drop_corrupt(detail::PageWork<MutableBuffer>& w) {
  if (!w.target.valid()) return;
  const ObjectIdentity identity = w.target.identity();
  const uint64_t bytes = s_.capacity.charge(w.target.size());
  w.target.reset();
  if (!s_.config.drop_corrupt) return;
  // Removed only if it is still the object that was read.
  if (s_.agent.remove(w.route.path, identity.valid() ? &identity : nullptr).ok()) {
    bump(s_.counters.corrupt_dropped);
    s_.index.erase(w.route.key_hash);
    s_.capacity.release(bytes).ignore_error();  // drift only: healed on restart
  }
}

void PageFiles::index_hit(const detail::PageWork<MutableBuffer>& w, uint64_t now) {
  if (read_marks_) read_marks_->mark(w.route.key_hash);
  if (!s_.index.touch(w.route.key_hash, now)) {
    s_.index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base),
                  s_.capacity.charge(object_bytes(w.payload))});
  }
}

void PageFiles::put_window(std::span<const std::string_view> keys,
                           std::span<const ConstBuffer> pieces, size_t k, std::span<Status> out) {
  auto work = s_.plan(keys, pieces, k, out);
  s_.admit(work, out);
  s_.stage_for_sealing(work, out, seals_whole_pages());

  Result<HeaderPool::Lease> lease = s_.headers.acquire(work.size());
  if (!lease.ok()) {
    for (const auto& w : work) out[w.page] = lease.status();
    bump(s_.counters.put_failures, work.size());
    return;
  }
  // Capacity: the window's bytes are reserved (evicting as needed) before anything is written.
  uint64_t reserved = 0;
  if (s_.capacity.bounded() && !work.empty()) {
    for (const auto& w : work) reserved += s_.capacity.charge(object_bytes(w.payload));
    Status st = reserve(reserved);
    if (!st.ok()) {
      for (const auto& w : work) out[w.page] = st;
      bump(s_.counters.put_failures, work.size());
      bump(s_.counters.capacity_refusals, work.size());
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
    spec.temp_dir = s_.router.temp_dir(w.route.base);
    spec.direct = opens_direct(w.io);
    specs.push_back(std::move(spec));
  }
  std::vector<Result<Target>> opened = s_.agent.open_targets(specs);
  // A namespace whose directories were removed under the store (by hand) gets them again, but
  // only under a base directory that is still there: a base that is gone may be a filesystem
  // that is gone (a network mount detached), and what lies beneath is not the store's.
  std::vector<bool> remade(s_.router.base_count(), false);
  for (size_t i = 0; i < work.size(); ++i) {
    const size_t b = work[i].route.base;
    if (opened[i].ok() || opened[i].status().code() != StatusCode::kNotFound) continue;
    if (!remade[b]) {
      remade[b] = true;
      Result<ObjectInfo> base = s_.agent.stat(s_.router.base(b));
      if (!base.ok() || !base->is_dir || !s_.agent.make_dirs(s_.router.temp_dir(b)).ok()) continue;
    }
    opened[i] = s_.agent.open_target(specs[i]);
  }

  const uint64_t created = wall_ns();
  if (writes_in_runs()) {
    // In runs spread over the store's threads (window/put_runs.h).
    std::vector<Status> written(work.size());
    for (size_t i = 0; i < work.size(); ++i) {
      if (opened[i].ok()) {
        work[i].target = std::move(opened[i]).value();
      } else {
        written[i] = std::move(opened[i]).status();
      }
    }
    // Each page is published by the thread that wrote its last bytes, as the others write.
    const std::atomic<bool>* call = guard::current_call();
    detail::write_in_runs(
        s_, work, keys, created, *lease, [&](size_t i) { return publish(work[i], call); }, written);
    for (size_t i = 0; i < work.size(); ++i) out[work[i].page] = std::move(written[i]);
  } else {
    write_whole(work, keys, created, *lease, opened, out);
  }
  for (const Status& s : out) {
    if (!s.ok()) bump(s_.counters.put_failures);
  }
  // Published pages are indexed as just used, the last of the batch first: engines put a
  // prompt's pages in prefix order, and a later page is worth nothing once an earlier one is
  // gone, so the earlier ones are the more recently used (evicted after them). Bytes reserved
  // for pages that were not published, and those of pages a publish replaced, go back to the
  // budget.
  uint64_t give_back = 0;
  for (auto it = work.rbegin(); it != work.rend(); ++it) {
    const auto& w = *it;
    const uint64_t bytes = s_.capacity.charge(object_bytes(w.payload));
    if (out[w.page].ok()) {
      const std::optional<uint64_t> old =
          s_.index.put({w.route.key_hash, static_cast<uint32_t>(w.route.base), bytes});
      if (old) give_back += *old;
    } else {
      give_back += bytes;
    }
  }
  if (reserved != 0)
    s_.capacity.release(give_back).ignore_error();  // drift only: healed on restart
}

// Pages written whole, one transfer per object (an object store uploads an object in one
// request; memory): in chunks of pages that grow from 1 MiB to 16 MiB, so that while the
// backend writes one chunk this thread encodes the next.
void PageFiles::write_whole(std::vector<detail::PageWork<ConstBuffer>>& work,
                            std::span<const std::string_view> keys, uint64_t created,
                            const HeaderPool::Lease& lease, std::vector<Result<Target>>& opened,
                            std::span<Status> out) {
  struct Chunk {
    std::vector<size_t> pages;  // indexes into `work`
    Result<Transfer> xfer = Transfer();
    Status error;  // the chunk's request could not be made or posted
  };
  std::vector<Chunk> chunks;
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
      if (Status st = s_.encode_put_header(w, keys[w.page], created, lease.block(next)); !st.ok()) {
        out[w.page] = std::move(st);  // its target is dropped unpublished
        continue;
      }
      const uint64_t padded = object_bytes(w.payload) - kHeaderBytes;

      c.pages.push_back(next);
      w.first_desc = mem.size();
      mem.push_back(MemDesc{lease.block(next).data(), kHeaderBytes});
      sto.push_back(StorageDesc{&w.target, 0, kHeaderBytes});
      if (through_staging(w.io)) {
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
          mem.push_back(MemDesc{s_.zeros.data(), padded - w.payload});
          sto.push_back(StorageDesc{&w.target, off, padded - w.payload});
        }
      }
      w.desc_count = mem.size() - w.first_desc;
      bytes += w.payload;
    }
    chunk_target = std::min<uint64_t>(chunk_target * 2, 16 << 20);
    if (mem.empty()) continue;
    c.xfer = s_.agent.make_request(TransferOp::kWrite, mem, sto);
    c.error = c.xfer.ok() ? c.xfer->post() : c.xfer.status();
  }

  for (Chunk& c : chunks) {
    if (c.error.ok() && c.xfer->valid()) c.xfer->wait();
    for (size_t i : c.pages) {
      auto& w = work[i];
      Status st = c.error;
      if (st.ok()) st = s_.page_result(*c.xfer, w);
      out[w.page] = st.ok() ? publish(w, guard::current_call()) : std::move(st);
    }
  }
}

Status PageFiles::publish(detail::PageWork<ConstBuffer>& w, const std::atomic<bool>* call) {
  // A call whose caller has gone (its deadline passed) publishes nothing: the temporary goes
  // with the target.
  if (guard::call_abandoned(call)) {
    return deadline_exceeded_error("the call's deadline passed before the page was published");
  }
  KVTIER_RETURN_IF_ERROR(w.target.publish(PublishOptions{.durable = s_.config.fsync}));
  bump(s_.counters.put_pages);
  bump(s_.counters.put_bytes, w.payload);
  s_.count_io(w);
  return ok_status();
}

// The files layout evicts the least recently used pages this process knows of, and learns
// others' pages by listing the namespace. Its use order knows only this process's reads: a
// page another store on this host read since (its read mark) is spared once, as the most
// recently used.
Status PageFiles::reserve(uint64_t need) {
  catch_up();  // not a victim to choose: another store removed it
  std::vector<PageIndex::Page> victims;
  StoreCapacity::Evictor e;
  e.choose = [&](uint64_t short_by) {
    victims.clear();
    uint64_t freeing = 0;
    // At most one pass over the index: readers marking pages as fast as they are spared
    // cannot hold a writer.
    size_t spares_left = s_.index.pages();
    while (freeing < short_by) {
      std::optional<PageIndex::Page> victim = s_.index.pop_oldest();
      if (!victim) break;
      if (read_marks_ && spares_left > 0 && read_marks_->take_others(victim->hash)) {
        --spares_left;
        s_.index.put(*victim);
        bump(s_.counters.kept_for_others);
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
      Status st = s_.agent.remove(s_.router.page_path(victim.base, victim.hash));
      if (st.ok()) {
        *freed += victim.bytes;
        if (read_marks_) read_marks_->clear(victim.hash);
        bump(s_.counters.evicted_pages);
        bump(s_.counters.evicted_bytes, victim.bytes);
      } else if (st.code() != StatusCode::kNotFound && failed.ok()) {
        failed = st.with_context("evicting a page");
      }
      // kNotFound: another process removed it and gave its bytes back. Gone either way, and
      // out of the index (pop_oldest), unless the removal failed.
      if (st.ok() || st.code() == StatusCode::kNotFound)
        s_.capacity.evictions().add({&victim.hash, 1});
      // The other stores' indexes drop it (at once: one that indexes it again after a read
      // misses it, and then puts it, keeps it).
      if (st.ok() && gone_) gone_->append({&victim.hash, 1});
    }
    return failed;
  };
  e.relearn = [&]() -> Result<bool> {
    // Every page this process knew of is gone: learn the ones others wrote.
    KVTIER_RETURN_IF_ERROR(scan_index(/*as_recent=*/false));
    return s_.index.pages() != 0;
  };
  e.none_left = "there is nothing left to evict";
  return s_.capacity.reserve(need, e);
}

Status PageFiles::scan_index(bool as_recent) {
  const NamespaceSpec& ns = s_.config.ns;
  // With a fixed page geometry every object has the same size: names alone are enough (one
  // getdents per directory, no stat per page).
  const bool fixed = ns.piece_bytes != 0;
  const uint64_t fixed_bytes = fixed ? object_bytes(ns.piece_bytes * ns.pieces_per_page) : 0;
  struct Found {
    PageIndex::Page page;
    uint64_t mtime_ns;
  };
  std::vector<Found> found;
  for (size_t b = 0; b < s_.router.base_count(); ++b) {
    KVTIER_RETURN_IF_ERROR(s_.for_each_fanout(
        b, /*with_details=*/!fixed, [&](const std::string&, const std::vector<ObjectInfo>& pages) {
          for (const ObjectInfo& e : pages) {
            const std::optional<Hash128> h = parse_hash_hex(e.name);
            if (h && (fixed || e.size > kHeaderBytes)) {
              found.push_back(
                  {{*h, static_cast<uint32_t>(b), s_.capacity.charge(fixed ? fixed_bytes : e.size)},
                   e.mtime_ns});
            }
          }
          return ok_status();
        }));
  }
  if (as_recent) {
    std::sort(found.begin(), found.end(),
              [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
    for (const Found& f : found) s_.index.put(f.page);
  } else {
    for (const Found& f : found) s_.index.put_cold(f.page);
  }
  return ok_status();
}

void PageFiles::open_for_read(detail::ReadWindow& rw, std::span<Status> out, bool trust_size) {
  std::vector<TargetSpec> specs;
  specs.reserve(rw.work.size());
  for (const auto& w : rw.work) {
    TargetSpec spec;
    spec.path = w.route.path;
    spec.direct = opens_direct(w.io);
    if (trust_size) spec.expected_size = object_bytes(w.payload);
    specs.push_back(std::move(spec));
  }
  std::vector<Result<Target>> opened = s_.agent.open_targets(specs);

  rw.reading.reserve(rw.work.size());
  for (size_t i = 0; i < rw.work.size(); ++i) {
    auto& w = rw.work[i];
    if (!opened[i].ok()) {
      out[w.page] = std::move(opened[i]).status();
      continue;
    }
    w.target = std::move(opened[i]).value();
    w.io_target = &w.target;
    const uint64_t size = w.target.size();
    w.stored_bytes = size;
    if (size < kHeaderBytes) {
      rw.reject(w.page, detail::Reject::kTorn);
      out[w.page] = corrupt_error(
          fmt::format("'{}' is {} bytes, shorter than a page header", w.route.path, size));
      continue;
    }
    w.header_only = size != object_bytes(w.payload);
    rw.reading.push_back(&w);
  }
}

}  // namespace kvtier
