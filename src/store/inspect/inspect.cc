#include "kvtier/store/inspect.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "capacity/ledger.h"
#include "capacity/page_index.h"
#include "format/page_format.h"
#include "format/sealed_page.h"
#include "format/segment_format.h"
#include "kvtier/backends/builtin.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/clock.h"
#include "kvtier/store/store.h"
#include "naming/clear_generation.h"
#include "naming/namespace_walk.h"
#include "naming/object_io.h"
#include "naming/routing.h"
#include "naming/store_root.h"

namespace kvtier {
namespace {

constexpr uint64_t kVerifyChunk = 4 << 20;
constexpr uint64_t kMaxManifest = 1 << 20;
// Pages removed per remove_many call (object stores delete up to 1000 in one request).
constexpr size_t kRemovalGroup = 1000;

Result<Agent> agent_for(const StoreLocation& loc) {
  AgentConfig ac;
  ac.backend = loc.backend;
  ac.storage_class = loc.storage_class;
  ac.params = loc.params;
  ac.registry = &builtin_backends();
  return Agent::create(ac);
}

using PageEntry = PageListing;

constexpr uint64_t kMaxSummary = uint64_t{1} << 30;

std::string seg_dir_of(const std::string& ns_dir) {
  return ns_dir + "/" + std::string(segment::kDir);
}

// The live records of one namespace directory's segments: every summary's entries in time
// order, the latest put or remove of a key deciding (what a store's index holds on open).
// Counts the segment files and their bytes into `ns`.
Status walk_segments(Agent& agent, NamespaceSummary& ns, std::vector<PageEntry>* pages,
                     uint64_t* found_pages, const ListProgress* progress) {
  const std::string dir = seg_dir_of(ns.dir);
  std::vector<std::string> names;
  Status st = agent.list(dir, ListOptions{.with_details = true}, [&](const ObjectInfo& e) {
    if (e.is_dir) return ok_status();
    if (segment::is_segment_file(e.name)) ns.segment_bytes += e.size;
    if (e.name.ends_with(segment::kSegmentSuffix)) ++ns.segments;
    if (std::optional<std::string> n = segment::name_of_summary(e.name)) names.push_back(*n);
    return ok_status();
  });
  if (st.code() == StatusCode::kNotFound) return ok_status();
  KVTIER_RETURN_IF_ERROR(st);
  std::sort(names.begin(), names.end());
  struct Found {
    segment::Entry entry;
    size_t name;
  };
  std::vector<Found> found;
  for (size_t n = 0; n < names.size(); ++n) {
    Result<std::string> bytes = object_io::read_object(
        agent, dir + "/" + names[n] + std::string(segment::kSummarySuffix), kMaxSummary);
    if (bytes.status().code() == StatusCode::kNotFound) continue;  // removed meanwhile
    KVTIER_RETURN_IF_ERROR(bytes.status());
    std::vector<Found> entries;
    bool ours = true;
    for (size_t o = 0; o + segment::kEntryBytes <= bytes->size(); o += segment::kEntryBytes) {
      const std::optional<segment::Entry> e =
          segment::decode_entry(std::span<const std::byte, segment::kEntryBytes>(
              reinterpret_cast<const std::byte*>(bytes->data() + o), segment::kEntryBytes));
      if (!e) break;  // a torn tail
      if (e->type == segment::EntryType::kBegin) ours = e->key_hash.hex() == ns.id;
      if (e->type == segment::EntryType::kPut || e->type == segment::EntryType::kRemove) {
        entries.push_back({*e, n});
      }
    }
    if (ours) found.insert(found.end(), entries.begin(), entries.end());
  }
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.entry.time_ns < b.entry.time_ns;
  });
  std::map<std::pair<uint64_t, uint64_t>, Found> live;
  for (const Found& f : found) {
    const auto key = std::make_pair(f.entry.key_hash.high, f.entry.key_hash.low);
    if (f.entry.type == segment::EntryType::kRemove) {
      live.erase(key);
    } else {
      live[key] = f;
    }
  }
  std::vector<uint64_t> per_segment(names.size(), 0);
  for (const auto& [key, f] : live) ++per_segment[f.name];
  const uint64_t namespace_pages = live.size();
  for (const auto& [key, f] : live) {
    ++ns.pages;
    ns.bytes += f.entry.record_bytes;
    if (pages) {
      PageEntry p;
      p.path = dir + "/" + names[f.name] + std::string(segment::kSegmentSuffix);
      p.summary = dir + "/" + names[f.name] + std::string(segment::kSummarySuffix);
      p.namespace_id = ns.id;
      p.namespace_dir = ns.dir;
      p.name = f.entry.key_hash.hex();
      p.bytes = f.entry.record_bytes;
      p.mtime_ns = f.entry.time_ns;
      p.offset = f.entry.offset;
      p.header_bytes = f.entry.header_bytes;
      p.payload_bytes = f.entry.payload_bytes;
      p.segment_pages = per_segment[f.name];
      p.namespace_pages = namespace_pages;
      pages->push_back(std::move(p));
    }
    if (progress && *progress && !(*progress)(++*found_pages)) {
      return cancelled_error("listing stopped");
    }
  }
  return ok_status();
}

