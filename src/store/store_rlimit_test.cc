// 20,000 mixed operations with batches of up to 128 pages under RLIMIT_NOFILE = 64: the store
// keeps its open objects within budget, so nothing fails for lack of descriptors. Both FILE
// layouts: a file per page, and segments (small segments so that they roll often, and three
// lanes, so that a full batch of 16 KiB pages is written into three segments at once).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <random>

#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

struct RlimitCase {
  const char* name;
  const char* query;
  size_t page;
};

class StoreRlimit : public ::testing::TestWithParam<RlimitCase> {};

TEST_P(StoreRlimit, TwentyThousandMixedOperationsWithSixtyFourDescriptors) {
  testing::TempDir dir;
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  struct rlimit tight = old;
  tight.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  struct Restore {
    struct rlimit r;
    ~Restore() { ::setrlimit(RLIMIT_NOFILE, &r); }
  } restore{old};

  const size_t kPage = GetParam().page;
  constexpr size_t kKeys = 400, kMaxBatch = 128;
  StoreConfig cfg;
  cfg.location = *parse_store_uri(dir.file("s") + GetParam().query);
  cfg.ns = testing::test_namespace();
  cfg.segment_bytes = 4 << 20;
  cfg.segment_lanes = 3;
  auto store = testing::open_store(std::move(cfg));
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 2 * kMaxBatch, kPage);
  const auto keys = testing::keys_for("rl", kKeys);
  std::vector<bool> stored(kKeys, false);
  std::mt19937 rng(1234);
  const size_t fds_at_start = testing::open_fds();

  size_t ops = 0, failures = 0;
  std::string first_failure;
  auto fail = [&](const Status& s) {
    if (failures++ == 0) first_failure = s.to_string();
  };
  while (ops < 20000) {
    // Mostly small batches, some of SGLang's full 128: each full batch alone needs twice the
    // descriptors the process may hold.
    const size_t roll = rng() % 100;
    const size_t span = roll < 70 ? 8 : roll < 95 ? 32 : kMaxBatch;
    const size_t first = rng() % kKeys;
    const size_t n = std::min<size_t>(roll >= 95 ? kMaxBatch : 1 + rng() % span, kKeys - first);
    std::vector<std::string_view> batch(keys.begin() + first, keys.begin() + first + n);
    switch (rng() % 5) {
      case 0:
      case 1: {  // batch_put
        std::vector<ConstBuffer> in;
        for (size_t i = 0; i < n; ++i) {
          pool.fill(i, kPage, first + i);
          in.push_back(pool.in(i, kPage));
        }
        BatchResult r = store->batch_put(batch, in);
        for (size_t i = 0; i < n; ++i) {
          if (r.pages[i].ok()) {
            stored[first + i] = true;
          } else {
            fail(r.pages[i]);
          }
        }
        break;
      }
      case 2: {  // batch_get, verifying every stored page
        std::vector<MutableBuffer> out;
        for (size_t i = 0; i < n; ++i) out.push_back(pool.out(kMaxBatch + i, kPage));
        BatchResult r = store->batch_get(batch, out);
        for (size_t i = 0; i < n; ++i) {
          if (stored[first + i]) {
            if (!r.pages[i].ok())
              fail(r.pages[i]);
            else if (!pool.holds(kMaxBatch + i, kPage, first + i))
              fail(corrupt_error("wrong bytes"));
          } else if (r.pages[i].code() != StatusCode::kNotFound) {
            fail(r.pages[i]);
          }
        }
        break;
      }
      case 3: {  // batch_exists
        size_t expect = 0;
        while (expect < n && stored[first + expect]) ++expect;
        if (store->batch_exists(batch) != expect) fail(internal_error("batch_exists"));
        break;
      }
      default: {  // remove one
        Status st = store->remove(keys[first]);
        if (stored[first] ? !st.ok() : st.code() != StatusCode::kNotFound) fail(st);
        stored[first] = false;
        break;
      }
    }
    ++ops;
  }
  EXPECT_EQ(failures, 0u) << "first failure: " << first_failure;
  EXPECT_EQ(testing::open_fds(), fds_at_start);
}

INSTANTIATE_TEST_SUITE_P(Layouts, StoreRlimit,
                         ::testing::Values(RlimitCase{"files", "?backend=posix", 4096},
                                           RlimitCase{"segments", "?backend=posix&layout=segments",
                                                      16384}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvtier
