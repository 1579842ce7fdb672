// Inspection and maintenance of a store location as a whole, across namespaces: what
// `kvtier stat`, `ls`, `verify`, `gc` and `clear` do. Only remove_pages() and
// sweep_temporaries() change anything.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/store/uri.h"

namespace kvtier {

struct NamespaceSummary {
  std::string id;             // 32 hex digits
  std::string dir;            // where its pages live (one base)
  std::string manifest_json;  // the namespace's description as recorded; empty when missing
  uint64_t pages = 0;
  uint64_t bytes = 0;        // object bytes on storage (headers and padding included)
  uint64_t temp_files = 0;   // temporaries (live writers or left by crashed ones)
  uint64_t other_files = 0;  // names that are not pages (not kvtier's)
  // The segment layout: segment files and the bytes of segments and summaries on storage
  // (`pages` and `bytes` count the live records among them).
  uint64_t segments = 0;
  uint64_t segment_bytes = 0;
  // A FILE location: what the namespace's tree takes as `du` counts it (st_blocks), and of
  // that what is not pages (directories, the manifest, the capacity ledger and the shared
  // files beside it, temporaries): the bytes a capacity_bytes bounds. 0 on object stores.
  uint64_t allocated_bytes = 0;
  uint64_t metadata_bytes = 0;
};

struct Inventory {
  std::vector<NamespaceSummary> namespaces;  // one per (namespace, base)
  uint64_t pages = 0;
  uint64_t bytes = 0;
  uint64_t temp_files = 0;
  uint64_t allocated_bytes = 0;  // FILE locations, as above
  uint64_t metadata_bytes = 0;
};

// kNotFound when a base directory does not exist.
Result<Inventory> take_inventory(const StoreLocation& location);

struct PageListing {
  std::string path;
  std::string namespace_id;
  std::string namespace_dir;
  std::string name;  // the key hash, 32 hex digits
  uint64_t bytes = 0;
  uint64_t mtime_ns = 0;
  // A record of the segment layout: `path` is its segment, `summary` the segment's summary
  // (empty for a page file); where the record is, and how many live records its segment held
  // when listed (a segment whose every record is removed is removed whole).
  std::string summary;
  uint64_t offset = 0;
  uint32_t header_bytes = 0;
  uint64_t payload_bytes = 0;
  uint64_t segment_pages = 0;
  uint64_t namespace_pages = 0;  // live records in the namespace's segments when listed
};

// Called while listing with the number of pages found so far; returning false stops the
// listing, which then fails with kCancelled.
using ListProgress = std::function<bool(uint64_t found)>;

// Every page of the location whose namespace id starts with `namespace_prefix` (all when
// empty), least recently written first.
Result<std::vector<PageListing>> list_pages(const StoreLocation& location,
                                            std::string_view namespace_prefix = {},
                                            const ListProgress& progress = {});

struct RemovalReport {
  uint64_t pages = 0;
  uint64_t bytes = 0;
  Status first_error;    // the first failure other than "already gone"
  bool stopped = false;  // the progress callback stopped it: later pages were left alone
};

// Called after each group of pages (about a thousand) with the pages tried so far and the
// total; returning false stops the removal before the next group.
using RemovalProgress = std::function<bool(uint64_t done, uint64_t total)>;

// Removes pages (as listed), giving their bytes back to their namespaces' capacity ledgers.
// Records of the segment layout: a segment whose every listed record is removed goes whole
// (segment and summary); other records are forgotten through remove entries in a summary of
// their own, which every store of the namespace applies. When every live record of a
// namespace's segments goes, every segment file there goes (older copies that newer records
// had superseded, and remove entries, included), so nothing can be found again.
Result<RemovalReport> remove_pages(const StoreLocation& location,
                                   std::span<const PageListing> pages,
                                   const RemovalProgress& progress = {});

// Removes the pages of one namespace (`namespace_id`, as listed by list_pages) like
// remove_pages, then rewrites its clear generation, as Store::clear does: every store open on
// the namespace, in any process, drops its index on its next call and sees the pages gone.
// The generation is rewritten even when the removal stopped early (some pages are gone).
Result<RemovalReport> clear_namespace(const StoreLocation& location, std::string_view namespace_id,
                                      std::span<const PageListing> pages,
                                      const RemovalProgress& progress = {});

// Removes the temporaries of every namespace that no writer will publish: those whose writer
// (on this host) is gone, and those older than `min_age_s` (writers on other hosts); and, in
// the segment layout, segments older than `min_age_s` that no summary names (a summary that
// failed to be written, a writer killed between the two; with `min_age_s` 0, every one), on
// FILE and object stores alike.
// Returns how many it removed.
Result<uint64_t> sweep_temporaries(const StoreLocation& location, uint64_t min_age_s);

// A tenant's keys, for the commands that read its sealed pages (`--key-file`, `--tenant`;
// docs/security.md).
struct TenantKeys {
  std::string key_file;  // empty: the file $KVTIER_KEY_FILE names
  std::string tenant;    // empty: "default"
};

// Whose a page is.
enum class PageOwner : uint8_t {
  kUnread,  // gone meanwhile, or its header does not decode
  kClear,   // a page in the clear
  kTenant,  // sealed, and its page key opens under the tenant's keys
  kOther,   // sealed, and not the tenant's (another tenant's or key file's, a key id the key
            // file does not hold, or a damaged sealed key); every sealed page without keys
};
struct PageSeal {
  PageOwner owner = PageOwner::kUnread;
  uint32_t key_id = 0;  // what a sealed page's header names (0: not sealed)
};

// For each page, in the order given: whose it is, read from its header (the key id is in the
// clear there; the page key, sealed on its own, opens under `keys` for the tenant's pages).
// Without keys, every sealed page is kOther. The key file's errors when `keys` name one that
// cannot be read.
Result<std::vector<PageSeal>> page_seals(const StoreLocation& location,
                                         std::span<const PageListing> pages,
                                         const TenantKeys* keys = nullptr);

// The key id each page is sealed under (page_seals' key_id, no key needed): what
// `kvtier gc --retire-key-id` removes by.
Result<std::vector<uint32_t>> sealed_key_ids(const StoreLocation& location,
                                             std::span<const PageListing> pages);

struct VerifyProblem {
  std::string path;
  std::string namespace_id;
  Status status;       // kCorrupt with the reason, or the fault that stopped the read
  uint64_t bytes = 0;  // the object's size
  PageListing page;    // the page as listed (what remove_pages takes to repair it)
};

struct VerifyReport {
  uint64_t pages = 0;
  uint64_t intact = 0;
  uint64_t bytes = 0;
  // Of the intact pages, sealed ones: `opened`, the tenant's, every tag checked (with keys);
  // `not_opened`, the others (no keys, or not the tenant's): header, place and size checked.
  uint64_t opened = 0;
  uint64_t not_opened = 0;
  std::vector<VerifyProblem> problems;
  bool stopped = false;  // the progress callback stopped it: only `pages` pages were checked
};

// Called after each page with the pages checked and the pages listed; returning false stops
// the verification, whose report then covers the pages checked so far (`stopped` set).
using VerifyProgress = std::function<bool(uint64_t done, uint64_t total)>;

// Reads every page of every namespace and checks it completely (header, namespace directory,
// file name against key hash, size, payload checksum). A sealed page's payload is checked by
// its tags, which need its key: with `keys`, the tenant's pages are opened chunk by chunk (a
// chunk that does not open is a problem); other sealed pages have their header, place and
// size checked.
Result<VerifyReport> verify_store(const StoreLocation& location,
                                  const VerifyProgress& progress = {},
                                  const TenantKeys* keys = nullptr);

}  // namespace kvtier