// Walks <base>/kvtier/<ns>/<xx>/<page> for every base, filling summaries and (optionally) the
// list of pages.
// `progress`, when given, is told of each page found and may stop the walk (kCancelled).
Status walk(Agent& agent, const StoreLocation& loc, Inventory* inv, std::vector<PageEntry>* pages,
            const ListProgress* progress = nullptr) {
  uint64_t found_pages = 0;
  for (const std::string& given : loc.bases) {
    // As a store opens it: no symbolic link in the paths built on it (naming/store_root.h).
    const std::string base =
        loc.storage_class == StorageClass::kFile ? store_root::opened_as(given) : given;
    if (loc.storage_class == StorageClass::kFile) {
      Result<ObjectInfo> b = agent.stat(base);
      if (!b.ok()) return b.status();
      if (!b->is_dir) return invalid_argument_error(fmt::format("'{}' is not a directory", base));
    }
    const std::string root = base + "/" + std::string(routing::kRootDir);
    std::vector<std::string> ns_ids;
    Status st = agent.list(root, ListOptions{}, [&](const ObjectInfo& e) {
      if (e.is_dir && routing::is_page_name(e.name)) ns_ids.push_back(e.name);
      return ok_status();
    });
    if (st.code() == StatusCode::kNotFound) continue;
    KVTIER_RETURN_IF_ERROR(st);
    std::sort(ns_ids.begin(), ns_ids.end());
    for (const std::string& id : ns_ids) {
      NamespaceSummary ns;
      ns.id = id;
      ns.dir = root + "/" + id;
      Result<std::string> manifest = object_io::read_object(
          agent, ns.dir + "/" + std::string(routing::kManifest), kMaxManifest);
      if (manifest.ok()) ns.manifest_json = std::move(manifest).value();
      KVTIER_ASSIGN_OR_RETURN(
          ns.temp_files, agent.count_temporaries(ns.dir + "/" + std::string(routing::kTempDir)));
      KVTIER_RETURN_IF_ERROR(walk_namespace(
          agent, ns.dir, /*with_details=*/true,
          [&](const std::string& dir, const std::vector<ObjectInfo>& found) {
            for (const ObjectInfo& e : found) {
              ++ns.pages;
              ns.bytes += e.size;
              if (pages) {
                pages->push_back(
                    PageEntry{dir + "/" + e.name, id, ns.dir, e.name, e.size, e.mtime_ns});
              }
              if (progress && *progress && !(*progress)(++found_pages)) {
                return cancelled_error("listing stopped");
              }
            }
            return ok_status();
          },
          &ns.other_files));
      KVTIER_RETURN_IF_ERROR(walk_segments(agent, ns, pages, &found_pages, progress));
      inv->pages += ns.pages;
      inv->bytes += ns.bytes;
      inv->temp_files += ns.temp_files;
      inv->namespaces.push_back(std::move(ns));
    }
  }
  return ok_status();
}

