// The segment layout beyond the behaviour suite (which runs over it too): space on disk,
// segments rolling and sealing, restart from summaries alone, torn and corrupted records and
// summaries, several processes writing and reading one namespace, SIGKILL of writers, and
// descriptor accounting.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "format/page_format.h"
#include "format/segment_format.h"
#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/store/inspect.h"
#include "kvtier/store/store.h"
#include "segments_test_fixture.h"
#include "src/store/store_test_util.h"

namespace kvtier {
namespace {

using testing::kPage;
using testing::PagePool;
using testing::seed_of;
using testing::seg_files;
using testing::SegFiles;

class StoreSegments : public testing::SegmentStoreTest {};

TEST_F(StoreSegments, LayoutComesFromTheUriOrTheConfig) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->layout(), StoreLayout::kSegments);
  Result<StoreLocation> loc = parse_store_uri("file:///x?layout=segments&backend=posix");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->layout, "segments");
  EXPECT_EQ(parse_store_uri(loc->uri())->layout, "segments");
  EXPECT_EQ(parse_store_uri("file:///x?layout=bogus").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("/x")->layout, "auto");
  EXPECT_EQ(parse_store_uri("/x?layout=files")->uri(), "file:///x?layout=files");
  // Memory stores keep one object per page.
  StoreConfig mem;
  mem.location = *parse_store_uri("mem://segments-refused?layout=segments");
  mem.ns = testing::test_namespace();
  EXPECT_EQ(Store::open(mem).status().code(), StatusCode::kUnsupported);
  StoreConfig files;
  files.location = *parse_store_uri(dir_.file("files"));
  files.ns = testing::test_namespace();
  files.layout = "segments";
  Result<std::unique_ptr<Store>> f = Store::open(files);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->layout(), StoreLayout::kSegments);
}

TEST_F(StoreSegments, AutoPicksSegmentsForSmallPagesOnly) {
  int n = 0;
  auto open_auto = [&](std::string query, uint64_t piece, uint32_t pieces, bool fsync = false,
                       uint64_t capacity = 0, uint64_t page_bytes = 0) {
    StoreConfig cfg;
    cfg.location = *parse_store_uri("file://" + dir_.file(fmt::format("auto{}", n++)) + query);
    cfg.ns = testing::test_namespace("auto");
    cfg.ns.piece_bytes = piece;
    cfg.ns.pieces_per_page = pieces;
    cfg.fsync = fsync;
    cfg.capacity_bytes = capacity;
    cfg.page_bytes = page_bytes;
    return Store::open(cfg);
  };
  auto layout_for = [&](auto&&... args) {
    Result<std::unique_ptr<Store>> s = open_auto(args...);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? (*s)->layout() : StoreLayout::kFiles;
  };
  EXPECT_EQ(layout_for("?layout=auto", 70272, 1), StoreLayout::kSegments);
  EXPECT_EQ(layout_for("?layout=auto", 256 << 10, 2), StoreLayout::kSegments);
  EXPECT_EQ(layout_for("?layout=auto", 1 << 20, 2), StoreLayout::kSegments);  // 2 MiB pages
  EXPECT_EQ(layout_for("?layout=auto", 2 << 20, 2), StoreLayout::kFiles);     // 4 MiB pages
  EXPECT_EQ(layout_for("?layout=auto", 4 << 20, 1), StoreLayout::kFiles);
  EXPECT_EQ(layout_for("?layout=auto", 0, 1), StoreLayout::kFiles);  // any page size
  // Pieces of unequal sizes: the caller's page size decides.
  EXPECT_EQ(layout_for("?layout=auto", 0, 3, false, 0, 1100000), StoreLayout::kSegments);
  EXPECT_EQ(layout_for("?layout=auto", 0, 3, false, 0, 5 << 20), StoreLayout::kFiles);
  // fsync too: a window syncs its segment and summary once, a page file syncs per page.
  EXPECT_EQ(layout_for("?layout=auto", 70272, 1, /*fsync=*/true), StoreLayout::kSegments);
  EXPECT_EQ(layout_for("?layout=auto", 4 << 20, 1, /*fsync=*/true), StoreLayout::kFiles);
  // A capacity is kept by both layouts (reclaiming whole segments here).
  EXPECT_EQ(layout_for("?layout=auto", 70272, 1, false, 64 << 20), StoreLayout::kSegments);
  // auto is the default; an explicit layout is kept whatever the page size.
  EXPECT_EQ(layout_for("", 70272, 1), StoreLayout::kSegments);
  EXPECT_EQ(layout_for("?layout=files", 70272, 1), StoreLayout::kFiles);
  // stats() says what auto chose and why.
  Result<std::unique_ptr<Store>> s = open_auto("", 70272, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->stats().layout, "segments (auto: pages of 70272 B, below 4 MiB)");
  s = open_auto("", 0, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->stats().layout, "files (auto: page size unknown (pieces of unequal sizes))");
  s = open_auto("?layout=segments", 70272, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->stats().layout, "segments");
  StoreConfig mem;
  mem.location = *parse_store_uri("mem://auto-layout?layout=auto");
  mem.ns = testing::test_namespace();
  mem.ns.piece_bytes = 4096;
  Result<std::unique_ptr<Store>> m = Store::open(mem);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->layout(), StoreLayout::kFiles);
  EXPECT_EQ((*m)->stats().layout, "files (auto: memory: one object per page)");
}

