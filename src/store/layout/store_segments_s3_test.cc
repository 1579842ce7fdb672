// The segment layout on an object store (the behaviour suite runs over it too, as
// s3_segments): small pages packed into few objects, other stores and restarts finding them
// through the summaries, a missing or replaced segment a miss for exactly its pages, removes
// seen by every store, and inspection (stat, verify, gc, clear) working on it. Skipped, with
// the reason, where the tests' S3 server is not running (scripts/with-s3-server).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "format/segment_format.h"
#include "kvtier/backends/builtin.h"
#include "kvtier/store/inspect.h"
#include "kvtier/store/store.h"
#include "naming/object_io.h"
#include "src/store/store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

constexpr size_t kSmall = 64 * 1024;

class StoreSegmentsS3 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::s3_test_server().available()) {
      GTEST_SKIP() << testing::s3_test_server().skip_reason;
    }
    Result<StoreLocation> loc = parse_store_uri(
        testing::s3_test_server().uri(dir_.path(), "&layout=segments&segment_lanes=2"));
    ASSERT_TRUE(loc.ok()) << loc.status().to_string();
    location_ = *loc;
    AgentConfig ac;
    ac.backend = "s3";
    ac.storage_class = StorageClass::kObject;
    ac.params = location_.params;
    ac.registry = &builtin_backends();
    Result<Agent> agent = Agent::create(ac);
    ASSERT_TRUE(agent.ok()) << agent.status().to_string();
    agent_.emplace(std::move(agent).value());
  }

  std::unique_ptr<Store> open(std::optional<uint64_t> refresh_ms = std::nullopt) {
    StoreConfig cfg;
    cfg.location = location_;
    cfg.ns = testing::test_namespace();
    cfg.refresh_ms = refresh_ms;
    Result<std::unique_ptr<Store>> s = Store::open(cfg);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static std::vector<std::string> keys(size_t first, size_t n) {
    std::vector<std::string> k;
    for (size_t i = first; i < first + n; ++i) k.push_back(fmt::format("s3-seg-{}", i));
    return k;
  }

  static std::vector<std::string_view> views(const std::vector<std::string>& k) {
    return {k.begin(), k.end()};
  }

  // Every object under the location, by name (the key after the last '/') suffix.
  std::map<std::string, std::vector<ObjectInfo>> objects() {
    std::map<std::string, std::vector<ObjectInfo>> out;
    std::vector<std::string> dirs{location_.bases.front()};
    while (!dirs.empty()) {
      const std::string d = dirs.back();
      dirs.pop_back();
      Status st = agent_->list(d, ListOptions{.with_details = true}, [&](const ObjectInfo& e) {
        if (e.is_dir) {
          dirs.push_back(d + "/" + e.name);
        } else {
          const size_t dot = e.name.rfind('.');
          ObjectInfo full = e;
          full.name = d + "/" + e.name;
          out[dot == std::string::npos ? "" : e.name.substr(dot)].push_back(std::move(full));
        }
        return ok_status();
      });
      EXPECT_TRUE(st.ok() || st.code() == StatusCode::kNotFound) << st.to_string();
    }
    return out;
  }

  // Writes pages [first, first + n) (pattern = index) in one batch.
  void put(Store& s, PagePool& pool, size_t first, size_t n) {
    std::vector<std::string> k = keys(first, n);
    std::vector<ConstBuffer> in;
    for (size_t i = 0; i < n; ++i) {
      pool.fill(i, kSmall, first + i);
      in.push_back(pool.in(i, kSmall));
    }
    BatchResult r = s.batch_put(views(k), in);
    ASSERT_TRUE(r.all_ok()) << (r.pages.empty() ? r.status : r.pages[r.ok_prefix()]).to_string();
  }

  // Reads pages [first, first + n): which came back byte-exact, which missed.
  std::vector<bool> get(Store& s, PagePool& pool, size_t first, size_t n) {
    std::vector<std::string> k = keys(first, n);
    std::vector<MutableBuffer> out;
    for (size_t i = 0; i < n; ++i) {
      pool.clear(i);
      out.push_back(pool.out(i, kSmall));
    }
    BatchResult r = s.batch_get(views(k), out);
    std::vector<bool> hit(n);
    for (size_t i = 0; i < n; ++i) {
      if (r.pages[i].ok()) {
        EXPECT_TRUE(pool.holds(i, kSmall, first + i)) << "page " << first + i << " came back wrong";
      } else {
        EXPECT_TRUE(r.pages[i].code() == StatusCode::kNotFound ||
                    r.pages[i].code() == StatusCode::kCorrupt)
            << r.pages[i].to_string();
      }
      hit[i] = r.pages[i].ok();
    }
    return hit;
  }

  // A writer; a store whose lookups look at most once an hour (an interval no test outlasts);
  // one whose lookups look every time.
  struct WriterHourNow {
    std::unique_ptr<Store> writer, hour, now;
  };
  WriterHourNow open_writer_hour_now() { return {open(), open(3'600'000), open(0)}; }

  // How list_pages lists page `i` (its record's segment and summary).
  PageListing listed(size_t i) {
    Result<std::vector<PageListing>> pages = list_pages(location_);
    EXPECT_TRUE(pages.ok()) << pages.status().to_string();
    const std::string hash = hash128(keys(i, 1).front()).hex();
    for (const PageListing& p : pages.ok() ? *pages : std::vector<PageListing>{}) {
      if (p.name == hash) return p;
    }
    ADD_FAILURE() << "page " << i << " is not listed";
    return {};
  }

  // Pages [0, 16) through a store opened now: only the second batch of 8 is found.
  void expect_only_the_second_batch() {
    auto fresh = open();
    ASSERT_NE(fresh, nullptr);
    PagePool pf(*fresh, 16, kSmall);
    std::vector<bool> hit = get(*fresh, pf, 0, 16);
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(hit[i], i >= 8) << "page " << i;
  }

  testing::TempDir dir_;
  StoreLocation location_;
  std::optional<Agent> agent_;
};

