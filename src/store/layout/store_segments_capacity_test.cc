// The segment layout's capacity: the budget held while writing far more than it, in one
// process and across three, reclaims never tearing a read, recently read pages surviving,
// min_free_bytes, and segments of killed writers reclaimed.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "format/page_format.h"
#include "format/segment_format.h"
#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/core/clock.h"
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

class StoreSegmentsCapacity : public testing::SegmentStoreTest {};

// Writing five times the capacity in one process: after every batch the segment files take no
// more than the capacity and exactly what the ledger says; pages are reclaimed a segment at a
// time, the newest stay, every hit is whole; no descriptor stays open; and a restart counts
// the same bytes.
TEST_F(StoreSegmentsCapacity, CapacityHoldsWhileWritingFarMoreThanIt) {
  constexpr uint64_t kCapacity = 8 << 20;
  const auto keys = testing::keys_for("cap-", 600);  // 42 MB
  uint64_t on_disk = 0;
  {
    auto s = open_capped(kCapacity);
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, 8, kPage);
    const size_t fds = testing::open_fds();
    for (size_t first = 0; first < keys.size(); first += 8) {
      ASSERT_TRUE(put(*s, pool, {keys.begin() + first, keys.begin() + first + 8}).all_ok());
      const SegFiles f = seg_files(*s);
      ASSERT_LE(f.allocated + s->stats().metadata_bytes, kCapacity) << first;
      ASSERT_EQ(s->stats().used_bytes, f.charged) << first;
      ASSERT_EQ(testing::open_fds(), fds);
    }
    const auto st = s->stats();
    EXPECT_GT(st.evicted_pages, 400u);
    EXPECT_GT(st.evicted_bytes, 400u * kPage);
    EXPECT_EQ(st.capacity_refusals, 0u);
    // The newest 32 pages are all there; the index and the files agree on the rest.
    EXPECT_EQ(read_all(*s, pool, {keys.end() - 32, keys.end()}), 32u);
    const size_t hits = read_all(*s, pool, keys);
    EXPECT_EQ(hits, s->stats().pages);
    EXPECT_GT(hits, 50u);
    EXPECT_LT(hits * kPage, kCapacity);
    EXPECT_EQ(testing::open_fds(), fds);
    on_disk = seg_files(*s).charged;
  }
  // Restart, alone: the ledger is set to the bytes on disk, which did not change.
  auto s = open_capped(kCapacity);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(seg_files(*s).charged, on_disk);
  EXPECT_EQ(s->stats().used_bytes, on_disk);
  EXPECT_EQ(s->stats().capacity_bytes, kCapacity);
}

// Pages read while others are written survive reclaims (they are copied forward); pages
// written at the same time and never read do not.
TEST_F(StoreSegmentsCapacity, RecentlyReadPagesSurviveReclaims) {
  constexpr uint64_t kCapacity = 8 << 20;
  auto s = open_capped(kCapacity);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  const auto cold = testing::keys_for("cold-", 16);  // a segment and a bit
  const auto hot = testing::keys_for("hot-", 8);
  for (size_t i = 0; i < cold.size(); i += 8) {
    ASSERT_TRUE(put(*s, pool, {cold.begin() + i, cold.begin() + i + 8}).all_ok());
  }
  ASSERT_TRUE(put(*s, pool, hot).all_ok());
  const auto filler = testing::keys_for("fill-", 640);  // 45 MB: about five capacities
  for (size_t first = 0; first < filler.size(); first += 8) {
    ASSERT_TRUE(put(*s, pool, {filler.begin() + first, filler.begin() + first + 8}).all_ok());
    EXPECT_EQ(read_all(*s, pool, hot), hot.size()) << first;
  }
  EXPECT_GT(s->stats().evicted_pages, 400u);
  EXPECT_EQ(read_all(*s, pool, hot), hot.size());
  EXPECT_EQ(read_all(*s, pool, {cold.begin(), cold.begin() + 8}), 0u);
  EXPECT_LE(seg_files(*s).bytes, kCapacity);
}