// A namespace keeps the layout it holds: page files written before auto chose segments stay
// readable, and a namespace of large pages written as segments stays segments.
TEST_F(StoreSegments, AutoKeepsTheLayoutTheNamespaceHolds) {
  constexpr size_t kSmall = 8192;
  auto open_with = [&](const std::string& dir, const std::string& query, uint64_t piece) {
    StoreConfig cfg;
    cfg.location = *parse_store_uri("file://" + dir_.file(dir) + "?backend=posix" + query);
    cfg.ns = testing::test_namespace("held");
    cfg.ns.piece_bytes = piece;
    Result<std::unique_ptr<Store>> s = Store::open(cfg);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  };
  {
    std::unique_ptr<Store> files = open_with("f", "&layout=files", kSmall);
    ASSERT_NE(files, nullptr);
    PagePool pool(*files, 1, kSmall);
    pool.fill(0, kSmall, 7);
    ASSERT_TRUE(files->put("old", pool.slot(0), kSmall).ok());
  }
  std::unique_ptr<Store> again = open_with("f", "", kSmall);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->layout(), StoreLayout::kFiles);
  EXPECT_EQ(again->stats().layout, "files (auto: the namespace already holds page files)");
  {
    PagePool pool(*again, 1, kSmall);
    ASSERT_TRUE(again->get("old", pool.slot(0), kSmall).ok());
    EXPECT_TRUE(pool.holds(0, kSmall, 7));
  }
  // Cleared, the namespace is empty again: auto decides by page size once more.
  ASSERT_TRUE(again->clear().ok());
  again.reset();
  again = open_with("f", "", kSmall);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->layout(), StoreLayout::kSegments);
  again.reset();

  // Pages of 4 MiB or more written as segments by choice: auto keeps segments.
  constexpr size_t kBig = size_t{4} << 20;
  {
    std::unique_ptr<Store> seg = open_with("s", "&layout=segments", kBig);
    ASSERT_NE(seg, nullptr);
    PagePool big(*seg, 1, kBig);
    big.fill(0, kBig, 3);
    ASSERT_TRUE(seg->put("big", big.slot(0), kBig).ok());
  }
  std::unique_ptr<Store> seg = open_with("s", "", kBig);
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg->layout(), StoreLayout::kSegments);
  EXPECT_EQ(seg->stats().layout, "segments (auto: the namespace already holds segments)");
  PagePool big(*seg, 1, kBig);
  ASSERT_TRUE(seg->get("big", big.slot(0), kBig).ok());
  EXPECT_TRUE(big.holds(0, kBig, 3));
}

