// The page store's behaviour suite, run on every backend configuration: round trips of many
// sizes, misses, overwrites, batches with holes, per-page status, prefix exists, clear scoped
// to the namespace, sharing between stores, and concurrent readers and writers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;
using testing::StoreCase;

class StoreBehaviour : public ::testing::TestWithParam<StoreCase> {
 protected:
  void SetUp() override {
    if (GetParam().backend == "s3" && !testing::s3_test_server().available()) {
      GTEST_SKIP() << testing::s3_test_server().skip_reason;
    }
    loc_ = testing::location_for(GetParam(), dir_);
    if (GetParam().backend == "uring") {
      StoreConfig probe{.location = loc_, .ns = testing::test_namespace()};
      Result<std::unique_ptr<Store>> s = Store::open(probe);
      if (!s.ok() && (s.status().code() == StatusCode::kUnavailable ||
                      s.status().message().find("unknown backend") != std::string::npos)) {
        GTEST_SKIP() << "no io_uring backend here: " << s.status().to_string();
      }
    }
    store_ = open_other(testing::test_namespace());
    ASSERT_NE(store_, nullptr);
    if (GetParam().direct_io != DirectIo::kOff && store_->stats().direct_io.starts_with("off")) {
      GTEST_SKIP() << "no direct I/O under " << dir_.path() << ": " << store_->stats().direct_io;
    }
  }

  std::unique_ptr<Store> open_other(NamespaceSpec ns) {
    return testing::open_store(loc_, std::move(ns), nullptr, GetParam().direct_io,
                               GetParam().fsync);
  }

  testing::TempDir dir_;
  StoreLocation loc_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreBehaviour, RoundTripOfManySizes) {
  PagePool pool(*store_, 2, (4 << 20) + 4096);
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4096}, size_t{70272}, size_t{(4 << 20) + 1}}) {
    SCOPED_TRACE(n);
    const std::string key = "page-" + std::to_string(n);
    pool.fill(0, n, n);
    KVTIER_ASSERT_OK(store_->put(key, pool.slot(0), n));
    pool.clear(1);
    KVTIER_ASSERT_OK(store_->get(key, pool.slot(1), n));
    EXPECT_TRUE(pool.holds(1, n, n));
  }
  const StoreStats s = store_->stats();
  EXPECT_EQ(s.put_pages, 5u);
  EXPECT_EQ(s.get_hits, 5u);
  EXPECT_EQ(s.get_bytes, s.put_bytes);
}

TEST_P(StoreBehaviour, EmptyPagesAreRejected) {
  PagePool pool(*store_, 1, 4096);
  EXPECT_EQ(store_->put("k", pool.slot(0), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->get("k", pool.slot(0), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store_->exists("k"), false);
}

TEST_P(StoreBehaviour, MissIsNotFoundAndCounted) {
  PagePool pool(*store_, 1, 4096);
  Status st = store_->get("never-written", pool.slot(0), 4096);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->stats().get_misses, 1u);
  EXPECT_EQ(*store_->exists("never-written"), false);
}

TEST_P(StoreBehaviour, OverwriteReplacesTheContent) {
  PagePool pool(*store_, 2, 65536);
  pool.fill(0, 65536, 1);
  KVTIER_ASSERT_OK(store_->put("k", pool.slot(0), 65536));
  pool.fill(0, 65536, 2);
  KVTIER_ASSERT_OK(store_->put("k", pool.slot(0), 65536));
  KVTIER_ASSERT_OK(store_->get("k", pool.slot(1), 65536));
  EXPECT_TRUE(pool.holds(1, 65536, 2));
}

TEST_P(StoreBehaviour, BatchWithHolesReportsEachPage) {
  constexpr size_t kPage = 70272;
  PagePool pool(*store_, 8, kPage);
  const auto keys = testing::keys_for("b", 6);
  // Store pages 0, 1, 3 and 5.
  std::vector<std::string_view> put_keys = {keys[0], keys[1], keys[3], keys[5]};
  std::vector<ConstBuffer> put_pieces;
  for (size_t i : {0, 1, 3, 5}) {
    pool.fill(i, kPage, 100 + i);
    put_pieces.push_back(pool.in(i, kPage));
  }
  BatchResult w = store_->batch_put(put_keys, put_pieces);
  ASSERT_TRUE(w.all_ok()) << w.status.to_string();

  for (size_t i = 0; i < 6; ++i) pool.clear(i);
  std::vector<MutableBuffer> get_pieces;
  for (size_t i = 0; i < 6; ++i) get_pieces.push_back(pool.out(i, kPage));
  BatchResult r = store_->batch_get(testing::views(keys), get_pieces);
  KVTIER_ASSERT_OK(r.status);
  ASSERT_EQ(r.pages.size(), 6u);
  const StatusCode expect[] = {StatusCode::kOk, StatusCode::kOk,       StatusCode::kNotFound,
                               StatusCode::kOk, StatusCode::kNotFound, StatusCode::kOk};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(r.pages[i].code(), expect[i]) << i << ": " << r.pages[i].to_string();
    if (expect[i] == StatusCode::kOk) {
      EXPECT_TRUE(pool.holds(i, kPage, 100 + i)) << i;
    }
  }
  EXPECT_EQ(r.ok_prefix(), 2u);
  EXPECT_EQ(r.ok_count(), 4u);
  EXPECT_EQ(store_->batch_exists(testing::views(keys)), 2u);
}

