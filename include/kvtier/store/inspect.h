// Inspection of a store location as a whole, across namespaces: what `kvtier stat` and
// `kvtier verify` print. Read-only, except that nothing here removes anything either.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
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
};

struct Inventory {
  std::vector<NamespaceSummary> namespaces;  // one per (namespace, base)
  uint64_t pages = 0;
  uint64_t bytes = 0;
  uint64_t temp_files = 0;
};

// kNotFound when a base directory does not exist.
Result<Inventory> take_inventory(const StoreLocation& location);

struct VerifyProblem {
  std::string path;
  std::string namespace_id;
  Status status;  // kCorrupt with the reason, or the fault that stopped the read
};

struct VerifyReport {
  uint64_t pages = 0;
  uint64_t intact = 0;
  uint64_t bytes = 0;
  std::vector<VerifyProblem> problems;
};

using VerifyProgress = std::function<void(uint64_t done, uint64_t total)>;

// Reads every page of every namespace and checks it completely (header, namespace directory,
// file name against key hash, size, payload checksum).
Result<VerifyReport> verify_store(const StoreLocation& location,
                                  const VerifyProgress& progress = {});

}  // namespace kvtier