TEST_F(StoreSegments, NoFileIsCreatedPerPageAndSpaceIsNearThePayload) {
  // One lane: every window goes to one segment. Three: a window over 1 MiB is dealt to three
  // segments, each lane's runs one after another in its own; never a file per page either way.
  for (const size_t lanes : {size_t{1}, size_t{3}}) {
    SCOPED_TRACE(lanes);
    std::filesystem::remove_all(dir_.file("store"));
    const auto keys = testing::keys_for("space-", 128);
    {
      auto s = open("?backend=posix&layout=segments", 256 << 20, lanes);
      ASSERT_NE(s, nullptr);
      PagePool pool(*s, 32, kPage);
      for (int round = 0; round < 4; ++round) {
        std::vector<std::string> batch;
        for (size_t i = 0; i < 32; ++i) batch.push_back(keys[round * 32 + i]);
        ASSERT_TRUE(put(*s, pool, batch).all_ok());  // 32 pages: 2.1 MiB, three runs
      }
      const SegFiles f = seg_files(*s);
      EXPECT_EQ(f.segments.size(), lanes);
      EXPECT_EQ(f.summaries.size(), lanes);
      const double payload = 128.0 * kPage;
      EXPECT_LE(static_cast<double>(f.bytes), 1.03 * payload) << f.bytes;
      EXPECT_EQ(s->stats().pages, 128u);
      EXPECT_EQ(read_all(*s, pool, keys), 128u);
    }
    // Another store finds every page of every lane's segment from the summaries.
    auto again = open("?backend=posix&layout=segments", 256 << 20, 1);
    ASSERT_NE(again, nullptr);
    PagePool pool(*again, 1, kPage);
    EXPECT_EQ(again->stats().pages, 128u);
    EXPECT_EQ(read_all(*again, pool, keys), 128u);
  }
}

// The lanes can come from a file:// URI (segment_lanes), as deadline_ms does; a config that
// sets them wins; a value that is not 1 to 64 fails the open, naming it.
TEST_F(StoreSegments, LanesComeFromTheUri) {
  {
    auto s = open("?backend=posix&layout=segments&segment_lanes=3", 256 << 20);
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, 32, kPage);
    ASSERT_TRUE(put(*s, pool, testing::keys_for("lanes-", 32)).all_ok());  // three runs
    EXPECT_EQ(seg_files(*s).segments.size(), 3u);
  }
  std::filesystem::remove_all(dir_.file("store"));
  {
    auto s = open("?backend=posix&layout=segments&segment_lanes=3", 256 << 20, /*lanes=*/1);
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, 32, kPage);
    ASSERT_TRUE(put(*s, pool, testing::keys_for("lanes-", 32)).all_ok());
    EXPECT_EQ(seg_files(*s).segments.size(), 1u);
  }
  for (const char* bad : {"0", "65", "two", ""}) {
    StoreConfig cfg;
    cfg.location = *parse_store_uri("file://" + dir_.file("store") +
                                    "?backend=posix&layout=segments&segment_lanes=" + bad);
    cfg.ns = testing::test_namespace("segments");
    Result<std::unique_ptr<Store>> s = Store::open(cfg);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("segment_lanes"), std::string::npos)
        << s.status().to_string();
  }
}

TEST_F(StoreSegments, SegmentsRollSealAndEveryPageSurvivesARestartExactly) {
  const auto keys = testing::keys_for("roll-", 200);
  uint64_t bytes = 0;
  {
    auto s = open();  // 1 MiB segments: about 14 pages each
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, 10, kPage);
    for (size_t first = 0; first < keys.size(); first += 10) {
      ASSERT_TRUE(put(*s, pool, {keys.begin() + first, keys.begin() + first + 10}).all_ok());
    }
    // Overwrites and removes are in the summaries too.
    ASSERT_TRUE(put(*s, pool, {keys[0]}).all_ok());
    KVTIER_ASSERT_OK(s->remove(keys[1]));
    EXPECT_EQ(s->stats().pages, 199u);
    bytes = s->stats().bytes;
    const SegFiles f = seg_files(*s);
    EXPECT_GE(f.segments.size(), 10u);
    EXPECT_EQ(f.segments.size(), f.summaries.size());
    // Every segment but the active one ends its summary with a seal.
    size_t sealed = 0;
    for (const std::string& p : f.summaries) {
      std::ifstream in(p, std::ios::binary);
      std::string bytes_of((std::istreambuf_iterator<char>(in)), {});
      ASSERT_EQ(bytes_of.size() % segment::kEntryBytes, 0u);
      auto last = segment::decode_entry(std::span<const std::byte, segment::kEntryBytes>(
          reinterpret_cast<const std::byte*>(bytes_of.data() + bytes_of.size() - 64), 64));
      ASSERT_TRUE(last.has_value()) << p;
      if (last->type == segment::EntryType::kSeal) ++sealed;
    }
    EXPECT_EQ(sealed, f.summaries.size() - 1);
  }
  auto s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().pages, 199u);
  EXPECT_EQ(s->stats().bytes, bytes);
  EXPECT_EQ(s->batch_exists(testing::views(keys)), 1u) << "keys[1] was removed";
  PagePool pool(*s, 1, kPage);
  EXPECT_EQ(read_all(*s, pool, keys), 199u);
  EXPECT_EQ(s->stats().get_corrupt, 0u);
}

