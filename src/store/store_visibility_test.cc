// When a page another store wrote is found: the promise itself, measured page by page.
//
// A store's lookups find what other stores (processes, hosts) wrote: at once with page files
// (a stat or HEAD of each key the index lacks), and with segments at the next look at the
// others' summaries, which lookups make at most once per refresh_ms (0 on FILE by default: every
// lookup that misses looks; 1000 on an object store). So a page whose put returned is found by
// every lookup that begins refresh_ms or more after it (docs/architecture.md, "Segments on an
// object store").
//
// Here a reader asks without pause (batch_exists over every key, as an engine's prefix lookups
// do) while a writer, another store of the namespace, writes: first batch after batch as fast
// as it can (done well within one interval on a fast machine), then a batch each time the
// reader has found the one before, so that writes and looks alternate over several intervals.
// Each page's lag, from its put returning to the start of the first lookup that found it,
// is measured; every lookup that began refresh_ms + kSlack or more after a page's put returned
// must have found it. The check is of event order, not of speed: both times come from one
// monotonic clock, taken outside the calls (after the put returned, before the lookup began),
// so a slower machine only makes more time pass. A store whose lookups stopped looking while
// lookups keep coming fails at the first lookup past that bound, not at a ceiling.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

constexpr size_t kPage = 64 * 1024;
constexpr size_t kBatch = 8;
constexpr size_t kFastBatches = 16;            // written without pause
constexpr size_t kBatches = kFastBatches + 4;  // then each once the one before is found
// Beyond refresh_ms: what an object store may take to list an object after its PUT returned.
// The store's own part is exact (a look that began after the put returned finds it); radosgw
// and Swift list a new object at once, and this leaves them room on a loaded machine.
constexpr std::chrono::milliseconds kSlack{100};

struct VisibilityCase {
  std::string label;
  std::string backend;  // "posix", "s3"
  std::string query;
  // The interval the location's lookups honour: 0 when each one finds what was written
  // before it (page files; refresh_ms 0).
  uint64_t interval_ms;
};

void PrintTo(const VisibilityCase& c, std::ostream* os) {
  *os << c.label;
}

class StoreVisibility : public ::testing::TestWithParam<VisibilityCase> {
 protected:
  void SetUp() override {
    if (GetParam().backend == "s3" && !testing::s3_test_server().available()) {
      GTEST_SKIP() << testing::s3_test_server().skip_reason;
    }
    loc_ = testing::location_for(
        testing::StoreCase{GetParam().label, GetParam().backend, GetParam().query}, dir_);
  }

  std::unique_ptr<Store> open() { return testing::open_store(loc_, testing::test_namespace()); }

  testing::TempDir dir_;
  StoreLocation loc_;
};

