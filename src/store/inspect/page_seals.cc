// Whose each listed page is, from its header (inspect.h: page_seals, sealed_key_ids): in the
// clear, or sealed under a key id, and with a tenant's keys whether its page key opens.
#include <array>
#include <cstring>

#include "format/page_format.h"
#include "format/sealed_page.h"
#include "inspect/sealed_reader.h"
#include "inspect/walk.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/store/inspect.h"
#include "naming/object_io.h"

namespace kvtier {

Result<std::vector<PageSeal>> page_seals(const StoreLocation& location,
                                         std::span<const PageListing> pages,
                                         const TenantKeys* keys) {
  std::unique_ptr<inspect::SealedReader> reader;
  if (keys != nullptr) {
    KVTIER_ASSIGN_OR_RETURN(reader, inspect::SealedReader::open(*keys));
  }
  KVTIER_ASSIGN_OR_RETURN(Agent agent, inspect::agent_for(location));
  KVTIER_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(page::kHeaderBytes));
  KVTIER_ASSIGN_OR_RETURN(Registration reg, agent.register_memory(buf.data(), buf.size()));
  std::vector<PageSeal> seals(pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    const PageListing& p = pages[i];
    const bool record = !p.summary.empty();
    const uint64_t at = record ? p.offset : 0;
    const uint64_t header_bytes = record ? p.header_bytes : page::kHeaderBytes;
    if (header_bytes == 0 || header_bytes > page::kHeaderBytes) continue;
    Result<Target> t = agent.open_target(TargetSpec{p.path, TargetMode::kRead, 0, {}});
    if (!t.ok() || at + header_bytes > t->size()) continue;
    if (!object_io::transfer_range(agent, TransferOp::kRead, *t, buf.data(), at, header_bytes)
             .ok()) {
      continue;
    }
    const std::span<const std::byte, page::kHeaderBytes> block(buf.data(), page::kHeaderBytes);
    if (!page::is_sealed(block)) {
      if (page::decode(block).ok()) seals[i].owner = PageOwner::kClear;
      continue;
    }
    page::SealedView view;
    Result<page::Header> h = page::decode_sealed(block, view);
    if (!h.ok()) continue;
    seals[i].key_id = view.key_id;
    seals[i].owner =
        reader && reader->page_key(*h, view).ok() ? PageOwner::kTenant : PageOwner::kOther;
  }
  return seals;
}

Result<std::vector<uint32_t>> sealed_key_ids(const StoreLocation& location,
                                             std::span<const PageListing> pages) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<PageSeal> seals, page_seals(location, pages));
  std::vector<uint32_t> ids;
  ids.reserve(seals.size());
  for (const PageSeal& s : seals) ids.push_back(s.key_id);
  return ids;
}

}  // namespace kvtier