// The namespace and key hash a page's header names against where it was found (`stored`:
// how the listing named it, "stored under" a page file, "its summary says" for a record).
Status check_identity(const page::Header& h, const PageEntry& p, std::string_view stored) {
  if (h.namespace_id.hex() != p.namespace_id) {
    return corrupt_error(
        fmt::format("belongs to namespace {}, found in {}", h.namespace_id.hex(), p.namespace_id));
  }
  if (h.key_hash.hex() != p.name) {
    return corrupt_error(fmt::format("holds key hash {}, {} {}", h.key_hash.hex(), stored, p.name));
  }
  return ok_status();
}

// Reads the header of the page starting at `at` in `t` (its first `header_bytes`), plain or
// sealed (`*sealed` says which: a sealed page's tags need its key, which inspection has not).
Result<page::Header> read_header(Agent& agent, Target& t, AlignedBuffer& buf, uint64_t at,
                                 uint64_t header_bytes, bool* sealed) {
  KVTIER_RETURN_IF_ERROR(
      object_io::transfer_range(agent, TransferOp::kRead, t, buf.data(), at, header_bytes));
  const std::span<const std::byte, page::kHeaderBytes> block(buf.data(), page::kHeaderBytes);
  *sealed = page::is_sealed(block);
  if (!*sealed) return page::decode(block);
  page::SealedView view;
  return page::decode_sealed(block, view);
}

// The payload's chunk checksums, the payload starting at `at` in `t`: read in units of whole
// checksum chunks, each chunk hashed as it arrives.
Result<std::vector<uint64_t>> payload_checksums(Agent& agent, Target& t, AlignedBuffer& buf,
                                                uint64_t at, uint64_t payload_bytes) {
  static_assert(kVerifyChunk % page::kChecksumChunkBytes == 0);
  std::vector<uint64_t> sums;
  sums.reserve(page::chunk_count(payload_bytes));
  for (uint64_t off = 0; off < payload_bytes; off += kVerifyChunk) {
    const uint64_t n = std::min(kVerifyChunk, payload_bytes - off);
    KVTIER_RETURN_IF_ERROR(
        object_io::transfer_range(agent, TransferOp::kRead, t, buf.data(), at + off, n));
    // The window starts on a chunk boundary, so its chunks are the page's.
    const ConstBuffer window{buf.data(), n};
    for (size_t c = 0; c < page::chunk_count(n); ++c) {
      sums.push_back(page::chunk_checksum(std::span<const ConstBuffer>(&window, 1), n, c));
    }
  }
  return sums;
}

// Checks a record of the segment layout as a get would: header, namespace, key hash, the
// summary's sizes, payload checksum.
Status verify_record(Agent& agent, const PageEntry& p, AlignedBuffer& buf) {
  KVTIER_ASSIGN_OR_RETURN(Target t,
                          agent.open_target(TargetSpec{p.path, TargetMode::kRead, 0, {}}));
  if (p.offset + p.bytes > t.size() || p.header_bytes == 0 || p.header_bytes > p.bytes ||
      p.header_bytes > page::kHeaderBytes) {
    return corrupt_error(fmt::format("record [{}, +{}) lies beyond the end of the segment ({})",
                                     p.offset, p.bytes, t.size()));
  }
  bool sealed = false;
  KVTIER_ASSIGN_OR_RETURN(page::Header h,
                          read_header(agent, t, buf, p.offset, p.header_bytes, &sealed));
  KVTIER_RETURN_IF_ERROR(check_identity(h, p, "its summary says"));
  if (h.header_bytes != p.header_bytes || h.payload_bytes != p.payload_bytes) {
    return corrupt_error(
        fmt::format("header of {} bytes and payload of {}; its summary says {} and {}",
                    h.header_bytes, h.payload_bytes, p.header_bytes, p.payload_bytes));
  }
  KVTIER_RETURN_IF_ERROR(page::verify_record(h, p.bytes, std::nullopt));
  if (sealed) return ok_status();  // its tags check the payload, with the key a get has
  KVTIER_ASSIGN_OR_RETURN(
      std::vector<uint64_t> sums,
      payload_checksums(agent, t, buf, p.offset + h.header_bytes, h.payload_bytes));
  return page::verify_record(h, p.bytes, sums);
}

