// `kvtier verify` (inspect.h: verify_store): every page of every namespace read and checked as
// a get would check it (header, namespace, name, size, payload checksum); a sealed page's
// payload, which its tags check, with the tenant's keys when given (SealedReader).
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <optional>

#include "format/page_format.h"
#include "format/sealed_page.h"
#include "inspect/sealed_reader.h"
#include "inspect/walk.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/store/inspect.h"
#include "kvtier/store/store.h"
#include "naming/object_io.h"

namespace kvtier {
namespace {

using inspect::SealedReader;
using PageEntry = PageListing;
using Block = std::array<std::byte, page::kHeaderBytes>;

constexpr uint64_t kVerifyChunk = 4 << 20;

// What verifying a sealed page could check of its payload.
enum class Sealed : uint8_t { kNo, kOpened, kNotOpened };

// The namespace and key hash a page's header names against where it was found (`stored`:
// how the listing named it, "stored under" a page file, "its summary says" for a record).
Status check_identity(const page::Header& h, const PageEntry& p, std::string_view stored) {
  if (h.namespace_id.hex() != p.namespace_id) {
    return corrupt_error(
        fmt::format("belongs to namespace {}, found in {}", h.namespace_id.hex(), p.namespace_id));
  }
  if (h.key_hash.hex() != p.name) {
    return corrupt_error(fmt::format("holds key hash {}, {} {}", h.key_hash.hex(), stored, p.name));
  }
  return ok_status();
}

// Reads the header of the page starting at `at` in `t` (its first `header_bytes`) into
// `block`, and decodes it, plain or sealed (`*sealed` says which; `view` points into `block`).
Result<page::Header> read_header(Agent& agent, Target& t, AlignedBuffer& buf, uint64_t at,
                                 uint64_t header_bytes, Block& block, bool* sealed,
                                 page::SealedView& view) {
  KVTIER_RETURN_IF_ERROR(
      object_io::transfer_range(agent, TransferOp::kRead, t, buf.data(), at, header_bytes));
  std::memcpy(block.data(), buf.data(), block.size());
  const std::span<const std::byte, page::kHeaderBytes> b(block);
  *sealed = page::is_sealed(b);
  if (!*sealed) return page::decode(b);
  return page::decode_sealed(b, view);
}

// The payload's chunk checksums (hashed as its header `hash` says), the payload starting at
// `at` in `t`: read in units of whole checksum chunks, each chunk hashed as it arrives.
Result<std::vector<uint64_t>> payload_checksums(Agent& agent, Target& t, AlignedBuffer& buf,
                                                uint64_t at, uint64_t payload_bytes,
                                                ChunkHash hash) {
  static_assert(kVerifyChunk % page::kChecksumChunkBytes == 0);
  std::vector<uint64_t> sums;
  sums.reserve(page::chunk_count(payload_bytes));
  for (uint64_t off = 0; off < payload_bytes; off += kVerifyChunk) {
    const uint64_t n = std::min(kVerifyChunk, payload_bytes - off);
    KVTIER_RETURN_IF_ERROR(
        object_io::transfer_range(agent, TransferOp::kRead, t, buf.data(), at + off, n));
    // The window starts on a chunk boundary, so its chunks are the page's.
    const ConstBuffer window{buf.data(), n};
    for (size_t c = 0; c < page::chunk_count(n); ++c) {
      sums.push_back(page::chunk_checksum(std::span<const ConstBuffer>(&window, 1), n, c, hash));
    }
  }
  return sums;
}

// A sealed page's payload (starting at `at` in `t`), when the tenant's keys open its page key:
// every chunk read and opened (kCorrupt for the first that does not). Pages whose key does
// not open are another tenant's (or key file's), and are left at what their header told.
Status open_sealed(Agent& agent, Target& t, AlignedBuffer& buf, uint64_t at, const page::Header& h,
                   const page::SealedView& view, const SealedReader* reader, Sealed* verdict) {
  *verdict = Sealed::kNotOpened;
  if (reader == nullptr) return ok_status();
  Result<std::string> key = reader->page_key(h, view);
  if (!key.ok()) return ok_status();
  // Chunks larger than the buffer (pages over 45 MiB) get one of their own.
  AlignedBuffer own;
  Registration own_reg;
  std::byte* mem = buf.data();
  if (view.chunk_bytes > buf.size()) {
    KVTIER_ASSIGN_OR_RETURN(own, AlignedBuffer::allocate(view.chunk_bytes));
    KVTIER_ASSIGN_OR_RETURN(own_reg, agent.register_memory(own.data(), own.size()));
    mem = own.data();
  }
  const size_t chunks = page::sealed_chunk_count(h.payload_bytes);
  for (size_t c = 0; c < chunks; ++c) {
    const uint64_t from = c * view.chunk_bytes;
    const uint64_t n = std::min<uint64_t>(view.chunk_bytes, h.payload_bytes - from);
    KVTIER_RETURN_IF_ERROR(
        object_io::transfer_range(agent, TransferOp::kRead, t, mem, at + from, n));
    Status st = reader->open_chunk(h, view, *key, static_cast<uint32_t>(c), {mem, n});
    if (!st.ok()) {
      return corrupt_error(fmt::format("sealed chunk {} of {} does not open under tenant {}'s key",
                                       c, chunks, reader->tenant()));
    }
  }
  *verdict = Sealed::kOpened;
  return ok_status();
}

// Checks a record of the segment layout as a get would: header, namespace, key hash, the
// summary's sizes, payload checksum (or tags).
Status verify_record(Agent& agent, const PageEntry& p, AlignedBuffer& buf,
                     const SealedReader* reader, Sealed* verdict) {
  KVTIER_ASSIGN_OR_RETURN(Target t,
                          agent.open_target(TargetSpec{p.path, TargetMode::kRead, 0, {}}));
  if (p.offset + p.bytes > t.size() || p.header_bytes == 0 || p.header_bytes > p.bytes ||
      p.header_bytes > page::kHeaderBytes) {
    return corrupt_error(fmt::format("record [{}, +{}) lies beyond the end of the segment ({})",
                                     p.offset, p.bytes, t.size()));
  }
  bool sealed = false;
  Block block;
  page::SealedView view;
  KVTIER_ASSIGN_OR_RETURN(
      page::Header h, read_header(agent, t, buf, p.offset, p.header_bytes, block, &sealed, view));
  KVTIER_RETURN_IF_ERROR(check_identity(h, p, "its summary says"));
  if (h.header_bytes != p.header_bytes || h.payload_bytes != p.payload_bytes) {
    return corrupt_error(
        fmt::format("header of {} bytes and payload of {}; its summary says {} and {}",
                    h.header_bytes, h.payload_bytes, p.header_bytes, p.payload_bytes));
  }
  KVTIER_RETURN_IF_ERROR(page::verify_record(h, p.bytes, std::nullopt));
  if (sealed) {
    return open_sealed(agent, t, buf, p.offset + h.header_bytes, h, view, reader, verdict);
  }
  KVTIER_ASSIGN_OR_RETURN(
      std::vector<uint64_t> sums,
      payload_checksums(agent, t, buf, p.offset + h.header_bytes, h.payload_bytes, h.chunk_hash));
  return page::verify_record(h, p.bytes, sums);
}

Status verify_page(Agent& agent, const PageEntry& p, AlignedBuffer& buf, const SealedReader* reader,
                   Sealed* verdict) {
  *verdict = Sealed::kNo;
  if (!p.summary.empty()) return verify_record(agent, p, buf, reader, verdict);
  KVTIER_ASSIGN_OR_RETURN(Target t,
                          agent.open_target(TargetSpec{p.path, TargetMode::kRead, 0, {}}));
  if (t.size() < page::kHeaderBytes) {
    return corrupt_error(fmt::format("{} bytes, shorter than a page header", t.size()));
  }
  bool sealed = false;
  Block block;
  page::SealedView view;
  KVTIER_ASSIGN_OR_RETURN(page::Header h,
                          read_header(agent, t, buf, 0, page::kHeaderBytes, block, &sealed, view));
  KVTIER_RETURN_IF_ERROR(check_identity(h, p, "stored under"));
  // The size first: the payload is read by the header's length.
  KVTIER_RETURN_IF_ERROR(page::verify_object(h, t.size(), std::nullopt));
  if (sealed) return open_sealed(agent, t, buf, page::kHeaderBytes, h, view, reader, verdict);
  KVTIER_ASSIGN_OR_RETURN(
      std::vector<uint64_t> sums,
      payload_checksums(agent, t, buf, page::kHeaderBytes, h.payload_bytes, h.chunk_hash));
  return page::verify_object(h, t.size(), sums);
}

}  // namespace

Result<VerifyReport> verify_store(const StoreLocation& location, const VerifyProgress& progress,
                                  const TenantKeys* keys) {
  std::unique_ptr<SealedReader> reader;
  if (keys != nullptr) {
    KVTIER_ASSIGN_OR_RETURN(reader, SealedReader::open(*keys));
  }
  KVTIER_ASSIGN_OR_RETURN(Agent agent, inspect::agent_for(location));
  Inventory inv;
  std::vector<PageEntry> pages;
  KVTIER_RETURN_IF_ERROR(inspect::walk(agent, location, &inv, &pages));
  KVTIER_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(kVerifyChunk));
  KVTIER_ASSIGN_OR_RETURN(Registration reg, agent.register_memory(buf.data(), buf.size()));
  VerifyReport report;
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageEntry& p = pages[i];
    ++report.pages;
    Sealed verdict = Sealed::kNo;
    Status st = verify_page(agent, p, buf, reader.get(), &verdict);
    if (st.ok()) {
      ++report.intact;
      report.bytes += p.bytes;
      if (verdict == Sealed::kOpened) ++report.opened;
      if (verdict == Sealed::kNotOpened) ++report.not_opened;
    } else if (st.code() != StatusCode::kNotFound) {  // removed meanwhile: not a problem
      report.problems.push_back(VerifyProblem{p.path, p.namespace_id, std::move(st), p.bytes, p});
    } else {
      --report.pages;
    }
    if (progress && !progress(i + 1, pages.size())) {
      report.stopped = true;
      break;
    }
  }
  return report;
}

}  // namespace kvtier
