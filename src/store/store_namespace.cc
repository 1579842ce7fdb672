// The namespace on storage: its directories and manifest, the temporaries dead writers left,
// and the walk of its fan-out directories.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <type_traits>

#include "naming/clear_generation.h"
#include "naming/namespace_walk.h"
#include "naming/object_io.h"
#include "naming/store_root.h"
#include "store_impl.h"

namespace kvtier {
namespace {

std::string manifest_json(const NamespaceSpec& ns, const Hash128& id) {
  nlohmann::json j = {{"kvtier_namespace", 1}, {"id", id.hex()}, {"format", kPageFormatVersion}};
  ns.for_each_field([&](std::string_view name, const auto& value) {
    const std::string key(name);
    using T = std::decay_t<decltype(value)>;
    if (name == "salt") {
      // The salt itself may name a tenant: record only that there is one.
      j["salted"] = !ns.salt.empty();
    } else if constexpr (std::is_same_v<T, ParallelRank>) {
      j[key] = name == "tp" && ns.mla ? nlohmann::json("replicated")
                                      : nlohmann::json::array({value.rank, value.size});
    } else {
      j[key] = value;
    }
  });
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
    // Each in the one above, the base first, which store_root::prepare made or found: nothing
    // above the namespace is made here, so an open that outlives a network mount detached
    // under it (its caller gone by the deadline) makes nothing on what lies beneath.
    for (const std::string& dir :
         {routing::Router::root_dir(router.base(b)), router.namespace_dir(b), temp_dir}) {
      if (guard::call_abandoned()) {
        return cancelled_error("the open's caller gave up (its deadline passed)");
      }
      KVTIER_RETURN_IF_ERROR(agent.make_dir(dir));
    }
    if (agent.storage_class() == StorageClass::kFile) {
      // Directories someone else made in the store's place are refused; an older tree's
      // modes are narrowed to the store's sharing.
      KVTIER_ASSIGN_OR_RETURN(const Sharing sharing, store_root::sharing_of(config.location));
      KVTIER_RETURN_IF_ERROR(store_root::check_tree(
          {routing::Router::root_dir(router.base(b)), router.namespace_dir(b), temp_dir}, sharing));
    }
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

}  // namespace kvtier