// Restart reads the summaries alone: with every segment file gone, a reopened store still
// indexes every page, exactly (the reads then miss). The open time is recorded.
TEST_F(StoreSegments, RestartIndexesFromSummariesWithoutReadingSegments) {
  constexpr size_t kPages = 200000, kSmall = 64, kBatch = 1000;
  uint64_t bytes = 0;
  {
    auto s = open("?backend=posix&layout=segments", 64 << 20);
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, kBatch, kSmall);
    std::vector<ConstBuffer> in;
    for (size_t i = 0; i < kBatch; ++i) in.push_back(pool.in(i, kSmall));
    for (size_t first = 0; first < kPages; first += kBatch) {
      std::vector<std::string> keys;
      for (size_t i = 0; i < kBatch; ++i) keys.push_back(fmt::format("{:064x}", first + i));
      ASSERT_TRUE(s->batch_put(testing::views(keys), in).all_ok());
    }
    bytes = s->stats().bytes;
    EXPECT_EQ(s->stats().pages, kPages);
    for (const std::string& p : seg_files(*s).segments) std::filesystem::remove(p);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto s = open();
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_NE(s, nullptr);
  RecordProperty(
      "open_ms",
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_EQ(s->stats().pages, kPages);
  EXPECT_EQ(s->stats().bytes, bytes);
  PagePool pool(*s, 1, kSmall);
  EXPECT_EQ(s->get(fmt::format("{:064x}", 7), pool.slot(0), kSmall).code(), StatusCode::kNotFound);
}

TEST_F(StoreSegments, ATornTailRecordIsAMissAndTheRestReads) {
  const auto keys = testing::keys_for("torn-", 6);
  std::string segment;
  {
    auto s = open();
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, 6, kPage);
    ASSERT_TRUE(put(*s, pool, keys).all_ok());
    segment = seg_files(*s).segments.at(0);
  }
  // The last record loses its end (a writer killed mid-append).
  const uint64_t size = std::filesystem::file_size(segment);
  std::filesystem::resize_file(segment, size - 1000);
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 1, kPage);
  for (size_t i = 0; i < 5; ++i) KVTIER_EXPECT_OK(s->get(keys[i], pool.slot(0), kPage)) << i;
  Status st = s->get(keys[5], pool.slot(0), kPage);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
  EXPECT_EQ(s->stats().get_corrupt, 1u);
  // Forgotten, here and after a restart: never read as wrong data again.
  EXPECT_EQ(*s->exists(keys[5]), false);
  s.reset();
  s = open();
  EXPECT_EQ(*s->exists(keys[5]), false);
  EXPECT_EQ(s->batch_exists(testing::views(keys)), 5u);
}

TEST_F(StoreSegments, ACorruptedRecordIsAMissAndIsForgotten) {
  const auto keys = testing::keys_for("flip-", 4);
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 4, kPage);
  ASSERT_TRUE(put(*s, pool, keys).all_ok());
  testing::damage_second_record(*s, keys[1].size());
  if (HasFatalFailure()) return;
  Status st = s->get(keys[1], pool.slot(0), kPage);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
  EXPECT_EQ(s->stats().corrupt_dropped, 1u);
  EXPECT_EQ(*s->exists(keys[1]), false);
  for (size_t i : {0, 2, 3}) KVTIER_EXPECT_OK(s->get(keys[i], pool.slot(0), kPage)) << i;
  auto again = open();
  EXPECT_EQ(*again->exists(keys[1]), false);
  EXPECT_EQ(again->stats().pages, 3u);
}

