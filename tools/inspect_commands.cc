// kvtier stat, verify, ls, gc and clear.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "commands.h"
#include "kvtier/store/inspect.h"
#include "kvtier/store/store.h"
#include "progress.h"

namespace kvtier::cli {
namespace {

Result<StoreLocation> location_of(const std::string& where, const char* command) {
  Result<StoreLocation> loc = parse_store_uri(where);
  if (!loc.ok()) fmt::print(stderr, "kvtier {}: {}\n", command, loc.status().to_string());
  return loc;
}

nlohmann::json manifest_of(const NamespaceSummary& ns) {
  if (ns.manifest_json.empty()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(ns.manifest_json, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

std::string describe(const nlohmann::json& m) {
  if (!m.is_object()) return "(no description)";
  auto str = [&](const char* k) {
    return m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : std::string("?");
  };
  auto num = [&](const char* k) {
    return m.contains(k) && m[k].is_number() ? m[k].get<uint64_t>() : uint64_t{0};
  };
  std::string tp = "tp replicated";
  if (m.contains("tp") && m["tp"].is_array()) {
    tp = fmt::format("tp {}/{}", m["tp"][0].get<uint64_t>(), m["tp"][1].get<uint64_t>());
  }
  std::string geometry = num("piece_bytes") != 0
                             ? fmt::format("{} x {} B", num("pieces_per_page"), num("piece_bytes"))
                             : "any size";
  return fmt::format("{} {} {} p{} {} {}", str("model"), str("dtype"), str("layout"),
                     num("page_tokens"), geometry, tp);
}

// Lists the pages with a running count on the bar; Ctrl-C stops the listing (kCancelled).
Result<std::vector<PageListing>> list_with_progress(const StoreLocation& loc, std::string_view ns,
                                                    bool quiet) {
  Progress bar("listing", 0, progress_wanted(quiet));
  return list_pages(loc, ns, [&](uint64_t found) {
    bar.update(found);
    return !interrupted();
  });
}

// Removes pages with a bar; Ctrl-C stops before the next group (report.stopped).
// Removes `pages`; with `clearing` (a namespace id), as a clear of that namespace, which every
// store open on it sees on its next call.
Result<RemovalReport> remove_with_progress(const StoreLocation& loc,
                                           std::span<const PageListing> pages, bool quiet,
                                           std::string_view clearing = {}) {
  Progress bar("removing", pages.size(), progress_wanted(quiet));
  auto progress = [&](uint64_t done, uint64_t) {
    bar.update(done);
    return !interrupted();
  };
  if (!clearing.empty()) return clear_namespace(loc, clearing, pages, progress);
  return remove_pages(loc, pages, progress);
}

// The tenant a command reads as: when --key-file or --tenant is given.
std::optional<TenantKeys> tenant_keys(const InspectOptions& o) {
  if (o.key_file.empty() && o.tenant.empty()) return std::nullopt;
  return TenantKeys{o.key_file, o.tenant};
}
std::string tenant_name(const TenantKeys& keys) {
  return keys.tenant.empty() ? "default" : keys.tenant;
}

// Keeps the tenant's pages of `pages` alone, in order; returns their key ids.
Result<std::vector<uint32_t>> keep_tenants(const StoreLocation& loc,
                                           std::vector<PageListing>& pages,
                                           const TenantKeys& keys) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<PageSeal> seals, page_seals(loc, pages, &keys));
  std::vector<PageListing> kept;
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (seals[i].owner != PageOwner::kTenant) continue;
    kept.push_back(std::move(pages[i]));
    ids.push_back(seals[i].key_id);
  }
  pages = std::move(kept);
  return ids;
}

// What `stat` counts of a tenant: its pages and their bytes, by key id; others' sealed pages
// and pages in the clear beside them.
struct TenantTally {
  uint64_t pages = 0;
  uint64_t bytes = 0;
  std::map<uint32_t, uint64_t> pages_by_key_id;
  uint64_t others = 0;
  uint64_t clear = 0;
};
Result<TenantTally> tally(const StoreLocation& loc, const TenantKeys& keys) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<PageListing> pages, list_pages(loc));
  KVTIER_ASSIGN_OR_RETURN(std::vector<PageSeal> seals, page_seals(loc, pages, &keys));
  TenantTally t;
  for (size_t i = 0; i < pages.size(); ++i) {
    switch (seals[i].owner) {
      case PageOwner::kTenant:
        ++t.pages;
        t.bytes += pages[i].bytes;
        ++t.pages_by_key_id[seals[i].key_id];
        break;
      case PageOwner::kOther:
        ++t.others;
        break;
      case PageOwner::kClear:
        ++t.clear;
        break;
      case PageOwner::kUnread:
        break;
    }
  }
  return t;
}

