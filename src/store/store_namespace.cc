// The namespace on storage: its directories and manifest, the temporaries dead writers left,
// the listing that fills the page index, and the clear generation other stores watch.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "object_io.h"
#include "store_impl.h"

namespace kvtier {
namespace {

std::string manifest_json(const NamespaceSpec& ns, const Hash128& id) {
  auto rank = [&](const ParallelRank& r) { return nlohmann::json::array({r.rank, r.size}); };
  nlohmann::json j = {
      {"kvtier_namespace", 1},
      {"id", id.hex()},
      {"format", kPageFormatVersion},
      {"model", ns.model},
      {"dtype", ns.dtype},
      {"layout", ns.layout},
      {"page_tokens", ns.page_tokens},
      {"piece_bytes", ns.piece_bytes},
      {"pieces_per_page", ns.pieces_per_page},
      {"mla", ns.mla},
      {"tp", ns.mla ? nlohmann::json("replicated") : rank(ns.tp)},
      {"pp", rank(ns.pp)},
      {"cp", rank(ns.cp)},
      {"dp", rank(ns.dp)},
      // The salt itself may name a tenant: record only that there is one.
      {"salted", !ns.salt.empty()},
  };
  return j.dump(2) + "\n";
}

}  // namespace

Status Store::Impl::open_namespace() {
  KVTIER_ASSIGN_OR_RETURN(zeros, AlignedBuffer::allocate(kBlockBytes));
  KVTIER_ASSIGN_OR_RETURN(zeros_registration, agent.register_memory(zeros.data(), zeros.size()));
  const std::string manifest = manifest_json(config.ns, ns_id);
  std::string dio_reason;
  std::optional<DirectIoAlignment> dio_seen;
  for (size_t b = 0; b < router.base_count(); ++b) {
    const std::string temp_dir = router.temp_dir(b);
    KVTIER_RETURN_IF_ERROR(agent.make_dirs(temp_dir));
    const std::string path = router.manifest_path(b);
    Result<ObjectInfo> existing = agent.stat(path);
    if (existing.status().code() == StatusCode::kNotFound) {
      KVTIER_RETURN_IF_ERROR(object_io::write_object(agent, path, temp_dir, manifest));
    } else if (!existing.ok()) {
      return existing.status();
    }
    KVTIER_ASSIGN_OR_RETURN(size_t swept,
                            agent.sweep_temporaries(temp_dir, config.stale_temp_age_s));
    bump(counters.temps_swept, swept);

    if (config.direct_io == DirectIo::kOff) continue;
    Result<DirectIoAlignment> a = agent.probe_direct_io(temp_dir);
    if (a.ok() && (a->memory > kBlockBytes || a->offset > kBlockBytes)) {
      a = unsupported_error(
          fmt::format("{}: direct I/O alignment {}/{} exceeds the page format's {}-byte blocks",
                      temp_dir, a->memory, a->offset, kBlockBytes));
    }
    if (a.ok()) {
      dio[b] = *a;
      dio_seen = *a;
    } else if (dio_reason.empty()) {
      dio_reason = std::string(a.status().message());
    }
  }
  if (config.direct_io != DirectIo::kOff) {
    if (!dio_seen) {
      dio_summary = "off: " + dio_reason;
    } else {
      dio_summary =
          fmt::format("{} ({}-byte memory, {}-byte offset alignment){}",
                      direct_io_name(config.direct_io), dio_seen->memory, dio_seen->offset,
                      dio_reason.empty() ? "" : "; some bases buffered: " + dio_reason);
    }
  }
  return ok_status();
}

Status Store::Impl::scan_index(bool as_recent) {
  const NamespaceSpec& ns = config.ns;
  // With a fixed page geometry every object has the same size: names alone are enough (one
  // getdents per directory, no stat per page).
  const bool fixed = ns.piece_bytes != 0;
  const uint64_t fixed_bytes = fixed ? object_bytes(ns.piece_bytes * ns.pieces_per_page) : 0;
  struct Found {
    PageIndex::Page page;
    uint64_t mtime_ns;
  };
  std::vector<Found> found;
  for (size_t b = 0; b < router.base_count(); ++b) {
    KVTIER_RETURN_IF_ERROR(for_each_fanout(
        b, /*with_details=*/!fixed, [&](const std::string&, const std::vector<ObjectInfo>& pages) {
          for (const ObjectInfo& e : pages) {
            const std::optional<Hash128> h = parse_hash_hex(e.name);
            if (h && (fixed || e.size > kHeaderBytes)) {
              found.push_back(
                  {{*h, static_cast<uint32_t>(b), fixed ? fixed_bytes : e.size}, e.mtime_ns});
            }
          }
          return ok_status();
        }));
  }
  if (as_recent) {
    std::sort(found.begin(), found.end(),
              [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
    for (const Found& f : found) index.put(f.page);
  } else {
    for (const Found& f : found) index.put_cold(f.page);
  }
  return ok_status();
}

Status Store::Impl::for_each_fanout(
    size_t b, bool with_details,
    const std::function<Status(const std::string& dir, const std::vector<ObjectInfo>& pages)>& fn) {
  const std::string& ns_dir = router.namespace_dir(b);
  std::vector<std::string> fanouts;
  Status st = agent.list(ns_dir, ListOptions{}, [&](const ObjectInfo& e) {
    if (e.is_dir && routing::is_fanout_name(e.name)) fanouts.push_back(ns_dir + "/" + e.name);
    return ok_status();
  });
  if (st.code() == StatusCode::kNotFound) return ok_status();
  KVTIER_RETURN_IF_ERROR(st);
  for (const std::string& dir : fanouts) {
    std::vector<ObjectInfo> pages;
    st = agent.list(dir, ListOptions{.with_details = with_details}, [&](const ObjectInfo& e) {
      if (!e.is_dir && routing::is_page_name(e.name)) pages.push_back(e);
      return ok_status();
    });
    if (st.code() == StatusCode::kNotFound) continue;
    KVTIER_RETURN_IF_ERROR(st);
    KVTIER_RETURN_IF_ERROR(fn(dir, pages));
  }
  return ok_status();
}

std::optional<Store::Impl::Generation> Store::Impl::read_generation() {
  Result<ObjectInfo> info = agent.stat(router.generation_path());
  if (info.ok()) return Generation{info->identity, info->mtime_ns, info->size};
  if (info.status().code() == StatusCode::kNotFound) return Generation{};
  return std::nullopt;
}

void Store::Impl::observe_generation() {
  std::optional<Generation> now = read_generation();
  if (!now) return;
  std::lock_guard lock(generation_mu);
  if (*now == seen_generation) return;
  seen_generation = *now;
  index.clear();
}

Status Store::Impl::publish_generation() {
  std::random_device rd;
  const std::string token = fmt::format("{:08x}{:08x}{:016x}\n", rd(), rd(), wall_ns());
  KVTIER_RETURN_IF_ERROR(
      object_io::write_object(agent, router.generation_path(), router.temp_dir(0), token));
  if (std::optional<Generation> now = read_generation()) {
    std::lock_guard lock(generation_mu);
    seen_generation = *now;
  }
  return ok_status();
}

}  // namespace kvtier
