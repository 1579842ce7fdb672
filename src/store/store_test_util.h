// Fixtures shared by the store tests: store configurations for every backend, a registered
// page pool like a serving engine's host pool, and small helpers.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/store/store.h"
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
  if (faults) {
    cfg.decorate = [faults](std::unique_ptr<Backend> b) {
      return make_fault_backend(std::move(b), faults);
    };
  }
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

// Runs `body` in a forked child and returns its pid; the child exits with body's return value.
// Nothing of the test framework runs in the child (an exception or a failed check ends it
// with code 9). ThreadSanitizer builds cannot run such children (under_thread_sanitizer()).
template <typename Body>
pid_t spawn(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 9;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);
  }
  return pid;
}

// Waits for a child: its exit code, 128 + the signal that ended it, or -1.
inline int wait_exit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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