TEST_P(StoreVisibility, EveryLookupThatBeginsRefreshMsAfterAPutFindsItsPage) {
  // The reader opens before anything is written and is never reopened: it learns of every
  // page by looking.
  auto reader = open();
  auto writer = open();
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(writer, nullptr);
  const std::vector<std::string> keys = testing::keys_for("visible-", kBatches * kBatch);
  const std::vector<std::string_view> all = testing::views(keys);
  const uint64_t bound_ns = GetParam().interval_ms * 1'000'000 +
                            static_cast<uint64_t>(std::chrono::nanoseconds(kSlack).count());

  // put_ns[b]: when batch b's put had returned (0: not yet).
  std::vector<std::atomic<uint64_t>> put_ns(kBatches);
  std::atomic<bool> put_failed{false};
  // Pages the reader has found so far (kReaderDone once it stopped).
  constexpr size_t kReaderDone = SIZE_MAX;
  std::atomic<size_t> reader_found{0};
  std::thread w([&] {
    PagePool pool(*writer, kBatch, kPage);
    for (size_t b = 0; b < kBatches; ++b) {
      if (b >= kFastBatches) {
        size_t f;
        while ((f = reader_found.load()) < b * kBatch) reader_found.wait(f);
        if (f == kReaderDone) return;
      }
      std::vector<ConstBuffer> in;
      for (size_t i = 0; i < kBatch; ++i) {
        pool.fill(i, kPage, b * kBatch + i);
        in.push_back(pool.in(i, kPage));
      }
      if (!writer->batch_put(std::span(all).subspan(b * kBatch, kBatch), in).all_ok()) {
        put_failed = true;
        return;
      }
      put_ns[b].store(now_ns());
    }
  });

  // The reader: one lookup after another, no pause, until every page is found or a lookup
  // that began too long after a page's put missed it.
  std::vector<uint64_t> found_ns(keys.size(), 0);  // the start of the first lookup that found it
  size_t found = 0, lookups = 0;
  std::string broken;
  const uint64_t ceiling = now_ns() + std::chrono::nanoseconds(testing::kHungCeiling).count();
  while (found < keys.size() && !put_failed) {
    const uint64_t began = now_ns();
    const size_t n = reader->batch_exists(all);
    ++lookups;
    if (n < found) {
      broken = fmt::format("lookup {} found {} pages, an earlier one {}", lookups, n, found);
      break;
    }
    for (size_t i = found; i < n; ++i) found_ns[i] = began;
    if (n > found) {
      reader_found.store(n);
      reader_found.notify_all();
    }
    found = n;
    if (found == keys.size()) break;
    // The first page this lookup missed: had its put returned long enough before it began?
    const uint64_t put = put_ns[found / kBatch].load();
    if (put != 0 && began >= put + bound_ns) {
      broken = fmt::format(
          "{} missed by a lookup that began {:.1f} ms after its put returned (bound {} ms + "
          "{} ms); lookups so far {}, looks {}",
          keys[found], static_cast<double>(began - put) / 1e6, GetParam().interval_ms,
          kSlack.count(), lookups, reader->stats().segment_looks);
      break;
    }
    if (began > ceiling) {
      broken = fmt::format("the writer hung: {} of {} pages found", found, keys.size());
      break;
    }
  }
  reader_found.store(kReaderDone);
  reader_found.notify_all();
  w.join();
  ASSERT_FALSE(put_failed) << "a put failed";
  ASSERT_TRUE(broken.empty()) << broken;

  // Each page's lag, from its put returning to the first lookup that found it (negative:
  // found before the writer's put returned).
  std::vector<double> lag_ms;
  for (size_t i = 0; i < keys.size(); ++i) {
    lag_ms.push_back(
        (static_cast<double>(found_ns[i]) - static_cast<double>(put_ns[i / kBatch].load())) / 1e6);
  }
  std::sort(lag_ms.begin(), lag_ms.end());
  const StoreStats st = reader->stats();
  std::printf(
      "%s: %zu pages, lag from put to first hit: median %.1f ms, max %.1f ms (bound %llu "
      "+ %lld ms); %zu lookups, %llu looks\n",
      GetParam().label.c_str(), keys.size(), lag_ms[lag_ms.size() / 2], lag_ms.back(),
      static_cast<unsigned long long>(GetParam().interval_ms),
      static_cast<long long>(kSlack.count()), lookups,
      static_cast<unsigned long long>(st.segment_looks));

  // What was found reads back whole.
  PagePool pool(*reader, 1, kPage);
  for (size_t i = 0; i < keys.size(); ++i) {
    KVTIER_ASSERT_OK(reader->get(keys[i], pool.slot(0), kPage)) << keys[i];
    ASSERT_TRUE(pool.holds(0, kPage, i)) << keys[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Locations, StoreVisibility,
                         ::testing::Values(
                             // FILE: every lookup that misses looks (refresh_ms 0 by default).
                             VisibilityCase{"file_pages", "posix", "&layout=files", 0},
                             VisibilityCase{"file_segments", "posix", "&layout=segments", 0},
                             VisibilityCase{"file_segments_refresh_300", "posix",
                                            "&layout=segments&refresh_ms=300", 300},
                             // S3: a HEAD per key the index lacks with page objects; with segments,
                             // a look (a LIST) at most once per refresh_ms, 1000 by default.
                             VisibilityCase{"s3_pages", "s3", "&layout=files", 0},
                             VisibilityCase{"s3_segments", "s3", "&layout=segments", 1000},
                             VisibilityCase{"s3_segments_refresh_0", "s3",
                                            "&layout=segments&refresh_ms=0", 0}),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace kvtier
