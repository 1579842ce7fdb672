#include "naming/routing.h"

#include <fmt/format.h>
#include <xxhash.h>

#include "format/page_format.h"

namespace kvtier::routing {
namespace {

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return !s.empty();
}

std::string join(std::string_view a, std::string_view b) {
  std::string p(a);
  if (p.empty() || p.back() != '/') p += '/';
  p += b;
  return p;
}

}  // namespace

Status validate_key(std::string_view key) {
  if (key.empty()) return invalid_argument_error("key is empty");
  if (key.size() > page::kMaxKeyBytes) {
    return invalid_argument_error(
        fmt::format("key of {} bytes exceeds the limit of {}", key.size(), page::kMaxKeyBytes));
  }
  return ok_status();
}

bool is_fanout_name(std::string_view name) {
  return name.size() == 2 && is_hex(name);
}
bool is_page_name(std::string_view name) {
  return name.size() == 32 && is_hex(name);
}

Router::Router(std::vector<std::string> bases, Hash128 namespace_id,
               const std::vector<std::string>& routed_as, KeyNamer namer)
    : bases_(std::move(bases)), namer_(std::move(namer)) {
  const std::string ns = namespace_id.hex();
  for (size_t i = 0; i < bases_.size(); ++i) {
    ns_dirs_.push_back(join(join(bases_[i], kRootDir), ns));
    base_seeds_.push_back(checksum64(routed_as.empty() ? bases_[i] : routed_as.at(i)));
  }
}

size_t Router::pick_base(const Hash128& key_hash) const {
  if (bases_.size() == 1) return 0;
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < bases_.size(); ++i) {
    const uint64_t score = XXH3_64bits_withSeed(&key_hash, sizeof(key_hash), base_seeds_[i]);
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

Route Router::route(std::string_view key) const {
  return route_named(key_hash(key));
}

Route Router::route_named(const Hash128& name) const {
  Route r;
  r.key_hash = name;
  r.base = pick_base(r.key_hash);
  r.path = page_path(r.base, r.key_hash);
  return r;
}

std::string Router::page_path(size_t base, const Hash128& key_hash) const {
  const std::string hex = key_hash.hex();
  return fmt::format("{}/{}/{}", ns_dirs_[base], std::string_view(hex).substr(0, 2), hex);
}

std::string Router::root_dir(std::string_view base) {
  return join(base, kRootDir);
}

std::string Router::temp_dir(size_t i) const {
  return join(ns_dirs_[i], kTempDir);
}
std::string Router::manifest_path(size_t i) const {
  return join(ns_dirs_[i], kManifest);
}

std::string Router::generation_path() const {
  return join(ns_dirs_[0], kGenerationFile);
}

}  // namespace kvtier::routing