// Reclaiming copies forward only the pages read since they were put: pages written in the
// same batch (the same segment) and never read go, the capacity holds at every step, and the
// copies are whole.
TEST_F(StoreSegmentsCapacity, OnlyPagesReadAreCopiedForward) {
  constexpr uint64_t kCapacity = 8 << 20;
  auto s = open_capped(kCapacity);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  const auto hot = testing::keys_for("hot-", 4);
  const auto neighbours = testing::keys_for("nbr-", 4);
  ASSERT_TRUE(put(*s, pool,
                  {hot[0], neighbours[0], hot[1], neighbours[1], hot[2], neighbours[2], hot[3],
                   neighbours[3]})
                  .all_ok());
  const size_t fds = testing::open_fds();
  const auto filler = testing::keys_for("fill-", 640);  // about five capacities
  for (size_t first = 0; first < filler.size(); first += 8) {
    ASSERT_TRUE(put(*s, pool, {filler.begin() + first, filler.begin() + first + 8}).all_ok());
    ASSERT_EQ(read_all(*s, pool, hot), hot.size()) << first;
    const SegFiles f = seg_files(*s);
    ASSERT_LE(f.allocated + s->stats().metadata_bytes, kCapacity) << first;
    ASSERT_EQ(s->stats().used_bytes, f.charged) << first;
  }
  const auto st = s->stats();
  // Each round of the clock copies the four read pages (and only them: the filler is never
  // read, so it is never copied).
  EXPECT_GE(st.relocated_pages, 4u);
  EXPECT_EQ(st.relocated_pages % 4, 0u);
  EXPECT_EQ(
      st.relocated_bytes,
      st.relocated_pages * page::record_bytes(page::compact_header_bytes(hot[0].size()), kPage));
  EXPECT_EQ(st.put_pages, 8u + filler.size());  // copies are not counted as puts
  EXPECT_EQ(read_all(*s, pool, neighbours), 0u);
  EXPECT_EQ(testing::open_fds(), fds);
}

// A sealed store copies forward as a store in the clear does: the pages read are opened and
// sealed again as they are put, under the key file's current key and that key's names, so a
// page sealed before a rotation outlives its key once copied.
TEST_F(StoreSegmentsCapacity, SealedPagesReadAreCopiedForwardUnderTheCurrentKey) {
  constexpr uint64_t kCapacity = 8 << 20;
  const std::string before = dir_.file("before-keys"), after = dir_.file("after-keys"),
                    only_new = dir_.file("new-keys");
  const std::string old_key = std::string(64, '1'), new_key = std::string(64, '2');
  testing::write_file(before, "1 " + old_key + "\n");
  testing::write_file(after, "2 " + new_key + "\n1 " + old_key + "\n");
  testing::write_file(only_new, "2 " + new_key + "\n");
  for (const std::string& f : {before, after, only_new}) ASSERT_EQ(::chmod(f.c_str(), 0600), 0);
  const auto hot = testing::keys_for("hot-", 4);
  {
    auto s = open_capped(kCapacity, nullptr, before);
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, 8, kPage);
    ASSERT_TRUE(put(*s, pool, hot).all_ok());
  }
  auto s = open_capped(kCapacity, nullptr, after);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  const auto filler = testing::keys_for("fill-", 640);  // about five capacities
  for (size_t first = 0; first < filler.size(); first += 8) {
    ASSERT_EQ(read_all(*s, pool, hot), hot.size()) << first;  // byte-exact (read_all)
    ASSERT_TRUE(put(*s, pool, {filler.begin() + first, filler.begin() + first + 8}).all_ok());
    ASSERT_LE(seg_files(*s).bytes, kCapacity) << first;
  }
  EXPECT_GE(s->stats().relocated_pages, 4u);
  EXPECT_EQ(s->stats().pages_rejected.size(), 0u);
  s.reset();
  // Key 1 out of the file: the copies, sealed under key 2, still read.
  s = open_capped(kCapacity, nullptr, only_new);
  ASSERT_NE(s, nullptr);
  PagePool again(*s, 1, kPage);
  EXPECT_EQ(read_all(*s, again, hot), hot.size());
}

