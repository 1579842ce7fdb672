// Sealing a page's chunks with AES-256-GCM (OpenSSL's EVP: AES-NI/VAES and PCLMULQDQ where
// the CPU has them, one stitched pass that ciphers and authenticates together).
//
// Nonces never repeat under one key, by construction. A writer seals under a session key of
// its own: when it starts it draws a 256-bit salt from OpenSSL's CSPRNG and derives
//
//   session key = HKDF-SHA256(IKM = tenant seal key, salt, info = "kvtier page session v1")
//
// The 96-bit nonce of chunk c of the session's page number n is le64(n) || le32(c): n comes
// from the session's counter (one atomic add per page; refused, not wrapped, at 2^64 - 1)
// and c < 2^32, so within a session no nonce is used twice. Two sessions share a key only if
// their salts are equal: over S sessions ever started under one tenant key the chance is at
// most S^2 / 2^257 (below 2^-190 for S = 2^32). A reader finds the key id, the salt and n in
// the page's header and derives the same session key (cached: a store reads the pages of a
// few writers' sessions).
//
// Each chunk's associated data is what the page is (`bound`: the caller's encoding of the
// namespace, the page key, the payload length, the key id and the header's other fields)
// followed by le32(c) and le32(chunk count), so a chunk moved within or between pages, a page
// under another name, namespace or tenant, a truncated page, or one sealed under another key
// does not open. The 128-bit tag of each chunk is stored beside the page's header.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kvtier/core/mutex.h"
#include "kvtier/core/status.h"
#include "seal/secret.h"
#include "seal/tenant.h"

namespace kvtier::seal {

inline constexpr size_t kSaltBytes = 32;
inline constexpr size_t kTagBytes = 16;
inline constexpr size_t kNonceBytes = 12;
using Salt = std::array<std::byte, kSaltBytes>;
using Tag = std::array<std::byte, kTagBytes>;
using Nonce = std::array<std::byte, kNonceBytes>;

// The nonce of chunk `chunk` of page number `page` (see above).
Nonce nonce_of(uint64_t page, uint32_t chunk) noexcept;

// A session's key, shared by the sealer that made it and the readers that derived it again.
struct SessionKey;

// One writer's session: seals chunks under its session key. Thread-safe.
class Sealer {
 public:
  static Result<Sealer> start(const TenantKey& key);

  uint32_t key_id() const noexcept;
  const Salt& salt() const noexcept;
  // A page number this sealer has never given out. kResourceExhausted after 2^64 - 1.
  Result<uint64_t> next_page() const noexcept;

  // Seals chunk `chunk` (of `chunks`) of page `page`: the bytes of `in`, fragments in order,
  // into `out` (exactly as many bytes; it may be one of the fragments' own memory only if it
  // is the only one), and its tag into `tag`.
  Status seal_chunk(uint64_t page, uint32_t chunk, uint32_t chunks,
                    std::span<const std::byte> bound,
                    std::span<const std::span<const std::byte>> in, std::span<std::byte> out,
                    Tag& tag) const;

 private:
  std::shared_ptr<const SessionKey> key_;
  std::unique_ptr<std::atomic<uint64_t>> next_page_;
};

// Opens the chunks of a tenant's pages, whichever of its keys and sessions sealed them.
// Thread-safe; the tenant must outlive it.
class Opener {
 public:
  explicit Opener(const Tenant& tenant) : tenant_(tenant) {}

  // Opens chunk `chunk` (of `chunks`) of a page sealed under `key_id` by the session with
  // `salt`, as its page number `page`, in place. kCorrupt, with `data` zeroed, when the tag
  // does not match: the caller is never left holding bytes that did not open. kNotFound for
  // a key id the tenant does not have (a retired key).
  Status open_chunk(uint32_t key_id, const Salt& salt, uint64_t page, uint32_t chunk,
                    uint32_t chunks, std::span<const std::byte> bound, std::span<std::byte> data,
                    const Tag& tag) const;
  // The same for a chunk that lies in several fragments of memory, in order (a page's pieces).
  Status open_chunk(uint32_t key_id, const Salt& salt, uint64_t page, uint32_t chunk,
                    uint32_t chunks, std::span<const std::byte> bound,
                    std::span<const std::span<std::byte>> data, const Tag& tag) const;

 private:
  Result<std::shared_ptr<const SessionKey>> session(uint32_t key_id, const Salt& salt) const;

  const Tenant& tenant_;
  mutable Mutex mu_;
  // The session keys derived so far, most recently derived last; a few hundred at most.
  mutable std::vector<std::shared_ptr<const SessionKey>> sessions_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::seal
