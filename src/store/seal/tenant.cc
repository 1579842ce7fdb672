#include "seal/tenant.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <array>
#include <atomic>
#include <memory>

namespace kvtier::seal {
namespace {

constexpr std::string_view kExtractSalt = "kvtier tenant v1";

std::atomic<uint64_t> next_serial{1};

// HMAC-SHA256 contexts with their keys set, a few per thread; OpenSSL's memory, freed (and
// wiped) when a slot is reused or the thread ends.
class MacCache {
 public:
  MacCache() = default;
  MacCache(const MacCache&) = delete;
  MacCache& operator=(const MacCache&) = delete;
  ~MacCache() {
    for (Slot& s : slots_) EVP_MAC_CTX_free(s.ctx);
  }

  // A context holding `key`'s naming key, ready for a message; nullptr when OpenSSL fails.
  EVP_MAC_CTX* get(const TenantKey& key) {
    for (Slot& s : slots_) {
      if (s.ctx != nullptr && s.serial == key.serial) {
        // No key: HMAC starts again from the pads it keeps.
        return EVP_MAC_init(s.ctx, nullptr, 0, nullptr) == 1 ? s.ctx : nullptr;
      }
    }
    static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (hmac == nullptr) return nullptr;
    Slot& s = slots_[next_++ % slots_.size()];
    EVP_MAC_CTX_free(s.ctx);
    s.serial = 0;
    s.ctx = EVP_MAC_CTX_new(hmac);
    if (s.ctx == nullptr) return nullptr;
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    if (EVP_MAC_init(s.ctx, reinterpret_cast<const unsigned char*>(key.name.bytes().data()),
                     key.name.size(), params) != 1) {
      return nullptr;
    }
    s.serial = key.serial;
    return s.ctx;
  }

 private:
  struct Slot {
    uint64_t serial = 0;
    EVP_MAC_CTX* ctx = nullptr;
  };
  std::array<Slot, 4> slots_{};
  size_t next_ = 0;
};

uint64_t big_endian64(const unsigned char* p) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

}  // namespace

Status hkdf_sha256(std::span<const std::byte> ikm, std::string_view salt, std::string_view info,
                   std::span<std::byte> out) {
  std::unique_ptr<EVP_KDF, decltype(&EVP_KDF_free)> kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr),
                                                        &EVP_KDF_free);
  if (!kdf) return internal_error("OpenSSL has no HKDF");
  std::unique_ptr<EVP_KDF_CTX, decltype(&EVP_KDF_CTX_free)> ctx(EVP_KDF_CTX_new(kdf.get()),
                                                                &EVP_KDF_CTX_free);
  if (!ctx) return resource_exhausted_error("EVP_KDF_CTX_new failed");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<std::byte*>(ikm.data()),
                                        ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()),
                                        salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()),
                                        info.size()),
      OSSL_PARAM_construct_end(),
  };
  if (EVP_KDF_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), out.size(), params) !=
      1) {
    return internal_error("HKDF-SHA256 failed");
  }
  return ok_status();
}

Status check_tenant_name(std::string_view tenant) {
  if (tenant.empty() || tenant.size() > kMaxTenantBytes) {
    return invalid_argument_error("a tenant name has 1 to 64 characters");
  }
  for (char c : tenant) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return invalid_argument_error("tenant \"" + std::string(tenant) +
                                    "\": a tenant name is made of letters, digits, '.', '_' "
                                    "and '-'");
    }
  }
  return ok_status();
}

Result<Tenant> Tenant::derive(const KeyFile& file, std::string_view tenant) {
  KVTIER_RETURN_IF_ERROR(check_tenant_name(tenant));
  Tenant t;
  t.name_ = std::string(tenant);
  std::string info_seal = "seal";
  info_seal.push_back('\0');
  info_seal += tenant;
  std::string info_name = "name";
  info_name.push_back('\0');
  info_name += tenant;
  for (const MasterKey& master : file.keys()) {
    TenantKey k;
    k.key_id = master.id;
    k.serial = next_serial.fetch_add(1, std::memory_order_relaxed);
    KVTIER_ASSIGN_OR_RETURN(k.seal, Secret::make(kTenantKeyBytes));
    KVTIER_ASSIGN_OR_RETURN(k.name, Secret::make(kTenantKeyBytes));
    // Extract-then-expand with the same salt gives each info its own key from one PRK.
    KVTIER_RETURN_IF_ERROR(
        hkdf_sha256(master.bytes.bytes(), kExtractSalt, info_seal, k.seal.bytes()));
    KVTIER_RETURN_IF_ERROR(
        hkdf_sha256(master.bytes.bytes(), kExtractSalt, info_name, k.name.bytes()));
    t.keys_.push_back(std::move(k));
  }
  return t;
}

const TenantKey* Tenant::find(uint32_t key_id) const noexcept {
  for (const TenantKey& k : keys_) {
    if (k.key_id == key_id) return &k;
  }
  return nullptr;
}

Hash128 keyed_name(const TenantKey& key, std::string_view page_key) noexcept {
  unsigned char mac[EVP_MAX_MD_SIZE] = {};
  thread_local MacCache cache;
  EVP_MAC_CTX* ctx = cache.get(key);
  size_t mac_bytes = 0;
  if (ctx == nullptr ||
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(page_key.data()),
                     page_key.size()) != 1 ||
      EVP_MAC_final(ctx, mac, &mac_bytes, sizeof mac) != 1) {
    // Only when OpenSSL cannot allocate: the one-shot form, which needs no context of ours.
    unsigned int n = 0;
    HMAC(EVP_sha256(), key.name.bytes().data(), static_cast<int>(key.name.size()),
         reinterpret_cast<const unsigned char*>(page_key.data()), page_key.size(), mac, &n);
  }
  Hash128 h;
  h.high = big_endian64(mac);
  h.low = big_endian64(mac + 8);
  return h;
}

}  // namespace kvtier::seal
