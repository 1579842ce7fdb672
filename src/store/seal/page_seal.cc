#include "seal/page_seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string_view>

namespace kvtier::seal {

struct SessionKey {
  // Unique in the process, never reused: what a thread's cipher contexts are keyed by.
  uint64_t serial = 0;
  uint32_t key_id = 0;
  Salt salt{};
  Secret key;  // 32 bytes
};

namespace {

constexpr std::string_view kSessionInfo = "kvtier page session v1";
constexpr size_t kSessionKeyBytes = 32;
// Session keys an Opener keeps derived.
constexpr size_t kOpenerSessions = 256;

std::atomic<uint64_t> next_serial{1};

Result<std::shared_ptr<const SessionKey>> derive_session(const TenantKey& tenant_key,
                                                         const Salt& salt) {
  auto k = std::make_shared<SessionKey>();
  k->serial = next_serial.fetch_add(1, std::memory_order_relaxed);
  k->key_id = tenant_key.key_id;
  k->salt = salt;
  KVTIER_ASSIGN_OR_RETURN(k->key, Secret::make(kSessionKeyBytes));
  const std::string_view salt_text(reinterpret_cast<const char*>(salt.data()), salt.size());
  KVTIER_RETURN_IF_ERROR(
      hkdf_sha256(tenant_key.seal.bytes(), salt_text, kSessionInfo, k->key.bytes()));
  return std::shared_ptr<const SessionKey>(std::move(k));
}

// Each thread keeps a few AES-256-GCM contexts with their keys expanded, so a chunk costs
// setting its nonce, not a key schedule and GHASH table. They are OpenSSL's memory: freed,
// and wiped by EVP_CIPHER_CTX_free, when the slot is reused or the thread ends.
class CipherCache {
 public:
  CipherCache() = default;
  CipherCache(const CipherCache&) = delete;
  CipherCache& operator=(const CipherCache&) = delete;
  ~CipherCache() {
    for (Slot& s : slots_) EVP_CIPHER_CTX_free(s.ctx);
  }

  // A context holding `key` for this direction, or nullptr when OpenSSL fails.
  EVP_CIPHER_CTX* get(const SessionKey& key, bool encrypt) {
    for (Slot& s : slots_) {
      if (s.ctx != nullptr && s.serial == key.serial && s.encrypt == encrypt) return s.ctx;
    }
    Slot& s = slots_[next_++ % slots_.size()];
    s.serial = 0;
    if (s.ctx == nullptr) {
      s.ctx = EVP_CIPHER_CTX_new();
      if (s.ctx == nullptr) return nullptr;
    } else {
      EVP_CIPHER_CTX_reset(s.ctx);
    }
    const auto* k = reinterpret_cast<const unsigned char*>(key.key.bytes().data());
    if (EVP_CipherInit_ex(s.ctx, EVP_aes_256_gcm(), nullptr, k, nullptr, encrypt ? 1 : 0) != 1) {
      return nullptr;
    }
    s.serial = key.serial;
    s.encrypt = encrypt;
    return s.ctx;
  }

