#include "seal/tenant.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <memory>

namespace kvtier::seal {
namespace {

constexpr std::string_view kExtractSalt = "kvtier tenant v1";

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
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_bytes = 0;
  HMAC(EVP_sha256(), key.name.bytes().data(), static_cast<int>(key.name.size()),
       reinterpret_cast<const unsigned char*>(page_key.data()), page_key.size(), mac, &mac_bytes);
  Hash128 h;
  h.high = big_endian64(mac);
  h.low = big_endian64(mac + 8);
  return h;
}

}  // namespace kvtier::seal