TEST_P(StoreBehaviour, PerPageStatusIsolatesABadPage) {
  PagePool pool(*store_, 3, 4096);
  AlignedBuffer unregistered = testing::make_buffer(4096);
  const std::vector<std::string_view> keys = {"p0", "p1", "p2"};
  const std::vector<ConstBuffer> pieces = {pool.in(0, 4096), ConstBuffer{unregistered.data(), 4096},
                                           pool.in(2, 4096)};
  BatchResult w = store_->batch_put(keys, pieces);
  KVTIER_ASSERT_OK(w.status);
  KVTIER_EXPECT_OK(w.pages[0]);
  EXPECT_EQ(w.pages[1].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.pages[1].message().find("registered"), std::string::npos) << w.pages[1].message();
  KVTIER_EXPECT_OK(w.pages[2]);
  EXPECT_EQ(store_->batch_exists(keys), 1u);
  EXPECT_EQ(*store_->exists("p2"), true);
}

TEST_P(StoreBehaviour, PrefixExistsStopsAtTheFirstAbsentKey) {
  PagePool pool(*store_, 1, 4096);
  const auto keys = testing::keys_for("e", 10);
  for (size_t i : {0, 1, 2, 3, 5, 6}) KVTIER_ASSERT_OK(store_->put(keys[i], pool.slot(0), 4096));
  EXPECT_EQ(store_->batch_exists(testing::views(keys)), 4u);
  EXPECT_EQ(store_->batch_exists({}), 0u);
  std::vector<std::string_view> from5 = {keys[5], keys[6], keys[7]};
  EXPECT_EQ(store_->batch_exists(from5), 2u);
}

TEST_P(StoreBehaviour, MultiPiecePagesKeepPieceOrder) {
  // Page-first MHA pages: a K piece and a V piece per page, at unrelated pool addresses.
  constexpr size_t kPiece = 1310720;  // Qwen2.5-72B TP8 piece (1.25 MiB)
  PagePool pool(*store_, 8, kPiece);
  const std::vector<std::string_view> keys = {"kv0", "kv1"};
  std::vector<ConstBuffer> in;
  for (size_t i = 0; i < 4; ++i) {
    pool.fill(i, kPiece, 7 + i);
    in.push_back(pool.in(i, kPiece));
  }
  ASSERT_TRUE(store_->batch_put(keys, in).all_ok());
  // Read page 0 as (V slot 5, K slot 4) swapped on purpose: pieces come back in stored order.
  std::vector<MutableBuffer> out = {pool.out(4, kPiece), pool.out(5, kPiece), pool.out(6, kPiece),
                                    pool.out(7, kPiece)};
  BatchResult r = store_->batch_get(keys, out);
  ASSERT_TRUE(r.all_ok()) << r.pages[0].to_string();
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(pool.holds(4 + i, kPiece, 7 + i)) << i;
  // The same page read as one piece of twice the size is a layout mismatch, not data.
  PagePool flat(*store_, 1, 2 * kPiece);
  Status st = store_->get("kv0", flat.slot(0), 2 * kPiece);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_EQ(*store_->exists("kv0"), true) << "an intact page must not be dropped";
}

