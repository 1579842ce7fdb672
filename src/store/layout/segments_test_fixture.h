// The segment layout tests' common ground (store_segments_test.cc,
// store_segments_capacity_test.cc): a store fixture opening the layout in a temporary directory,
// with or without a capacity, and helpers that write pages of known content and check what comes
// back.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "capacity/footprint.h"
#include "format/page_format.h"
#include "format/segment_format.h"
#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/core/unique_fd.h"
#include "kvtier/store/store.h"
#include "src/store/store_test_util.h"

namespace kvtier::testing {

inline constexpr size_t kPage = 70272;  // a DeepSeek-V3 page of one token

inline uint64_t seed_of(const std::string& key) {
  return std::hash<std::string>{}(key);
}

struct SegFiles {
  std::vector<std::string> segments, summaries;
  uint64_t bytes = 0;      // their sizes
  uint64_t charged = 0;    // as the capacity ledger charges them (capacity/footprint.h)
  uint64_t allocated = 0;  // their blocks (st_blocks)
};

inline SegFiles seg_files(const Store& s) {
  SegFiles out;
  for (const std::string& dir : s.namespace_dirs()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/seg", ec)) {
      const std::string p = e.path().string();
      if (p.ends_with(".seg")) out.segments.push_back(p);
      if (p.ends_with(".sum")) out.summaries.push_back(p);
      struct stat st;
      if (::stat(p.c_str(), &st) == 0) {
        out.bytes += static_cast<uint64_t>(st.st_size);
        out.charged += footprint::appended_file_bytes(st.st_size, footprint::kBlockBytes);
        out.allocated += static_cast<uint64_t>(st.st_blocks) * 512;
      }
    }
  }
  std::sort(out.segments.begin(), out.segments.end());
  std::sort(out.summaries.begin(), out.summaries.end());
  return out;
}

// Flips one payload byte of the second record of the store's first segment (compact records of
// kPage bytes under keys of `key_size` bytes: a 4096-byte segment header, then records of
// header + payload rounded to 64 bytes).
inline void damage_second_record(const Store& s, size_t key_size) {
  const uint64_t record = page::record_bytes(page::compact_header_bytes(key_size), kPage);
  const std::string seg = seg_files(s).segments.at(0);
  Result<UniqueFd> fd = open_file(seg.c_str(), O_RDWR);
  ASSERT_TRUE(fd.ok()) << fd.status().to_string();
  const off_t at = static_cast<off_t>(segment::kSegmentHeaderBytes + record + 5000);
  char c = 0;
  ASSERT_EQ(::pread(fd->get(), &c, 1, at), 1);
  c = static_cast<char>(c ^ 0x10);
  ASSERT_EQ(::pwrite(fd->get(), &c, 1, at), 1);
}

// The segment layout in directory `dir`. `lanes` 0: the store's default (one per hardware
// thread, at most 4). `faults`: the backend goes through a fault injector.
inline std::unique_ptr<Store> open_segments(const std::string& dir,
                                            std::string query = "?backend=posix&layout=segments",
                                            uint64_t segment_bytes = 1 << 20, size_t lanes = 0,
                                            std::shared_ptr<FaultInjector> faults = nullptr) {
  StoreConfig cfg;
  cfg.location = *parse_store_uri("file://" + dir + query);
  cfg.ns = test_namespace("segments");
  cfg.segment_bytes = segment_bytes;
  cfg.segment_lanes = lanes;
  decorate(cfg, std::move(faults));
  return open_store(std::move(cfg));
}

// The segment layout in `dir` with a capacity: segments are then at most capacity / 64 (1 MiB
// at least). With `key_file`, its pages are sealed (docs/security.md).
inline std::unique_ptr<Store> open_segments_capped(const std::string& dir, uint64_t capacity,
                                                   std::shared_ptr<FaultInjector> faults = nullptr,
                                                   const std::string& key_file = "") {
  StoreConfig cfg;
  cfg.location = *parse_store_uri("file://" + dir + "?backend=posix&layout=segments");
  cfg.ns = test_namespace("segments");
  cfg.capacity_bytes = capacity;
  cfg.key_file = key_file;
  decorate(cfg, std::move(faults));
  return open_store(std::move(cfg));
}

// Writes `keys` from the first slots of `pool`, each page filled with its key's pattern.
inline BatchResult put_keys(Store& s, PagePool& pool, const std::vector<std::string>& keys) {
  std::vector<ConstBuffer> in;
  for (size_t i = 0; i < keys.size(); ++i) {
    pool.fill(i, kPage, seed_of(keys[i]));
    in.push_back(pool.in(i, kPage));
  }
  return s.batch_put(views(keys), in);
}

class SegmentStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> open(std::string query = "?backend=posix&layout=segments",
                              uint64_t segment_bytes = 1 << 20, size_t lanes = 0,
                              std::shared_ptr<FaultInjector> faults = nullptr) {
    return open_segments(dir_.file("store"), std::move(query), segment_bytes, lanes,
                         std::move(faults));
  }

  std::unique_ptr<Store> open_capped(uint64_t capacity,
                                     std::shared_ptr<FaultInjector> faults = nullptr,
                                     const std::string& key_file = "") {
    return open_segments_capped(dir_.file("store"), capacity, std::move(faults), key_file);
  }

  static BatchResult put(Store& s, PagePool& pool, const std::vector<std::string>& keys) {
    return put_keys(s, pool, keys);
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