TEST_F(StoreSegments, ATornSummaryTailIsIgnored) {
  const auto keys = testing::keys_for("sum-", 3);
  std::string summary;
  {
    auto s = open();
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, 3, kPage);
    ASSERT_TRUE(put(*s, pool, keys).all_ok());
    summary = seg_files(*s).summaries.at(0);
  }
  // Half an entry at the end, and garbage in a whole one.
  {
    std::ofstream out(summary, std::ios::binary | std::ios::app);
    const std::string junk(64 + 30, '\x5a');
    out.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().pages, 3u);
  PagePool pool(*s, 1, kPage);
  EXPECT_EQ(read_all(*s, pool, keys), 3u);
}

// A summary of another namespace copied into this one's segment directory (by hand, or a
// bug) names none of its pages: not on open, and not when a refresh reads it again after it
// grew.
TEST_F(StoreSegments, ASummaryOfAnotherNamespaceIsIgnored) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  StoreConfig other_cfg;
  other_cfg.location = *parse_store_uri("file://" + dir_.file("other") + "?layout=segments");
  other_cfg.ns = testing::test_namespace("someone-else");
  auto other = testing::open_store(other_cfg);
  ASSERT_NE(other, nullptr);
  PagePool pool(*other, 2, kPage);
  ASSERT_TRUE(put(*other, pool, {"stranger-0"}).all_ok());
  const std::string seg_dir = s->namespace_dirs()[0] + "/seg/";
  const SegFiles theirs = seg_files(*other);
  for (const std::string& p : theirs.summaries) {
    std::filesystem::copy_file(p, seg_dir + std::filesystem::path(p).filename().string());
  }
  EXPECT_EQ(*s->exists("stranger-0"), false);  // read by a refresh, from its begin entry
  // It grows (another put of that writer, copied again): still nothing.
  ASSERT_TRUE(put(*other, pool, {"stranger-1"}).all_ok());
  for (const std::string& p : theirs.summaries) {
    std::filesystem::copy_file(p, seg_dir + std::filesystem::path(p).filename().string(),
                               std::filesystem::copy_options::overwrite_existing);
  }
  EXPECT_EQ(*s->exists("stranger-1"), false);
  EXPECT_EQ(s->stats().pages, 0u);
  auto again = open();
  EXPECT_EQ(again->stats().pages, 0u);
}

// A writer killed between a new segment and its summary (or whose summary could not be
// written) leaves a segment no summary names: gc removes it once older than --temp-age.
TEST_F(StoreSegments, GcRemovesSegmentsNoSummaryNames) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 4, kPage);
  const auto keys = testing::keys_for("named-", 4);
  ASSERT_TRUE(put(*s, pool, keys).all_ok());
  const SegFiles before = seg_files(*s);
  ASSERT_EQ(before.segments.size(), 1u);
  ASSERT_EQ(before.summaries.size(), 1u);
  const std::string seg_dir = s->namespace_dirs()[0] + "/seg/";
  const std::string unnamed =
      seg_dir + segment::segment_name(0xabc, 7) + std::string(segment::kSegmentSuffix);
  std::filesystem::copy_file(before.segments.front(), unnamed);
  const StoreLocation loc = *parse_store_uri("file://" + dir_.file("store"));
  Result<uint64_t> swept = sweep_temporaries(loc, 3600);  // too young: kept
  ASSERT_TRUE(swept.ok()) << swept.status().to_string();
  EXPECT_EQ(*swept, 0u);
  EXPECT_TRUE(std::filesystem::exists(unnamed));
  swept = sweep_temporaries(loc, 0);
  ASSERT_TRUE(swept.ok()) << swept.status().to_string();
  EXPECT_EQ(*swept, 1u);
  EXPECT_FALSE(std::filesystem::exists(unnamed));
  EXPECT_EQ(seg_files(*s).segments, before.segments);  // the named one stays
  EXPECT_EQ(read_all(*s, pool, keys), 4u);
}