TEST_F(StoreSegmentsS3, SmallPagesArePackedIntoAFewObjects) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->layout(), StoreLayout::kSegments);
  PagePool pool(*s, 128, kSmall);
  put(*s, pool, 0, 128);  // 8 MiB in one window: one segment per lane
  auto objs = objects();
  const size_t segs = objs[std::string(segment::kSegmentSuffix)].size();
  EXPECT_EQ(segs, 2u) << "one object per lane (not three to keep each below 4 MiB)";
  EXPECT_EQ(objs[std::string(segment::kSummarySuffix)].size(), segs);
  EXPECT_EQ(objs[""].size(), 0u) << "no page objects";
  uint64_t seg_bytes = 0;
  for (const ObjectInfo& o : objs[std::string(segment::kSegmentSuffix)]) seg_bytes += o.size;
  EXPECT_GE(seg_bytes, 128 * kSmall);
  EXPECT_LT(seg_bytes, 128 * (kSmall + 4096) + segs * segment::kSegmentHeaderBytes);
  std::vector<bool> hit = get(*s, pool, 0, 128);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 128);
}

// Unless segment_lanes says otherwise, an object store's window goes up as about 8 segments
// side by side, whatever the client's cores (uploads are what runs in parallel there), none a
// little past a whole MiB: eight segments of an 8 MiB window of 64 KiB pages would each be a
// few KiB past 1 MiB (records carry compact headers), so it goes up as nine of 14-15 pages.
TEST_F(StoreSegmentsS3, ByDefaultAWindowGoesUpAsAboutEightSegmentsOfAtMostOneMiB) {
  Result<StoreLocation> loc =
      parse_store_uri(testing::s3_test_server().uri(dir_.path(), "&layout=segments"));
  ASSERT_TRUE(loc.ok()) << loc.status().to_string();
  location_ = *loc;
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 128, kSmall);
  put(*s, pool, 0, 128);  // 8 MiB in one window
  auto objs = objects();
  const std::vector<ObjectInfo>& segs = objs[std::string(segment::kSegmentSuffix)];
  EXPECT_EQ(segs.size(), 9u);
  for (const ObjectInfo& o : segs) {
    EXPECT_LE(o.size, uint64_t{1} << 20) << o.name;
    EXPECT_GT(o.size, 14 * kSmall) << o.name << ": the pages shared out evenly";
  }
  put(*s, pool, 128, 8);  // 512 KiB: one segment, not eight of 64 KiB
  EXPECT_EQ(objects()[std::string(segment::kSegmentSuffix)].size(), 10u);
  std::vector<bool> hit = get(*s, pool, 0, 128);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 128);
  hit = get(*s, pool, 128, 8);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 8);
}

