// Walking a store location without a Store (walk.h).
#include "inspect/walk.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "format/segment_format.h"
#include "kvtier/backends/builtin.h"
#include "naming/namespace_walk.h"
#include "naming/object_io.h"
#include "naming/routing.h"
#include "naming/store_root.h"

namespace kvtier::inspect {

Result<Agent> agent_for(const StoreLocation& loc) {
  AgentConfig ac;
  ac.backend = loc.backend;
  ac.storage_class = loc.storage_class;
  ac.params = loc.params;
  ac.registry = &builtin_backends();
  return Agent::create(ac);
}

std::string seg_dir_of(const std::string& ns_dir) {
  return ns_dir + "/" + std::string(segment::kDir);
}

namespace {

constexpr uint64_t kMaxManifest = 1 << 20;
constexpr uint64_t kMaxSummary = uint64_t{1} << 30;

// The live records of one namespace directory's segments: every summary's entries in time
// order, the latest put or remove of a key deciding (what a store's index holds on open).
// Counts the segment files and their bytes into `ns`.
Status walk_segments(Agent& agent, NamespaceSummary& ns, std::vector<PageListing>* pages,
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
      PageListing p;
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

}  // namespace

Status walk(Agent& agent, const StoreLocation& loc, Inventory* inv, std::vector<PageListing>* pages,
            const ListProgress* progress) {
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
                    PageListing{dir + "/" + e.name, id, ns.dir, e.name, e.size, e.mtime_ns});
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

}  // namespace kvtier::inspect
