#include "kvtier/store/inspect.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "capacity/footprint.h"
#include "capacity/ledger.h"
#include "capacity/page_index.h"
#include "format/page_format.h"
#include "format/sealed_page.h"
#include "format/segment_format.h"
#include "inspect/allocation.h"
#include "inspect/walk.h"
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

using inspect::agent_for;
using inspect::seg_dir_of;
using inspect::walk;
using PageEntry = PageListing;

// Pages removed per remove_many call (object stores delete up to 1000 in one request).
constexpr size_t kRemovalGroup = 1000;

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

}  // namespace

Result<Inventory> take_inventory(const StoreLocation& location) {
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  Inventory inv;
  KVTIER_RETURN_IF_ERROR(walk(agent, location, &inv, nullptr));
  if (location.storage_class == StorageClass::kFile) {
    for (NamespaceSummary& ns : inv.namespaces) {
      Result<inspect::Allocation> a = inspect::allocation_of(ns.dir);
      if (!a.ok() && a.status().code() == StatusCode::kNotFound) continue;  // cleared meanwhile
      KVTIER_RETURN_IF_ERROR(a.status());
      ns.allocated_bytes = a->page_bytes + a->metadata_bytes;
      ns.metadata_bytes = a->metadata_bytes;
      inv.allocated_bytes += ns.allocated_bytes;
      inv.metadata_bytes += ns.metadata_bytes;
    }
  }
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

  // What a capacity ledger charges for a file (capacity/footprint.h), by namespace directory.
  std::map<std::string, uint64_t> units;
  const auto unit_of = [&](const std::string& dir) {
    auto [it, made] = units.try_emplace(dir, 0);
    if (made) it->second = footprint::allocation_unit(dir);
    return it->second;
  };
  std::map<std::string, uint64_t> freed;  // namespace dir -> bytes, as charged
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
        freed[pages[i].namespace_dir] +=
            footprint::file_bytes(pages[i].bytes, unit_of(pages[i].namespace_dir));
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
    std::optional<std::map<std::string, uint64_t>> now;  // namespace dir -> bytes, as charged
    for (const auto& [dir, bytes] : freed) {
      const std::string usage = dir + "/" + std::string(routing::kUsageFile);
      if (::access(usage.c_str(), F_OK) != 0) continue;
      if (!now) {
        now.emplace();
        Inventory inv;
        std::vector<PageListing> left;
        if (walk(agent, location, &inv, &left).ok()) {
          // Page files as a store charges them; segment and summary files likewise.
          for (const PageListing& p : left) {
            if (p.summary.empty()) {
              (*now)[p.namespace_dir] += footprint::file_bytes(p.bytes, unit_of(p.namespace_dir));
            }
          }
          for (const NamespaceSummary& ns : inv.namespaces) {
            (*now)[ns.dir] += ns.segment_bytes +
                              2 * ns.segments * footprint::appended_file_bytes(0, unit_of(ns.dir));
          }
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

}  // namespace kvtier
