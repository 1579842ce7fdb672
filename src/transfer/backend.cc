#include "kvtier/transfer/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace kvtier {

std::string_view transfer_op_name(TransferOp op) {
  return op == TransferOp::kRead ? "read" : "write";
}

std::string_view storage_class_name(StorageClass c) {
  switch (c) {
    case StorageClass::kFile:
      return "FILE";
    case StorageClass::kMemory:
      return "MEM";
    case StorageClass::kObject:
      return "OBJ";
  }
  return "?";
}

Status Backend::register_memory(MemoryRecord& /*region*/) {
  return ok_status();
}
void Backend::deregister_memory(MemoryRecord& /*region*/) noexcept {}
void Backend::cancel(IoBatch& /*batch*/) noexcept {}

std::vector<Result<ObjectInfo>> Backend::stat_many(std::span<const std::string> paths,
                                                   bool until_missing) {
  std::vector<Result<ObjectInfo>> out;
  out.reserve(paths.size());
  bool missing = false;
  for (const std::string& p : paths) {
    if (missing) {
      out.emplace_back(not_found_error(fmt::format("'{}' not checked", p)));
      continue;
    }
    out.push_back(stat(p));
    missing = until_missing && (!out.back().ok() || out.back()->is_dir);
  }
  return out;
}

std::vector<Status> Backend::remove_many(std::span<const std::string> paths) {
  std::vector<Status> out;
  out.reserve(paths.size());
  for (const std::string& p : paths) out.push_back(remove(p, nullptr));
  return out;
}

std::vector<Result<std::unique_ptr<BackendTarget>>> Backend::open_batch(
    std::span<const TargetSpec> specs) {
  std::vector<Result<std::unique_ptr<BackendTarget>>> out;
  out.reserve(specs.size());
  for (const TargetSpec& spec : specs) out.push_back(open(spec));
  return out;
}

Result<size_t> Backend::sweep_temporaries(std::string_view /*temp_dir*/, uint64_t /*min_age_s*/) {
  return size_t{0};
}
Result<size_t> Backend::count_temporaries(std::string_view /*temp_dir*/) {
  return size_t{0};
}

Status Backend::sync(BackendTarget& target) {
  return unsupported_error(fmt::format(
      "'{}': the {} backend has no appended bytes to sync (it does not append to objects)",
      target.path(), name()));
}

Result<DirectIoAlignment> Backend::probe_direct_io(std::string_view /*dir*/) {
  return unsupported_error(fmt::format("the {} backend has no direct I/O", name()));
}

Status BackendRegistry::add(std::string name, StorageClass storage_class, int priority,
                            BackendFactory factory, std::vector<ParamSpec> params) {
  if (name.empty() || name == "auto") {
    return invalid_argument_error(fmt::format("backend name '{}' is reserved", name));
  }
  if (find(name) != nullptr) {
    return already_exists_error(fmt::format("backend '{}' is already registered", name));
  }
  entries_.push_back(
      Entry{std::move(name), storage_class, priority, std::move(factory), std::move(params)});
  return ok_status();
}

const BackendRegistry::Entry* BackendRegistry::find(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::vector<const BackendRegistry::Entry*> BackendRegistry::candidates(
    StorageClass storage_class) const {
  std::vector<const Entry*> out;
  for (const Entry& e : entries_) {
    if (e.storage_class == storage_class) out.push_back(&e);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Entry* a, const Entry* b) { return a->priority > b->priority; });
  return out;
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

Status check_params(const BackendParams& params,
                    std::span<const BackendRegistry::Entry* const> backends) {
  for (const auto& [name, value] : params) {
    bool known = false;
    for (const BackendRegistry::Entry* e : backends) {
      for (const ParamSpec& spec : e->params) {
        if (spec.name != name) continue;
        known = true;
        Status parsed;
        if (spec.type == ParamType::kUnsigned) {
          parsed = param_u64(params, name, 0).status();
        } else if (spec.type == ParamType::kBool) {
          parsed = param_bool(params, name, false).status();
        }
        if (!parsed.ok()) return parsed.with_context(fmt::format("backend '{}'", e->name));
      }
    }
    if (!known) {
      std::vector<std::string> names;
      std::vector<std::string> known_params;
      for (const BackendRegistry::Entry* e : backends) {
        names.push_back(e->name);
        for (const ParamSpec& spec : e->params) {
          if (std::find(known_params.begin(), known_params.end(), spec.name) ==
              known_params.end()) {
            known_params.push_back(spec.name);
          }
        }
      }
      std::sort(known_params.begin(), known_params.end());
      return invalid_argument_error(fmt::format(
          "unknown parameter '{}' for backend {} (known: {})", name, fmt::join(names, " or "),
          known_params.empty() ? "none" : fmt::format("{}", fmt::join(known_params, ", "))));
    }
  }
  return ok_status();
}

Result<uint64_t> param_u64(const BackendParams& params, std::string_view key, uint64_t fallback) {
  auto it = params.find(key);
  if (it == params.end() || it->second.empty()) return fallback;
  const std::string& s = it->second;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return invalid_argument_error(
        fmt::format("parameter {}='{}' is not an unsigned integer", key, s));
  }
  return v;
}

Result<bool> param_bool(const BackendParams& params, std::string_view key, bool fallback) {
  auto it = params.find(key);
  if (it == params.end() || it->second.empty()) return fallback;
  const std::string& s = it->second;
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  return invalid_argument_error(fmt::format("parameter {}='{}' is not a boolean", key, s));
}

}  // namespace kvtier
