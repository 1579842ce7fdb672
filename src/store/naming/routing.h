// Key -> location. Keys are untrusted bytes and never appear in a path: a page lives at
//
//   <base>/kvtier/<namespace id, 32 hex>/<first 2 hex of the key hash>/<key hash, 32 hex>
//
// where the key hash is XXH3-128 of the key, or in a sealed store the key's keyed name
// (seal/tenant.h: HMAC-SHA256 under the tenant's naming key), which the router is given. With
// several base directories, a key's base is chosen by rendezvous hashing over the base paths:
// stable across restarts, and adding a base moves only the keys that land on it.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/checksum.h"
#include "kvtier/core/status.h"

namespace kvtier::routing {

inline constexpr std::string_view kRootDir = "kvtier";
inline constexpr std::string_view kTempDir = "tmp";
inline constexpr std::string_view kManifest = "namespace.json";
// The capacity ledger's files (see ledger.h).
inline constexpr std::string_view kUsageFile = "usage";
inline constexpr std::string_view kMembersFile = "members";
// Which pages each store read, shared by the namespace's stores on one host (see read_marks.h).
inline constexpr std::string_view kReadMarksFile = "reads";
// Which pages were written before, for admission, shared likewise (see admission.h).
inline constexpr std::string_view kDoorkeeperFile = "written";
// What the engine asked the namespace's stores on one host for, for admission (admission.h).
inline constexpr std::string_view kLookupsFile = "asked";
// The pages the namespace's stores on one host evicted or removed (see key_ring.h).
inline constexpr std::string_view kGoneFile = "evicted";
// The namespace's clear generation: rewritten by every clear(), watched by every store of the
// namespace so that a clear in one process empties the others' indexes (see store.h).
inline constexpr std::string_view kGenerationFile = "generation";

// kInvalidArgument for empty keys and keys over page::kMaxKeyBytes.
Status validate_key(std::string_view key);

// True for a fan-out directory name ("00".."ff") and a page file name (32 hex digits).
bool is_fanout_name(std::string_view name);
bool is_page_name(std::string_view name);

struct Route {
  size_t base = 0;
  Hash128 key_hash;
  std::string path;
};

// What a page key is called on storage: XXH3-128 of the key when empty.
using KeyNamer = std::function<Hash128(std::string_view key)>;

class Router {
 public:
  // `bases` are absolute, normalized directory paths (see uri.h): the paths built on. Keys
  // are spread over them by the names in `routed_as` (the bases as the location names them,
  // which a store resolves to real paths before it opens them; empty: `bases`).
  Router(std::vector<std::string> bases, Hash128 namespace_id,
         const std::vector<std::string>& routed_as = {}, KeyNamer namer = {});

  Route route(std::string_view key) const;
  // The route of a page called `name` on storage (a sealed store's names under earlier keys).
  Route route_named(const Hash128& name) const;
  // The key's hash: its name on storage and in the page index.
  Hash128 key_hash(std::string_view key) const { return namer_ ? namer_(key) : hash128(key); }
  std::string page_path(size_t base, const Hash128& key_hash) const;

  size_t base_count() const { return bases_.size(); }
  const std::string& base(size_t i) const { return bases_[i]; }
  const std::string& namespace_dir(size_t i) const { return ns_dirs_[i]; }
  // <base>/kvtier, where every namespace's directory is.
  static std::string root_dir(std::string_view base);
  std::string temp_dir(size_t i) const;
  std::string manifest_path(size_t i) const;
  // The clear generation object (base 0 only: one per namespace).
  std::string generation_path() const;
  // The base a key hash lives on (what route() picks).
  size_t pick_base(const Hash128& key_hash) const;

 private:
  std::vector<std::string> bases_;
  std::vector<std::string> ns_dirs_;
  std::vector<uint64_t> base_seeds_;
  KeyNamer namer_;
};

}  // namespace kvtier::routing
