// Durable puts in the segment layout (StoreConfig::fsync): records synced before their
// summary entries are appended, entries synced before the pages are indexed, new segments
// published durably; a failed sync fails the put and leaves its pages out of the index; no
// descriptor is left open.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/store/store.h"
#include "segments_test_fixture.h"
#include "src/store/store_test_util.h"
#include "src/testing/test_util.h"

namespace kvtier {
namespace {

using testing::kPage;
using testing::PagePool;
using testing::seg_files;

class StoreSegmentsFsync : public testing::SegmentStoreTest {
 protected:
  void SetUp() override { faults_ = std::make_shared<FaultInjector>(); }

  // `lanes`: StoreConfig::segment_lanes (each lane's records go to a segment of its own).
  std::unique_ptr<Store> open_durable(bool fsync = true, std::string backend = "posix",
                                      size_t lanes = 1) {
    StoreConfig cfg;
    cfg.location =
        *parse_store_uri("file://" + dir_.file(fmt::format("store-{}-{}", backend, lanes)) +
                         "?backend=" + backend + "&layout=segments");
    cfg.ns = testing::test_namespace("segments");
    cfg.segment_bytes = 64 << 20;  // every batch below fits in the first segment
    cfg.segment_lanes = lanes;
    cfg.fsync = fsync;
    cfg.decorate = [faults = faults_](std::unique_ptr<Backend> inner) {
      return make_fault_backend(std::move(inner), faults);
    };
    Result<std::unique_ptr<Store>> s = Store::open(cfg);
    if (!s.ok() && backend == "uring" && s.status().code() == StatusCode::kUnavailable) {
      return nullptr;
    }
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  uint64_t syncs() const { return faults_->calls(FaultOp::kSync); }

  std::shared_ptr<FaultInjector> faults_;
};

TEST_F(StoreSegmentsFsync, EachBatchSyncsItsRecordsThenItsEntriesAndSurvivesARestart) {
  for (const std::string backend : {"posix", "uring"}) {
    for (const size_t lanes : {size_t{1}, size_t{3}}) {
      SCOPED_TRACE(fmt::format("{}, {} lanes", backend, lanes));
      const auto keys = testing::keys_for(fmt::format("durable-{}-{}-", backend, lanes), 64);
      {
        auto s = open_durable(true, backend, lanes);
        if (s == nullptr && backend == "uring") continue;  // no io_uring here
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->layout(), StoreLayout::kSegments);
        PagePool pool(*s, 64, kPage);
        const uint64_t publishes = faults_->calls(FaultOp::kPublish);
        const uint64_t before = syncs();
        // 32 pages are three 1 MiB runs: one segment target per lane written, then its
        // summary, two syncs a lane. Each lane's segment and summary were created (published
        // durably) by this first batch.
        ASSERT_TRUE(put(*s, pool, {keys.begin(), keys.begin() + 32}).all_ok());
        EXPECT_EQ(syncs() - before, 2 * lanes);
        EXPECT_EQ(faults_->calls(FaultOp::kPublish) - publishes, 2 * lanes);
        ASSERT_TRUE(put(*s, pool, {keys.begin() + 32, keys.end()}).all_ok());
        EXPECT_EQ(syncs() - before, 4 * lanes);
        // A remove is a summary entry, synced too.
        KVTIER_ASSERT_OK(s->remove(keys[0]));
        EXPECT_EQ(syncs() - before, 4 * lanes + 1);
        EXPECT_EQ(read_all(*s, pool, keys), 63u);
      }
      auto s = open_durable(true, backend, lanes);
      ASSERT_NE(s, nullptr);
      PagePool pool(*s, 1, kPage);
      EXPECT_EQ(s->stats().pages, 63u);
      EXPECT_EQ(read_all(*s, pool, keys), 63u);
      EXPECT_EQ(s->get(keys[0], pool.slot(0), kPage).code(), StatusCode::kNotFound);
    }
  }
}

TEST_F(StoreSegmentsFsync, WithoutFsyncNothingIsSynced) {
  auto s = open_durable(false);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 32, kPage);
  const auto keys = testing::keys_for("lazy-", 32);
  ASSERT_TRUE(put(*s, pool, keys).all_ok());
  KVTIER_ASSERT_OK(s->remove(keys[0]));
  EXPECT_EQ(syncs(), 0u);
}

TEST_F(StoreSegmentsFsync, AFailedRecordSyncFailsThePutAndLeavesThePagesUnindexed) {
  auto s = open_durable();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 16, kPage);
  const auto keys = testing::keys_for("failed-", 16);
  faults_->add(FaultRule{.op = FaultOp::kSync, .path_contains = ".seg", .error = EIO, .count = 1});
  const BatchResult r = put(*s, pool, {keys.begin(), keys.begin() + 8});
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  for (const Status& st : r.pages) {
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("fdatasync"), std::string::npos) << st.to_string();
  }
  EXPECT_EQ(s->stats().pages, 0u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_FALSE(*s->exists(keys[i])) << keys[i];
    EXPECT_EQ(s->get(keys[i], pool.slot(0), kPage).code(), StatusCode::kNotFound);
  }
  // No entry names them: a restart does not find them either.
  s.reset();
  s = open_durable();
  ASSERT_NE(s, nullptr);
  PagePool again(*s, 16, kPage);
  EXPECT_EQ(s->stats().pages, 0u);
  // The next batch goes through.
  ASSERT_TRUE(put(*s, again, {keys.begin() + 8, keys.end()}).all_ok());
  EXPECT_EQ(read_all(*s, again, {keys.begin() + 8, keys.end()}), 8u);
}

TEST_F(StoreSegmentsFsync, AFailedSummarySyncFailsThePut) {
  auto s = open_durable();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  const auto keys = testing::keys_for("summary-", 8);
  faults_->add(FaultRule{.op = FaultOp::kSync, .path_contains = ".sum", .error = EIO, .count = 1});
  const BatchResult r = put(*s, pool, keys);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.ok_count(), 0u);
  // Not indexed here; the records themselves were synced, so a store that reads the entry
  // later finds whole pages (as a file page whose directory sync failed after its rename).
  EXPECT_EQ(s->stats().pages, 0u);
  EXPECT_EQ(s->get(keys[0], pool.slot(0), kPage).code(), StatusCode::kNotFound);
  ASSERT_TRUE(put(*s, pool, keys).all_ok());
  EXPECT_EQ(read_all(*s, pool, keys), 8u);
}

TEST_F(StoreSegmentsFsync, DurablePutsLeaveNoDescriptorOpen) {
  auto s = open_durable();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 128, kPage);
  const auto keys = testing::keys_for("fds-", 128);
  ASSERT_TRUE(put(*s, pool, {keys.begin(), keys.begin() + 8}).all_ok());  // the first segment
  const size_t base = testing::open_fds();
  ASSERT_TRUE(put(*s, pool, keys).all_ok());
  EXPECT_EQ(testing::open_fds(), base);
  EXPECT_EQ(read_all(*s, pool, keys), 128u);
  EXPECT_EQ(testing::open_fds(), base);
  faults_->add(FaultRule{.op = FaultOp::kSync, .error = EIO, .count = 1});
  EXPECT_EQ(put(*s, pool, testing::keys_for("fds-failed-", 16)).ok_count(), 0u);
  EXPECT_EQ(testing::open_fds(), base);
  EXPECT_EQ(seg_files(*s).segments.size(), 1u);
}

}  // namespace
}  // namespace kvtier
