// Fixtures shared by the store tests: store configurations for every backend, a registered
// page pool like a serving engine's host pool, and small helpers.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/store/store.h"
#include "src/testing/child_process.h"
#include "src/testing/test_util.h"

namespace kvtier::testing {

// A generic namespace (any page size) for one test model.
inline NamespaceSpec test_namespace(std::string model = "test-model") {
  NamespaceSpec ns;
  ns.model = std::move(model);
  ns.dtype = "bfloat16";
  ns.layout = "page_first";
  ns.page_tokens = 64;
  return ns;
}

// One store configuration of the behaviour suite.
struct StoreCase {
  std::string label;
  std::string backend;  // "posix", "dram"
  std::string query;    // extra URI parameters
  int bases = 1;        // base directories
  DirectIo direct_io = DirectIo::kOff;
  bool fsync = false;  // StoreConfig::fsync
};

inline void PrintTo(const StoreCase& c, std::ostream* os) {
  *os << c.label;
}

inline std::string case_name(const ::testing::TestParamInfo<StoreCase>& info) {
  return info.param.label;
}

// The location of `c` under `dir` (mem:// names are unique per directory).
inline StoreLocation location_for(const StoreCase& c, const TempDir& dir) {
  std::string uri;
  if (c.backend == "s3") {
    // A fresh prefix per test directory: tests never see each other's objects.
    Result<StoreLocation> loc = parse_store_uri(s3_test_server().uri(dir.path(), c.query));
    EXPECT_TRUE(loc.ok()) << loc.status().to_string();
    return loc.ok() ? *loc : StoreLocation{};
  }
  if (c.backend == "dram") {
    std::string name = dir.path();
    for (char& ch : name) ch = ch == '/' ? '_' : ch;
    uri = "mem://" + name;
  } else {
    uri = "file://";
    for (int b = 0; b < c.bases; ++b) uri += (b ? "," : "") + dir.file("base" + std::to_string(b));
  }
  uri += "?backend=" + c.backend + c.query;
  Result<StoreLocation> loc = parse_store_uri(uri);
  EXPECT_TRUE(loc.ok()) << loc.status().to_string();
  return loc.ok() ? *loc : StoreLocation{};
}

// The file of `key`'s page in `store`'s first base directory (a FILE store): routed as the
// store routes it, <namespace dir>/<first two hex digits>/<key hash in hex>.
inline std::string page_file(const Store& store, std::string_view key) {
  const std::string hex = hash128(key).hex();
  return store.namespace_dirs()[0] + "/" + hex.substr(0, 2) + "/" + hex;
}

// The store's backend goes through `faults` (none: as it is).
// Pages `store` refused for `reason` (StoreStats::pages_rejected), and for any reason.
inline uint64_t rejected(const Store& store, const std::string& reason) {
  const StoreStats s = store.stats();
  const auto it = s.pages_rejected.find(reason);
  return it == s.pages_rejected.end() ? 0 : it->second;
}
inline uint64_t rejected_total(const Store& store) {
  uint64_t n = 0;
  for (const auto& [reason, count] : store.stats().pages_rejected) n += count;
  return n;
}

inline void decorate(StoreConfig& cfg, std::shared_ptr<FaultInjector> faults) {
  if (!faults) return;
  cfg.decorate = [faults](std::unique_ptr<Backend> inner) {
    return make_fault_backend(std::move(inner), faults);
  };
}

inline std::unique_ptr<Store> open_store(StoreConfig cfg) {
  Result<std::unique_ptr<Store>> s = Store::open(cfg);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline std::unique_ptr<Store> open_store(const StoreLocation& loc, NamespaceSpec ns,
                                         std::shared_ptr<FaultInjector> faults = nullptr,
                                         DirectIo direct_io = DirectIo::kOff, bool fsync = false) {
  StoreConfig cfg;
  cfg.location = loc;
  cfg.ns = std::move(ns);
  cfg.direct_io = direct_io;
  cfg.fsync = fsync;
  decorate(cfg, std::move(faults));
  return open_store(std::move(cfg));
}

// A registered host pool of `slots` slots of `slot_bytes` each.
class PagePool {
 public:
  PagePool(Store& store, size_t slots, size_t slot_bytes)
      : slot_bytes_(slot_bytes), memory_(make_buffer(slots * slot_bytes)) {
    Result<Registration> r = store.register_memory(memory_.data(), memory_.size());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) registration_ = std::move(r).value();
  }

  std::byte* slot(size_t i) { return memory_.data() + i * slot_bytes_; }
  size_t slot_bytes() const { return slot_bytes_; }
  ConstBuffer in(size_t i, size_t n) { return ConstBuffer{slot(i), n}; }
  MutableBuffer out(size_t i, size_t n) { return MutableBuffer{slot(i), n}; }
  void fill(size_t i, size_t n, uint64_t seed) { fill_pattern(slot(i), n, seed); }
  bool holds(size_t i, size_t n, uint64_t seed) {
    return find_pattern_mismatch(slot(i), n, seed) == SIZE_MAX;
  }
  void clear(size_t i) { std::memset(slot(i), 0, slot_bytes_); }

  // A batch of `n` pages of `bytes`: slots 0..n-1 filled with patterns 0..n-1 to write from,
  // slots n..2n-1 to read them back into.
  struct Batch {
    std::vector<ConstBuffer> in;
    std::vector<MutableBuffer> out;
  };
  Batch fill_batch(size_t n, size_t bytes) {
    Batch b;
    for (size_t i = 0; i < n; ++i) {
      fill(i, bytes, i);
      b.in.push_back(in(i, bytes));
      b.out.push_back(out(n + i, bytes));
    }
    return b;
  }
  void release() { registration_.reset(); }

 private:
  size_t slot_bytes_;
  AlignedBuffer memory_;
  Registration registration_;
};

// Where a crash test stops its writer: the (skip + 1)-th call of `op` on a path containing
// `path_contains` (fault_trap_at), and with `also`, one the writer's body also accepts by that
// name (crash_writer_faults). Plain data, since it reaches the writer as arguments.
struct TrapPoint {
  FaultOp op;
  std::string path_contains;
  uint64_t skip = 0;
  std::string also;
};

// Where a crash test kills its writer: held at a trap (exactly between two steps of a write),
// or, without one, as soon as the writer has reported `batches` whole batches (wherever in the
// next one it has got to).
struct KillPoint {
  std::string name;  // for messages: "before a summary append #3"
  std::optional<TrapPoint> trap;
  size_t batches = 1;
  // With a trap: the writer has failed to reach it once it has done this many batches.
  size_t trap_within = 200;
};

// What a crash test's writer reports to its parent (child_event).
inline constexpr char kBatchDone = 'b', kTrapped = 't';

// A crash test's writer: the child body `child` (KVTIER_CHILD), started with `args` followed by
// the kill point's trap (kTrapArgs more arguments, read by crash_writer_faults). The body opens
// its store through that injector and runs run_crash_writer(); `batch_keys(n)` are the keys of
// its batch n, here as in the body.
struct CrashWriter {
  std::string child;
  std::vector<std::string> args;
  std::function<std::vector<std::string>(size_t)> batch_keys;
};

inline constexpr size_t kTrapArgs = 4;

inline std::vector<std::string> trap_args(const std::optional<TrapPoint>& trap) {
  if (!trap) return {"-", "", "0", ""};
  return {std::to_string(static_cast<int>(trap->op)), trap->path_contains,
          std::to_string(trap->skip), trap->also};
}

// In a crash writer's body: a fault injector holding the trap that args[from, from +
// kTrapArgs) describe (none for a kill point without one); reaching it reports kTrapped and
// waits for the SIGKILL. `also`: the predicates the body knows, by name.
inline std::shared_ptr<FaultInjector> crash_writer_faults(
    const ChildArgs& args, size_t from,
    const std::map<std::string, std::function<bool(const FaultCall&)>, std::less<>>& also = {}) {
  auto faults = std::make_shared<FaultInjector>();
  if (args.str(from) == "-") return faults;
  std::function<bool(const FaultCall&)> predicate;
  if (!args.str(from + 3).empty()) predicate = also.at(args.str(from + 3));
  faults->set_trap(fault_trap_at(
      static_cast<FaultOp>(args.u64(from)), args.str(from + 1), args.u64(from + 2),
      [] {
        child_event(kTrapped);
        for (;;) ::pause();  // until the SIGKILL
      },
      std::move(predicate)));
  return faults;
}

// In a crash writer's body: puts batch 0, 1, ... with `put`, reporting each whole batch
// (kBatchDone), until it is killed. Returns 3 when a put fails.
inline int run_crash_writer(const std::function<std::vector<std::string>(size_t)>& batch_keys,
                            const std::function<bool(const std::vector<std::string>&)>& put) {
  for (size_t n = 0;; ++n) {
    if (!put(batch_keys(n))) return 3;
    child_event(kBatchDone);
  }
}

// Batch n of a writer that goes round `keys` keys (prefix + 0, 1, ...), `batch` at a time.
inline std::vector<std::string> round_robin_batch(std::string_view prefix, size_t keys,
                                                  size_t batch, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < batch; ++i) {
    out.push_back(std::string(prefix) + std::to_string((n * batch + i) % keys));
  }
  return out;
}