 private:
  struct Slot {
    uint64_t serial = 0;
    bool encrypt = false;
    EVP_CIPHER_CTX* ctx = nullptr;
  };
  std::array<Slot, 8> slots_{};
  size_t next_ = 0;
};

CipherCache& cipher_cache() {
  thread_local CipherCache cache;
  return cache;
}

const unsigned char* u8(const std::byte* p) noexcept {
  return reinterpret_cast<const unsigned char*>(p);
}
unsigned char* u8(std::byte* p) noexcept {
  return reinterpret_cast<unsigned char*>(p);
}

void put_le32(unsigned char* p, uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// Starts a chunk's message on `ctx`: its nonce, then its associated data.
bool begin_chunk(EVP_CIPHER_CTX* ctx, uint64_t page, uint32_t chunk, uint32_t chunks,
                 std::span<const std::byte> bound) {
  const Nonce nonce = nonce_of(page, chunk);
  if (EVP_CipherInit_ex(ctx, nullptr, nullptr, nullptr, u8(nonce.data()), -1) != 1) return false;
  int n = 0;
  if (bound.size() > INT_MAX) return false;
  if (!bound.empty() &&
      EVP_CipherUpdate(ctx, nullptr, &n, u8(bound.data()), static_cast<int>(bound.size())) != 1) {
    return false;
  }
  unsigned char place[8];
  put_le32(place, chunk);
  put_le32(place + 4, chunks);
  return EVP_CipherUpdate(ctx, nullptr, &n, place, sizeof place) == 1;
}

}  // namespace

Nonce nonce_of(uint64_t page, uint32_t chunk) noexcept {
  Nonce n{};
  for (int i = 0; i < 8; ++i) n[i] = static_cast<std::byte>(page >> (8 * i));
  for (int i = 0; i < 4; ++i) n[8 + i] = static_cast<std::byte>(chunk >> (8 * i));
  return n;
}

Result<Sealer> Sealer::start(const TenantKey& key) {
  Salt salt;
  if (RAND_bytes(u8(salt.data()), static_cast<int>(salt.size())) != 1) {
    return unavailable_error("OpenSSL's random source failed: no salt for a sealing session");
  }
  Sealer s;
  KVTIER_ASSIGN_OR_RETURN(s.key_, derive_session(key, salt));
  s.next_page_ = std::make_unique<std::atomic<uint64_t>>(0);
  return s;
}

uint32_t Sealer::key_id() const noexcept {
  return key_->key_id;
}
const Salt& Sealer::salt() const noexcept {
  return key_->salt;
}

Result<uint64_t> Sealer::next_page() const noexcept {
  uint64_t n = next_page_->load(std::memory_order_relaxed);
  do {
    if (n == UINT64_MAX) {
      return resource_exhausted_error("this sealing session has used all its page numbers");
    }
  } while (!next_page_->compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
  return n;
}

Status Sealer::seal_chunk(uint64_t page, uint32_t chunk, uint32_t chunks,
                          std::span<const std::byte> bound,
                          std::span<const std::span<const std::byte>> in, std::span<std::byte> out,
                          Tag& tag) const {
  size_t total = 0;
  for (const auto& f : in) total += f.size();
  if (total != out.size()) {
    return invalid_argument_error("a sealed chunk's output differs in size from its input");
  }
  if (total > INT_MAX) return invalid_argument_error("a sealed chunk is larger than 2 GiB");
  EVP_CIPHER_CTX* ctx = cipher_cache().get(*key_, /*encrypt=*/true);
  if (ctx == nullptr || !begin_chunk(ctx, page, chunk, chunks, bound)) {
    return internal_error("AES-256-GCM failed to start a chunk");
  }
  size_t pos = 0;
  for (const auto& f : in) {
    if (f.empty()) continue;
    int n = 0;
    if (EVP_EncryptUpdate(ctx, u8(out.data() + pos), &n, u8(f.data()),
                          static_cast<int>(f.size())) != 1) {
      return internal_error("AES-256-GCM failed to seal a chunk");
    }
    pos += static_cast<size_t>(n);
  }
  int n = 0;
  if (EVP_EncryptFinal_ex(ctx, u8(out.data() + pos), &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, u8(tag.data())) != 1) {
    return internal_error("AES-256-GCM failed to finish a chunk");
  }
  return ok_status();
}

Result<std::shared_ptr<const SessionKey>> Opener::session(uint32_t key_id, const Salt& salt) const {
  {
    MutexLock lock(mu_);
    for (auto it = sessions_.rbegin(); it != sessions_.rend(); ++it) {
      if ((*it)->key_id == key_id && (*it)->salt == salt) return *it;
    }
  }
  const TenantKey* key = tenant_.find(key_id);
  if (key == nullptr) {
    return not_found_error("sealed under key id " + std::to_string(key_id) +
                           ", which the key file does not hold");
  }
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<const SessionKey> derived, derive_session(*key, salt));
  MutexLock lock(mu_);
  if (sessions_.size() >= kOpenerSessions) sessions_.erase(sessions_.begin());
  sessions_.push_back(derived);
  return derived;
}

Status Opener::open_chunk(uint32_t key_id, const Salt& salt, uint64_t page, uint32_t chunk,
                          uint32_t chunks, std::span<const std::byte> bound,
                          std::span<std::byte> data, const Tag& tag) const {
  const std::span<std::byte> one[] = {data};
  return open_chunk(key_id, salt, page, chunk, chunks, bound, one, tag);
}

Status Opener::open_chunk(uint32_t key_id, const Salt& salt, uint64_t page, uint32_t chunk,
                          uint32_t chunks, std::span<const std::byte> bound,
                          std::span<const std::span<std::byte>> data, const Tag& tag) const {
  const auto wipe = [&] {
    for (const std::span<std::byte> f : data) OPENSSL_cleanse(f.data(), f.size());
  };
  for (const std::span<std::byte> f : data) {
    if (f.size() > INT_MAX) {
      wipe();
      return invalid_argument_error("a sealed chunk is larger than 2 GiB");
    }
  }
  Result<std::shared_ptr<const SessionKey>> key = session(key_id, salt);
  if (!key.ok()) {
    wipe();
    return std::move(key).status();
  }
  EVP_CIPHER_CTX* ctx = cipher_cache().get(**key, /*encrypt=*/false);
  if (ctx == nullptr || !begin_chunk(ctx, page, chunk, chunks, bound)) {
    wipe();
    return internal_error("AES-256-GCM failed to start a chunk");
  }
  int n = 0;
  bool opened = true;
  for (const std::span<std::byte> f : data) {
    if (f.empty()) continue;
    opened = opened && EVP_DecryptUpdate(ctx, u8(f.data()), &n, u8(f.data()),
                                         static_cast<int>(f.size())) == 1;
  }
  opened = opened && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes,
                                         const_cast<unsigned char*>(u8(tag.data()))) == 1;
  unsigned char tail[16];
  opened = opened && EVP_DecryptFinal_ex(ctx, tail, &n) == 1;
  if (!opened) {
    // What the cipher wrote is not the page: the caller must not see it.
    wipe();
    return corrupt_error("chunk " + std::to_string(chunk) +
                         " of a sealed page does not open under its key: its bytes, its "
                         "place or its key differ from what was sealed");
  }
  return ok_status();
}

}  // namespace kvtier::seal
