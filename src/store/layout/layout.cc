// Which layout a store opens with (layout.h).
#include "layout/layout.h"

#include "layout/page_files.h"
#include "layout/segments.h"
#include "store_impl.h"

namespace kvtier {

std::unique_ptr<Layout> make_layout(Store::Impl& store, StoreLayout kind) {
  if (kind == StoreLayout::kFiles) return std::make_unique<PageFiles>(store);
  if (store.config.location.storage_class == StorageClass::kObject) {
    return std::make_unique<ObjectSegments>(store);
  }
  return std::make_unique<FileSegments>(store);
}

Result<bool> holds_pages(Store::Impl& store, StoreLayout kind) {
  return kind == StoreLayout::kFiles ? PageFiles::holds_pages(store)
                                     : SegmentLayout::holds_pages(store);
}

}  // namespace kvtier