TEST_F(StoreSegmentsS3, OtherStoresAndRestartsFindThePages) {
  auto a = open();
  auto b = open();  // open before the pages exist: learns of them by listing
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  PagePool pa(*a, 64, kSmall);
  PagePool pb(*b, 64, kSmall);
  put(*a, pa, 0, 40);
  const std::vector<std::string> k = keys(0, 40);
  EXPECT_EQ(b->batch_exists(views(k)), 40u);
  std::vector<bool> hit = get(*b, pb, 0, 40);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 40);
  a.reset();
  b.reset();
  auto c = open();  // a restart: indexed from the summaries alone
  ASSERT_NE(c, nullptr);
  PagePool pc(*c, 64, kSmall);
  EXPECT_EQ(c->stats().pages, 40u);
  hit = get(*c, pc, 0, 40);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 40);
}

// A key the index lacks makes a store list the other writers' summaries: one LIST request per
// 1,000 segments. Lookups list at most once per refresh_ms, so a serving engine whose every
// request ends in a miss does not list the whole namespace each time (50 ms a call at 2,048
// segments on the project's radosgw, growing with the store).
TEST_F(StoreSegmentsS3, LookupsListAtMostOncePerRefreshInterval) {
  auto [a, hour, now] = open_writer_hour_now();
  ASSERT_TRUE(a && hour && now);
  PagePool pa(*a, 64, kSmall);
  PagePool ph(*hour, 64, kSmall);
  put(*a, pa, 0, 20);
  const std::vector<std::string> first = keys(0, 20);
  const std::vector<std::string> second = keys(20, 20);
  // The first lookup since open looks, and later misses within the interval do not.
  EXPECT_EQ(hour->batch_exists(views(first)), 20u);
  EXPECT_EQ(hour->stats().segment_looks, 1u);
  put(*a, pa, 20, 20);
  EXPECT_EQ(hour->batch_exists(views(second)), 0u);
  Result<bool> one = hour->exists(second.front());
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_FALSE(*one);
  std::vector<bool> hit = get(*hour, ph, 20, 20);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 0);  // misses, not errors
  EXPECT_EQ(hour->stats().segment_looks, 1u);
  // What it holds it still serves.
  hit = get(*hour, ph, 0, 20);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 20);
  // refresh_ms=0: each lookup with a miss looks, and finds what was written before it.
  EXPECT_EQ(now->batch_exists(views(first)), 20u);
  EXPECT_EQ(now->batch_exists(views(second)), 20u);
  put(*a, pa, 40, 20);
  EXPECT_EQ(now->batch_exists(views(keys(40, 20))), 20u);
  EXPECT_EQ(now->stats().segment_looks, 2u);  // its first look found both batches
  // Writes, clear and reopening are not lookups: a restart finds everything at once.
  auto again = open(3'600'000);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->batch_exists(views(keys(0, 60))), 60u);
  EXPECT_EQ(again->stats().segment_looks, 0u);
}