TEST_P(StoreBehaviour, NamespaceGeometryIsEnforced) {
  NamespaceSpec ns = testing::test_namespace("geometry");
  ns.piece_bytes = 8192;
  ns.pieces_per_page = 2;
  auto s = open_other(ns);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 4, 8192);
  const std::vector<std::string_view> one = {"g"};
  const std::vector<ConstBuffer> good = {pool.in(0, 8192), pool.in(1, 8192)};
  EXPECT_TRUE(s->batch_put(one, good).all_ok());
  const std::vector<ConstBuffer> short_piece = {pool.in(0, 8192), pool.in(1, 4096)};
  EXPECT_EQ(s->batch_put(one, short_piece).pages[0].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->put("g1", pool.slot(0), 16384).code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreBehaviour, ClearIsScopedToTheNamespace) {
  auto other = open_other(testing::test_namespace("another-model"));
  ASSERT_NE(other, nullptr);
  PagePool mine(*store_, 1, 4096);
  PagePool theirs(*other, 1, 4096);
  const auto keys = testing::keys_for("c", 20);
  for (const auto& k : keys) {
    KVTIER_ASSERT_OK(store_->put(k, mine.slot(0), 4096));
    KVTIER_ASSERT_OK(other->put(k, theirs.slot(0), 4096));
  }
  KVTIER_ASSERT_OK(store_->clear());
  EXPECT_EQ(store_->stats().cleared, 20u);
  EXPECT_EQ(store_->batch_exists(testing::views(keys)), 0u);
  EXPECT_EQ(other->batch_exists(testing::views(keys)), 20u);
  for (const auto& k : keys) KVTIER_EXPECT_OK(other->get(k, theirs.slot(0), 4096));
  // The cleared store keeps working.
  KVTIER_ASSERT_OK(store_->put(keys[0], mine.slot(0), 4096));
  EXPECT_EQ(store_->batch_exists(testing::views(keys)), 1u);
}

TEST_P(StoreBehaviour, StoresWithEqualNamespacesSharePagesOthersNever) {
  auto twin = open_other(testing::test_namespace());
  auto stranger = open_other(testing::test_namespace("other"));
  ASSERT_NE(twin, nullptr);
  ASSERT_NE(stranger, nullptr);
  PagePool a(*store_, 1, 8192), b(*twin, 1, 8192), c(*stranger, 1, 8192);
  a.fill(0, 8192, 5);
  KVTIER_ASSERT_OK(store_->put("shared", a.slot(0), 8192));
  KVTIER_ASSERT_OK(twin->get("shared", b.slot(0), 8192));
  EXPECT_TRUE(b.holds(0, 8192, 5));
  EXPECT_EQ(stranger->get("shared", c.slot(0), 8192).code(), StatusCode::kNotFound);
}

TEST_P(StoreBehaviour, RemoveDeletesOnePage) {
  PagePool pool(*store_, 1, 4096);
  KVTIER_ASSERT_OK(store_->put("r1", pool.slot(0), 4096));
  KVTIER_ASSERT_OK(store_->put("r2", pool.slot(0), 4096));
  KVTIER_ASSERT_OK(store_->remove("r1"));
  EXPECT_EQ(store_->remove("r1").code(), StatusCode::kNotFound);
  EXPECT_EQ(*store_->exists("r1"), false);
  EXPECT_EQ(*store_->exists("r2"), true);
}

TEST_P(StoreBehaviour, LargeBatchesLikeSglangs) {
  constexpr size_t kPages = 128, kPage = 16384;
  PagePool pool(*store_, 2 * kPages, kPage);
  const auto keys = testing::keys_for("big", kPages);
  auto [in, out] = pool.fill_batch(kPages, kPage);
  BatchResult w = store_->batch_put(testing::views(keys), in);
  ASSERT_TRUE(w.all_ok());
  BatchResult r = store_->batch_get(testing::views(keys), out);
  ASSERT_TRUE(r.all_ok());
  for (size_t i = 0; i < kPages; ++i) ASSERT_TRUE(pool.holds(kPages + i, kPage, i)) << i;
  EXPECT_EQ(store_->batch_exists(testing::views(keys)), kPages);
}

