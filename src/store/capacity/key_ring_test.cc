// KeyRing: every store of the ring replays what every store appended since it last looked, in
// order (its own too, or only the others'); a store opened later starts at the ring's end; one
// that fell more than a ring behind replays what the ring still holds; a foreign file is
// refused.
#include "capacity/key_ring.h"

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "src/testing/test_util.h"

namespace kvtier {
namespace {

constexpr uint64_t kMagic = 0x31474e4952545345;  // "ESTRING1"

std::vector<Hash128> keys(uint64_t first, uint64_t n) {
  std::vector<Hash128> out;
  for (uint64_t i = first; i < first + n; ++i) out.push_back(Hash128{i * 7, i});
  return out;
}

std::unique_ptr<KeyRing> open_ring(const std::string& path, uint64_t slots = 8) {
  Result<std::unique_ptr<KeyRing>> r = KeyRing::open(path, kMagic, slots);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST(KeyRing, EveryStoreReplaysEveryAppendInOrder) {
  testing::TempDir dir;
  const std::string path = dir.file("ring");
  auto a = open_ring(path), b = open_ring(path);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  a->append(keys(0, 2));
  b->append(keys(2, 1));
  a->append(keys(3, 2));
  EXPECT_EQ(a->drain(), keys(0, 5));
  EXPECT_EQ(b->drain(), keys(0, 5));
  EXPECT_TRUE(a->drain().empty()) << "replayed once";
  // Only the others': a skips its own appends, b sees them.
  a->append(keys(5, 1));
  b->append(keys(6, 1));
  a->append(keys(7, 1));
  EXPECT_EQ(a->drain(KeyRing::Whose::kOthers), keys(6, 1));
  EXPECT_EQ(b->drain(KeyRing::Whose::kOthers),
            (std::vector<Hash128>{keys(5, 1)[0], keys(7, 1)[0]}));
  // A store opened now starts at the end.
  auto c = open_ring(path);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->drain().empty());
  a->append(keys(8, 1));
  EXPECT_EQ(c->drain(), keys(8, 1));
}

TEST(KeyRing, AStoreThatFellBehindReplaysWhatTheRingStillHolds) {
  testing::TempDir dir;
  const std::string path = dir.file("ring");
  auto a = open_ring(path, 8), b = open_ring(path, 8);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  a->append(keys(0, 5));
  a->append(keys(5, 6));  // 11 appended, 8 held
  EXPECT_EQ(b->drain(), keys(3, 8));
  a->append(keys(11, 20));
  EXPECT_EQ(b->drain(), keys(23, 8));
  // A file of another kind is refused, not reused.
  EXPECT_EQ(KeyRing::open(path, kMagic + 1, 8).status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace kvtier