// Writes remove entries for `hashes` in a summary of a writer of its own in `ns_dir`.
Status forget_records(Agent& agent, const std::string& ns_dir, const std::string& ns_id,
                      const std::vector<Hash128>& hashes) {
  std::random_device rd;
  uint64_t writer = 0;
  while (writer == 0) writer = (uint64_t{rd()} << 32) ^ rd() ^ wall_ns();
  const uint64_t now = wall_ns();
  std::string bytes((hashes.size() + 2) * segment::kEntryBytes, '\0');
  auto put = [&](size_t i, const segment::Entry& e) {
    segment::encode_entry(e, std::span<std::byte, segment::kEntryBytes>(
                                 reinterpret_cast<std::byte*>(bytes.data()) + i * 64, 64));
  };
  Hash128 ns;
  if (std::optional<Hash128> id = parse_hash_hex(ns_id)) ns = *id;
  put(0, {segment::EntryType::kBegin, 0, ns, writer, 0, 0, now});
  for (size_t i = 0; i < hashes.size(); ++i) {
    put(i + 1, {segment::EntryType::kRemove, 0, hashes[i], 0, 0, 0, now});
  }
  put(hashes.size() + 1, {segment::EntryType::kSeal, 0, {}, 0, 0, 0, now});
  return object_io::write_object(agent,
                                 seg_dir_of(ns_dir) + "/" + segment::segment_name(writer, 0) +
                                     std::string(segment::kSummarySuffix),
                                 ns_dir + "/" + std::string(routing::kTempDir), bytes);
}

Status verify_page(Agent& agent, const PageEntry& p, AlignedBuffer& buf) {
  if (!p.summary.empty()) return verify_record(agent, p, buf);
  KVTIER_ASSIGN_OR_RETURN(Target t,
                          agent.open_target(TargetSpec{p.path, TargetMode::kRead, 0, {}}));
  if (t.size() < page::kHeaderBytes) {
    return corrupt_error(fmt::format("{} bytes, shorter than a page header", t.size()));
  }
  bool sealed = false;
  KVTIER_ASSIGN_OR_RETURN(page::Header h,
                          read_header(agent, t, buf, 0, page::kHeaderBytes, &sealed));
  KVTIER_RETURN_IF_ERROR(check_identity(h, p, "stored under"));
  // The size first: the payload is read by the header's length.
  KVTIER_RETURN_IF_ERROR(page::verify_object(h, t.size(), std::nullopt));
  if (sealed) return ok_status();  // its tags check the payload, with the key a get has
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint64_t> sums,
                          payload_checksums(agent, t, buf, page::kHeaderBytes, h.payload_bytes));
  return page::verify_object(h, t.size(), sums);
}

}  // namespace

Result<Inventory> take_inventory(const StoreLocation& location) {
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  Inventory inv;
  KVTIER_RETURN_IF_ERROR(walk(agent, location, &inv, nullptr));
  return inv;
}

Result<std::vector<PageListing>> list_pages(const StoreLocation& location,
                                            std::string_view namespace_prefix,
                                            const ListProgress& progress) {
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  Inventory inv;
  std::vector<PageEntry> pages;
  KVTIER_RETURN_IF_ERROR(walk(agent, location, &inv, &pages, &progress));
  std::erase_if(pages,
                [&](const PageEntry& p) { return !p.namespace_id.starts_with(namespace_prefix); });
  std::stable_sort(pages.begin(), pages.end(),
                   [](const PageEntry& a, const PageEntry& b) { return a.mtime_ns < b.mtime_ns; });
  return pages;
}