TEST_P(StoreBehaviour, ConcurrentReadersAndWriters) {
  // A backup writer and a prefetch reader per thread pair, on overlapping keys: every read is
  // either a miss or one complete version of the page, never a mix.
  constexpr size_t kPage = 32768, kKeys = 16, kRounds = 40;
  constexpr int kThreads = 4;
  PagePool pool(*store_, kThreads * 2, kPage);
  std::atomic<int> torn{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t r = 0; r < kRounds; ++r) {
        const size_t k = (r * 7 + t) % kKeys;
        const std::string key = "cc" + std::to_string(k);
        if (t % 2 == 0) {
          // Content depends only on the key, in one of two versions.
          pool.fill(t, kPage, k * 2 + (r % 2));
          if (!store_->put(key, pool.slot(t), kPage).ok()) ++errors;
        } else {
          Status st = store_->get(key, pool.slot(t), kPage);
          if (st.ok()) {
            if (!pool.holds(t, kPage, k * 2) && !pool.holds(t, kPage, k * 2 + 1)) ++torn;
          } else if (st.code() != StatusCode::kNotFound) {
            ++errors;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(store_->stats().get_corrupt, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, StoreBehaviour,
    ::testing::Values(
        StoreCase{"posix", "posix", "", 1}, StoreCase{"posix_three_dirs", "posix", "", 3},
        StoreCase{"posix_short_io", "posix", "&max_io_bytes=1000", 1},
        StoreCase{"posix_named_temps", "posix", "&use_tmpfile=0", 1},
        StoreCase{"posix_direct_on", "posix", "", 1, DirectIo::kOn},
        StoreCase{"posix_direct_auto", "posix", "", 2, DirectIo::kAuto},
        StoreCase{"posix_direct_short_io", "posix", "&max_io_bytes=5000", 1, DirectIo::kOn},
        StoreCase{"posix_pool_only", "posix", "&inline_bytes=0", 1},
        StoreCase{"uring", "uring", "", 1}, StoreCase{"uring_three_dirs", "uring", "", 3},
        StoreCase{"uring_rings_only", "uring", "&inline_bytes=0", 1},
        StoreCase{"uring_short_io", "uring", "&max_io_bytes=1000&inline_bytes=0", 1},
        StoreCase{"uring_direct_on", "uring", "", 1, DirectIo::kOn},
        StoreCase{"posix_segments", "posix", "&layout=segments", 1},
        StoreCase{"posix_segments_three_dirs", "posix", "&layout=segments", 3},
        StoreCase{"posix_segments_short_io", "posix", "&layout=segments&max_io_bytes=1000", 1},
        StoreCase{"posix_segments_pool_only", "posix", "&layout=segments&inline_bytes=0", 1},
        StoreCase{"posix_segments_direct_on", "posix", "&layout=segments", 1, DirectIo::kOn},
        StoreCase{"posix_segments_direct_auto", "posix", "&layout=segments", 2, DirectIo::kAuto},
        StoreCase{"uring_segments", "uring", "&layout=segments", 1},
        StoreCase{"uring_segments_rings_only", "uring", "&layout=segments&inline_bytes=0", 1},
        StoreCase{"uring_segments_direct_on", "uring", "&layout=segments", 1, DirectIo::kOn},
        StoreCase{"posix_segments_fsync", "posix", "&layout=segments", 1, DirectIo::kOff, true},
        StoreCase{"uring_segments_fsync", "uring", "&layout=segments", 1, DirectIo::kOff, true},
        StoreCase{"dram", "dram", "", 1}, StoreCase{"s3", "s3", "&layout=files", 1},
        StoreCase{"s3_multipart", "s3", "&layout=files&multipart_bytes=6000000&part_bytes=5242880",
                  1},
        StoreCase{"s3_segments", "s3", "&layout=segments", 1},
        StoreCase{"s3_segments_multipart", "s3",
                  "&layout=segments&multipart_bytes=6000000&part_bytes=5242880", 1}),
    testing::case_name);

}  // namespace
}  // namespace kvtier