int interrupted_while_listing(const char* command) {
  fmt::print(stderr, "kvtier {}: interrupted while listing pages; nothing removed\n", command);
  return kExitInterrupted;
}

}  // namespace

int run_stat(const InspectOptions& o) {
  Result<StoreLocation> loc = location_of(o.location, "stat");
  if (!loc.ok()) return kExitUsage;
  Result<Inventory> inv = take_inventory(*loc);
  if (!inv.ok()) {
    fmt::print(stderr, "kvtier stat: {}\n", inv.status().to_string());
    return kExitUsage;
  }
  const std::optional<TenantKeys> keys = tenant_keys(o);
  std::optional<TenantTally> tenant;
  if (keys) {
    Result<TenantTally> t = tally(*loc, *keys);
    if (!t.ok()) {
      fmt::print(stderr, "kvtier stat: {}\n", t.status().to_string());
      return kExitUsage;
    }
    tenant = *t;
  }
  if (o.prometheus) {
    // Prometheus text exposition: one sample per namespace (and base), plus totals.
    PrometheusWriter w;
    auto per_namespace = [&](std::string_view name, std::string_view help, auto field) {
      w.family(name, "gauge", help);
      for (const NamespaceSummary& ns : inv->namespaces) {
        w.sample(name, static_cast<uint64_t>(field(ns)), {{"namespace", ns.id}, {"dir", ns.dir}});
      }
    };
    per_namespace("pages", "Pages stored, by namespace.",
                  [](const NamespaceSummary& ns) { return ns.pages; });
    per_namespace("bytes", "Object bytes stored (headers and padding included), by namespace.",
                  [](const NamespaceSummary& ns) { return ns.bytes; });
    per_namespace("temp_files", "Temporaries of live or crashed writers, by namespace.",
                  [](const NamespaceSummary& ns) { return ns.temp_files; });
    if (loc->storage_class == StorageClass::kFile) {
      per_namespace("allocated_bytes",
                    "Bytes the namespace's tree takes on storage (st_blocks, as du counts).",
                    [](const NamespaceSummary& ns) { return ns.allocated_bytes; });
      per_namespace("metadata_bytes",
                    "Of allocated_bytes, those not of pages (directories, ledger, shared files).",
                    [](const NamespaceSummary& ns) { return ns.metadata_bytes; });
    }
    w.family("namespaces", "gauge", "Namespaces at the location.");
    w.sample("namespaces", static_cast<uint64_t>(inv->namespaces.size()));
    if (tenant) {
      w.family("tenant_pages", "gauge", "The tenant's sealed pages, by key id.");
      for (const auto& [id, n] : tenant->pages_by_key_id) {
        w.sample("tenant_pages", n,
                 {{"tenant", tenant_name(*keys)}, {"key_id", std::to_string(id)}});
      }
      w.family("tenant_bytes", "gauge", "Object bytes of the tenant's sealed pages.");
      w.sample("tenant_bytes", tenant->bytes, {{"tenant", tenant_name(*keys)}});
    }
    fmt::print("{}", w.text());
    return kExitOk;
  }
  if (o.json) {
    nlohmann::json namespaces = nlohmann::json::array();
    for (const NamespaceSummary& ns : inv->namespaces) {
      namespaces.push_back({{"id", ns.id},
                            {"dir", ns.dir},
                            {"pages", ns.pages},
                            {"bytes", ns.bytes},
                            {"temp_files", ns.temp_files},
                            {"other_files", ns.other_files},
                            {"segments", ns.segments},
                            {"segment_bytes", ns.segment_bytes},
                            {"allocated_bytes", ns.allocated_bytes},
                            {"metadata_bytes", ns.metadata_bytes},
                            {"manifest", manifest_of(ns)}});
    }
    nlohmann::json j = {{"uri", loc->uri()},
                        {"pages", inv->pages},
                        {"bytes", inv->bytes},
                        {"temp_files", inv->temp_files},
                        {"allocated_bytes", inv->allocated_bytes},
                        {"metadata_bytes", inv->metadata_bytes},
                        {"namespaces", namespaces}};
    if (tenant) {
      nlohmann::json by_id = nlohmann::json::object();
      for (const auto& [id, n] : tenant->pages_by_key_id) by_id[std::to_string(id)] = n;
      j["tenant"] = {{"name", tenant_name(*keys)},      {"pages", tenant->pages},
                     {"bytes", tenant->bytes},          {"pages_by_key_id", by_id},
                     {"others_sealed", tenant->others}, {"clear", tenant->clear}};
    }
    fmt::print("{}\n", j.dump());
    return kExitOk;
  }
  fmt::print("{}: {} pages, {} bytes, {} namespaces, {} temporary files\n", loc->uri(), inv->pages,
             inv->bytes, inv->namespaces.size(), inv->temp_files);
  if (loc->storage_class == StorageClass::kFile) {
    fmt::print("  on storage (as du counts): {} bytes, {} of them pages, {} beside them\n",
               inv->allocated_bytes, inv->allocated_bytes - inv->metadata_bytes,
               inv->metadata_bytes);
  }
  if (tenant) {
    std::string ids;
    for (const auto& [id, n] : tenant->pages_by_key_id) {
      ids += fmt::format("{}key id {}: {}", ids.empty() ? " (" : ", ", id, n);
    }
    fmt::print("  tenant {}: {} pages, {} bytes{}; {} sealed pages of others, {} in the clear\n",
               tenant_name(*keys), tenant->pages, tenant->bytes, ids.empty() ? "" : ids + ")",
               tenant->others, tenant->clear);
  }
  for (const NamespaceSummary& ns : inv->namespaces) {
    fmt::print(
        "  {}  {:>8} pages {:>14} bytes  {}{}{}{}\n", ns.id.substr(0, 12), ns.pages, ns.bytes,
        describe(manifest_of(ns)),
        ns.temp_files ? fmt::format("  ({} temporaries)", ns.temp_files) : "",
        ns.other_files ? fmt::format("  ({} foreign files)", ns.other_files) : "",
        ns.segments ? fmt::format("  ({} segments, {} bytes)", ns.segments, ns.segment_bytes) : "");
  }
  return kExitOk;
}