Result<RemovalReport> remove_pages(const StoreLocation& location,
                                   std::span<const PageListing> pages,
                                   const RemovalProgress& progress) {
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  RemovalReport report;
  // Records of the segment layout first: whole segments, else remove entries.
  std::map<std::string, std::vector<size_t>> by_segment;
  std::vector<size_t> files;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pages[i].summary.empty()) {
      files.push_back(i);
    } else {
      by_segment[pages[i].path].push_back(i);
    }
  }
  std::map<std::pair<std::string, std::string>, std::vector<Hash128>> forget;  // (dir, id)
  for (const auto& [seg, idx] : by_segment) {
    const PageListing& first = pages[idx.front()];
    if (idx.size() >= first.segment_pages) {
      const std::string both[2] = {first.path, first.summary};
      std::vector<Status> removed = agent.remove_many(both);
      Status st = removed[0].code() == StatusCode::kNotFound ? removed[1] : removed[0];
      if (st.ok() || st.code() == StatusCode::kNotFound) {
        report.pages += idx.size();
        for (size_t i : idx) report.bytes += pages[i].bytes;
      } else if (report.first_error.ok()) {
        report.first_error = st;
      }
      continue;
    }
    for (size_t i : idx) {
      if (std::optional<Hash128> h = parse_hash_hex(pages[i].name)) {
        forget[{pages[i].namespace_dir, pages[i].namespace_id}].push_back(*h);
        ++report.pages;
        report.bytes += pages[i].bytes;
      }
    }
  }
  // Namespaces whose every live record was listed for removal: everything in their segment
  // directories goes, superseded copies and remove-only summaries included.
  std::map<std::string, std::pair<uint64_t, uint64_t>> per_namespace;  // dir -> (listed, live)
  for (const auto& [seg, idx] : by_segment) {
    auto& n = per_namespace[pages[idx.front()].namespace_dir];
    n.first += idx.size();
    n.second = pages[idx.front()].namespace_pages;
  }
  for (const auto& [ns_dir, n] : per_namespace) {
    if (n.first < n.second) continue;
    const std::string& dir = ns_dir;  // lambdas cannot capture a structured binding
    for (auto it = forget.begin(); it != forget.end();) {
      it = it->first.first == dir ? forget.erase(it) : std::next(it);
    }
    std::vector<std::string> rest;
    Status st = agent.list(seg_dir_of(dir), ListOptions{}, [&](const ObjectInfo& e) {
      if (segment::is_segment_file(e.name)) rest.push_back(seg_dir_of(dir) + "/" + e.name);
      return ok_status();
    });
    for (const Status& r : agent.remove_many(rest)) {
      if (!r.ok() && r.code() != StatusCode::kNotFound && st.ok()) st = r;
    }
    if (!st.ok() && st.code() != StatusCode::kNotFound && report.first_error.ok()) {
      report.first_error = st;
    }
  }
  for (const auto& [where, hashes] : forget) {
    Status st = forget_records(agent, where.first, where.second, hashes);
    if (!st.ok() && report.first_error.ok()) report.first_error = st;
  }
  std::vector<PageListing> file_pages;
  for (size_t i : files) file_pages.push_back(pages[i]);
  pages = file_pages;

  std::map<std::string, uint64_t> freed;  // namespace dir -> bytes
  for (size_t begin = 0; begin < pages.size();) {
    const size_t end = std::min(pages.size(), begin + kRemovalGroup);
    std::vector<std::string> paths;
    for (size_t i = begin; i < end; ++i) paths.push_back(pages[i].path);
    std::vector<Status> removed = agent.remove_many(paths);
    for (size_t i = begin; i < end; ++i) {
      const Status& st = removed[i - begin];
      if (st.ok()) {
        ++report.pages;
        report.bytes += pages[i].bytes;
        freed[pages[i].namespace_dir] += pages[i].bytes;
      } else if (st.code() != StatusCode::kNotFound && report.first_error.ok()) {
        report.first_error = st;
      }
    }
    begin = end;
    if (progress && !progress(end, pages.size()) && end < pages.size()) {
      report.stopped = true;
      break;
    }
  }
  // Namespaces with a capacity ledger get the bytes back (FILE stores only).
  if (location.storage_class == StorageClass::kFile) {
    // Alone, a ledger is reset from a fresh count; with stores open, given the bytes back.
    // One walk counts every namespace (taken when the first ledger needs it).
    std::optional<std::map<std::string, uint64_t>> now;  // namespace dir -> bytes
    for (const auto& [dir, bytes] : freed) {
      const std::string usage = dir + "/" + std::string(routing::kUsageFile);
      if (::access(usage.c_str(), F_OK) != 0) continue;
      if (!now) {
        now.emplace();
        Inventory inv;
        if (walk(agent, location, &inv, nullptr).ok()) {
          for (const NamespaceSummary& ns : inv.namespaces) (*now)[ns.dir] = ns.bytes;
        }
      }
      const auto it = now->find(dir);
      KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Ledger> ledger,
                              Ledger::open(dir, it == now->end() ? 0 : it->second));
      if (!ledger->reset_on_open()) KVTIER_RETURN_IF_ERROR(ledger->release(bytes));
    }
  }
  return report;
}

