#include "inspect/sealed_reader.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

namespace kvtier::inspect {
namespace {

seal::Salt salt_of(const page::SealedView& view) {
  seal::Salt salt;
  std::memcpy(salt.data(), view.salt.data(), salt.size());
  return salt;
}
seal::Tag tag_at(std::span<const std::byte> tags, size_t i) {
  seal::Tag tag;
  std::memcpy(tag.data(), tags.data() + i * tag.size(), tag.size());
  return tag;
}

}  // namespace

Result<std::unique_ptr<SealedReader>> SealedReader::open(const TenantKeys& keys) {
  Result<seal::KeyFile> file = keys.key_file.empty() ? seal::KeyFile::from_environment()
                                                     : seal::KeyFile::load(keys.key_file);
  if (!file.ok() && keys.key_file.empty() && file.status().code() == StatusCode::kNotFound) {
    return invalid_argument_error(fmt::format(
        "reading sealed pages needs a key file (--key-file or {})", seal::kKeyFileVariable));
  }
  if (!file.ok()) return std::move(file).status();
  std::unique_ptr<SealedReader> r(new SealedReader());
  r->keys_ = std::move(file).value();
  KVTIER_ASSIGN_OR_RETURN(
      r->tenant_,
      seal::Tenant::derive(r->keys_, keys.tenant.empty() ? seal::kDefaultTenant : keys.tenant));
  r->opener_ = std::make_unique<seal::Opener>(r->tenant_);
  return r;
}

Result<std::string> SealedReader::page_key(const page::Header& h,
                                           const page::SealedView& view) const {
  std::string key(reinterpret_cast<const char*>(view.sealed_key.data()), view.sealed_key.size());
  const auto chunks = static_cast<uint32_t>(page::sealed_chunk_count(h.payload_bytes));
  KVTIER_RETURN_IF_ERROR(opener_->open_chunk(
      view.key_id, salt_of(view), view.page_number, page::kKeyChunk, chunks, view.bound,
      std::span<std::byte>(reinterpret_cast<std::byte*>(key.data()), key.size()),
      tag_at(view.key_tag, 0)));
  return key;
}

Status SealedReader::open_chunk(const page::Header& h, const page::SealedView& view,
                                std::string_view key, uint32_t chunk,
                                std::span<std::byte> data) const {
  // Bound as a store binds it: the header's fixed bytes, then the page key.
  std::vector<std::byte> bound(view.bound.begin(), view.bound.end());
  const auto* k = reinterpret_cast<const std::byte*>(key.data());
  bound.insert(bound.end(), k, k + key.size());
  const auto chunks = static_cast<uint32_t>(page::sealed_chunk_count(h.payload_bytes));
  return opener_->open_chunk(view.key_id, salt_of(view), view.page_number, chunk, chunks, bound,
                             data, tag_at(view.chunk_tags, chunk));
}

}  // namespace kvtier::inspect
