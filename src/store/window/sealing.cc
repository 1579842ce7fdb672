#include "window/sealing.h"

#include <fmt/format.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kvtier {
namespace {

seal::Tag& tag_at(std::span<std::byte> tags, size_t i) {
  return *reinterpret_cast<seal::Tag*>(tags.data() + i * seal::kTagBytes);
}
const seal::Tag& tag_at(std::span<const std::byte> tags, size_t i) {
  return *reinterpret_cast<const seal::Tag*>(tags.data() + i * seal::kTagBytes);
}

}  // namespace

Result<std::unique_ptr<PageSealing>> PageSealing::open(const StoreConfig& cfg) {
  std::string tenant = cfg.tenant;
  if (tenant.empty()) {
    if (auto it = cfg.location.store_params.find("tenant"); it != cfg.location.store_params.end()) {
      tenant = it->second;
    }
  }
  Result<seal::KeyFile> keys =
      cfg.key_file.empty() ? seal::KeyFile::from_environment() : seal::KeyFile::load(cfg.key_file);
  const char* named = std::getenv(seal::kKeyFileVariable);
  if (cfg.key_file.empty() && (named == nullptr || *named == '\0')) {
    if (!tenant.empty()) {
      return invalid_argument_error(fmt::format(
          "tenant '{}' needs a key file (StoreConfig::key_file, --key-file or {}): a tenant's "
          "pages are sealed under its own keys",
          tenant, seal::kKeyFileVariable));
    }
    return std::unique_ptr<PageSealing>();
  }
  if (!keys.ok()) return std::move(keys).status();
  std::unique_ptr<PageSealing> s(new PageSealing());
  s->keys_ = std::move(keys).value();
  KVTIER_ASSIGN_OR_RETURN(
      s->tenant_, seal::Tenant::derive(s->keys_, tenant.empty() ? seal::kDefaultTenant : tenant));
  KVTIER_ASSIGN_OR_RETURN(s->sealer_, seal::Sealer::start(s->tenant_.current()));
  s->opener_ = std::make_unique<seal::Opener>(s->tenant_);
  return s;
}

std::string PageSealing::describe() const {
  return fmt::format("AES-256-GCM, tenant {}, key id {} (of {} in the key file)", tenant_.name(),
                     sealer_.key_id(), keys_.keys().size());
}

Status PageSealing::begin_seal(const page::Header& h,
                               std::span<std::byte, page::kHeaderBytes> block,
                               SealedPut& put) const {
  if (h.payload_bytes > page::kMaxSealedPayloadBytes) {
    return invalid_argument_error(
        fmt::format("a sealed page holds at most {} bytes", page::kMaxSealedPayloadBytes));
  }
  KVTIER_ASSIGN_OR_RETURN(put.number, sealer_.next_page());
  put.slots = page::encode_sealed(h, sealer_.key_id(), put.number, block);
  std::memcpy(put.slots.salt.data(), sealer_.salt().data(), seal::kSaltBytes);
  put.chunk_bytes = page::sealed_chunk_bytes(h.payload_bytes);
  put.chunks = static_cast<uint32_t>(page::sealed_chunk_count(h.payload_bytes));
  // The key first, bound to the fixed fields alone (so `kvtier verify` can open it).
  const std::span<const std::byte> key_in[] = {
      {reinterpret_cast<const std::byte*>(h.key.data()), h.key.size()}};
  KVTIER_RETURN_IF_ERROR(sealer_.seal_chunk(put.number, page::kKeyChunk, put.chunks,
                                            put.slots.bound, key_in, put.slots.sealed_key,
                                            tag_at(put.slots.key_tag, 0)));
  put.bound = Bound(put.slots.bound, h.key);
  return ok_status();
}

Status PageSealing::seal_chunk(const SealedPut& put, const detail::PageWork<ConstBuffer>& w,
                               size_t c, std::byte* into) const {
  const uint64_t from = c * uint64_t{put.chunk_bytes};
  const uint64_t to = std::min<uint64_t>(w.payload, from + put.chunk_bytes);
  std::vector<std::span<const std::byte>> in;
  page::for_each_part(w.pieces, from, to,
                      [&](const std::byte* d, uint64_t n) { in.emplace_back(d, n); });
  return sealer_.seal_chunk(put.number, static_cast<uint32_t>(c), put.chunks, put.bound.span(), in,
                            std::span<std::byte>(into, to - from), tag_at(put.slots.chunk_tags, c));
}

Result<std::string> PageSealing::page_key(const page::Header& h,
                                          const page::SealedView& view) const {
  seal::Salt salt;
  std::memcpy(salt.data(), view.salt.data(), salt.size());
  std::string key(reinterpret_cast<const char*>(view.sealed_key.data()), view.sealed_key.size());
  const auto chunks = static_cast<uint32_t>(page::sealed_chunk_count(h.payload_bytes));
  KVTIER_RETURN_IF_ERROR(opener_->open_chunk(
      view.key_id, salt, view.page_number, page::kKeyChunk, chunks, view.bound,
      std::span<std::byte>(reinterpret_cast<std::byte*>(key.data()), key.size()),
      tag_at(view.key_tag, 0)));
  return key;
}

Status PageSealing::open_chunk(const page::SealedView& view, std::string_view key,
                               uint64_t payload_bytes, std::span<const MutableBuffer> pieces,
                               size_t chunk) const {
  seal::Salt salt;
  std::memcpy(salt.data(), view.salt.data(), salt.size());
  const Bound bound(view.bound, key);
  const size_t chunks = page::sealed_chunk_count(payload_bytes);
  const uint64_t from = chunk * view.chunk_bytes;
  const uint64_t to = std::min<uint64_t>(payload_bytes, from + view.chunk_bytes);
  std::vector<std::span<std::byte>> data;
  page::for_each_part(pieces, from, to, [&](const std::byte* d, uint64_t n) {
    data.emplace_back(const_cast<std::byte*>(d), n);
  });
  return opener_->open_chunk(view.key_id, salt, view.page_number, static_cast<uint32_t>(chunk),
                             static_cast<uint32_t>(chunks), bound.span(), data,
                             tag_at(view.chunk_tags, chunk));
}

Status PageSealing::open(const page::SealedView& view, std::string_view key, uint64_t payload_bytes,
                         std::span<const MutableBuffer> pieces,
                         std::span<const uint8_t> opened) const {
  const size_t chunks = page::sealed_chunk_count(payload_bytes);
  for (size_t c = 0; c < chunks; ++c) {
    if (c < opened.size() && opened[c] != 0) continue;
    Status st = open_chunk(view, key, payload_bytes, pieces, c);
    if (!st.ok()) {
      // The chunks opened before it are this page's bytes, but not all of them: none stay.
      for (const MutableBuffer& p : pieces) std::memset(p.data, 0, p.size);
      return st;
    }
  }
  return ok_status();
}

}  // namespace kvtier
