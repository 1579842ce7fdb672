// Who may reach a FILE store (kvtier/core/file_access.h): what kvtier creates is its owner's
// alone whatever the umask, or its group's with share=group; a root anyone may write, or that
// another user owns, is refused; a symbolic link planted in the tree is neither read nor
// written through.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::PagePool;

constexpr size_t kPage = 70272;

// Sets the umask for a scope (the process's: these tests run one at a time in their binary).
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t m) : old_(::umask(m)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

mode_t mode_of(const fs::path& p) {
  struct stat st;
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode;
}

StoreConfig config_for(const std::string& uri, uint64_t capacity = 0) {
  StoreConfig cfg;
  Result<StoreLocation> loc = parse_store_uri(uri);
  EXPECT_TRUE(loc.ok()) << loc.status().to_string();
  if (loc.ok()) cfg.location = *loc;
  cfg.ns = testing::test_namespace();
  cfg.capacity_bytes = capacity;
  return cfg;
}

// Writes `n` pages (and reads one back) through a store of `cfg`; its files are then on disk.
void write_pages(StoreConfig cfg, size_t n) {
  std::unique_ptr<Store> store = testing::open_store(std::move(cfg));
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, n + 1, kPage);
  for (size_t i = 0; i < n; ++i) {
    pool.fill(i, kPage, i);
    KVTIER_ASSERT_OK(store->put("page-" + std::to_string(i), pool.slot(i), kPage));
  }
  KVTIER_ASSERT_OK(store->get("page-0", pool.slot(n), kPage));
  EXPECT_TRUE(pool.holds(n, kPage, 0));
}

struct Tree {
  size_t dirs = 0;
  size_t files = 0;
};

// Every entry under `root` (itself included), checked by `check(path, mode)`.
template <typename Check>
Tree walk(const fs::path& root, Check check) {
  Tree t;
  check(root, mode_of(root));
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
    const mode_t m = mode_of(e.path());
    (S_ISDIR(m) ? t.dirs : t.files)++;
    check(e.path(), m);
  }
  return t;
}

class StoreAccess : public ::testing::TestWithParam<std::string> {
 protected:
  std::string uri(const std::string& query = "") const {
    return dir_.file("root") + "?backend=posix&layout=" + GetParam() + query;
  }
  testing::TempDir dir_;
};

TEST_P(StoreAccess, UmaskZeroStillGivesFilesOnlyTheOwnerCanReach) {
  ScopedUmask umask(0);
  // A capacity: the ledger and the shared files beside the pages are made too.
  write_pages(config_for(uri(), 64 << 20), 6);
  const Tree t = walk(dir_.file("root"), [](const fs::path& p, mode_t m) {
    EXPECT_EQ(m & 077, 0u) << p << " has mode " << std::oct << (m & 07777);
    EXPECT_FALSE(S_ISLNK(m)) << p;
  });
  EXPECT_GE(t.dirs, 4u);   // root, kvtier, the namespace, tmp, ...
  EXPECT_GE(t.files, 4u);  // manifest, ledger, pages or segments, ...
}

TEST_P(StoreAccess, ShareGroupGivesTheGroupReadAndWriteWhateverTheUmask) {
  ScopedUmask umask(077);
  write_pages(config_for(uri("&share=group"), 64 << 20), 6);
  const fs::path root = dir_.file("root");
  walk(root / "kvtier", [](const fs::path& p, mode_t m) {
    if (S_ISDIR(m)) {
      EXPECT_EQ(m & 07777, 02770u) << p << " has mode " << std::oct << (m & 07777);
    } else {
      EXPECT_EQ(m & 0777, 0660u) << p << " has mode " << std::oct << (m & 07777);
    }
  });
}

TEST_P(StoreAccess, AnOlderTreeIsNarrowedToTheOwnerWhenItOpens) {
  {
    ScopedUmask umask(0);
    write_pages(config_for(uri()), 2);
  }
  const fs::path ns = testing::open_store(config_for(uri()))->namespace_dirs()[0];
  // What kvtier made before stores were private: 0755 directories.
  for (const fs::path& d : {fs::path(dir_.file("root")) / "kvtier", ns}) {
    ASSERT_EQ(::chmod(d.c_str(), 0755), 0);
  }
  write_pages(config_for(uri()), 2);
  EXPECT_EQ(mode_of(fs::path(dir_.file("root")) / "kvtier") & 07777, 0700u);
  EXPECT_EQ(mode_of(ns) & 07777, 0700u);
}

