// The segment layout tests' common ground (store_segments_test.cc,
// store_segments_capacity_test.cc): a store fixture opening the layout in a temporary directory,
// with or without a capacity, and helpers that write pages of known content and check what comes
// back.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier::testing {

inline constexpr size_t kPage = 70272;  // a DeepSeek-V3 page of one token

inline uint64_t seed_of(const std::string& key) {
  return std::hash<std::string>{}(key);
}

struct SegFiles {
  std::vector<std::string> segments;
  std::vector<std::string> summaries;
  uint64_t bytes = 0;
};

inline SegFiles seg_files(const Store& s) {
  SegFiles out;
  for (const std::string& dir : s.namespace_dirs()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/seg", ec)) {
      const std::string p = e.path().string();
      if (p.ends_with(".seg")) out.segments.push_back(p);
      if (p.ends_with(".sum")) out.summaries.push_back(p);
      // Allocated bytes: what the records take on disk, holes not counted.
      struct stat st;
      if (::stat(p.c_str(), &st) == 0) out.bytes += static_cast<uint64_t>(st.st_size);
    }
  }
  std::sort(out.segments.begin(), out.segments.end());
  std::sort(out.summaries.begin(), out.summaries.end());
  return out;
}

class SegmentStoreTest : public ::testing::Test {
 protected:
  // `lanes` 0: the store's default (one per hardware thread, at most 4).
  // `faults`: the backend goes through a fault injector.
  std::unique_ptr<Store> open(std::string query = "?backend=posix&layout=segments",
                              uint64_t segment_bytes = 1 << 20, size_t lanes = 0,
                              std::shared_ptr<FaultInjector> faults = nullptr) {
    StoreConfig cfg;
    cfg.location = *parse_store_uri("file://" + dir_.file("store") + query);
    cfg.ns = test_namespace("segments");
    cfg.segment_bytes = segment_bytes;
    cfg.segment_lanes = lanes;
    decorate(cfg, std::move(faults));
    return open_store(std::move(cfg));
  }

  // A store with a capacity: segments are then at most capacity / 64 (1 MiB at least).
  std::unique_ptr<Store> open_capped(uint64_t capacity,
                                     std::shared_ptr<FaultInjector> faults = nullptr) {
    StoreConfig cfg;
    cfg.location =
        *parse_store_uri("file://" + dir_.file("store") + "?backend=posix&layout=segments");
    cfg.ns = test_namespace("segments");
    cfg.capacity_bytes = capacity;
    decorate(cfg, std::move(faults));
    return open_store(std::move(cfg));
  }

  static BatchResult put(Store& s, PagePool& pool, const std::vector<std::string>& keys) {
    std::vector<ConstBuffer> in;
    for (size_t i = 0; i < keys.size(); ++i) {
      pool.fill(i, kPage, seed_of(keys[i]));
      in.push_back(pool.in(i, kPage));
    }
    return s.batch_put(views(keys), in);
  }

  // Reads every key: the number of hits; a hit must hold its key's content.
  static size_t read_all(Store& s, PagePool& pool, const std::vector<std::string>& keys) {
    size_t hits = 0;
    for (const std::string& k : keys) {
      Status st = s.get(k, pool.slot(0), kPage);
      if (st.ok()) {
        ++hits;
        EXPECT_TRUE(pool.holds(0, kPage, seed_of(k))) << k;
      } else {
        EXPECT_EQ(st.code(), StatusCode::kNotFound) << k << ": " << st.to_string();
      }
    }
    return hits;
  }

  TempDir dir_;
};

}  // namespace kvtier::testing
