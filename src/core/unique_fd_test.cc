#include "kvtier/core/unique_fd.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "kvtier/core/dir.h"
#include "src/testing/test_util.h"

namespace kvtier {
namespace {

using testing::open_fds;

TEST(UniqueFd, ClosesOnDestructionAndCountsShowIt) {
  const size_t before = open_fds();
  {
    Result<UniqueFd> fd = open_file("/proc/self/stat", O_RDONLY);
    ASSERT_TRUE(fd.ok()) << fd.status().to_string();
    EXPECT_TRUE(fd->valid());
    EXPECT_EQ(open_fds(), before + 1);
  }
  EXPECT_EQ(open_fds(), before);
}

TEST(UniqueFd, MoveTransfersOwnershipOnce) {
  const size_t before = open_fds();
  Result<UniqueFd> a = open_file("/proc/self/stat", O_RDONLY);
  ASSERT_TRUE(a.ok());
  const int raw = a->get();
  UniqueFd b = std::move(a).value();
  EXPECT_EQ(b.get(), raw);
  UniqueFd c;
  c = std::move(b);
  EXPECT_FALSE(b.valid());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(c.get(), raw);
  EXPECT_EQ(open_fds(), before + 1);
  c.reset();
  EXPECT_EQ(open_fds(), before);
}

TEST(UniqueFd, ExplicitCloseReportsAndReleases) {
  const size_t before = open_fds();
  Result<UniqueFd> fd = open_file("/proc/self/stat", O_RDONLY);
  ASSERT_TRUE(fd.ok());
  EXPECT_TRUE(std::move(fd).value().close().ok());
  EXPECT_EQ(open_fds(), before);
}

TEST(UniqueFd, EveryOpenIsCloseOnExec) {
  testing::TempDir dir;
  Result<UniqueFd> f = open_file(dir.file("x").c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_TRUE(f.ok());
  Result<UniqueFd> d = open_file(dir.path().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(d.ok());
  Result<UniqueFd> g = open_at(d->borrow(), "x", O_RDONLY);
  ASSERT_TRUE(g.ok());
  for (int fd : {f->get(), d->get(), g->get()}) {
    EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC) << fd;
  }
}

TEST(UniqueFd, FailedOpenOwnsNothingAndSaysWhy) {
  const size_t before = open_fds();
  Result<UniqueFd> fd = open_file("/nonexistent/kvtier/x", O_RDONLY);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), StatusCode::kNotFound);
  EXPECT_NE(fd.status().message().find("/nonexistent/kvtier/x"), std::string::npos);
  EXPECT_EQ(open_fds(), before);
}

TEST(Dir, ListsEntriesWithTypes) {
  testing::TempDir dir;
  testing::write_file(dir.file("a"), "1");
  ASSERT_EQ(::mkdir(dir.file("sub").c_str(), 0755), 0);
  Result<UniqueFd> d = open_file(dir.path().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(d.ok());
  std::map<std::string, DirEntryType> seen;
  KVTIER_ASSERT_OK(for_each_dir_entry(d->borrow(), [&](const DirEntry& e) {
    seen[std::string(e.name)] = e.type;
    return ok_status();
  }));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen["a"], DirEntryType::kFile);
  EXPECT_EQ(seen["sub"], DirEntryType::kDir);
}

TEST(Dir, CallbackErrorStopsTheWalk) {
  testing::TempDir dir;
  for (int i = 0; i < 5; ++i) testing::write_file(dir.file(std::to_string(i)), "x");
  Result<UniqueFd> d = open_file(dir.path().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(d.ok());
  int calls = 0;
  Status st = for_each_dir_entry(d->borrow(), [&](const DirEntry&) {
    ++calls;
    return cancelled_error("stop");
  });
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kvtier
