#include "window/put_encoding.h"

#include <algorithm>
#include <cstring>

namespace kvtier::detail {

Status PutEncoding::begin(const PageSealing* sealing, const page::Header& h,
                          PageWork<ConstBuffer>& w,
                          std::span<std::byte, page::kHeaderBytes> block) {
  sealing_ = sealing;
  h_ = h;
  w_ = &w;
  block_ = block;
  if (w.staging) {
    const uint64_t padded = page::object_bytes(w.payload) - page::kHeaderBytes;
    std::memset(w.staging.data() + w.payload, 0, padded - w.payload);
  }
  if (sealing_ != nullptr) {
    sealed_.emplace();
    KVTIER_RETURN_IF_ERROR(sealing_->begin_seal(h_, block_, *sealed_));
    chunk_bytes_ = sealed_->chunk_bytes;
    chunks_ = sealed_->chunks;
    return ok_status();
  }
  chunk_bytes_ = page::kChecksumChunkBytes;
  chunks_ = page::chunk_count(w.payload);
  sums_.assign(chunks_, 0);
  return ok_status();
}

Status PutEncoding::chunk(size_t c, std::byte* into) {
  const PageWork<ConstBuffer>& w = *w_;
  if (sealed_) {
    return sealing_->seal_chunk(*sealed_, w, c,
                                into != nullptr ? into : w.staging.data() + c * chunk_bytes_);
  }
  if (w.io != PageIo::kStaged) {
    sums_[c] = page::chunk_checksum(w.pieces, w.payload, c, h_.chunk_hash);
    return ok_status();
  }
  // Staged for direct I/O: copied into the staging buffer, and checksummed there.
  const uint64_t from = c * chunk_bytes_;
  const uint64_t to = std::min<uint64_t>(w.payload, from + chunk_bytes_);
  std::byte* dst = w.staging.data() + from;
  page::for_each_part(w.pieces, from, to, [&](const std::byte* d, uint64_t n) {
    std::memcpy(dst, d, n);
    dst += n;
  });
  const ConstBuffer staged{w.staging.data(), w.payload};
  sums_[c] =
      page::chunk_checksum(std::span<const ConstBuffer>(&staged, 1), w.payload, c, h_.chunk_hash);
  return ok_status();
}

void PutEncoding::finish() {
  if (sealed_) {
    PageSealing::finish_seal(block_);
    return;
  }
  h_.payload_checksum = page::combine_chunk_checksums(sums_);
  page::encode(h_, block_);
}

}  // namespace kvtier::detail