TEST_F(StoreSegments, StoresSeeEachOthersPagesWithoutReopening) {
  auto a = open();
  auto b = open();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  PagePool pa(*a, 8, kPage), pb(*b, 8, kPage);
  const auto keys = testing::keys_for("shared-", 8);
  ASSERT_TRUE(put(*a, pa, {keys.begin(), keys.begin() + 4}).all_ok());
  ASSERT_TRUE(put(*b, pb, {keys.begin() + 4, keys.end()}).all_ok());
  // Each writes its own segments.
  EXPECT_EQ(seg_files(*a).segments.size(), 2u);
  EXPECT_EQ(b->batch_exists(testing::views(keys)), 8u);
  EXPECT_EQ(*a->exists(keys[7]), true);
  EXPECT_EQ(read_all(*a, pa, keys), 8u);
  EXPECT_EQ(read_all(*b, pb, keys), 8u);
  // A clear by one is seen by the other on its next exists call.
  KVTIER_ASSERT_OK(b->clear());
  EXPECT_EQ(a->batch_exists(testing::views(keys)), 0u);
  EXPECT_EQ(seg_files(*a).segments.size(), 0u);
  // Both keep writing after it.
  ASSERT_TRUE(put(*a, pa, {keys[0]}).all_ok());
  ASSERT_TRUE(put(*b, pb, {keys[1]}).all_ok());
  EXPECT_EQ(a->batch_exists(testing::views(keys)), 2u);
  EXPECT_EQ(b->batch_exists(testing::views(keys)), 2u);
}

