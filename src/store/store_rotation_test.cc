// Key rotation in a sealed store (docs/security.md, "Rotating keys"): a key file whose first
// line is a new key still reads, finds and removes the pages sealed under its earlier keys
// (which keep the names they were given then), writes new pages under the new key alone, and
// once an earlier key leaves the file its pages are misses with no byte given. Both layouts,
// on a directory and on an object store.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "sealed_test_fixture.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using namespace sealed_test;  // NOLINT(google-build-using-namespace)
using testing::PagePool;

class Rotation : public SealedStoreBase, public ::testing::TestWithParam<std::string> {
 protected:
  Rotation() : SealedStoreBase(GetParam()) {}
  void SetUp() override {
    before_ = write_keys("before", std::string("1 ") + kKeyA1 + "\n");
    after_ = write_keys("after", std::string("2 ") + kKeyA2 + "\n1 " + kKeyA1 + "\n");
    retired_ = write_keys("retired", std::string("2 ") + kKeyA2 + "\n");
  }
  // Seals "old-1" and "old-2" (seeds 1 and 2) under key 1 alone.
  void write_before_rotation() {
    std::unique_ptr<Store> store = open(before_, "alpha");
    ASSERT_NE(store, nullptr);
    PagePool pool(*store, 2, kPage);
    ASSERT_TRUE(put_seeded(*store, pool, {"old-1", "old-2"}, 1).all_ok());
  }
  std::string before_, after_, retired_;
};

TEST_P(Rotation, EarlierPagesStayReadableAndNewOnesTakeTheNewKey) {
  write_before_rotation();
  std::unique_ptr<Store> store = open(after_, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 4, kPage);
  pool.fill(0, kPage, 3);
  KVTIER_ASSERT_OK(store->put("new-1", pool.slot(0), kPage));

  // A batch of pages under both keys, in both orders.
  const std::vector<std::string_view> keys = {"new-1", "old-1", "old-2"};
  const std::vector<MutableBuffer> out = {pool.out(1, kPage), pool.out(2, kPage),
                                          pool.out(3, kPage)};
  const BatchResult got = store->batch_get(keys, out);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_TRUE(got.pages[i].ok()) << keys[i] << ": " << got.pages[i].to_string();
  }
  EXPECT_TRUE(pool.holds(1, kPage, 3));
  EXPECT_TRUE(pool.holds(2, kPage, 1));
  EXPECT_TRUE(pool.holds(3, kPage, 2));
  const StoreStats st = store->stats();
  EXPECT_EQ(st.get_hits, 3u);
  EXPECT_EQ(st.get_misses, 0u);
  EXPECT_EQ(store->batch_exists(keys), 3u);
  const std::vector<std::string_view> gap = {"old-1", "never", "old-2"};
  EXPECT_EQ(store->batch_exists(gap), 1u);
  EXPECT_TRUE(*store->exists("old-2"));
  EXPECT_FALSE(*store->exists("never"));

  // The new page has the new key's name alone; the old ones keep key 1's.
  if (layout_ == "files") {
    EXPECT_TRUE(std::filesystem::exists(page_file(*store, name_of(after_, "alpha", "new-1"))));
    EXPECT_FALSE(std::filesystem::exists(page_file(*store, name_of(before_, "alpha", "new-1"))));
    EXPECT_TRUE(std::filesystem::exists(page_file(*store, name_of(before_, "alpha", "old-1"))));
  }

  // A store opened anew (no index yet) finds them too; removing finds the earlier name.
  store.reset();
  store = open(after_, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool again(*store, 1, kPage);
  KVTIER_ASSERT_OK(store->get("old-2", again.slot(0), kPage));
  EXPECT_TRUE(again.holds(0, kPage, 2));
  KVTIER_ASSERT_OK(store->remove("old-1"));
  EXPECT_EQ(store->remove("old-1").code(), StatusCode::kNotFound);
  const Miss m = read_poisoned(*store, again, 0, "old-1", kPage);
  EXPECT_EQ(m.status.code(), StatusCode::kNotFound) << m.status.to_string();
  EXPECT_TRUE(m.nothing_given);
}

TEST_P(Rotation, PagesOfAKeyTakenOutOfTheFileAreMissesWithNoBytes) {
  write_before_rotation();
  std::unique_ptr<Store> store = open(retired_, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 1, kPage);
  for (const std::string_view key : {"old-1", "old-2"}) {
    const Miss m = read_poisoned(*store, pool, 0, key, kPage);
    EXPECT_EQ(m.status.code(), StatusCode::kNotFound) << key << ": " << m.status.to_string();
    EXPECT_TRUE(m.nothing_given) << key;
    EXPECT_FALSE(*store->exists(key)) << key;
  }
  // Key 1's material back under another id: the pages are found by name, but their headers
  // name key id 1, which the file no longer holds.
  const std::string renamed = write_keys("renamed", std::string("9 ") + kKeyA1 + "\n");
  store = open(renamed, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool p(*store, 1, kPage);
  const Miss m = read_poisoned(*store, p, 0, "old-1", kPage);
  EXPECT_EQ(m.status.code(), StatusCode::kNotFound) << m.status.to_string();
  EXPECT_TRUE(m.nothing_given);
  EXPECT_EQ(store->stats().pages_rejected.at("key_id"), 1u);
}

// On an object store: a page object missing under the new key's name is asked for under the
// earlier one (a GET each), as a FILE store opens a file.
class RotationS3 : public SealedS3Base {
 protected:
  void SetUp() override {
    SealedS3Base::SetUp();
    if (IsSkipped()) return;
    before_ = write_keys("before", std::string("1 ") + kKeyA1 + "\n");
    after_ = write_keys("after", std::string("2 ") + kKeyA2 + "\n1 " + kKeyA1 + "\n");
  }
  std::string before_, after_;
};

TEST_P(RotationS3, EarlierPagesStayReadable) {
  {
    std::unique_ptr<Store> store = open(before_, "alpha");
    ASSERT_NE(store, nullptr);
    PagePool pool(*store, 1, kPage);
    pool.fill(0, kPage, 41);
    KVTIER_ASSERT_OK(store->put("old", pool.slot(0), kPage));
  }
  std::unique_ptr<Store> store = open(after_, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 3, kPage);
  pool.fill(0, kPage, 42);
  KVTIER_ASSERT_OK(store->put("new", pool.slot(0), kPage));
  const std::vector<std::string_view> keys = {"new", "old"};
  const std::vector<MutableBuffer> out = {pool.out(1, kPage), pool.out(2, kPage)};
  const BatchResult got = store->batch_get(keys, out);
  ASSERT_TRUE(got.all_ok()) << got.pages[1].to_string();
  EXPECT_TRUE(pool.holds(1, kPage, 42));
  EXPECT_TRUE(pool.holds(2, kPage, 41));
  EXPECT_EQ(store->batch_exists(keys), 2u);
  EXPECT_EQ(store->stats().get_misses, 0u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Rotation, ::testing::Values("files", "segments"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Layouts, RotationS3, ::testing::Values("files", "segments"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvtier
