// Where a store lives, from a URI or a plain path.
//
//   /var/cache/kvtier                       a directory (FILE)
//   file:///var/cache/kvtier                the same
//   file:///mnt/nvme0/kv,/mnt/nvme1/kv      several base directories, pages spread by hash
//   file:///data/kv?backend=posix&io_threads=16
//   mem://name                              process memory (the dram backend), shared by
//                                           every store opened on the same name
//   s3://bucket/prefix?endpoint=http://127.0.0.1:7480&region=us-east-1
//                                           an S3 bucket (the s3 backend); objects under
//                                           `prefix`
//
// Query parameters: `backend` picks the backend ("auto" by default), `layout` the FILE
// layout ("auto" by default, "files" or "segments"), and on file:// `deadline_ms`,
// `probe_interval_ms`, `isolate`, `segment_lanes`, `cpus`, `admission` and `refresh_ms` (on s3://
// `segment_lanes` and `refresh_ms`), and `tenant` on any, go to the store
// (StoreLocation::store_params; `key=` and `key_file=` are refused: key material never comes
// from a URI, see StoreConfig::key_file); every other
// parameter goes to the backend (io_threads, max_io_bytes, endpoint, region, `share` of the FILE
// backends: private or group, see kvtier/core/file_access.h, ...), which rejects a
// name it does not know and a value it cannot parse when the store opens (kInvalidArgument naming
// the parameter; see BackendRegistry). uri() prints
// parameters that hold secrets (names with "secret", "token" or "password") as REDACTED.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/transfer/backend.h"

namespace kvtier {

struct StoreLocation {
  StorageClass storage_class = StorageClass::kFile;
  // Absolute, normalized base paths (FILE); a single "/<name>" for memory.
  std::vector<std::string> bases;
  std::string backend = "auto";
  // How a FILE store lays pages out: "files" (one file per page), "segments" (records
  // appended to large segment files; docs/format.md) or "auto" (the default: what the
  // namespace holds, else by page size; see StoreLayout in store.h). The `layout` query
  // parameter.
  std::string layout = "auto";
  BackendParams params;
  // FILE locations: the store's own parameters, not the backend's: `deadline_ms`,
  // `probe_interval_ms` and `isolate` (docs/architecture.md, "Locations that hang"), checked
  // when the store opens. Tools that only inspect a location ignore them.
  BackendParams store_params;

  // The URI that parses back to this location: '%', control bytes and the separators of each
  // part ('?' and ',' in paths, '&' in values) are %-encoded. Secret parameters print as
  // REDACTED, so only a location without secrets parses back equal.
  std::string uri() const;
};

// kInvalidArgument for malformed URIs, kUnsupported for schemes this build lacks.
Result<StoreLocation> parse_store_uri(std::string_view uri);

}  // namespace kvtier