int run_verify(const InspectOptions& o) {
  Result<StoreLocation> loc = location_of(o.location, "verify");
  if (!loc.ok()) return kExitUsage;
  Result<VerifyReport> report = invalid_argument_error("not run");
  {
    // The total is known once the pages are listed: the bar starts with the first page.
    Progress bar("verify", 0, progress_wanted(o.quiet));
    const std::optional<TenantKeys> keys = tenant_keys(o);
    report = verify_store(
        *loc,
        [&](uint64_t done, uint64_t total) {
          bar.set_total(total);
          bar.update(done);
          return !interrupted();
        },
        keys ? &*keys : nullptr);
  }
  if (!report.ok()) {
    fmt::print(stderr, "kvtier verify: {}\n", report.status().to_string());
    return kExitUsage;
  }
  if (report->stopped) {
    for (const VerifyProblem& p : report->problems) {
      fmt::print("CORRUPT {}: {}\n", p.path, p.status.message());
    }
    fmt::print(stderr,
               "kvtier verify: interrupted: {} pages checked, {} intact, {} corrupt; nothing "
               "removed\n",
               report->pages, report->intact, report->problems.size());
    return kExitInterrupted;
  }
  const bool ok = report->problems.empty();
  // --repair: corrupt pages are removed (faults that stopped a read are left alone).
  uint64_t repaired = 0;
  if (o.repair && !ok) {
    std::vector<PageListing> bad;
    for (const VerifyProblem& p : report->problems) {
      if (p.status.code() != StatusCode::kCorrupt) continue;
      bad.push_back(p.page);
    }
    Result<RemovalReport> removed = remove_pages(*loc, bad);  // few: not interrupted
    if (!removed.ok()) {
      fmt::print(stderr, "kvtier verify: repairing: {}\n", removed.status().to_string());
      return kExitUsage;
    }
    repaired = removed->pages;
  }
  if (o.json) {
    nlohmann::json corrupt = nlohmann::json::array();
    for (const VerifyProblem& p : report->problems) {
      corrupt.push_back({{"path", p.path},
                         {"namespace", p.namespace_id},
                         {"code", std::string(status_code_name(p.status.code()))},
                         {"error", std::string(p.status.message())}});
    }
    nlohmann::json j = {{"uri", loc->uri()},
                        {"pages", report->pages},
                        {"intact", report->intact},
                        {"bytes", report->bytes},
                        {"corrupt", corrupt},
                        {"ok", ok},
                        {"repaired", repaired},
                        {"sealed_opened", report->opened},
                        {"sealed_not_opened", report->not_opened}};
    fmt::print("{}\n", j.dump());
  } else {
    for (const VerifyProblem& p : report->problems) {
      fmt::print("CORRUPT {}: {}\n", p.path, p.status.message());
    }
    std::string sealed;
    if (report->opened + report->not_opened != 0) {
      sealed = fmt::format(" ({} sealed pages opened, {} checked without their key)",
                           report->opened, report->not_opened);
    }
    fmt::print("{}: {} pages checked, {} intact{}, {} corrupt{}\n", loc->uri(), report->pages,
               report->intact, sealed, report->problems.size(),
               o.repair ? fmt::format(", {} removed", repaired) : "");
  }
  return ok ? kExitOk : kExitFailed;
}

