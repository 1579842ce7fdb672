// Which layout a store opens with: the one named (StoreConfig::layout, or the URI's) or
// layout=auto's choice, checked against the configuration, and made (layout.h).
#include <fmt/format.h>

#include "layout/layout.h"
#include "layout/page_files.h"
#include "layout/segments.h"
#include "window/store_core.h"

namespace kvtier {
namespace {

Status check_segments_config(const StoreConfig& config) {
  if (config.location.storage_class == StorageClass::kMemory) {
    return unsupported_error(fmt::format(
        "{}: the segment layout needs a FILE or object store; memory keeps one object per page",
        config.location.uri()));
  }
  if (config.segment_lanes > 64) {
    return invalid_argument_error(
        fmt::format("segment_lanes {} is more than 64", config.segment_lanes));
  }
  if (config.segment_bytes < (uint64_t{1} << 20)) {
    return invalid_argument_error(fmt::format(
        "segment_bytes {} is below the smallest segment (1 MiB)", config.segment_bytes));
  }
  return ok_status();
}

// What layout=auto resolves to. A namespace that already holds page files keeps the files
// layout (its pages stay readable); one that holds segments keeps segments; an empty one gets
// segments when its pages are below kAutoSegmentsBelow (kAutoObjectSegmentsBelow on an
// object store; fixed by the namespace, or the caller's page_bytes when its pieces differ in
// size), files otherwise.
Result<LayoutChoice> auto_layout(StoreCore& store) {
  const StoreConfig& config = store.config;
  if (config.location.storage_class == StorageClass::kMemory) {
    return LayoutChoice{StoreLayout::kFiles, "memory: one object per page"};
  }
  const bool object = config.location.storage_class == StorageClass::kObject;
  const uint64_t below = object ? kAutoObjectSegmentsBelow : kAutoSegmentsBelow;
  KVTIER_ASSIGN_OR_RETURN(const bool page_files, holds_pages(store, StoreLayout::kFiles));
  if (page_files) {
    return LayoutChoice{StoreLayout::kFiles, "the namespace already holds page files"};
  }
  KVTIER_ASSIGN_OR_RETURN(const bool segments, holds_pages(store, StoreLayout::kSegments));
  if (segments) {
    return LayoutChoice{StoreLayout::kSegments, "the namespace already holds segments"};
  }
  const uint64_t page = config.ns.piece_bytes != 0
                            ? config.ns.piece_bytes * config.ns.pieces_per_page
                            : config.page_bytes;
  if (page == 0) {
    return LayoutChoice{StoreLayout::kFiles, "page size unknown (pieces of unequal sizes)"};
  }
  const std::string_view where = object ? " on an object store" : "";
  if (page < below) {
    return LayoutChoice{StoreLayout::kSegments,
                        fmt::format("pages of {} B, below {} MiB{}", page, below >> 20, where)};
  }
  return LayoutChoice{StoreLayout::kFiles,
                      fmt::format("pages of {} B, {} MiB or more{}", page, below >> 20, where)};
}

}  // namespace

std::string_view store_layout_name(StoreLayout layout) {
  return layout == StoreLayout::kSegments ? "segments" : "files";
}

Result<StoreLayout> parse_store_layout(std::string_view text) {
  if (text == "files") return StoreLayout::kFiles;
  if (text == "segments") return StoreLayout::kSegments;
  return invalid_argument_error(fmt::format("layout '{}' (use files or segments)", text));
}

Result<std::optional<StoreLayout>> named_layout(const StoreConfig& config) {
  const std::string_view name =
      config.layout.empty() ? std::string_view(config.location.layout) : config.layout;
  if (name == "auto") return std::optional<StoreLayout>();
  KVTIER_ASSIGN_OR_RETURN(const StoreLayout layout, parse_store_layout(name));
  if (layout == StoreLayout::kSegments) KVTIER_RETURN_IF_ERROR(check_segments_config(config));
  return std::optional<StoreLayout>(layout);
}

Result<LayoutChoice> choose_layout(StoreCore& store, std::optional<StoreLayout> named) {
  if (named) return LayoutChoice{*named, std::string(store_layout_name(*named))};
  KVTIER_ASSIGN_OR_RETURN(LayoutChoice chosen, auto_layout(store));
  if (chosen.kind == StoreLayout::kSegments) {
    KVTIER_RETURN_IF_ERROR(check_segments_config(store.config));
  }
  chosen.summary = fmt::format("{} (auto: {})", store_layout_name(chosen.kind), chosen.summary);
  return chosen;
}

std::unique_ptr<Layout> make_layout(StoreCore& store, StoreLayout kind) {
  if (kind == StoreLayout::kFiles) return std::make_unique<PageFiles>(store);
  if (store.config.location.storage_class == StorageClass::kObject) {
    return std::make_unique<ObjectSegments>(store);
  }
  return std::make_unique<FileSegments>(store);
}

Result<bool> holds_pages(StoreCore& store, StoreLayout kind) {
  return kind == StoreLayout::kFiles ? PageFiles::holds_pages(store)
                                     : SegmentLayout::holds_pages(store);
}

}  // namespace kvtier
