// Integrity: a damaged, truncated, swapped, foreign or mis-sized page is never returned as
// data. Each case is a miss (kCorrupt or kNotFound), counted, and a corrupt page is dropped.
#include <gtest/gtest.h>

#include <filesystem>

#include "format/page_format.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

constexpr size_t kPage = 70272;  // DeepSeek-V3, page size 1

class StoreIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    loc_ = *parse_store_uri(dir_.file("s") + "?backend=posix");
    store_ = testing::open_store(loc_, testing::test_namespace());
    ASSERT_NE(store_, nullptr);
    pool_ = std::make_unique<PagePool>(*store_, 4, kPage);
    pool_->fill(0, kPage, 11);
    pool_->fill(1, kPage, 22);
    KVTIER_ASSERT_OK(store_->put("alpha", pool_->slot(0), kPage));
    KVTIER_ASSERT_OK(store_->put("beta", pool_->slot(1), kPage));
  }

  std::string file_of(std::string_view key) const { return testing::page_file(*store_, key); }

  void flip(std::string_view key, size_t offset) {
    std::string bytes = testing::read_file(file_of(key));
    ASSERT_LT(offset, bytes.size());
    bytes[offset] ^= 0x10;
    testing::write_file(file_of(key), bytes);
  }

  // Reads `key` into a poisoned slot and expects a miss of `code`; with a `reason`, the page
  // was read and refused for it (StoreStats::pages_rejected), counted once.
  void expect_miss(std::string_view key, StatusCode code, const std::string& reason = "") {
    const uint64_t before = testing::rejected(*store_, reason);
    const uint64_t total = testing::rejected_total(*store_);
    std::memset(pool_->slot(3), 0x5A, kPage);
    Status st = store_->get(key, pool_->slot(3), kPage);
    EXPECT_EQ(st.code(), code) << st.to_string();
    if (reason.empty()) return;
    EXPECT_EQ(testing::rejected(*store_, reason), before + 1) << reason << ": " << st.to_string();
    EXPECT_EQ(testing::rejected_total(*store_), total + 1) << reason;
  }

  testing::TempDir dir_;
  StoreLocation loc_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<PagePool> pool_;
};

TEST_F(StoreIntegrity, FlippedPayloadByteIsCorruptCountedAndDropped) {
  flip("alpha", page::kHeaderBytes + 12345);
  expect_miss("alpha", StatusCode::kCorrupt, "checksum");
  const StoreStats s = store_->stats();
  EXPECT_EQ(s.get_corrupt, 1u);
  EXPECT_EQ(s.corrupt_dropped, 1u);
  EXPECT_FALSE(std::filesystem::exists(file_of("alpha")));
  expect_miss("alpha", StatusCode::kNotFound);
  // The neighbour is untouched.
  KVTIER_ASSERT_OK(store_->get("beta", pool_->slot(2), kPage));
  EXPECT_TRUE(pool_->holds(2, kPage, 22));
}

TEST_F(StoreIntegrity, FlippedByteInALaterChunkOfPiecesThatStraddleChunksIsCorrupt) {
  // Five 100,000-byte pieces: checksum chunks (256 KiB) span piece boundaries.
  PagePool pool(*store_, 10, 100000);
  std::vector<ConstBuffer> in;
  std::vector<MutableBuffer> out;
  for (size_t i = 0; i < 5; ++i) {
    pool.fill(i, 100000, 70 + i);
    in.push_back(pool.in(i, 100000));
    out.push_back(pool.out(5 + i, 100000));
  }
  const std::vector<std::string_view> key = {"straddle"};
  ASSERT_TRUE(store_->batch_put(key, in).all_ok());
  ASSERT_TRUE(store_->batch_get(key, out).all_ok());
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(pool.holds(5 + i, 100000, 70 + i)) << i;
  flip("straddle", page::kHeaderBytes + 499999);  // the last byte of the last piece
  BatchResult r = store_->batch_get(key, out);
  EXPECT_EQ(r.pages[0].code(), StatusCode::kCorrupt) << r.pages[0].to_string();
}

TEST_F(StoreIntegrity, FlippedHeaderFieldIsCorrupt) {
  flip("alpha", 50);  // payload length
  expect_miss("alpha", StatusCode::kCorrupt, "header");
  EXPECT_EQ(store_->stats().get_corrupt, 1u);
}

TEST_F(StoreIntegrity, FlippedMagicIsCorrupt) {
  flip("alpha", 0);
  expect_miss("alpha", StatusCode::kCorrupt, "header");
}

TEST_F(StoreIntegrity, FlippedKeyByteIsCorrupt) {
  flip("alpha", 128 + 2);
  expect_miss("alpha", StatusCode::kCorrupt, "header");
}