// Exists calls see another store's clear through the namespace's clear generation, a HEAD on
// an object store: read at most once per refresh_ms too. Until then the stale index may
// answer, and a read of a cleared page is a miss, never data.
TEST_F(StoreSegmentsS3, AClearIsSeenWithinTheRefreshInterval) {
  auto [a, hour, now] = open_writer_hour_now();
  ASSERT_TRUE(a && hour && now);
  PagePool pa(*a, 64, kSmall);
  PagePool ph(*hour, 64, kSmall);
  put(*a, pa, 0, 20);
  const std::vector<std::string> k = keys(0, 20);
  EXPECT_EQ(hour->batch_exists(views(k)), 20u);
  EXPECT_EQ(now->batch_exists(views(k)), 20u);
  KVTIER_ASSERT_OK(a->clear());
  EXPECT_EQ(now->batch_exists(views(k)), 0u);    // read the generation again
  EXPECT_EQ(hour->batch_exists(views(k)), 20u);  // has not, and answers from its index
  std::vector<bool> hit = get(*hour, ph, 0, 20);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 0);
  EXPECT_EQ(a->batch_exists(views(k)), 0u);  // the store that cleared knows at once
}

TEST_F(StoreSegmentsS3, TheUriSetsTheRefreshInterval) {
  Result<StoreLocation> loc =
      parse_store_uri(testing::s3_test_server().uri(dir_.path(), "&layout=segments&refresh_ms=5"));
  ASSERT_TRUE(loc.ok()) << loc.status().to_string();
  EXPECT_EQ(loc->store_params.at("refresh_ms"), "5");
  EXPECT_EQ(loc->params.count("refresh_ms"), 0u);  // not the backend's
  StoreConfig cfg;
  cfg.location = *loc;
  cfg.ns = testing::test_namespace();
  EXPECT_TRUE(Store::open(cfg).ok());
  loc = parse_store_uri(testing::s3_test_server().uri(dir_.path(), "&refresh_ms=soon"));
  ASSERT_TRUE(loc.ok()) << loc.status().to_string();
  cfg.location = *loc;
  Result<std::unique_ptr<Store>> bad = Store::open(cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("refresh_ms='soon'"), std::string::npos)
      << bad.status().to_string();
}

TEST_F(StoreSegmentsS3, AMissingSegmentIsAMissForExactlyItsPages) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 64, kSmall);
  put(*s, pool, 0, 8);  // under 1 MiB: one segment
  put(*s, pool, 8, 8);  // another
  Result<std::vector<PageListing>> pages = list_pages(location_);
  ASSERT_TRUE(pages.ok()) << pages.status().to_string();
  ASSERT_EQ(pages->size(), 16u);
  std::set<std::string> segments;
  for (const PageListing& p : *pages) segments.insert(p.path);
  ASSERT_EQ(segments.size(), 2u);
  // The first batch's segment goes (as a bucket's lifecycle rule or another host would).
  const std::string first_seg = listed(0).path;
  ASSERT_FALSE(first_seg.empty());
  KVTIER_ASSERT_OK(agent_->remove(first_seg));
  std::vector<bool> hit = get(*s, pool, 0, 16);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(hit[i], i >= 8) << "page " << i;
  expect_only_the_second_batch();
}

