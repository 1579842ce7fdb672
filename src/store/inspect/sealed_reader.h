// Reading sealed pages without a Store, for the commands given a tenant's keys (`--key-file`,
// `--tenant`; docs/security.md): whose a sealed page is (its page key, sealed on its own in
// the header, opens under the tenant's keys or not), and opening a tenant's page's payload
// chunk by chunk to check every tag.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "format/page_format.h"
#include "format/sealed_page.h"
#include "kvtier/core/status.h"
#include "kvtier/store/inspect.h"
#include "seal/key_file.h"
#include "seal/page_seal.h"
#include "seal/tenant.h"

namespace kvtier::inspect {

class SealedReader {
 public:
  // The tenant's keys from `keys`: its key file (or $KVTIER_KEY_FILE's) and tenant (or
  // "default"). The key file's own errors (seal/key_file.h); kInvalidArgument when neither
  // names a key file.
  static Result<std::unique_ptr<SealedReader>> open(const TenantKeys& keys);

  SealedReader(const SealedReader&) = delete;
  SealedReader& operator=(const SealedReader&) = delete;

  const std::string& tenant() const noexcept { return tenant_.name(); }

  // The page key of the sealed page whose header decoded as `h` and `view`: kNotFound for a
  // key id the key file does not hold, kCorrupt when it does not open (another tenant's or
  // key file's page, or a damaged one).
  Result<std::string> page_key(const page::Header& h, const page::SealedView& view) const;
  // Opens payload chunk `chunk` of that page (of page key `key`), whose sealed bytes `data`
  // holds, in place: kCorrupt (and `data` zeroed) when its tag differs.
  Status open_chunk(const page::Header& h, const page::SealedView& view, std::string_view key,
                    uint32_t chunk, std::span<std::byte> data) const;

 private:
  SealedReader() = default;

  seal::KeyFile keys_;
  seal::Tenant tenant_;
  std::unique_ptr<seal::Opener> opener_;  // refers to tenant_
};

}  // namespace kvtier::inspect
