// PageIndex: LRU order, replacement accounting, cold inserts, hex parsing.
#include "page_index.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

Hash128 h(uint64_t n) {
  return Hash128{n, n * 7 + 1};
}

TEST(PageIndex, LeastRecentlyUsedComesOutFirst) {
  PageIndex idx;
  for (uint64_t i = 0; i < 4; ++i) idx.put({h(i), 0, 100});
  EXPECT_TRUE(idx.touch(h(0)));
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

TEST(PageIndex, ParsesTheHexOfPageNames) {
  const Hash128 x{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(parse_hash_hex(x.hex()), x);
  EXPECT_FALSE(parse_hash_hex("0123").has_value());
  EXPECT_FALSE(parse_hash_hex(std::string(32, 'g')).has_value());
  EXPECT_FALSE(parse_hash_hex(std::string(32, 'A')).has_value());
}

}  // namespace
}  // namespace kvtier
