#include "naming/store_root.h"

#include <climits>
#include <cstdlib>
#include <memory>

namespace kvtier::store_root {

Result<Sharing> sharing_of(const StoreLocation& loc) {
  if (loc.storage_class != StorageClass::kFile) return Sharing::kPrivate;
  auto it = loc.params.find("share");
  if (it == loc.params.end()) return Sharing::kPrivate;
  return parse_sharing(it->second);
}

Result<std::string> real_dir(const std::string& dir) {
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(dir.c_str(), nullptr), &std::free);
  if (!real) return errno_status(errno, "realpath", dir);
  return std::string(real.get());
}

std::string opened_as(const std::string& dir) {
  Result<std::string> real = real_dir(dir);
  return real.ok() ? *std::move(real) : dir;
}

Result<std::vector<std::string>> prepare(Agent& agent, const StoreLocation& loc,
                                         const std::function<Status()>& may_make) {
  KVTIER_ASSIGN_OR_RETURN(const Sharing sharing, sharing_of(loc));
  std::vector<std::string> real;
  for (const std::string& base : loc.bases) {
    // The base as given may pass through links (/var/run, a mount point's alias): resolve
    // them before the store's own paths, which may not.
    Result<std::string> r = real_dir(base);
    if (r.status().code() == StatusCode::kNotFound) {
      if (may_make) KVTIER_RETURN_IF_ERROR(may_make());
      KVTIER_RETURN_IF_ERROR(agent.make_dirs(base));
      r = real_dir(base);
    }
    if (!r.ok()) return r.status();
    KVTIER_RETURN_IF_ERROR(check_store_root(*r, sharing));
    real.push_back(*std::move(r));
  }
  return real;
}

Status check_tree(const std::vector<std::string>& dirs, Sharing sharing) {
  const CreateModes modes = create_modes(sharing);
  for (const std::string& d : dirs) KVTIER_RETURN_IF_ERROR(check_own_dir(d, modes));
  return ok_status();
}

}  // namespace kvtier::store_root
