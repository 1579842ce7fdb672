// A capacity is the bytes on storage: whatever a store writes, the whole tree under its base
// directory takes no more than capacity_bytes plus one page as `du` counts it (st_blocks), for
// both layouts and capacities from the smallest a store accepts up; what it keeps beside its
// pages stays within what it set aside (StoreStats::metadata_bytes), which `kvtier stat`'s
// inventory measures; a capacity below the smallest is refused.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "format/page_format.h"
#include "kvtier/store/inspect.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

// A payload that is not a whole number of blocks: both layouts round what they store.
constexpr size_t kPage = (64 << 10) + 1000;

NamespaceSpec footprint_namespace() {
  NamespaceSpec ns = testing::test_namespace("footprint-model");
  ns.piece_bytes = kPage;
  ns.pieces_per_page = 1;
  return ns;
}

// What `dir` and everything under it take, as `du` counts it.
uint64_t du(const std::string& dir) {
  struct stat st {};
  uint64_t bytes = ::lstat(dir.c_str(), &st) == 0 ? uint64_t(st.st_blocks) * 512 : 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (::lstat(it->path().c_str(), &st) == 0) bytes += uint64_t(st.st_blocks) * 512;
  }
  return bytes;
}

struct Case {
  StoreLayout layout;
  std::string name;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class StoreFootprint : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<Store> open_at(const std::string& dir, uint64_t capacity) {
    StoreConfig cfg;
    cfg.location =
        *parse_store_uri(fmt::format("{}?backend=posix&layout={}", dir, GetParam().name));
    cfg.ns = footprint_namespace();
    cfg.capacity_bytes = capacity;
    return testing::open_store(std::move(cfg));
  }
  // The smallest capacity a store of this layout accepts for these pages.
  uint64_t smallest() const {
    return capacity_holding(capacity_page_bytes(page::object_bytes(kPage)), GetParam().layout);
  }

  testing::TempDir dir_;
};

TEST_P(StoreFootprint, TheWholeTreeStaysWithinTheCapacity) {
  const uint64_t page_blocks = (page::object_bytes(kPage) + 4095) / 4096 * 4096;
  for (const uint64_t capacity :
       {smallest(), 2 * smallest(), uint64_t{6} << 20, uint64_t{24} << 20}) {
    SCOPED_TRACE(fmt::format("capacity {}", capacity));
    const std::string dir = dir_.file(fmt::format("c{}", capacity));
    auto s = open_at(dir, capacity);
    ASSERT_NE(s, nullptr);
    // Three capacities of pages, each under a key of its own (every fan-out directory made),
    // in batches that fit the room the pages have.
    const uint64_t room = capacity - s->stats().metadata_bytes;
    const size_t batch = std::clamp<size_t>(room / page::object_bytes(kPage) / 4, 1, 8);
    const size_t pages = 3 * capacity / kPage;
    PagePool pool(*s, batch, kPage);
    size_t written = 0;
    for (size_t first = 0; first < pages; first += batch) {
      std::vector<std::string> keys;
      std::vector<ConstBuffer> in;
      for (size_t i = 0; i < batch; ++i) {
        keys.push_back(fmt::format("page-{}", first + i));
        pool.fill(i, kPage, first + i);
        in.push_back(pool.in(i, kPage));
      }
      const BatchResult r = s->batch_put(testing::views(keys), in);
      written += r.ok_count();
      const StoreStats st = s->stats();
      ASSERT_LE(st.used_bytes + st.metadata_bytes, capacity) << first;
    }
    const StoreStats st = s->stats();
    EXPECT_GT(written, pages / 2) << "writes were refused: " << st.capacity_refusals;
    EXPECT_GT(st.evicted_pages, 0u);
    EXPECT_GT(st.pages, 0u);
    // As du counts it: everything under the base directory, within the capacity and one page.
    const uint64_t total = du(dir);
    EXPECT_LE(total, capacity + page_blocks);
    // What is kept beside the pages, measured, within what the store set aside for it.
    Result<Inventory> inv = take_inventory(*parse_store_uri(dir));
    ASSERT_TRUE(inv.ok()) << inv.status().to_string();
    EXPECT_GT(inv->metadata_bytes, 0u);
    EXPECT_LE(inv->metadata_bytes, st.metadata_bytes);
    EXPECT_LE(inv->allocated_bytes, total);
    s.reset();
    // A lone open charges what is there: the same bounds hold.
    s = open_at(dir, capacity);
    ASSERT_NE(s, nullptr);
    EXPECT_LE(s->stats().used_bytes + s->stats().metadata_bytes, capacity);
  }
}

TEST_P(StoreFootprint, ACapacityBelowTheSmallestIsRefusedSayingWhy) {
  StoreConfig cfg;
  cfg.location = *parse_store_uri(
      fmt::format("{}?backend=posix&layout={}", dir_.file("small"), GetParam().name));
  cfg.ns = footprint_namespace();
  cfg.capacity_bytes = smallest() - 1;
  Result<std::unique_ptr<Store>> s = Store::open(cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(fmt::format("at least {}", smallest())), std::string::npos)
      << s.status().to_string();
  cfg.capacity_bytes = smallest();
  EXPECT_NE(testing::open_store(cfg), nullptr);
}

// What `kvtier gc` removes from page files is given back to the ledger as the store charged
// it: the usage a store that stayed open sees afterwards is what a lone open counts.
TEST(StoreFootprintGc, WhatGcRemovesGoesBackAsCharged) {
  testing::TempDir dir;
  StoreConfig cfg;
  cfg.location = *parse_store_uri(dir.file("store") + "?backend=posix&layout=files");
  cfg.ns = footprint_namespace();
  cfg.capacity_bytes = uint64_t{8} << 20;
  auto s = testing::open_store(cfg);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  for (size_t first = 0; first < 48; first += 8) {
    std::vector<std::string> keys;
    std::vector<ConstBuffer> in;
    for (size_t i = 0; i < 8; ++i) {
      keys.push_back(fmt::format("gc-{}", first + i));
      pool.fill(i, kPage, first + i);
      in.push_back(pool.in(i, kPage));
    }
    ASSERT_TRUE(s->batch_put(testing::views(keys), in).all_ok());
  }
  Result<std::vector<PageListing>> pages = list_pages(cfg.location, "", {});
  ASSERT_TRUE(pages.ok()) << pages.status().to_string();
  pages->resize(pages->size() / 2);
  Result<RemovalReport> removed = remove_pages(cfg.location, *pages, {});
  ASSERT_TRUE(removed.ok()) << removed.status().to_string();
  EXPECT_EQ(removed->pages, 24u);
  const uint64_t after_gc = s->stats().used_bytes;
  s.reset();
  s = testing::open_store(cfg);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(after_gc, s->stats().used_bytes);
  EXPECT_EQ(after_gc, 24 * capacity_page_bytes(page::object_bytes(kPage)));
}

INSTANTIATE_TEST_SUITE_P(Layouts, StoreFootprint,
                         ::testing::Values(Case{StoreLayout::kFiles, "files"},
                                           Case{StoreLayout::kSegments, "segments"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kvtier