int run_ls(const InspectOptions& o) {
  Result<StoreLocation> loc = location_of(o.location, "ls");
  if (!loc.ok()) return kExitUsage;
  Result<std::vector<PageListing>> pages = list_with_progress(*loc, o.namespace_prefix, o.quiet);
  if (pages.status().code() == StatusCode::kCancelled && interrupted()) {
    fmt::print(stderr, "kvtier ls: interrupted while listing pages\n");
    return kExitInterrupted;
  }
  if (!pages.ok()) {
    fmt::print(stderr, "kvtier ls: {}\n", pages.status().to_string());
    return kExitUsage;
  }
  // With a tenant, its pages alone, each with the key id it is sealed under.
  std::vector<uint32_t> key_ids;
  if (const std::optional<TenantKeys> keys = tenant_keys(o)) {
    Result<std::vector<uint32_t>> ids = keep_tenants(*loc, *pages, *keys);
    if (!ids.ok()) {
      fmt::print(stderr, "kvtier ls: {}\n", ids.status().to_string());
      return kExitUsage;
    }
    key_ids = std::move(ids).value();
  }
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (size_t i = 0; i < pages->size(); ++i) {
      const PageListing& p = (*pages)[i];
      nlohmann::json e = {{"namespace", p.namespace_id},
                          {"page", p.name},
                          {"bytes", p.bytes},
                          {"mtime_ns", p.mtime_ns},
                          {"path", p.path}};
      if (!p.summary.empty()) e["offset"] = p.offset;  // a record in a segment
      if (!key_ids.empty()) e["key_id"] = key_ids[i];
      j.push_back(std::move(e));
    }
    fmt::print("{}\n", j.dump());
    return kExitOk;
  }
  uint64_t printed = 0;
  for (size_t i = 0; i < pages->size(); ++i) {
    const PageListing& p = (*pages)[i];
    if (interrupted()) {
      std::fflush(stdout);
      fmt::print(stderr, "kvtier ls: interrupted: {} of {} pages listed\n", printed, pages->size());
      return kExitInterrupted;
    }
    fmt::print("{}  {}  {:>12}  {}{}{}\n", p.namespace_id.substr(0, 12), p.name, p.bytes, p.path,
               p.summary.empty() ? "" : fmt::format(" @{}", p.offset),
               key_ids.empty() ? "" : fmt::format("  key id {}", key_ids[i]));
    ++printed;
  }
  return kExitOk;
}