Result<RemovalReport> clear_namespace(const StoreLocation& location, std::string_view namespace_id,
                                      std::span<const PageListing> pages,
                                      const RemovalProgress& progress) {
  if (!routing::is_page_name(namespace_id) || location.bases.empty()) {
    return invalid_argument_error(fmt::format("'{}' is not a namespace id", namespace_id));
  }
  for (const PageListing& p : pages) {
    if (p.namespace_id != namespace_id) {
      return invalid_argument_error(
          fmt::format("'{}' is not a page of namespace {}", p.path, namespace_id));
    }
  }
  KVTIER_ASSIGN_OR_RETURN(RemovalReport report, remove_pages(location, pages, progress));
  // The generation lives under the first base, as the store's router puts it.
  const std::string& first = location.bases.front();
  const std::string ns_dir = fmt::format(
      "{}/{}/{}",
      location.storage_class == StorageClass::kFile ? store_root::opened_as(first) : first,
      routing::kRootDir, namespace_id);
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  Status published =
      clear_generation::publish(agent, fmt::format("{}/{}", ns_dir, routing::kGenerationFile),
                                fmt::format("{}/{}", ns_dir, routing::kTempDir));
  if (!published.ok() && report.first_error.ok()) report.first_error = published;
  return report;
}

namespace {

// Segments no summary names: an upload whose summary failed or came too late for its
// caller's deadline (an object store), a writer killed between a segment and its summary.
// No store ever finds their records or reclaims them. A writer publishes the summary moments
// after the segment, so one older than `min_age_s` is abandoned (0: any, whatever its time).
Result<uint64_t> sweep_unnamed_segments(Agent& agent, const std::string& ns_dir,
                                        uint64_t min_age_s) {
  const std::string dir = seg_dir_of(ns_dir);
  std::set<std::string> named;
  std::vector<std::pair<std::string, uint64_t>> segments;  // name, modification time
  Status st = agent.list(dir, ListOptions{.with_details = true}, [&](const ObjectInfo& e) {
    if (e.is_dir) return ok_status();
    if (std::optional<std::string> n = segment::name_of_summary(e.name)) named.insert(*n);
    if (std::optional<std::string> n = segment::name_of_segment(e.name)) {
      segments.emplace_back(*n, e.mtime_ns);
    }
    return ok_status();
  });
  if (st.code() == StatusCode::kNotFound) return uint64_t{0};
  KVTIER_RETURN_IF_ERROR(st);
  const uint64_t now = wall_ns();
  std::vector<std::string> abandoned;
  for (const auto& [name, mtime] : segments) {
    // A time ahead of the clock (a server's, rounded up) is not old; age 0 asks for none.
    const bool old = min_age_s == 0 ||
                     (mtime != 0 && mtime <= now && (now - mtime) / 1'000'000'000 >= min_age_s);
    if (named.count(name) == 0 && old) {
      abandoned.push_back(dir + "/" + name + std::string(segment::kSegmentSuffix));
    }
  }
  uint64_t removed = 0;
  Status failed;
  for (const Status& r : agent.remove_many(abandoned)) {
    if (r.ok()) {
      ++removed;
    } else if (r.code() != StatusCode::kNotFound && failed.ok()) {
      failed = r;
    }
  }
  KVTIER_RETURN_IF_ERROR(failed);
  return removed;
}

}  // namespace

Result<uint64_t> sweep_temporaries(const StoreLocation& location, uint64_t min_age_s) {
  if (location.storage_class == StorageClass::kMemory) return uint64_t{0};
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  Inventory inv;
  KVTIER_RETURN_IF_ERROR(walk(agent, location, &inv, nullptr));
  uint64_t removed = 0;
  for (const NamespaceSummary& ns : inv.namespaces) {
    if (ns.temp_files != 0 && location.storage_class == StorageClass::kFile) {
      KVTIER_ASSIGN_OR_RETURN(
          size_t n,
          agent.sweep_temporaries(ns.dir + "/" + std::string(routing::kTempDir), min_age_s));
      removed += n;
    }
    if (ns.segments != 0) {
      KVTIER_ASSIGN_OR_RETURN(uint64_t n, sweep_unnamed_segments(agent, ns.dir, min_age_s));
      removed += n;
    }
  }
  return removed;
}

Result<VerifyReport> verify_store(const StoreLocation& location, const VerifyProgress& progress) {
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  Inventory inv;
  std::vector<PageEntry> pages;
  KVTIER_RETURN_IF_ERROR(walk(agent, location, &inv, &pages));
  KVTIER_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(kVerifyChunk));
  KVTIER_ASSIGN_OR_RETURN(Registration reg, agent.register_memory(buf.data(), buf.size()));
  VerifyReport report;
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageEntry& p = pages[i];
    ++report.pages;
    Status st = verify_page(agent, p, buf);
    if (st.ok()) {
      ++report.intact;
      report.bytes += p.bytes;
    } else if (st.code() != StatusCode::kNotFound) {  // removed meanwhile: not a problem
      report.problems.push_back(VerifyProblem{p.path, p.namespace_id, std::move(st), p.bytes, p});
    } else {
      --report.pages;
    }
    if (progress && !progress(i + 1, pages.size())) {
      report.stopped = true;
      break;
    }
  }
  return report;
}

