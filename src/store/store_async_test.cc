// Submitted batches: many in flight from several threads, completion by wait or callback
// (no polling), tickets that protect the caller's memory, and a store that waits for them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::PagePool;

constexpr size_t kPage = 32768;

class StoreAsync : public ::testing::Test {
 protected:
  void SetUp() override {
    faults_ = std::make_shared<FaultInjector>();
    store_ = testing::open_store(*parse_store_uri(dir_.file("s") + "?backend=posix"),
                                 testing::test_namespace(), faults_);
    ASSERT_NE(store_, nullptr);
    pool_ = std::make_unique<PagePool>(*store_, 256, kPage);
  }

  std::vector<ConstBuffer> in(size_t first, size_t n) {
    std::vector<ConstBuffer> v;
    for (size_t i = 0; i < n; ++i) v.push_back(pool_->in(first + i, kPage));
    return v;
  }
  std::vector<MutableBuffer> out(size_t first, size_t n) {
    std::vector<MutableBuffer> v;
    for (size_t i = 0; i < n; ++i) v.push_back(pool_->out(first + i, kPage));
    return v;
  }

  testing::TempDir dir_;
  std::shared_ptr<FaultInjector> faults_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<PagePool> pool_;
};

TEST_F(StoreAsync, ManyBatchesInFlightFromSeveralThreads) {
  constexpr int kThreads = 4, kBatches = 8, kPages = 4;  // 4 x 8 x 4 = 128 pages
  for (size_t i = 0; i < 128; ++i) pool_->fill(i, kPage, 1000 + i);
  const size_t fds = testing::open_fds();
  std::atomic<int> callbacks{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<BatchTicket> puts;
      std::vector<std::vector<std::string>> keys(kBatches);
      for (int b = 0; b < kBatches; ++b) {
        const size_t first = (t * kBatches + b) * kPages;
        keys[b] = testing::keys_for("a" + std::to_string(first) + "-", kPages);
        puts.push_back(store_->submit_put(testing::views(keys[b]), in(first, kPages),
                                          [&](const BatchResult& r) {
                                            ++callbacks;
                                            if (!r.all_ok()) ++bad;
                                          }));
      }
      for (auto& p : puts) {
        p.wait();
        if (!p.take().all_ok()) ++bad;
      }
      std::vector<BatchTicket> gets;
      for (int b = 0; b < kBatches; ++b) {
        const size_t first = (t * kBatches + b) * kPages;
        gets.push_back(store_->submit_get(testing::views(keys[b]), out(128 + first, kPages)));
      }
      for (int b = 0; b < kBatches; ++b) {
        KVTIER_EXPECT_OK(gets[b].wait(testing::kHungCeiling));
        if (!gets[b].take().all_ok()) ++bad;
        const size_t first = (t * kBatches + b) * kPages;
        for (size_t i = 0; i < kPages; ++i) {
          if (!pool_->holds(128 + first + i, kPage, 1000 + first + i)) ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(callbacks.load(), kThreads * kBatches);
  EXPECT_EQ(testing::open_fds(), fds);
}

TEST_F(StoreAsync, WaitTimesOutThenCompletesAndTakeGivesTheResultOnce) {
  const auto keys = testing::keys_for("w", 2);
  faults_->hold_batches();  // the put cannot finish until released below
  BatchTicket t = store_->submit_put(testing::views(keys), in(0, 2));
  EXPECT_FALSE(t.done());
  EXPECT_EQ(t.take().status.code(), StatusCode::kInvalidArgument) << "take before done";
  EXPECT_EQ(t.wait(20ms).code(), StatusCode::kDeadlineExceeded);
  faults_->release_batches();
  KVTIER_ASSERT_OK(t.wait(testing::kHungCeiling));
  EXPECT_TRUE(t.done());
  BatchResult r = t.take();
  EXPECT_TRUE(r.all_ok());
  EXPECT_EQ(r.pages.size(), 2u);
  EXPECT_EQ(t.take().status.code(), StatusCode::kInvalidArgument) << "taken twice";
}

TEST_F(StoreAsync, KeysAreCopiedSoTheCallerMayDropThem) {
  BatchTicket t;
  {
    std::vector<std::string> keys = {"copied-0", "copied-1"};
    t = store_->submit_put(testing::views(keys), in(0, 2));
  }  // the caller's keys are gone before the batch runs
  t.wait();
  EXPECT_TRUE(t.take().all_ok());
  EXPECT_TRUE(*store_->exists("copied-1"));
}

// Opens the fault injector's gate once a batch is held there: from another thread, for a
// caller that blocks until the batch is done.
std::thread release_once_held(FaultInjector& faults) {
  return std::thread([&faults] {
    faults.wait_held(1);
    faults.release_batches();
  });
}

TEST_F(StoreAsync, DestroyingATicketWaitsForItsBatch) {
  faults_->hold_batches();
  std::atomic<bool> finished{false};
  std::thread releaser = release_once_held(*faults_);
  {
    const auto keys = testing::keys_for("d", 4);
    BatchTicket t = store_->submit_put(testing::views(keys), in(0, 4),
                                       [&](const BatchResult&) { finished = true; });
  }  // blocks until the batch, held until it reached the backend, is done
  EXPECT_TRUE(finished.load()) << "the ticket went while its batch could still touch memory";
  releaser.join();
}

TEST_F(StoreAsync, DetachedBatchesReportThroughTheirCallbackAndTheStoreWaitsForThem) {
  faults_->hold_batches();
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    const auto keys = testing::keys_for("x" + std::to_string(i) + "-", 2);
    store_
        ->submit_put(testing::views(keys), in(2 * i, 2),
                     [&](const BatchResult& r) { done += r.all_ok() ? 1 : 100; })
        .detach();
  }
  EXPECT_EQ(done.load(), 0);  // all held
  std::thread releaser = release_once_held(*faults_);
  store_.reset();  // closes only after the detached batches ran
  releaser.join();
  EXPECT_EQ(done.load(), 3);
}

TEST_F(StoreAsync, BadInputComesBackInTheTicket) {
  const std::vector<std::string_view> keys = {"a", "b"};
  BatchTicket t = store_->submit_get(keys, out(0, 3));
  t.wait();
  EXPECT_EQ(t.take().status.code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreAsync, AThrowingCallbackDoesNotTakeTheStoreDown) {
  const auto keys = testing::keys_for("t", 1);
  BatchTicket t = store_->submit_put(testing::views(keys), in(0, 1), [](const BatchResult&) {
    throw std::runtime_error("callback bug");
  });
  t.wait();
  EXPECT_TRUE(t.take().all_ok());
  BatchTicket again = store_->submit_get(testing::views(keys), out(1, 1));
  again.wait();
  EXPECT_TRUE(again.take().all_ok());
}

}  // namespace
}  // namespace kvtier
