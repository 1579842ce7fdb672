// The `kvtier` CLI's commands: thin layers over the library.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvtier::cli {

// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // ran, and found a problem (corrupt pages, bad bytes)
inline constexpr int kExitUsage = 2;   // bad arguments, or the store could not be opened
// kExitInterrupted (130, progress.h): stopped by Ctrl-C after cleaning up.

struct BenchOptions {
  std::string dir;    // --dir
  std::string uri;    // --uri
  std::string model;  // --model
  uint64_t page_bytes = 0;
  uint64_t pages = 128;
  uint64_t batch = 32;
  uint64_t threads = 1;
  uint64_t in_flight = 1;  // --in-flight: batches each client thread keeps submitted
  // --pool-pages: host pool pages per batch in flight, batches taking turns through them
  // (0: one batch's worth, reused by every batch)
  uint64_t pool_pages = 0;
  std::string backend;
  uint64_t io_threads = 0;
  std::string direct_io = "off";
  std::string layout;          // --layout: files or segments (empty: the URI's, files by default)
  uint64_t segment_lanes = 0;  // --segment-lanes (0: the store's default)
  bool fsync = false;
  bool skip_payload_checksum = false;
  bool keep = false;
  bool json = false;
  bool quiet = false;     // --quiet: no progress bar
  uint64_t capacity = 0;  // --capacity: the store's capacity_bytes (0: none)
  // --deadline-ms / --isolate: StoreConfig::deadline_ms and isolate (unset/empty: the URI's)
  std::optional<uint64_t> deadline_ms;
  std::string isolate;
  // --key-file / --tenant: StoreConfig::key_file and tenant (empty: $KVTIER_KEY_FILE, the
  // URI's tenant=)
  std::string key_file;
  std::string tenant;
};

int run_bench(const BenchOptions& options);

struct InspectOptions {
  std::string location;
  bool json = false;
  bool prometheus = false;               // stat --prometheus
  bool repair = false;                   // verify --repair
  std::string namespace_prefix;          // ls/clear --namespace
  uint64_t to_bytes = 0;                 // gc --to
  uint64_t temp_age_s = 3600;            // gc --temp-age: temporaries older than this are abandoned
  bool quiet = false;                    // --quiet: no progress bar
  std::vector<uint32_t> retire_key_ids;  // gc --retire-key-id: sealed pages under these go
  // --key-file / --tenant: read as this tenant (its sealed pages alone, opened); neither
  // given: every page, sealed ones by their headers
  std::string key_file;
  std::string tenant;
  // --deadline-ms: how long the command waits for a location that stops answering (unset: the
  // URI's deadline_ms, else 10000; 0: no deadline); see watchdog.h.
  std::optional<uint64_t> deadline_ms;
};

int run_stat(const InspectOptions& options);
int run_verify(const InspectOptions& options);
int run_ls(const InspectOptions& options);
int run_gc(const InspectOptions& options);
int run_clear(const InspectOptions& options);

// The default store location of `kvtier bench`: $TMPDIR/kvtier-bench, or ./kvtier-bench when
// TMPDIR is unset.
std::string default_bench_dir();

}  // namespace kvtier::cli