// A segment whose summary never made it (its upload failed, or came after the caller's
// deadline) is found by no store and reclaimed by none: gc removes it once it is older than
// --temp-age, as it does temporaries, and nothing else.
TEST_F(StoreSegmentsS3, GcRemovesSegmentsNoSummaryNames) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 64, kSmall);
  put(*s, pool, 0, 8);  // under 1 MiB: one segment
  put(*s, pool, 8, 8);  // another
  const PageListing first = listed(0);
  const std::string& first_seg = first.path;
  const std::string& first_sum = first.summary;
  ASSERT_FALSE(first_sum.empty());
  KVTIER_ASSERT_OK(agent_->remove(first_sum));  // as if it had never been written
  ASSERT_EQ(objects()[".seg"].size(), 2u);
  // Younger than the age given: kept (a writer may be about to publish its summary).
  Result<uint64_t> swept = sweep_temporaries(location_, 3600);
  ASSERT_TRUE(swept.ok()) << swept.status().to_string();
  EXPECT_EQ(*swept, 0u);
  EXPECT_EQ(objects()[".seg"].size(), 2u);
  // Age 0: every one, whatever time the server lists (Swift's S3 API rounds it up).
  swept = sweep_temporaries(location_, 0);
  ASSERT_TRUE(swept.ok()) << swept.status().to_string();
  EXPECT_EQ(*swept, 1u);
  const std::vector<ObjectInfo> left = objects()[".seg"];
  ASSERT_EQ(left.size(), 1u);
  EXPECT_NE(left.front().name, first_seg);
  expect_only_the_second_batch();  // the other segment's pages are all there
}

TEST_F(StoreSegmentsS3, AReplacedSegmentIsAMissNeverData) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 16, kSmall);
  put(*s, pool, 0, 4);
  put(*s, pool, 4, 4);
  Result<std::vector<PageListing>> pages = list_pages(location_);
  ASSERT_TRUE(pages.ok()) << pages.status().to_string();
  std::map<std::string, uint64_t> seg_size;
  const auto objs = objects();
  for (const ObjectInfo& o : objs.at(std::string(segment::kSegmentSuffix))) {
    seg_size[o.name] = o.size;
  }
  const Hash128 k0 = hash128(keys(0, 1).front());
  const Hash128 k4 = hash128(keys(4, 1).front());
  std::string seg0, seg4;
  for (const PageListing& p : *pages) {
    if (p.name == k0.hex()) seg0 = p.path;
    if (p.name == k4.hex()) seg4 = p.path;
  }
  ASSERT_FALSE(seg0.empty());
  ASSERT_FALSE(seg4.empty());
  ASSERT_NE(seg0, seg4);
  ASSERT_EQ(seg_size.count(seg0), 1u) << seg0;
  // One replaced by other bytes of the same size, the other by an object of another size.
  const std::string temp = location_.bases.front() + "/tmp";
  KVTIER_ASSERT_OK(object_io::write_object(*agent_, seg0, temp, std::string(seg_size[seg0], 'x')));
  KVTIER_ASSERT_OK(object_io::write_object(*agent_, seg4, temp, std::string(4096, 'y')));
  std::vector<bool> hit = get(*s, pool, 0, 8);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 0);
  auto fresh = open();
  ASSERT_NE(fresh, nullptr);
  PagePool pf(*fresh, 8, kSmall);
  hit = get(*fresh, pf, 0, 8);
  EXPECT_EQ(std::count(hit.begin(), hit.end(), true), 0);
}

TEST_F(StoreSegmentsS3, ARemovedPageIsGoneForEveryStore) {
  auto a = open();
  ASSERT_NE(a, nullptr);
  PagePool pa(*a, 8, kSmall);
  put(*a, pa, 0, 4);
  KVTIER_ASSERT_OK(a->remove(keys(2, 1).front()));
  // A store that opens later applies the remove's summary after the put's.
  auto c = open();
  ASSERT_NE(c, nullptr);
  PagePool pc(*c, 8, kSmall);
  std::vector<bool> hit = get(*c, pc, 0, 4);
  EXPECT_EQ(hit, (std::vector<bool>{true, true, false, true}));
  hit = get(*a, pa, 0, 4);
  EXPECT_EQ(hit, (std::vector<bool>{true, true, false, true}));
}