TEST_F(StoreIntegrity, TruncatedPageIsCorrupt) {
  std::filesystem::resize_file(file_of("alpha"), page::kHeaderBytes + kPage - 1);
  expect_miss("alpha", StatusCode::kCorrupt, "torn");
  std::filesystem::resize_file(file_of("beta"), 100);
  expect_miss("beta", StatusCode::kCorrupt, "torn");
  EXPECT_EQ(store_->stats().get_corrupt, 2u);
}

TEST_F(StoreIntegrity, ExtendedPageIsCorrupt) {
  std::filesystem::resize_file(file_of("alpha"), page::kHeaderBytes + kPage + 4096);
  expect_miss("alpha", StatusCode::kCorrupt, "torn");
}

TEST_F(StoreIntegrity, ZeroFilledPageIsCorrupt) {
  testing::write_file(file_of("alpha"), std::string(page::kHeaderBytes + kPage, '\0'));
  expect_miss("alpha", StatusCode::kCorrupt, "header");
}

TEST_F(StoreIntegrity, SwappedFilesAreCorrupt) {
  const std::string a = file_of("alpha"), b = file_of("beta"), t = a + ".swap";
  std::filesystem::rename(a, t);
  std::filesystem::rename(b, a);
  std::filesystem::rename(t, b);
  expect_miss("alpha", StatusCode::kCorrupt, "place");
  expect_miss("beta", StatusCode::kCorrupt, "place");
  EXPECT_EQ(store_->stats().get_corrupt, 2u);
}

TEST_F(StoreIntegrity, PageOfAnotherNamespaceIsNeverRead) {
  auto other = testing::open_store(loc_, testing::test_namespace("another-model"));
  ASSERT_NE(other, nullptr);
  PagePool pool(*other, 1, kPage);
  // Written in one namespace, read from another: a plain miss.
  EXPECT_EQ(other->get("alpha", pool.slot(0), kPage).code(), StatusCode::kNotFound);
  EXPECT_EQ(other->stats().get_misses, 1u);
  // Copied by hand into the other namespace's directory: the header says whose it is.
  const std::filesystem::path dst = testing::page_file(*other, "alpha");
  std::filesystem::create_directories(dst.parent_path());
  std::filesystem::copy_file(file_of("alpha"), dst);
  Status st = other->get("alpha", pool.slot(0), kPage);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("namespace"), std::string::npos) << st.message();
  EXPECT_EQ(other->stats().get_corrupt, 1u);
  EXPECT_EQ(testing::rejected(*other, "namespace"), 1u);
  EXPECT_EQ(testing::rejected_total(*other), 1u) << "the plain miss was no refusal";
  // The original is untouched.
  KVTIER_EXPECT_OK(store_->get("alpha", pool_->slot(2), kPage));
}

TEST_F(StoreIntegrity, WrongBufferSizeIsACallerErrorNotCorruption) {
  Status st = store_->get("alpha", pool_->slot(3), kPage - 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_EQ(store_->stats().get_corrupt, 0u);
  EXPECT_EQ(testing::rejected_total(*store_), 0u) << "a caller's mistake is no refusal";
  KVTIER_EXPECT_OK(store_->get("alpha", pool_->slot(3), kPage)) << "the page was kept";
  EXPECT_TRUE(pool_->holds(3, kPage, 11));
}

TEST_F(StoreIntegrity, CorruptPagesStayWhenDroppingIsOff) {
  StoreConfig cfg;
  cfg.location = loc_;
  cfg.ns = testing::test_namespace();
  cfg.drop_corrupt = false;
  auto keep = testing::open_store(cfg);
  ASSERT_NE(keep, nullptr);
  PagePool pool(*keep, 1, kPage);
  flip("alpha", page::kHeaderBytes + 1);
  EXPECT_EQ(keep->get("alpha", pool.slot(0), kPage).code(), StatusCode::kCorrupt);
  EXPECT_TRUE(std::filesystem::exists(file_of("alpha")));
}

TEST_F(StoreIntegrity, BatchReportsCorruptionPerPage) {
  flip("beta", page::kHeaderBytes + 7);
  const std::vector<std::string_view> keys = {"alpha", "beta"};
  const std::vector<MutableBuffer> out = {pool_->out(2, kPage), pool_->out(3, kPage)};
  BatchResult r = store_->batch_get(keys, out);
  KVTIER_EXPECT_OK(r.pages[0]);
  EXPECT_EQ(r.pages[1].code(), StatusCode::kCorrupt);
  EXPECT_TRUE(pool_->holds(2, kPage, 11));
}

}  // namespace
}  // namespace kvtier