// A copy forward joins the clock where its last read puts it, as an LRU keeps it: a page read
// before others were written, and not since, is copied when its segment goes but then leaves
// ahead of most of those others; it does not start a new round at the back (where it stayed
// until all of them had gone).
TEST_F(StoreSegmentsCapacity, ACopyForwardGoesBeforePagesWrittenAfterItsRead) {
  constexpr uint64_t kCapacity = 8 << 20;  // 1 MiB segments: one 8-page batch each
  StoreConfig cfg;
  cfg.location = *parse_store_uri("file://" + dir_.file("store") +
                                  "?backend=posix&layout=segments&admission=always");
  cfg.ns = testing::test_namespace("segments");
  cfg.capacity_bytes = kCapacity;
  auto s = testing::open_store(std::move(cfg));
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  const auto first = testing::keys_for("first-", 8);
  ASSERT_TRUE(put(*s, pool, first).all_ok());
  ASSERT_EQ(read_all(*s, pool, {first[0]}), 1u);       // read now, never again
  const auto later = testing::keys_for("later-", 32);  // written after that read
  for (size_t i = 0; i < later.size(); i += 8) {
    ASSERT_TRUE(put(*s, pool, {later.begin() + i, later.begin() + i + 8}).all_ok());
  }
  auto held = [&](const std::string& key) {
    Result<bool> e = s->exists(key);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() && *e;
  };
  // Until half the later pages are gone (a reclaim takes a segment or two of them at a time).
  const auto filler = testing::keys_for("fill-", 640);  // about five capacities
  size_t i = 0;
  for (; i < filler.size(); i += 8) {
    ASSERT_TRUE(put(*s, pool, {filler.begin() + i, filler.begin() + i + 8}).all_ok());
    ASSERT_LE(seg_files(*s).bytes, kCapacity);
    if (std::count_if(later.begin(), later.end(), held) <= 16) break;
  }
  ASSERT_LT(i, filler.size()) << "the later pages were never reclaimed";
  // first[0] was copied forward (its batch's other pages were not) and is gone by then.
  EXPECT_EQ(s->stats().relocated_pages, 1u);
  EXPECT_FALSE(held(first[0]));
  EXPECT_EQ(read_all(*s, pool, first), 0u);
}

// A read page whose record was damaged since is not copied forward: it leaves with its
// segment (a miss, never its bytes), while the other read pages of the segment are copied.
TEST_F(StoreSegmentsCapacity, ADamagedRecordIsNotCopiedForward) {
  constexpr uint64_t kCapacity = 8 << 20;
  auto s = open_capped(kCapacity);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  const auto hot = testing::keys_for("hot-", 4);
  ASSERT_TRUE(put(*s, pool, hot).all_ok());  // the first records of the first segment
  ASSERT_EQ(read_all(*s, pool, hot), hot.size());
  testing::damage_second_record(*s, hot[1].size());
  if (HasFatalFailure()) return;
  // Written until the first segment is reclaimed (its copies are in by then).
  const auto filler = testing::keys_for("fill-", 400);
  size_t first = 0;
  for (; first < filler.size() && s->stats().relocated_pages == 0; first += 8) {
    ASSERT_TRUE(put(*s, pool, {filler.begin() + first, filler.begin() + first + 8}).all_ok());
  }
  ASSERT_LT(first, filler.size()) << "nothing was reclaimed";
  EXPECT_EQ(s->stats().relocated_pages, 3u);
  for (const size_t i : {0, 2, 3}) {
    KVTIER_EXPECT_OK(s->get(hot[i], pool.slot(0), kPage)) << i;
    EXPECT_TRUE(pool.holds(0, kPage, seed_of(hot[i]))) << i;
  }
  EXPECT_EQ(s->get(hot[1], pool.slot(0), kPage).code(), StatusCode::kNotFound);
  EXPECT_EQ(s->stats().get_corrupt, 0u);
}