TEST_F(StoreSegmentsS3, StatVerifyGcAndClearWorkOnIt) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 32, kSmall);
  put(*s, pool, 0, 24);
  Result<Inventory> inv = take_inventory(location_);
  ASSERT_TRUE(inv.ok()) << inv.status().to_string();
  ASSERT_EQ(inv->namespaces.size(), 1u);
  EXPECT_EQ(inv->namespaces[0].pages, 24u);
  EXPECT_GE(inv->namespaces[0].segments, 1u);
  Result<VerifyReport> v = verify_store(location_);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->pages, 24u);
  EXPECT_EQ(v->intact, 24u);
  EXPECT_TRUE(v->problems.empty());
  // gc: the 8 least recently written pages go; every store then misses them.
  Result<std::vector<PageListing>> pages = list_pages(location_);
  ASSERT_TRUE(pages.ok()) << pages.status().to_string();
  ASSERT_EQ(pages->size(), 24u);
  std::vector<PageListing> oldest;
  std::set<std::string> gone;
  for (size_t i = 0; i < 8; ++i) {
    oldest.push_back((*pages)[i]);
    gone.insert((*pages)[i].name);
  }
  Result<RemovalReport> removed = remove_pages(location_, oldest);
  ASSERT_TRUE(removed.ok()) << removed.status().to_string();
  EXPECT_EQ(removed->pages, 8u);
  KVTIER_EXPECT_OK(removed->first_error);
  auto fresh = open();
  ASSERT_NE(fresh, nullptr);
  PagePool pf(*fresh, 24, kSmall);
  std::vector<bool> hit = get(*fresh, pf, 0, 24);
  const std::vector<std::string> k = keys(0, 24);
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_EQ(hit[i], gone.count(hash128(k[i]).hex()) == 0) << "page " << i;
  }
  // clear: nothing left, for this store and any other.
  KVTIER_ASSERT_OK(s->clear());
  EXPECT_EQ(objects()[std::string(segment::kSegmentSuffix)].size(), 0u);
  auto after = open();
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->batch_exists(views(k)), 0u);
  EXPECT_EQ(fresh->batch_exists(views(k)), 0u);
}

TEST_F(StoreSegmentsS3, AutoPacksPagesBelowOneMiB) {
  auto open_auto = [&](const std::string& prefix, std::string_view query, uint64_t piece) {
    StoreConfig cfg;
    cfg.location = *parse_store_uri(testing::s3_test_server().uri(dir_.file(prefix), query));
    cfg.ns = testing::test_namespace();
    cfg.ns.piece_bytes = piece;
    Result<std::unique_ptr<Store>> s = Store::open(cfg);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  };
  auto small = open_auto("small", "", 256 * 1024);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->layout(), StoreLayout::kSegments);
  EXPECT_EQ(small->stats().layout,
            "segments (auto: pages of 262144 B, below 1 MiB on an object store)");
  auto large = open_auto("large", "", 1 << 20);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(large->layout(), StoreLayout::kFiles);
  // A namespace that holds page objects keeps them readable: it stays with files.
  {
    auto files = open_auto("held", "&layout=files", 256 * 1024);
    ASSERT_NE(files, nullptr);
    PagePool pool(*files, 1, 256 * 1024);
    pool.fill(0, 256 * 1024, 5);
    KVTIER_ASSERT_OK(files->put("held-page", pool.slot(0), 256 * 1024));
  }
  auto held = open_auto("held", "", 256 * 1024);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->layout(), StoreLayout::kFiles);
  EXPECT_EQ(held->stats().layout, "files (auto: the namespace already holds page files)");
  PagePool pool(*held, 1, 256 * 1024);
  KVTIER_ASSERT_OK(held->get("held-page", pool.slot(0), 256 * 1024));
  EXPECT_TRUE(pool.holds(0, 256 * 1024, 5));
}

TEST_F(StoreSegmentsS3, CapacityIsRefusedAsForPageObjects) {
  StoreConfig cfg;
  cfg.location = location_;
  cfg.ns = testing::test_namespace();
  cfg.capacity_bytes = 1 << 30;
  EXPECT_EQ(Store::open(cfg).status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace kvtier