// A look lists seg/ again only when its time changed, unless that time was still within the
// clock's coarse tick when the look last listed it: a segment created just after that listing,
// in the same tick, has the same time. That case is made here by setting the directory's time
// back after the creation; it is set ahead first, so that the listing sees a young time (ahead
// of the look's end, or again further ahead), and the test then waits for the clock to pass it
// (settled: 100 ms older than now).
TEST_F(StoreSegments, ASegmentCreatedInTheTickOfTheLastListingIsFound) {
  auto reader = open();
  auto a = open();
  auto b = open();
  ASSERT_TRUE(reader && a && b);
  PagePool pa(*a, 4, kPage), pb(*b, 4, kPage);
  const auto keys = testing::keys_for("tick-", 8);
  const std::vector<std::string> first(keys.begin(), keys.begin() + 4);
  const std::vector<std::string> second(keys.begin() + 4, keys.end());
  ASSERT_TRUE(put(*a, pa, first).all_ok());
  const std::string dir = reader->namespace_dirs()[0] + "/seg";
  std::chrono::system_clock::time_point young;
  timespec times[2] = {{0, UTIME_OMIT}, {}};
  // Ahead far enough that the look comes before that time (doubled until it does).
  for (auto ahead = std::chrono::milliseconds(500);; ahead *= 2) {
    young = std::chrono::system_clock::now() + ahead;
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(young.time_since_epoch()).count();
    times[1] = {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    ASSERT_EQ(::utimensat(AT_FDCWD, dir.c_str(), times, 0), 0) << std::strerror(errno);
    EXPECT_EQ(*reader->exists("tick-absent"), false);  // a miss: lists seg/ at that time
    if (std::chrono::system_clock::now() < young) break;
  }
  ASSERT_TRUE(put(*b, pb, second).all_ok());  // b's first segment
  ASSERT_EQ(::utimensat(AT_FDCWD, dir.c_str(), times, 0), 0) << std::strerror(errno);
  while (std::chrono::system_clock::now() < young + std::chrono::milliseconds(150)) {
    std::this_thread::sleep_until(young + std::chrono::milliseconds(150));  // a clock event
  }
  EXPECT_EQ(reader->batch_exists(testing::views(keys)), 8u);
  PagePool pr(*reader, 1, kPage);
  EXPECT_EQ(read_all(*reader, pr, keys), 8u);
}

// refresh_ms bounds how often a store's lookups look at what others appended (FILE default 0:
// a stat of the directory per lookup with a miss, so every page is found at once, as above).
TEST_F(StoreSegments, ARefreshIntervalBoundsHowOftenLookupsLook) {
  auto a = open();
  auto hour = open("?backend=posix&layout=segments&refresh_ms=3600000");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(hour, nullptr);
  PagePool pa(*a, 8, kPage), ph(*hour, 8, kPage);
  const auto keys = testing::keys_for("refresh-", 8);
  const std::vector<std::string> first(keys.begin(), keys.begin() + 4);
  const std::vector<std::string> second(keys.begin() + 4, keys.end());
  ASSERT_TRUE(put(*a, pa, first).all_ok());
  EXPECT_EQ(hour->batch_exists(testing::views(first)), 4u);  // the first lookup looks
  EXPECT_EQ(hour->stats().segment_looks, 1u);
  ASSERT_TRUE(put(*a, pa, second).all_ok());
  EXPECT_EQ(hour->batch_exists(testing::views(second)), 0u);
  EXPECT_EQ(*hour->exists(second[0]), false);
  EXPECT_EQ(read_all(*hour, ph, keys), 4u);  // the rest are misses
  EXPECT_EQ(hour->stats().segment_looks, 1u);
  auto now = open();
  ASSERT_NE(now, nullptr);
  EXPECT_EQ(now->batch_exists(testing::views(keys)), 8u);  // indexed at open
  EXPECT_EQ(now->stats().segment_looks, 0u);
  // A bad value is refused when the store opens.
  StoreConfig cfg;
  cfg.location =
      *parse_store_uri("file://" + dir_.file("store") + "?layout=segments&refresh_ms=-1");
  cfg.ns = testing::test_namespace("segments");
  Result<std::unique_ptr<Store>> bad = Store::open(cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().to_string();
}

constexpr int kProcs = 3;
constexpr size_t kProcKeys = 60;

// A process of ThreeProcessesWriteAndReadOneNamespace: args are the store's directory and the
// process's number. 3: a put failed, 4: a wrong page, 5: a read failed.
KVTIER_CHILD(segments_three_processes, args) {
  const std::string p = args.str(1);
  auto s = testing::open_segments(args.str(0));
  if (s == nullptr) return 2;
  PagePool pool(*s, 4, kPage);
  const auto mine = testing::keys_for("proc" + p + "-", kProcKeys);
  for (size_t i = 0; i < kProcKeys; i += 4) {
    if (!testing::put_keys(*s, pool, {mine.begin() + i, mine.begin() + i + 4}).all_ok()) return 3;
    // Read what the others have written so far: hits must be whole.
    for (int q = 0; q < kProcs; ++q) {
      const std::string k = "proc" + std::to_string(q) + "-" + std::to_string(i);
      Status st = s->get(k, pool.slot(0), kPage);
      if (st.ok() && !pool.holds(0, kPage, seed_of(k))) return 4;
      if (!st.ok() && st.code() != StatusCode::kNotFound) return 5;
    }
  }
  return 0;
}

// Three processes write their own keys and read everyone's, at once: every page each one
// reads is whole, and once all are done each process's pages are found by a store that was
// open throughout.
TEST_F(StoreSegments, ThreeProcessesWriteAndReadOneNamespace) {
  auto watcher = open();
  ASSERT_NE(watcher, nullptr);
  std::vector<testing::Child> procs;
  for (int p = 0; p < kProcs; ++p) {
    procs.push_back(
        testing::Child::start("segments_three_processes", {dir_.file("store"), std::to_string(p)}));
  }
  for (testing::Child& p : procs) EXPECT_EQ(p.wait(), 0);
  PagePool pool(*watcher, 1, kPage);
  for (int p = 0; p < kProcs; ++p) {
    const auto keys = testing::keys_for("proc" + std::to_string(p) + "-", kProcKeys);
    EXPECT_EQ(watcher->batch_exists(testing::views(keys)), kProcKeys) << p;
    EXPECT_EQ(read_all(*watcher, pool, keys), kProcKeys) << p;
  }
  EXPECT_EQ(watcher->stats().pages, kProcs * kProcKeys);
}

constexpr size_t kKillKeys = 64, kKillBatch = 8;

std::vector<std::string> kill_batch(size_t n) {
  return testing::round_robin_batch("kill-", kKillKeys, kKillBatch, n);
}

// The writer of SigkillDuringAppendsAndSealsNeverLeavesAWrongPage: args are the store's
// directory, then the trap. Segments of 1 MiB roll every two batches or so.
KVTIER_CHILD(segments_crash_writer, args) {
  // "seal": a one-entry append past a summary's start (these writers remove nothing, and
  // their windows of 8 records rarely leave one record to a segment).
  const auto seal = [](const FaultCall& c) {
    return c.length == segment::kEntryBytes && c.offset > 0;
  };
  auto s = testing::open_segments(args.str(0), "?backend=posix&layout=segments", 1 << 20, 0,
                                  testing::crash_writer_faults(args, 1, {{"seal", seal}}));
  if (s == nullptr) return 2;
  PagePool pool(*s, kKillBatch, kPage);
  return testing::run_crash_writer(kill_batch, [&](const std::vector<std::string>& keys) {
    return testing::put_keys(*s, pool, keys).all_ok();
  });
}

// Writers are killed 30 times during appends and segment rolls (small segments roll every
// two batches or so): 24 times held at an exact point of a write, 6 as soon as they report
// some whole batches. Every page reads back whole or is a miss, and every page of a batch a
// writer reported done is a hit, after a restart and in a store that was open throughout.
TEST_F(StoreSegments, SigkillDuringAppendsAndSealsNeverLeavesAWrongPage) {
  auto watcher = open();
  ASSERT_NE(watcher, nullptr);
  const testing::CrashWriter writer{"segments_crash_writer", {dir_.file("store")}, kill_batch};
  using testing::TrapPoint;
  std::vector<testing::KillPoint> points = testing::kills_after_batches(6, 3);
  for (uint64_t i = 0; i < 6; ++i) {
    points.push_back({fmt::format("before record or header write #{}", 3 * i + 1),
                      TrapPoint{FaultOp::kWrite, ".seg", 3 * i, ""}});
    points.push_back({fmt::format("before summary append #{} (records written)", 2 * i + 2),
                      TrapPoint{FaultOp::kWrite, ".sum", 2 * i + 1, ""}});
    points.push_back(
        {fmt::format("before seal #{}", i + 1), TrapPoint{FaultOp::kWrite, ".sum", i, "seal"}});
    points.push_back({fmt::format("segment #{} written, not yet published (the one before "
                                  "sealed)",
                                  i + 2),
                      TrapPoint{FaultOp::kPublish, ".seg", i + 1, ""}});
  }
  const std::vector<std::string> done = testing::kill_writer_at_each(writer, points);
  ASSERT_FALSE(done.empty()) << "no writer got through a batch";
  const auto keys = testing::keys_for("kill-", kKillKeys);
  PagePool wpool(*watcher, 1, kPage);
  EXPECT_GE(read_all(*watcher, wpool, keys), done.size());
  EXPECT_EQ(read_all(*watcher, wpool, done), done.size());
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 1, kPage);
  EXPECT_EQ(read_all(*s, pool, done), done.size());
  EXPECT_GE(read_all(*s, pool, keys), done.size());
  EXPECT_EQ(s->stats().get_corrupt, 0u);
  EXPECT_EQ(watcher->stats().get_corrupt, 0u);
}

TEST_F(StoreSegments, NothingStaysOpenBetweenCalls) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 16, kPage);
  const auto keys = testing::keys_for("fd-", 16);
  const size_t before = testing::open_fds();
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(put(*s, pool, keys).all_ok());  // rolls 1 MiB segments on the way
    EXPECT_EQ(testing::open_fds(), before);
    EXPECT_EQ(read_all(*s, pool, keys), keys.size());
    EXPECT_EQ(testing::open_fds(), before);
    EXPECT_EQ(s->batch_exists(testing::views(keys)), keys.size());
    EXPECT_EQ(*s->exists("fd-absent"), false);
    EXPECT_EQ(testing::open_fds(), before);
    KVTIER_ASSERT_OK(s->remove(keys[0]));
    EXPECT_EQ(s->get(keys[0], pool.slot(0), kPage).code(), StatusCode::kNotFound);
    EXPECT_EQ(testing::open_fds(), before);
  }
  KVTIER_ASSERT_OK(s->clear());
  EXPECT_EQ(testing::open_fds(), before);
  // A failed read (a segment gone under the index) holds nothing either.
  ASSERT_TRUE(put(*s, pool, {keys[1]}).all_ok());
  for (const std::string& p : seg_files(*s).segments) std::filesystem::remove(p);
  EXPECT_EQ(s->get(keys[1], pool.slot(0), kPage).code(), StatusCode::kNotFound);
  EXPECT_EQ(testing::open_fds(), before);
}

}  // namespace
}  // namespace kvtier
