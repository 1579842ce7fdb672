#include "kvtier/store/inspect.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>

#include "kvtier/backends/builtin.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/store/store.h"
#include "ledger.h"
#include "namespace_walk.h"
#include "object_io.h"
#include "page_format.h"
#include "routing.h"

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

// Walks <base>/kvtier/<ns>/<xx>/<page> for every base, filling summaries and (optionally) the
// list of pages.
// `progress`, when given, is told of each page found and may stop the walk (kCancelled).
Status walk(Agent& agent, const StoreLocation& loc, Inventory* inv, std::vector<PageEntry>* pages,
            const ListProgress* progress = nullptr) {
  uint64_t found_pages = 0;
  for (const std::string& base : loc.bases) {
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
      inv->pages += ns.pages;
      inv->bytes += ns.bytes;
      inv->temp_files += ns.temp_files;
      inv->namespaces.push_back(std::move(ns));
    }
  }
  return ok_status();
}

Status verify_page(Agent& agent, const PageEntry& p, AlignedBuffer& buf) {
  KVTIER_ASSIGN_OR_RETURN(Target t,
                          agent.open_target(TargetSpec{p.path, TargetMode::kRead, 0, {}}));
  if (t.size() < page::kHeaderBytes) {
    return corrupt_error(fmt::format("{} bytes, shorter than a page header", t.size()));
  }
  KVTIER_RETURN_IF_ERROR(
      object_io::transfer_range(agent, TransferOp::kRead, t, buf.data(), 0, page::kHeaderBytes));
  KVTIER_ASSIGN_OR_RETURN(
      page::Header h,
      page::decode(std::span<const std::byte, page::kHeaderBytes>(buf.data(), page::kHeaderBytes)));
  if (h.namespace_id.hex() != p.namespace_id) {
    return corrupt_error(
        fmt::format("belongs to namespace {}, found in {}", h.namespace_id.hex(), p.namespace_id));
  }
  if (h.key_hash.hex() != p.name) {
    return corrupt_error(
        fmt::format("holds key hash {}, stored under {}", h.key_hash.hex(), p.name));
  }
  // The size first: the payload is read by the header's length.
  KVTIER_RETURN_IF_ERROR(page::verify_object(h, t.size(), std::nullopt));
  // Read in units of whole checksum chunks; hash each chunk as it arrives.
  static_assert(kVerifyChunk % page::kChecksumChunkBytes == 0);
  std::vector<uint64_t> sums;
  sums.reserve(page::chunk_count(h.payload_bytes));
  for (uint64_t off = 0; off < h.payload_bytes; off += kVerifyChunk) {
    const uint64_t n = std::min(kVerifyChunk, h.payload_bytes - off);
    KVTIER_RETURN_IF_ERROR(object_io::transfer_range(agent, TransferOp::kRead, t, buf.data(),
                                                     page::kHeaderBytes + off, n));
    // The window starts on a chunk boundary, so its chunks are the page's.
    const ConstBuffer window{buf.data(), n};
    for (size_t c = 0; c < page::chunk_count(n); ++c) {
      sums.push_back(page::chunk_checksum(std::span<const ConstBuffer>(&window, 1), n, c));
    }
  }
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

Result<uint64_t> sweep_temporaries(const StoreLocation& location, uint64_t min_age_s) {
  if (location.storage_class != StorageClass::kFile) return uint64_t{0};
  KVTIER_ASSIGN_OR_RETURN(Agent agent, agent_for(location));
  Inventory inv;
  KVTIER_RETURN_IF_ERROR(walk(agent, location, &inv, nullptr));
  uint64_t removed = 0;
  for (const NamespaceSummary& ns : inv.namespaces) {
    if (ns.temp_files == 0) continue;
    KVTIER_ASSIGN_OR_RETURN(
        size_t n,
        agent.sweep_temporaries(ns.dir + "/" + std::string(routing::kTempDir), min_age_s));
    removed += n;
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
      report.problems.push_back(VerifyProblem{p.path, p.namespace_id, std::move(st), p.bytes});
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

}  // namespace kvtier
