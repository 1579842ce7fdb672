// A sealed store's pages on their way (docs/security.md): the keys a store opened with, and
// the two steps that differ from a store in the clear. A put seals each page from the
// caller's memory into its staging buffer, the tags and the sealed key into its header block
// (one pass over the payload: the cipher reads the caller's bytes and writes the staging
// copy that is written out); a get opens the payload in place in the caller's memory once
// it is read (one pass: the cipher reads and writes each byte where it landed), and wipes it
// when any tag differs.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "format/page_format.h"
#include "format/sealed_page.h"
#include "kvtier/core/status.h"
#include "kvtier/store/store.h"
#include "seal/key_file.h"
#include "seal/page_seal.h"
#include "seal/tenant.h"
#include "window/page_work.h"

namespace kvtier {

class PageSealing {
 public:
  // The sealing `cfg` asks for: its key file (or $KVTIER_KEY_FILE's) and tenant (or the
  // URI's tenant=); nullptr for a store in the clear. kInvalidArgument for a tenant without
  // a key; the key file's own errors otherwise (seal/key_file.h).
  static Result<std::unique_ptr<PageSealing>> open(const StoreConfig& cfg);

  PageSealing(const PageSealing&) = delete;
  PageSealing& operator=(const PageSealing&) = delete;

  const std::string& tenant() const noexcept { return tenant_.name(); }
  uint32_t key_id() const noexcept { return sealer_.key_id(); }
  // "AES-256-GCM, tenant alpha, key id 2 (of 2 in the key file)": no key material.
  std::string describe() const;
  // A page key's name under the current key.
  Hash128 name(std::string_view key) const noexcept {
    return seal::keyed_name(tenant_.current(), key);
  }
  // Rotation: pages written before the current key was put first in the key file carry the
  // names of the key current then. name_count(): the keys a page may be named by (the key
  // file's, current first); name(key, i): its name under the i-th (0: the current key's).
  size_t name_count() const noexcept { return tenant_.keys().size(); }
  Hash128 name(std::string_view key, size_t i) const noexcept {
    return seal::keyed_name(tenant_.keys()[i], key);
  }
  // A sealed record's header size in the segment layout's compact form.
  static uint32_t compact_header_bytes(size_t key_bytes, uint64_t payload_bytes) {
    return page::compact_sealed_header_bytes(key_bytes, payload_bytes);
  }

  // A page being sealed, in three steps so that its chunks can be sealed on several threads,
  // each by the thread that then writes it: begin_seal (its page number, its header's fixed
  // fields and sealed key into `block`: `h` gives the fixed fields, its key_hash the keyed
  // name, its key the page key), seal_chunk (chunk `c` of its payload from its pieces into
  // `into`, which has room for the chunk; the tag into `block`; thread-safe for distinct
  // chunks) and finish_seal (the header's checksum, once every chunk is sealed).
  // What each payload chunk is bound to: the header's fixed bytes, then the page key.
  struct Bound {
    std::array<std::byte, page::kSealBoundBytes + page::kMaxKeyBytes> bytes;
    size_t size = 0;
    Bound() = default;
    Bound(std::span<const std::byte> fixed, std::string_view key) {
      std::memcpy(bytes.data(), fixed.data(), fixed.size());
      std::memcpy(bytes.data() + fixed.size(), key.data(), key.size());
      size = fixed.size() + key.size();
    }
    std::span<const std::byte> span() const { return {bytes.data(), size}; }
  };
  struct SealedPut {
    uint64_t number = 0;
    uint32_t chunk_bytes = 0;
    uint32_t chunks = 0;
    page::SealedSlots slots;
    Bound bound;
  };
  Status begin_seal(const page::Header& h, std::span<std::byte, page::kHeaderBytes> block,
                    SealedPut& put) const;
  Status seal_chunk(const SealedPut& put, const detail::PageWork<ConstBuffer>& w, size_t c,
                    std::byte* into) const;
  static void finish_seal(std::span<std::byte, page::kHeaderBytes> block) {
    page::finish_sealed(block);
  }

  // The page key a sealed header holds (decoded as `h` and `view`), opened: kNotFound for a
  // key id the key file no longer holds, kCorrupt when it does not open.
  Result<std::string> page_key(const page::Header& h, const page::SealedView& view) const;

  // Opens the payload of a page whose sealed header decoded as `view`, read into `pieces` as
  // page `key`, in place: the chunks not yet opened (`opened[c]` 0, or beyond `opened`).
  // kCorrupt (every piece wiped) when a tag differs; kNotFound for a key id the key file no
  // longer holds.
  Status open(const page::SealedView& view, std::string_view key, uint64_t payload_bytes,
              std::span<const MutableBuffer> pieces, std::span<const uint8_t> opened = {}) const;
  // Opens chunk `chunk` of it alone, in place (wiped when its tag differs): what a read does
  // as each chunk lands, while it is in cache.
  Status open_chunk(const page::SealedView& view, std::string_view key, uint64_t payload_bytes,
                    std::span<const MutableBuffer> pieces, size_t chunk) const;

 private:
  PageSealing() = default;

  seal::KeyFile keys_;
  seal::Tenant tenant_;
  seal::Sealer sealer_;
  std::unique_ptr<seal::Opener> opener_;  // refers to tenant_
};

}  // namespace kvtier