int run_gc(const InspectOptions& o) {
  Result<StoreLocation> loc = location_of(o.location, "gc");
  if (!loc.ok()) return kExitUsage;
  // Least recently written first.
  Result<std::vector<PageListing>> pages = list_with_progress(*loc, {}, o.quiet);
  if (pages.status().code() == StatusCode::kCancelled && interrupted()) {
    return interrupted_while_listing("gc");
  }
  if (!pages.ok()) {
    fmt::print(stderr, "kvtier gc: {}\n", pages.status().to_string());
    return kExitUsage;
  }
  std::vector<PageListing> victims;
  if (!o.retire_key_ids.empty()) {
    // A retired key's pages first, wherever they are in the order.
    Result<std::vector<uint32_t>> ids = sealed_key_ids(*loc, *pages);
    if (!ids.ok()) {
      fmt::print(stderr, "kvtier gc: {}\n", ids.status().to_string());
      return kExitUsage;
    }
    std::vector<PageListing> kept;
    for (size_t i = 0; i < pages->size(); ++i) {
      const bool retired = std::find(o.retire_key_ids.begin(), o.retire_key_ids.end(), (*ids)[i]) !=
                           o.retire_key_ids.end();
      (retired ? victims : kept).push_back(std::move((*pages)[i]));
    }
    *pages = std::move(kept);
  }
  // With a tenant, --to bounds its pages alone.
  if (const std::optional<TenantKeys> keys = tenant_keys(o)) {
    Result<std::vector<uint32_t>> ids = keep_tenants(*loc, *pages, *keys);
    if (!ids.ok()) {
      fmt::print(stderr, "kvtier gc: {}\n", ids.status().to_string());
      return kExitUsage;
    }
  }
  uint64_t total = 0;
  for (const PageListing& p : *pages) total += p.bytes;
  for (const PageListing& p : *pages) {
    if (total <= o.to_bytes) break;
    victims.push_back(p);
    total -= p.bytes;
  }
  Result<RemovalReport> removed = remove_with_progress(*loc, victims, o.quiet);
  if (!removed.ok()) {
    fmt::print(stderr, "kvtier gc: {}\n", removed.status().to_string());
    return kExitUsage;
  }
  if (removed->stopped) {
    uint64_t left = 0;
    for (const PageListing& p : *pages) left += p.bytes;
    left -= removed->bytes;
    fmt::print(stderr,
               "kvtier gc: interrupted: removed {} of {} pages ({} bytes); {} bytes remain\n",
               removed->pages, victims.size(), removed->bytes, left);
    return kExitInterrupted;
  }
  Result<uint64_t> temps = sweep_temporaries(*loc, o.temp_age_s);
  if (!temps.ok()) {
    fmt::print(stderr, "kvtier gc: temporaries: {}\n", temps.status().to_string());
    return kExitFailed;
  }
  if (o.json) {
    nlohmann::json j = {{"removed_pages", removed->pages},
                        {"removed_bytes", removed->bytes},
                        {"removed_temporaries", *temps},
                        {"remaining_bytes", total}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print(
        "{}: removed {} pages ({} bytes), least recently written first, and {} temporaries; {} "
        "bytes remain\n",
        loc->uri(), removed->pages, removed->bytes, *temps, total);
  }
  if (!removed->first_error.ok()) {
    fmt::print(stderr, "kvtier gc: {}\n", removed->first_error.to_string());
    return kExitFailed;
  }
  return kExitOk;
}

int run_clear(const InspectOptions& o) {
  Result<StoreLocation> loc = location_of(o.location, "clear");
  if (!loc.ok()) return kExitUsage;
  if (o.namespace_prefix.empty()) {
    fmt::print(stderr, "kvtier clear: --namespace ID (or a unique prefix of it) is required\n");
    return kExitUsage;
  }
  Result<Inventory> inv = take_inventory(*loc);
  if (!inv.ok()) {
    fmt::print(stderr, "kvtier clear: {}\n", inv.status().to_string());
    return kExitUsage;
  }
  std::set<std::string> ids;
  for (const NamespaceSummary& ns : inv->namespaces) {
    if (ns.id.starts_with(o.namespace_prefix)) ids.insert(ns.id);
  }
  if (ids.size() != 1) {
    fmt::print(stderr,
               "kvtier clear: '{}' matches {} namespaces; give one (kvtier stat lists them)\n",
               o.namespace_prefix, ids.size());
    return kExitUsage;
  }
  Result<std::vector<PageListing>> pages = list_with_progress(*loc, *ids.begin(), o.quiet);
  if (pages.status().code() == StatusCode::kCancelled && interrupted()) {
    return interrupted_while_listing("clear");
  }
  if (!pages.ok()) {
    fmt::print(stderr, "kvtier clear: {}\n", pages.status().to_string());
    return kExitUsage;
  }
  // A tenant's pages go one by one (remove entries every store applies), leaving the other
  // tenants' and the namespace's clear generation alone.
  const std::optional<TenantKeys> keys = tenant_keys(o);
  if (keys) {
    Result<std::vector<uint32_t>> kept = keep_tenants(*loc, *pages, *keys);
    if (!kept.ok()) {
      fmt::print(stderr, "kvtier clear: {}\n", kept.status().to_string());
      return kExitUsage;
    }
  }
  Result<RemovalReport> removed =
      remove_with_progress(*loc, *pages, o.quiet, keys ? std::string_view() : *ids.begin());
  if (!removed.ok()) {
    fmt::print(stderr, "kvtier clear: {}\n", removed.status().to_string());
    return kExitUsage;
  }
  if (removed->stopped) {
    fmt::print(stderr,
               "kvtier clear: interrupted: namespace {}: removed {} of {} pages ({} bytes)\n",
               *ids.begin(), removed->pages, pages->size(), removed->bytes);
    return kExitInterrupted;
  }
  fmt::print(
      "{}: namespace {}: removed {}{} pages ({} bytes)\n", loc->uri(), *ids.begin(), removed->pages,
      keys ? fmt::format(" of tenant {}'s", tenant_name(*keys)) : std::string(), removed->bytes);
  return removed->first_error.ok() ? kExitOk : kExitFailed;
}

}  // namespace kvtier::cli