Result<std::vector<uint32_t>> sealed_key_ids(const StoreLocation& location,
                                             std::span<const PageListing> pages) {
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  KVTIER_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(page::kHeaderBytes));
  KVTIER_ASSIGN_OR_RETURN(Registration reg, agent.register_memory(buf.data(), buf.size()));
  std::vector<uint32_t> ids(pages.size(), 0);
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageListing& p = pages[i];
    const bool record = !p.summary.empty();
    const uint64_t at = record ? p.offset : 0;
    const uint64_t header_bytes = record ? p.header_bytes : page::kHeaderBytes;
    if (header_bytes == 0 || header_bytes > page::kHeaderBytes) continue;
    Result<Target> t = agent.open_target(TargetSpec{p.path, TargetMode::kRead, 0, {}});
    if (!t.ok() || at + header_bytes > t->size()) continue;
    if (!object_io::transfer_range(agent, TransferOp::kRead, *t, buf.data(), at, header_bytes)
             .ok()) {
      continue;
    }
    const std::span<const std::byte, page::kHeaderBytes> block(buf.data(), page::kHeaderBytes);
    if (!page::is_sealed(block)) continue;
    page::SealedView view;
    if (page::decode_sealed(block, view).ok()) ids[i] = view.key_id;
  }
  return ids;
}

}  // namespace kvtier