// `n` kill points without a trap: after 1..max_batches whole batches, in turn.
inline std::vector<KillPoint> kills_after_batches(size_t n, size_t max_batches) {
  std::vector<KillPoint> out;
  for (size_t i = 0; i < n; ++i) {
    const size_t b = 1 + i % max_batches;
    out.push_back({"after " + std::to_string(b) + " batches", std::nullopt, b});
  }
  return out;
}

// Starts the writer and SIGKILLs it at `point`; returns how many batches it reported whole
// before (batches 0..n-1 are in the store whatever the kill left). The child reports on its
// pipe: a batch done, or the trap reached, after which it waits to be killed. So the kill lands
// where it must however slow the machine is.
inline size_t kill_writer(const CrashWriter& writer, const KillPoint& point) {
  std::vector<std::string> args = writer.args;
  for (std::string& a : trap_args(point.trap)) args.push_back(std::move(a));
  Child child = Child::start(writer.child, std::move(args));
  if (!child.valid()) return 0;
  size_t done = 0;
  int event = Child::kEnd;
  while ((event = child.next()) == kBatchDone) {
    ++done;
    if (done == (point.trap ? point.trap_within : point.batches)) break;
  }
  const bool reached = point.trap ? event == kTrapped : done == point.batches;
  child.kill(SIGKILL);
  const int code = child.wait();
  EXPECT_TRUE(reached) << point.name << ": "
                       << (event == kBatchDone    ? "the trap was not reached in its batches"
                           : event == Child::kEnd ? "the writer ended by itself (2: open "
                                                    "failed, 3: a put failed)"
                                                  : "the writer hung");
  EXPECT_EQ(code, 128 + SIGKILL) << point.name;
  return done;
}

// Kills a writer at each point in turn. Returns the keys of the batches some writer reported
// whole (batch 0 up to the most batches one got through; each key once): each must be a hit,
// whatever the kills left.
inline std::vector<std::string> kill_writer_at_each(const CrashWriter& writer,
                                                    const std::vector<KillPoint>& points) {
  size_t committed = 0;
  for (const KillPoint& point : points) committed = std::max(committed, kill_writer(writer, point));
  std::vector<std::string> done;
  for (size_t n = 0; n < committed; ++n) {
    for (std::string& k : writer.batch_keys(n)) {
      if (std::find(done.begin(), done.end(), k) == done.end()) done.push_back(std::move(k));
    }
  }
  return done;
}

inline std::vector<std::string> keys_for(std::string_view prefix, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(std::string(prefix) + std::to_string(i));
  return out;
}

inline std::vector<std::string_view> views(const std::vector<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

}  // namespace kvtier::testing