// The same across stores (processes): pages another store keeps reading survive this store's
// reclaims (the reader sets the segment's access time), pages nobody reads do not.
// Until the kernel's coarse clock, which stamps file times, is past `ns` (wall clock).
void wait_for_the_coarse_clock_to_pass(uint64_t ns) {
  for (;;) {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
    if (uint64_t(now.tv_sec) * 1'000'000'000 + uint64_t(now.tv_nsec) > ns) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST_F(StoreSegmentsCapacity, PagesAnotherStoreReadsSurviveReclaims) {
  constexpr uint64_t kCapacity = 8 << 20;
  auto writer = open_capped(kCapacity);
  auto reader = open_capped(kCapacity);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  PagePool wpool(*writer, 8, kPage), rpool(*reader, 1, kPage);
  const auto cold = testing::keys_for("cold-", 16);
  const auto hot = testing::keys_for("hot-", 8);
  for (size_t i = 0; i < cold.size(); i += 8) {
    ASSERT_TRUE(put(*writer, wpool, {cold.begin() + i, cold.begin() + i + 8}).all_ok());
  }
  ASSERT_TRUE(put(*writer, wpool, hot).all_ok());
  const auto filler = testing::keys_for("fill-", 640);
  for (size_t first = 0; first < filler.size(); first += 8) {
    ASSERT_TRUE(put(*writer, wpool, {filler.begin() + first, filler.begin() + first + 8}).all_ok());
    // The reader's reads stamp the segment's access time from the kernel's coarse clock, and
    // only a time past the fine one at which the segment last joined the clock (maybe in the
    // put just done) counts: a machine that does many rounds within one tick would never
    // show a read. So the clock ticks first (an event, a few milliseconds at most).
    wait_for_the_coarse_clock_to_pass(wall_ns());
    EXPECT_EQ(read_all(*reader, rpool, hot), hot.size()) << first;
  }
  EXPECT_GT(writer->stats().evicted_pages, 400u);
  EXPECT_EQ(read_all(*writer, wpool, hot), hot.size());
  EXPECT_EQ(read_all(*writer, wpool, {cold.begin(), cold.begin() + 8}), 0u);
  EXPECT_LE(seg_files(*writer).bytes, kCapacity);
}

// Reclaimed segments' pages are named to take_evicted: by the store that reclaimed them, and
// by another store of the namespace once it reads the summaries again. Only pages that left.
TEST_F(StoreSegmentsCapacity, ReclaimedPagesAreNamedToEveryStoreWatching) {
  constexpr uint64_t kCapacity = 8 << 20;
  auto writer = open_capped(kCapacity);
  auto reader = open_capped(kCapacity);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  writer->watch_evictions(1 << 20);
  reader->watch_evictions(1 << 20);
  PagePool pool(*writer, 8, kPage);
  const auto keys = testing::keys_for("gone-", 400);
  const std::vector<std::string_view> views = testing::views(keys);
  const std::span<const std::string_view> all(views);
  auto write = [&](size_t from, size_t to) {
    for (size_t first = from; first < to; first += 8) {
      ASSERT_TRUE(put(*writer, pool, {keys.begin() + first, keys.begin() + first + 8}).all_ok());
    }
  };
  write(0, 80);
  ASSERT_EQ(reader->batch_exists(all.first(80)), 80u);  // the reader indexes the first 80
  write(80, keys.size());
  const uint64_t evicted = writer->stats().evicted_pages;
  ASSERT_GT(evicted, 100u);
  const Store::Evicted mine = writer->take_evicted();
  EXPECT_EQ(mine.keys.size(), evicted);
  EXPECT_EQ(mine.dropped, 0u);
  std::set<std::pair<uint64_t, uint64_t>> named;
  for (const Hash128& h : mine.keys) named.insert({h.high, h.low});
  EXPECT_EQ(named.size(), mine.keys.size());  // each once
  size_t present = 0;
  for (const std::string& k : keys) {
    const Hash128 h = hash128(k);
    const bool there = writer->exists(k).value_or(false);
    present += there;
    EXPECT_NE(there, named.count({h.high, h.low}) == 1) << k;  // named exactly when gone
  }
  EXPECT_EQ(present + named.size(), keys.size());
  // The reader learns the first 80 went when it next reads the namespace's summaries (an
  // index miss makes it look).
  EXPECT_EQ(reader->batch_exists(all.last(1)), 1u);
  const Store::Evicted seen = reader->take_evicted();
  EXPECT_FALSE(seen.keys.empty());
  std::set<std::pair<uint64_t, uint64_t>> first80;
  for (size_t i = 0; i < 80; ++i) first80.insert({hash128(keys[i]).high, hash128(keys[i]).low});
  for (const Hash128& h : seen.keys) {
    EXPECT_EQ(named.count({h.high, h.low}), 1u);
    EXPECT_EQ(first80.count({h.high, h.low}), 1u);
  }
}

// A reader that opened a segment keeps reading it whole after another store reclaims it:
// its read is held at the backend's gate while the writer writes the segment away.
TEST_F(StoreSegmentsCapacity, AReclaimNeverTearsAReadInFlight) {
  constexpr uint64_t kCapacity = 8 << 20;
  auto writer = open_capped(kCapacity);
  ASSERT_NE(writer, nullptr);
  PagePool wpool(*writer, 8, kPage);
  const auto first = testing::keys_for("held-", 8);
  ASSERT_TRUE(put(*writer, wpool, first).all_ok());
  const std::string segment = seg_files(*writer).segments.front();
  auto faults = std::make_shared<FaultInjector>();
  auto reader = open_capped(kCapacity, faults);
  ASSERT_NE(reader, nullptr);
  PagePool rpool(*reader, 1, kPage);
  faults->hold_batches();
  std::thread get([&] {
    Status st = reader->get(first[3], rpool.slot(0), kPage);
    KVTIER_EXPECT_OK(st);
    EXPECT_TRUE(rpool.holds(0, kPage, seed_of(first[3])));
  });
  faults->wait_held(1);  // the segment is open, its read in flight
  const auto more = testing::keys_for("evict-", 200);
  for (size_t i = 0; i < more.size(); i += 8) {
    ASSERT_TRUE(put(*writer, wpool, {more.begin() + i, more.begin() + i + 8}).all_ok());
  }
  EXPECT_FALSE(std::filesystem::exists(segment));
  faults->release_batches();
  get.join();
  // The next read of it is a miss, in both stores.
  EXPECT_EQ(reader->get(first[4], rpool.slot(0), kPage).code(), StatusCode::kNotFound);
  EXPECT_EQ(writer->get(first[4], wpool.slot(0), kPage).code(), StatusCode::kNotFound);
}

constexpr uint64_t kSharedCapacity = 16 << 20;
constexpr int kProcs = 3;
constexpr size_t kProcKeys = 800;  // 56 MB each

// A process of CapacityIsOneBudgetAcrossThreeProcessesReadingEachOther: args are the store's
// directory and the process's number.
KVTIER_CHILD(segments_capacity_process, args) {
  const std::string p = args.str(1);
  auto s = testing::open_segments_capped(args.str(0), kSharedCapacity);
  if (s == nullptr) return 2;
  PagePool pool(*s, 8, kPage);
  const size_t fds = testing::open_fds();
  const auto mine = testing::keys_for("proc" + p + "-", kProcKeys);
  for (size_t i = 0; i < kProcKeys; i += 8) {
    if (!testing::put_keys(*s, pool, {mine.begin() + i, mine.begin() + i + 8}).all_ok()) return 3;
    const StoreStats st = s->stats();
    if (st.used_bytes + st.metadata_bytes > kSharedCapacity) return 4;
    for (int q = 0; q < kProcs; ++q) {
      for (size_t back : {size_t{0}, size_t{40}, size_t{200}}) {
        if (i < back) continue;
        const std::string k = "proc" + std::to_string(q) + "-" + std::to_string(i - back);
        Status st = s->get(k, pool.slot(0), kPage);
        if (st.ok() && !pool.holds(0, kPage, seed_of(k))) return 5;
        if (!st.ok() && st.code() != StatusCode::kNotFound) return 6;
      }
    }
    if (testing::open_fds() != fds) return 7;
  }
  return s->stats().get_corrupt == 0 ? 0 : 8;
}

// Three processes write ten times the capacity at once and read each other's pages while
// segments are reclaimed under them: the shared usage never passes the capacity, every hit
// is whole, and after they are done the files take what a lone open counts.
TEST_F(StoreSegmentsCapacity, CapacityIsOneBudgetAcrossThreeProcessesReadingEachOther) {
  std::vector<testing::Child> procs;
  for (int p = 0; p < kProcs; ++p) {
    procs.push_back(testing::Child::start("segments_capacity_process",
                                          {dir_.file("store"), std::to_string(p)}));
  }
  for (testing::Child& p : procs) {
    EXPECT_EQ(p.wait(), 0) << "3: a put failed, 4: usage over capacity, 5: a wrong page, 6: an "
                              "error, 7: descriptors, 8: corrupt reads";
  }
  auto s = open_capped(kSharedCapacity);
  ASSERT_NE(s, nullptr);
  const SegFiles f = seg_files(*s);
  EXPECT_LE(f.allocated + s->stats().metadata_bytes, kSharedCapacity);
  EXPECT_EQ(s->stats().used_bytes, f.charged);  // alone again: exact
  PagePool pool(*s, 1, kPage);
  size_t hits = 0;
  for (int p = 0; p < kProcs; ++p) {
    hits += read_all(*s, pool, testing::keys_for("proc" + std::to_string(p) + "-", kProcKeys));
  }
  EXPECT_GT(hits, 0u);
  EXPECT_EQ(s->stats().get_corrupt, 0u);
}

// One thread writes five capacities while another reads keys written before, in the same
// store: every read is a whole page or a miss, never an error or other data.
TEST_F(StoreSegmentsCapacity, ReadersInTheSameStoreSeeHitsOrMissesWhileSegmentsGo) {
  constexpr uint64_t kCapacity = 8 << 20;
  auto s = open_capped(kCapacity);
  ASSERT_NE(s, nullptr);
  PagePool wpool(*s, 8, kPage), rpool(*s, 1, kPage);
  const auto keys = testing::keys_for("race-", 600);
  std::atomic<size_t> written{0};
  std::atomic<bool> done{false};
  std::atomic<size_t> reads{0};
  size_t hits = 0, bad = 0;
  std::thread reader([&] {
    std::mt19937_64 rng(7);
    while (!done.load()) {
      const size_t n = written.load();
      if (n == 0) continue;
      const std::string& k = keys[rng() % n];
      Status st = s->get(k, rpool.slot(0), kPage);
      reads.fetch_add(1);
      reads.notify_all();
      if (st.ok()) {
        ++hits;
        if (!rpool.holds(0, kPage, seed_of(k))) ++bad;
      } else if (st.code() != StatusCode::kNotFound) {
        ++bad;
      }
    }
  });
  for (size_t i = 0; i < keys.size(); i += 8) {
    // Some reads happen while segments go, however the two threads get the machine: the last
    // batch waits for the reader's first read.
    if (i + 8 == keys.size()) reads.wait(0);
    EXPECT_TRUE(put(*s, wpool, {keys.begin() + i, keys.begin() + i + 8}).all_ok());
    written.store(i + 8);
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_GT(s->stats().evicted_pages, 400u);
  EXPECT_EQ(s->stats().get_corrupt, 0u);
  EXPECT_LE(seg_files(*s).bytes, kCapacity);
  (void)hits;
}

// min_free_bytes goes through the same reservation: a floor above the free space refuses
// every write before anything is written.
TEST_F(StoreSegmentsCapacity, MinFreeBytesRefusesWritesBeforeAnyByteIsWritten) {
  StoreConfig cfg;
  cfg.location =
      *parse_store_uri("file://" + dir_.file("store") + "?backend=posix&layout=segments");
  cfg.ns = testing::test_namespace("segments");
  cfg.min_free_bytes = uint64_t{1} << 62;
  auto s = testing::open_store(std::move(cfg));
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 2, kPage);
  const BatchResult r = put(*s, pool, testing::keys_for("floor-", 2));
  ASSERT_EQ(r.pages.size(), 2u);
  EXPECT_EQ(r.pages[0].code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s->stats().capacity_refusals, 2u);
  EXPECT_EQ(seg_files(*s).bytes, 0u);
  EXPECT_EQ(s->stats().used_bytes, 0u);
}

// A writer that dies (SIGKILL) once it has written a batch: its active segment is never
// sealed. args: the store's directory and its capacity.
KVTIER_CHILD(segments_writer_that_dies, args) {
  auto s = testing::open_segments_capped(args.str(0), args.u64(1));
  if (s == nullptr) return 2;
  PagePool pool(*s, 8, kPage);
  if (!testing::put_keys(*s, pool, testing::keys_for("dead-", 8)).all_ok()) return 3;
  ::raise(SIGKILL);
  return 4;
}

// A store that opens alone reclaims segments their writers left unsealed (killed).
TEST_F(StoreSegmentsCapacity, SegmentsOfKilledWritersAreReclaimedAfterALoneOpen) {
  constexpr uint64_t kCapacity = 8 << 20;
  testing::Child dies = testing::Child::start("segments_writer_that_dies",
                                              {dir_.file("store"), std::to_string(kCapacity)});
  EXPECT_EQ(dies.wait(), 128 + SIGKILL);
  const std::string abandoned = seg_files(*open()).segments.front();
  auto s = open_capped(kCapacity);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  EXPECT_EQ(s->stats().used_bytes, seg_files(*s).charged);
  const auto keys = testing::keys_for("live-", 240);  // two capacities
  for (size_t i = 0; i < keys.size(); i += 8) {
    ASSERT_TRUE(put(*s, pool, {keys.begin() + i, keys.begin() + i + 8}).all_ok());
  }
  EXPECT_FALSE(std::filesystem::exists(abandoned));
  EXPECT_LE(seg_files(*s).bytes, kCapacity);
}

}  // namespace
}  // namespace kvtier
