// One tenant's keys: from each master key of a key file, a sealing key and a naming key,
// derived with HKDF-SHA256 (RFC 5869):
//
//   PRK      = HKDF-Extract(salt = "kvtier tenant v1", IKM = master key)
//   seal key = HKDF-Expand(PRK, info = "seal" 0x00 tenant, 32 bytes)
//   name key = HKDF-Expand(PRK, info = "name" 0x00 tenant, 32 bytes)
//
// One master key thus serves any number of tenants, and a tenant's keys tell nothing about
// another's or about the master key. The naming key turns page keys into the names pages
// have on storage (keyed_name): without it a name says nothing about the page key, and two
// tenants' names for one page key differ.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/checksum.h"
#include "kvtier/core/status.h"
#include "seal/key_file.h"
#include "seal/secret.h"

namespace kvtier::seal {

inline constexpr size_t kTenantKeyBytes = 32;
// Tenant names: 1 to 64 of [A-Za-z0-9._-]; they are not secret.
inline constexpr size_t kMaxTenantBytes = 64;
inline constexpr const char* kDefaultTenant = "default";

struct TenantKey {
  uint32_t key_id = 0;
  // Unique in the process, never reused: what a thread's HMAC contexts are keyed by.
  uint64_t serial = 0;
  Secret seal;  // kTenantKeyBytes
  Secret name;  // kTenantKeyBytes
};

class Tenant {
 public:
  // The tenant's keys under every key of `file`, current first. kInvalidArgument for a
  // tenant name outside the rule above.
  static Result<Tenant> derive(const KeyFile& file, std::string_view tenant);

  const std::string& name() const noexcept { return name_; }
  const TenantKey& current() const noexcept { return keys_.front(); }
  const TenantKey* find(uint32_t key_id) const noexcept;
  const std::vector<TenantKey>& keys() const noexcept { return keys_; }

 private:
  std::string name_;
  std::vector<TenantKey> keys_;
};

Status check_tenant_name(std::string_view tenant);

// The name a page key has on storage under `key`: the first 128 bits of
// HMAC-SHA256(name key, page key), in Hash128's words (high = bytes 0..7 big-endian). Each
// thread keeps the HMAC state of a few keys set up (the key's inner and outer pads hashed
// once), so a name costs hashing the page key.
Hash128 keyed_name(const TenantKey& key, std::string_view page_key) noexcept;

// HKDF-SHA256 of `ikm` into `out` (any length up to 255 * 32 bytes). Used for the tenant keys
// and for each sealing session's key (page_seal.h).
Status hkdf_sha256(std::span<const std::byte> ikm, std::string_view salt, std::string_view info,
                   std::span<std::byte> out);

}  // namespace kvtier::seal
