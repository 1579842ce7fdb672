// ReadMarks: another store's read is seen, taken once and cleared; a store's own read is not
// another's; a full bucket loses a mark and never spares the wrong page; a file whose
// maker died before its header is made again, a foreign one is refused; across processes.
#include "capacity/read_marks.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "naming/routing.h"
#include "src/testing/child_process.h"
#include "src/testing/test_util.h"

namespace kvtier {
namespace {

Hash128 h(uint64_t high, uint64_t low) {
  return Hash128{high, low};
}

std::unique_ptr<ReadMarks> open_marks(const std::string& dir, uint64_t slots = 4096) {
  Result<std::unique_ptr<ReadMarks>> m = ReadMarks::open(dir, slots);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Two stores' marks of one namespace: a and b.
class ReadMarksOfTwo : public ::testing::Test {
 protected:
  void SetUp() override {
    a = open_marks(dir.path());
    b = open_marks(dir.path());
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
  }
  testing::TempDir dir;
  std::unique_ptr<ReadMarks> a, b;
};

TEST_F(ReadMarksOfTwo, AnotherStoresReadIsTakenOnceItsOwnNever) {
  EXPECT_NE(a->tag(), b->tag());
  EXPECT_EQ(b->slots(), a->slots());
  const Hash128 page = h(0x1234'5678'9abc'def0, 42);
  EXPECT_FALSE(a->take_others(page));  // nobody read it
  b->mark(page);
  EXPECT_FALSE(b->take_others(page));  // b's own read: b's index knows it
  EXPECT_TRUE(a->take_others(page));
  EXPECT_FALSE(a->take_others(page));  // spent
  // A later read by a replaces b's: nothing for a to take, b now can.
  b->mark(page);
  a->mark(page);
  EXPECT_FALSE(a->take_others(page));
  EXPECT_TRUE(b->take_others(page));
  // An evicted page's mark goes.
  b->mark(page);
  a->clear(page);
  EXPECT_FALSE(a->take_others(page));
}

// Four pages of one bucket keep their marks; a fifth replaces one (a lost spare, never a
// wrong one), and clearing a page leaves the others' marks.
TEST_F(ReadMarksOfTwo, AFullBucketLosesAMarkAndSparesNoOtherPage) {
  // One bucket (equal low words modulo the bucket count), five pages (high words).
  std::vector<Hash128> pages;
  // (Apart by twice the bucket count: one slot per mark would put the first, third and
  // fifth in one slot.)
  for (uint64_t i = 0; i < 5; ++i) pages.push_back(h((i + 1) << 58, 7 + i * (a->slots() / 2)));
  for (const Hash128& p : pages) b->mark(p);
  // The fifth (high word 5 << 58: its low bits pick the first slot) replaced the first.
  EXPECT_FALSE(a->take_others(pages[0]));
  for (size_t i = 1; i < 5; ++i) EXPECT_TRUE(a->take_others(pages[i])) << i;
  for (const Hash128& p : pages) b->mark(p);
  a->clear(pages[3]);
  EXPECT_FALSE(a->take_others(pages[3]));
  EXPECT_TRUE(a->take_others(pages[4]));
  EXPECT_TRUE(a->take_others(pages[2]));
}

TEST(ReadMarks, AHeaderlessFileIsMadeAgainAForeignOneRefused) {
  testing::TempDir dir;
  const std::string path = dir.file(std::string(routing::kReadMarksFile));
  {
    std::ofstream f(path, std::ios::binary);
    f << std::string(100, '\0');  // sized, no header: its maker died
  }
  auto a = open_marks(dir.path(), 8192);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->slots(), 8192u);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << std::string(64 + 4 * 4096, 'x');
  }
  Result<std::unique_ptr<ReadMarks>> foreign = ReadMarks::open(dir.path(), 4096);
  EXPECT_EQ(foreign.status().code(), StatusCode::kCorrupt);
}

const Hash128 kOtherProcessPage = h(0xfeed'0000'0000'0000, 99);

// Another process's store marks kOtherProcessPage read. args: the directory, the first
// process's tag (2: the marks would not open, or took the same tag).
KVTIER_CHILD(read_marks_other_process, args) {
  Result<std::unique_ptr<ReadMarks>> b = ReadMarks::open(args.str(0), 4096);
  if (!b.ok() || (*b)->tag() == args.u64(1)) return 2;
  (*b)->mark(kOtherProcessPage);
  return 0;
}

TEST(ReadMarks, AReadInAnotherProcessIsSeen) {
  testing::TempDir dir;
  auto a = open_marks(dir.path());
  ASSERT_NE(a, nullptr);
  testing::Child other =
      testing::Child::start("read_marks_other_process", {dir.path(), std::to_string(a->tag())});
  ASSERT_EQ(other.wait(), 0);
  EXPECT_TRUE(a->take_others(kOtherProcessPage));
}

}  // namespace
}  // namespace kvtier