TEST_P(StoreAccess, ARootAnyoneMayWriteIsRefusedUnlessSticky) {
  const std::string root = dir_.file("root");
  ASSERT_TRUE(fs::create_directory(root));
  ASSERT_EQ(::chmod(root.c_str(), 0777), 0);
  Result<std::unique_ptr<Store>> s = Store::open(config_for(uri()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied) << s.status().to_string();
  EXPECT_NE(s.status().message().find("sticky"), std::string::npos) << s.status().to_string();
  EXPECT_FALSE(fs::exists(fs::path(root) / "kvtier")) << "refused before anything was made";

  ASSERT_EQ(::chmod(root.c_str(), 01777), 0);
  write_pages(config_for(uri()), 2);
}

TEST_P(StoreAccess, ARootAnotherUserOwnsIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string root = dir_.file("root");
  ASSERT_TRUE(fs::create_directory(root));
  ASSERT_EQ(::chown(root.c_str(), 65534, 65534), 0);
  Result<std::unique_ptr<Store>> s = Store::open(config_for(uri()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied) << s.status().to_string();
  EXPECT_NE(s.status().message().find("another user"), std::string::npos) << s.status().to_string();
  // One of this process's groups, with share=group, is a cluster's shared root.
  ASSERT_EQ(::chown(root.c_str(), 65534, ::getegid()), 0);
  ASSERT_EQ(::chmod(root.c_str(), 02770), 0);
  EXPECT_FALSE(Store::open(config_for(uri())).ok());
  write_pages(config_for(uri("&share=group")), 2);
}

TEST_P(StoreAccess, ABaseReachedThroughALinkIsResolvedOnce) {
  const std::string real = dir_.file("real");
  ASSERT_TRUE(fs::create_directory(real));
  fs::create_directory_symlink(real, dir_.file("root"));
  write_pages(config_for(uri()), 3);
  EXPECT_TRUE(fs::is_directory(fs::path(real) / "kvtier"));
  // The same pages through the link, as another process would open them.
  std::unique_ptr<Store> again = testing::open_store(config_for(uri()));
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(*again->exists("page-2"));
}

TEST_P(StoreAccess, AnUnknownShareValueIsRefused) {
  Result<std::unique_ptr<Store>> s = Store::open(config_for(uri("&share=world")));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().to_string();
  EXPECT_NE(s.status().message().find("share"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Layouts, StoreAccess, ::testing::Values("files", "segments"),
                         [](const auto& info) { return info.param; });

// A link planted in a store's tree (by whoever else may write there) points at another
// store's pages: nothing is read through it, nothing written through it.
class PlantedLinks : public ::testing::Test {
 protected:
  void SetUp() override {
    victim_ = testing::open_store(config_for(dir_.file("victim") + "?backend=posix&layout=files"));
    ASSERT_NE(victim_, nullptr);
    pool_ = std::make_unique<PagePool>(*victim_, 2, kPage);
    pool_->fill(0, kPage, 7);
    KVTIER_ASSERT_OK(victim_->put("secret", pool_->slot(0), kPage));
    store_ = testing::open_store(config_for(dir_.file("store") + "?backend=posix&layout=files"));
    ASSERT_NE(store_, nullptr);
    victim_file_ = testing::page_file(*victim_, "secret");
    victim_bytes_ = testing::read_file(victim_file_);
    planted_ = testing::page_file(*store_, "secret");
  }

  void expect_victim_untouched() {
    EXPECT_EQ(testing::read_file(victim_file_), victim_bytes_);
    EXPECT_FALSE(fs::is_symlink(victim_file_));
  }

  // The same key, read and written through the store whose tree has the link.
  void expect_no_read_nor_write_through() {
    PagePool pool(*store_, 2, kPage);
    std::memset(pool.slot(1), 0, kPage);
    Status got = store_->get("secret", pool.slot(1), kPage);
    EXPECT_FALSE(got.ok());
    EXPECT_FALSE(pool.holds(1, kPage, 7)) << "the victim's page was read through the link";
    pool.fill(0, kPage, 99);
    (void)store_->put("secret", pool.slot(0), kPage).ignore_error();
    expect_victim_untouched();
  }

  testing::TempDir dir_;
  std::unique_ptr<Store> victim_, store_;
  std::unique_ptr<PagePool> pool_;
  std::string victim_file_, victim_bytes_, planted_;
};

TEST_F(PlantedLinks, ALinkInPlaceOfAPageFile) {
  fs::create_directories(fs::path(planted_).parent_path());
  fs::create_symlink(victim_file_, planted_);
  expect_no_read_nor_write_through();
}

TEST_F(PlantedLinks, ALinkInPlaceOfAFanOutDirectory) {
  const fs::path fanout = fs::path(planted_).parent_path();
  fs::remove_all(fanout);
  fs::create_directory_symlink(fs::path(victim_file_).parent_path(), fanout);
  expect_no_read_nor_write_through();
  EXPECT_TRUE(fs::is_symlink(fanout));
}

}  // namespace
}  // namespace kvtier
