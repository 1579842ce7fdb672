// PageIndex: LRU order, replacement accounting, cold inserts, hex parsing.
#include "capacity/page_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>

namespace kvtier {
namespace {

Hash128 h(uint64_t n) {
  return Hash128{n, n * 7 + 1};
}

TEST(PageIndex, LeastRecentlyUsedComesOutFirst) {
  PageIndex idx;
  for (uint64_t i = 0; i < 4; ++i) idx.put({h(i), 0, 100});
  EXPECT_TRUE(idx.touch(h(0), 1));
  EXPECT_EQ(idx.pop_oldest()->hash, h(1));
  EXPECT_EQ(idx.pop_oldest()->hash, h(2));
  EXPECT_EQ(idx.pop_oldest()->hash, h(3));
  EXPECT_EQ(idx.pop_oldest()->hash, h(0));
  EXPECT_FALSE(idx.pop_oldest().has_value());
  EXPECT_EQ(idx.bytes(), 0u);
}

TEST(PageIndex, ReplacementReportsTheOldSizeAndColdPagesGoFirst) {
  PageIndex idx;
  EXPECT_FALSE(idx.put({h(1), 0, 100}).has_value());
  EXPECT_EQ(idx.put({h(1), 0, 300}).value_or(0), 100u);
  EXPECT_EQ(idx.bytes(), 300u);
  EXPECT_TRUE(idx.put_cold({h(2), 1, 50}));
  EXPECT_FALSE(idx.put_cold({h(1), 0, 999}));  // already indexed: unchanged
  EXPECT_EQ(idx.bytes(), 350u);
  EXPECT_EQ(idx.pop_oldest()->hash, h(2));
  EXPECT_EQ(idx.erase(h(1))->bytes, 300u);
  EXPECT_FALSE(idx.erase(h(1)).has_value());
  EXPECT_EQ(idx.pages(), 0u);
}

// Random puts, cold puts, touches, erases and pops against a plain model of the same LRU
// list: the open-addressing table (with deletions shifting entries back) finds exactly what
// the model holds, in the same order. Small hash ranges force long probe runs and
// collisions of the low word.
TEST(PageIndex, AgreesWithAModelUnderRandomOperations) {
  std::mt19937_64 rng(7);
  for (uint64_t range : {uint64_t{50}, uint64_t{5000}}) {
    PageIndex idx;
    std::list<std::pair<Hash128, uint64_t>> model;  // front: least recently used
    auto find = [&](const Hash128& x) {
      return std::find_if(model.begin(), model.end(), [&](const auto& e) { return e.first == x; });
    };
    for (int op = 0; op < 200000; ++op) {
      const uint64_t k = rng() % range;
      // Low words collide for k and k + 1024: probe runs cross deletions.
      const Hash128 key{k, k % 1024};
      const uint64_t bytes = 1 + rng() % 1000;
      auto it = find(key);
      switch (rng() % 6) {
        case 0:
        case 1: {
          const std::optional<uint64_t> old = idx.put({key, 0, bytes});
          ASSERT_EQ(old.has_value(), it != model.end());
          if (it != model.end()) {
            ASSERT_EQ(*old, it->second);
            model.erase(it);
          }
          model.emplace_back(key, bytes);
          break;
        }
        case 2:
          ASSERT_EQ(idx.put_cold({key, 0, bytes}), it == model.end());
          if (it == model.end()) model.emplace_front(key, bytes);
          break;
        case 3:
          ASSERT_EQ(idx.touch(key, 1), it != model.end());
          if (it != model.end()) model.splice(model.end(), model, it);
          break;
        case 4: {
          const std::optional<PageIndex::Page> p = idx.erase(key);
          ASSERT_EQ(p.has_value(), it != model.end());
          if (it != model.end()) {
            ASSERT_EQ(p->bytes, it->second);
            model.erase(it);
          }
          break;
        }
        case 5: {
          const std::optional<PageIndex::Page> p = idx.pop_oldest();
          ASSERT_EQ(p.has_value(), !model.empty());
          if (!model.empty()) {
            ASSERT_EQ(p->hash, model.front().first);
            model.pop_front();
          }
          break;
        }
      }
      ASSERT_EQ(idx.pages(), model.size());
      ASSERT_EQ(idx.contains(key), find(key) != model.end());
    }
    uint64_t total = 0;
    for (const auto& e : model) total += e.second;
    EXPECT_EQ(idx.bytes(), total);
    for (const auto& e : model) ASSERT_EQ(idx.pop_oldest()->hash, e.first);
    EXPECT_FALSE(idx.pop_oldest().has_value());
  }
}

// Pages in gone segments go, the others stay; freed nodes reused for other segments are
// judged by their new page only.
TEST(PageIndex, ErasesThePagesOfGoneSegments) {
  PageIndex idx;
  for (uint64_t i = 0; i < 300; ++i) {
    idx.put({h(i), 0, 100, static_cast<uint32_t>(i % 3), 64, i * 100, 36});
  }
  ASSERT_TRUE(idx.erase(h(4)).has_value());  // segment 1: a freed node
  idx.put({h(1000), 0, 100, 2, 64, 0, 36});  // reuses it, in segment 2
  EXPECT_EQ(idx.erase_segments([](uint32_t s) { return s == 1; }).size(), 99u);
  EXPECT_EQ(idx.pages(), 201u);
  EXPECT_EQ(idx.bytes(), 20100u);
  for (uint64_t i = 0; i < 300; ++i) EXPECT_EQ(idx.contains(h(i)), i % 3 != 1) << i;
  EXPECT_TRUE(idx.contains(h(1000)));
  EXPECT_EQ(idx.erase_segments([](uint32_t) { return false; }).size(), 0u);
  // What is left still comes out in use order.
  EXPECT_EQ(idx.pop_oldest()->hash, h(0));
  EXPECT_EQ(idx.pop_oldest()->hash, h(2));
}

// A page another writer put again elsewhere (a later summary: a new put, or its copy-forward)
// takes the new location and keeps its place in the use order, but not this store's read
// mark: read since it was put, it has not been, so reclaim does not copy it forward again.
TEST(PageIndex, ARelearnedPageKeepsItsPlaceButNotItsRead) {
  PageIndex idx;
  idx.put({h(1), 0, 100, 1, 64, 0, 36});
  idx.put({h(2), 0, 100, 1, 64, 100, 36});
  ASSERT_TRUE(idx.touch(h(1), 5));
  ASSERT_EQ(idx.find(h(1))->read_ns, 5u);
  idx.put_relearned({h(1), 0, 120, 7, 64, 500, 56});
  const PageIndex::Page p = *idx.find(h(1));
  EXPECT_EQ(p.segment, 7u);
  EXPECT_EQ(p.offset, 500u);
  EXPECT_EQ(p.bytes, 120u);
  EXPECT_EQ(p.read_ns, 0u);  // put again: not read since
  EXPECT_EQ(idx.bytes(), 220u);
  EXPECT_EQ(idx.pop_oldest()->hash, h(2));  // h(1) is still the most recently used
}

TEST(PageIndex, ParsesTheHexOfPageNames) {
  const Hash128 x{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(parse_hash_hex(x.hex()), x);
  EXPECT_FALSE(parse_hash_hex("0123").has_value());
  EXPECT_FALSE(parse_hash_hex(std::string(32, 'g')).has_value());
  EXPECT_FALSE(parse_hash_hex(std::string(32, 'A')).has_value());
}

}  // namespace
}  // namespace kvtier
