// The store's lifecycle: the page index (exists without system calls, other processes' pages
// found on a miss, exact after a restart), capacity shared by several processes with
// least-recently-used eviction that never tears a read, and crash safety under SIGKILL.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "kvtier/backends/builtin.h"
#include "kvtier/store/inspect.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

constexpr size_t kPage = 16384;             // payload
constexpr uint64_t kObject = kPage + 4096;  // header + payload (4 KiB aligned)
// What a page object is charged against a capacity (its blocks and its directory entry), and a
// capacity whose pages hold `n` of them beside what the store keeps (capacity/footprint.h).
const uint64_t kCharged = capacity_page_bytes(kObject);
uint64_t room_for(size_t n) {
  return capacity_holding(n * kCharged, StoreLayout::kFiles);
}

NamespaceSpec fixed_namespace() {
  NamespaceSpec ns = testing::test_namespace("lifecycle-model");
  ns.piece_bytes = kPage;
  ns.pieces_per_page = 1;
  return ns;
}

// Every page object under the store's namespace directories: count and bytes on disk (files
// other processes remove meanwhile are skipped).
std::pair<size_t, uint64_t> on_disk(const Store& store) {
  size_t n = 0;
  uint64_t bytes = 0;
  for (const std::string& dir : store.namespace_dirs()) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code size_ec;
      const uintmax_t size = std::filesystem::file_size(it->path(), size_ec);
      if (!size_ec && name.size() == 32) {
        ++n;
        bytes += size;
      }
    }
  }
  return {n, bytes};
}

// The store of these tests in directory `path`; `faults`: the backend goes through a fault
// injector.
std::unique_ptr<Store> open_at(const std::string& path, uint64_t capacity = 0,
                               std::string query = "?backend=posix&layout=files",
                               NamespaceSpec ns = fixed_namespace(),
                               std::shared_ptr<FaultInjector> faults = nullptr) {
  StoreConfig cfg;
  cfg.location = *parse_store_uri(path + query);
  cfg.ns = std::move(ns);
  cfg.capacity_bytes = capacity;
  testing::decorate(cfg, std::move(faults));
  return testing::open_store(std::move(cfg));
}

BatchResult put_pages(Store& s, PagePool& pool, const std::vector<std::string>& keys,
                      size_t first_slot = 0) {
  std::vector<ConstBuffer> in;
  for (size_t i = 0; i < keys.size(); ++i) {
    pool.fill(first_slot + i, kPage, std::hash<std::string>{}(keys[i]));
    in.push_back(pool.in(first_slot + i, kPage));
  }
  return s.batch_put(testing::views(keys), in);
}

class StoreLifecycle : public ::testing::Test {
 protected:
  std::unique_ptr<Store> open(uint64_t capacity = 0,
                              std::string query = "?backend=posix&layout=files",
                              NamespaceSpec ns = fixed_namespace(),
                              std::shared_ptr<FaultInjector> faults = nullptr) {
    return open_at(dir_.file("store"), capacity, std::move(query), std::move(ns),
                   std::move(faults));
  }

  static BatchResult put(Store& s, PagePool& pool, const std::vector<std::string>& keys,
                         size_t first_slot = 0) {
    return put_pages(s, pool, keys, first_slot);
  }
  // Each key by a call of its own, in order (the last is the most recently used).
  static bool put_each(Store& s, PagePool& pool, const std::vector<std::string>& keys) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!put(s, pool, {keys[i]}, i).all_ok()) return false;
    }
    return true;
  }

  testing::TempDir dir_;
};

TEST_F(StoreLifecycle, IndexAnswersExistsWithoutAStatPerKey) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 64, kPage);
  const auto keys = testing::keys_for("idx", 64);
  ASSERT_TRUE(put(*s, pool, keys).all_ok());
  EXPECT_EQ(s->batch_exists(testing::views(keys)), 64u);
  EXPECT_EQ(s->stats().index_stats, 0u);
  EXPECT_EQ(s->stats().pages, 64u);
  EXPECT_EQ(s->stats().bytes, 64 * kObject);
  // An absent key costs one stat, and ends the prefix there.
  std::vector<std::string> holed = keys;
  holed[10] = "absent";
  EXPECT_EQ(s->batch_exists(testing::views(holed)), 10u);
  EXPECT_EQ(s->stats().index_stats, 1u);
  KVTIER_ASSERT_OK(s->remove(keys[3]));
  EXPECT_EQ(s->batch_exists(testing::views(keys)), 3u);
}

TEST_F(StoreLifecycle, RestartRebuildsTheIndexExactly) {
  // 100,000 of the smallest pages (one byte: an 8 KiB object).
  constexpr size_t kPages = 100000;
  constexpr uint64_t kSmallObject = 8192;
  NamespaceSpec ns = fixed_namespace();
  ns.piece_bytes = 1;
  {
    auto s = open(0, "?backend=posix&layout=files", ns);
    ASSERT_NE(s, nullptr);
    PagePool pool(*s, 128, 4096);
    for (size_t first = 0; first < kPages; first += 128) {
      std::vector<std::string> keys;
      for (size_t i = first; i < std::min(kPages, first + 128); ++i) {
        keys.push_back("restart-" + std::to_string(i));
      }
      std::vector<ConstBuffer> in;
      for (size_t i = 0; i < keys.size(); ++i) in.push_back(pool.in(i, 1));
      ASSERT_TRUE(s->batch_put(testing::views(keys), in).all_ok()) << first;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto s = open(0, "?backend=posix&layout=files", ns);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_NE(s, nullptr);
  RecordProperty(
      "reopen_ms",
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.pages, kPages);
  EXPECT_EQ(st.bytes, kPages * kSmallObject);
  const auto [n, bytes] = on_disk(*s);
  EXPECT_EQ(n, kPages);
  EXPECT_EQ(bytes, st.bytes);
  std::vector<std::string> keys;
  for (size_t i = 0; i < 128; ++i) keys.push_back("restart-" + std::to_string(i * 700));
  EXPECT_EQ(s->batch_exists(testing::views(keys)), 128u);
  keys[100] = "restart-absent";
  EXPECT_EQ(s->batch_exists(testing::views(keys)), 100u);
  EXPECT_EQ(s->stats().index_stats, 1u);
  // With a capacity, the usage after the restart is exact at once.
  s.reset();
  auto capped = open(uint64_t{1} << 40, "?backend=posix&layout=files", ns);
  ASSERT_NE(capped, nullptr);
  EXPECT_EQ(capped->stats().used_bytes, kPages * capacity_page_bytes(kSmallObject));
}

TEST_F(StoreLifecycle, AnotherProcessesPagesAreFoundOnAnIndexMiss) {
  auto reader = open();
  auto writer = open();
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(writer, nullptr);
  PagePool pool(*writer, 4, kPage);
  ASSERT_TRUE(put(*writer, pool, {"late"}).all_ok());
  // The reader indexed before the page existed: a stat finds it, and indexes it.
  EXPECT_EQ(reader->exists("late").value_or(false), true);
  EXPECT_EQ(reader->stats().index_stats, 1u);
  EXPECT_EQ(reader->exists("late").value_or(false), true);
  EXPECT_EQ(reader->stats().index_stats, 1u);
  // A removal by another process shows when a read misses.
  KVTIER_ASSERT_OK(writer->remove("late"));
  PagePool rpool(*reader, 1, kPage);
  EXPECT_EQ(reader->get("late", rpool.slot(0), kPage).code(), StatusCode::kNotFound);
  EXPECT_EQ(reader->exists("late").value_or(true), false);
}

// indexed() answers from memory only: what this store wrote or found, never another's page
// it has not looked for, and never a bad key.
TEST_F(StoreLifecycle, IndexedAnswersWithoutStorage) {
  auto reader = open();
  auto writer = open();
  ASSERT_NE(reader, nullptr);
  ASSERT_NE(writer, nullptr);
  PagePool pool(*writer, 4, kPage);
  ASSERT_TRUE(put(*writer, pool, {"mine", "also-mine"}).all_ok());
  const std::vector<std::string_view> keys = {"mine", "absent", "also-mine", "../bad"};
  EXPECT_EQ(writer->indexed(keys), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(reader->indexed(keys), (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(reader->stats().index_stats, 0u);  // no stat for it
  ASSERT_EQ(reader->exists("mine").value_or(false), true);
  EXPECT_EQ(reader->indexed(keys), (std::vector<bool>{true, false, false, false}));
  KVTIER_ASSERT_OK(writer->remove("mine"));
  EXPECT_EQ(writer->indexed(keys), (std::vector<bool>{false, false, true, false}));
}

TEST_F(StoreLifecycle, AClearIsSeenByEveryStoreOfTheNamespaceOnItsNextCall) {
  auto a = open();
  auto b = open();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  PagePool pool(*a, 8, kPage);
  const auto keys = testing::keys_for("gen", 8);
  ASSERT_TRUE(put(*a, pool, keys).all_ok());
  // b indexes the pages (a stat each), then answers from its index.
  EXPECT_EQ(b->batch_exists(testing::views(keys)), 8u);
  EXPECT_EQ(b->stats().pages, 8u);
  KVTIER_ASSERT_OK(a->clear());
  // b's next calls see the clear: nothing indexed survives it.
  EXPECT_EQ(b->batch_exists(testing::views(keys)), 0u);
  EXPECT_EQ(b->exists(keys[0]).value_or(true), false);
  EXPECT_EQ(b->stats().pages, 0u);
  // Pages written after the clear are found again, by both, and a second clear by b is seen
  // by a (a generation is never reused).
  ASSERT_TRUE(put(*a, pool, keys).all_ok());
  EXPECT_EQ(b->batch_exists(testing::views(keys)), 8u);
  KVTIER_ASSERT_OK(b->clear());
  EXPECT_EQ(a->batch_exists(testing::views(keys)), 0u);
  // Another namespace in the same directory is untouched by either clear, and a store
  // opened after a clear starts from the current generation.
  NamespaceSpec other = fixed_namespace();
  other.model = "lifecycle-other";
  auto c = open(0, "?backend=posix&layout=files", other);
  ASSERT_NE(c, nullptr);
  PagePool cpool(*c, 8, kPage);
  ASSERT_TRUE(put(*c, cpool, keys).all_ok());
  KVTIER_ASSERT_OK(a->clear());
  EXPECT_EQ(c->batch_exists(testing::views(keys)), 8u);
  auto d = open();
  ASSERT_NE(d, nullptr);
  PagePool dpool(*d, 8, kPage);
  ASSERT_TRUE(put(*d, dpool, keys).all_ok());
  EXPECT_EQ(d->batch_exists(testing::views(keys)), 8u);
  EXPECT_EQ(d->stats().index_stats, 0u);
}

TEST_F(StoreLifecycle, EvictionFollowsReadsNotOnlyWrites) {
  auto s = open(room_for(4));
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  ASSERT_TRUE(put_each(*s, pool, {"p0", "p1", "p2", "p3"}));
  KVTIER_ASSERT_OK(s->get("p0", pool.slot(7), kPage));  // p0 is now the most recently used
  ASSERT_TRUE(put(*s, pool, {"p4"}, 4).all_ok());
  EXPECT_TRUE(s->exists("p0").value_or(false));
  EXPECT_FALSE(s->exists("p1").value_or(true));  // the least recently used went
  EXPECT_TRUE(s->exists("p4").value_or(false));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.evicted_pages, 1u);
  EXPECT_EQ(st.used_bytes, 4 * kCharged);
  EXPECT_EQ(on_disk(*s).second, 4 * kObject);
  // A batch larger than the whole capacity is refused, not half-written.
  testing::TempDir other;
  auto tiny = open_at(other.file("store"), room_for(1));
  ASSERT_NE(tiny, nullptr);
  PagePool tpool(*tiny, 2, kPage);
  const BatchResult both = put(*tiny, tpool, {"huge", "r"});
  EXPECT_EQ(both.pages[0].code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(both.pages[1].code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(on_disk(*tiny).first, 0u);
  // A capacity that does not hold what the store keeps beside its pages and one page is
  // refused before anything is made, naming the smallest it takes.
  StoreConfig cfg;
  cfg.location = *parse_store_uri(other.file("refused") + "?backend=posix&layout=files");
  cfg.ns = fixed_namespace();
  cfg.capacity_bytes = room_for(1) - 1;
  Result<std::unique_ptr<Store>> refused = Store::open(cfg);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(fmt::format("at least {}", room_for(1))),
            std::string::npos)
      << refused.status().to_string();
  EXPECT_FALSE(std::filesystem::exists(other.file("refused") + "/kvtier"));
}

// Engines put and get a prompt's pages in prefix order, and a later page is of no use once an
// earlier one is gone: within a batch the first page is the most recently used, so eviction
// takes a prefix's last pages first, for puts and reads alike.
TEST_F(StoreLifecycle, EvictionTakesABatchsLastPagesFirst) {
  auto s = open(room_for(4));
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  ASSERT_TRUE(put(*s, pool, {"a0", "a1", "a2", "a3"}).all_ok());  // a3 a2 a1 a0
  ASSERT_TRUE(put(*s, pool, {"b"}, 4).all_ok());                  // a2 a1 a0 b
  EXPECT_FALSE(s->exists("a3").value_or(true));
  std::vector<MutableBuffer> out{pool.out(5, kPage), pool.out(6, kPage)};
  const std::vector<std::string> keys{"a1", "a2"};
  ASSERT_TRUE(s->batch_get(testing::views(keys), out).all_ok());  // a0 b a2 a1
  ASSERT_TRUE(put(*s, pool, {"c"}, 7).all_ok());
  EXPECT_FALSE(s->exists("a0").value_or(true));
  for (const char* k : {"a1", "a2", "b", "c"}) EXPECT_TRUE(s->exists(k).value_or(false)) << k;
  ASSERT_TRUE(put(*s, pool, {"d"}, 0).all_ok());  // a2 a1 c d
  EXPECT_FALSE(s->exists("b").value_or(true));
  ASSERT_TRUE(put(*s, pool, {"e"}, 1).all_ok());
  EXPECT_FALSE(s->exists("a2").value_or(true));
  EXPECT_TRUE(s->exists("a1").value_or(false));
  EXPECT_EQ(s->stats().evicted_pages, 4u);
}

// The same for a batch longer than a window (the store works 128 pages at a time at most).
TEST_F(StoreLifecycle, ALongBatchsFirstPageIsItsMostRecentlyUsed) {
  constexpr size_t kPages = 300;
  auto s = open(room_for(kPages));
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, kPages, kPage);
  std::vector<std::string> keys;
  for (size_t i = 0; i < kPages; ++i) keys.push_back(fmt::format("long-{}", i));
  ASSERT_TRUE(put(*s, pool, keys).all_ok());
  ASSERT_TRUE(put(*s, pool, {"next"}).all_ok());
  EXPECT_FALSE(s->exists(keys.back()).value_or(true));
  keys.pop_back();
  for (size_t i : {size_t{0}, size_t{127}, size_t{128}, keys.size() - 1}) {
    EXPECT_TRUE(s->exists(keys[i]).value_or(false)) << keys[i];
  }
  std::vector<MutableBuffer> out;
  for (size_t i = 0; i < keys.size(); ++i) out.push_back(pool.out(i, kPage));
  ASSERT_TRUE(s->batch_get(testing::views(keys), out).all_ok());
  ASSERT_TRUE(put(*s, pool, {"x"}).all_ok());  // "next" was not read: it goes first
  EXPECT_FALSE(s->exists("next").value_or(true));
  ASSERT_TRUE(put(*s, pool, {"y"}).all_ok());  // then the read's last page
  EXPECT_FALSE(s->exists(keys.back()).value_or(true));
  EXPECT_TRUE(s->exists(keys[127]).value_or(false));
  EXPECT_TRUE(s->exists(keys[0]).value_or(false));
}

// Each process orders its own index by its own reads; a page another store of the namespace
// read since (its read mark) is spared by this store's eviction once, and goes at its turn
// after that unless read again. Its own reads never buy a spare: its index already has them.
TEST_F(StoreLifecycle, EvictionSparesOnceWhatAnotherStoreRead) {
  auto writer = open(room_for(4));
  auto reader = open(room_for(4));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  PagePool pool(*writer, 8, kPage), rpool(*reader, 1, kPage);
  ASSERT_TRUE(put_each(*writer, pool, {"p0", "p1", "p2", "p3"}));
  KVTIER_ASSERT_OK(reader->get("p0", rpool.slot(0), kPage));
  KVTIER_ASSERT_OK(writer->get("p3", pool.slot(7), kPage));
  // The writer's order is p0 p1 p2 p3: p0 is spared, p1 goes.
  ASSERT_TRUE(put(*writer, pool, {"p4"}, 4).all_ok());
  EXPECT_TRUE(writer->exists("p0").value_or(false));
  EXPECT_FALSE(writer->exists("p1").value_or(true));
  EXPECT_EQ(writer->stats().kept_for_others, 1u);
  // Now p2 p3 p0 p4 (exists calls do not reorder): three more puts reach p0, spared no more.
  ASSERT_TRUE(put(*writer, pool, {"p5", "p6"}, 5).all_ok());
  EXPECT_TRUE(writer->exists("p0").value_or(false));
  EXPECT_FALSE(writer->exists("p3").value_or(true));  // its own read bought nothing
  ASSERT_TRUE(put(*writer, pool, {"p7"}, 7).all_ok());
  EXPECT_FALSE(writer->exists("p0").value_or(true));
  EXPECT_EQ(reader->get("p0", rpool.slot(0), kPage).code(), StatusCode::kNotFound);
  const StoreStats st = writer->stats();
  EXPECT_EQ(st.kept_for_others, 1u);
  EXPECT_EQ(st.evicted_pages, 4u);
  EXPECT_EQ(on_disk(*writer).second, 4 * kObject);
  EXPECT_EQ(st.used_bytes, 4 * kCharged);
}

// Stores of a namespace on one host share what they evict and remove: a page another store
// removed is not reported by this store's exists() though its index had learnt of it, so an
// engine is not promised a page its read then misses (before, the index kept such a page until
// a read missed it). A page written again afterwards is found again.
TEST_F(StoreLifecycle, APageAnotherStoreRemovedIsNotReported) {
  auto writer = open(room_for(2));
  auto other = open(room_for(2));
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(other, nullptr);
  PagePool pool(*writer, 4, kPage);
  ASSERT_TRUE(put_each(*writer, pool, {"p0", "p1"}));
  const std::vector<std::string> both{"p0", "p1"};
  ASSERT_EQ(other->batch_exists(testing::views(both)), 2u);  // found by a stat, now indexed
  ASSERT_TRUE(put(*writer, pool, {"p2"}, 2).all_ok());       // evicts p0
  ASSERT_EQ(writer->stats().evicted_pages, 1u);
  EXPECT_EQ(other->batch_exists(testing::views(both)), 0u);
  EXPECT_FALSE(other->exists("p0").value_or(true));
  EXPECT_TRUE(other->exists("p1").value_or(false));
  KVTIER_ASSERT_OK(writer->remove("p1"));
  EXPECT_FALSE(other->exists("p1").value_or(true));
  ASSERT_TRUE(put(*writer, pool, {"p0"}, 0).all_ok());
  EXPECT_EQ(other->batch_exists(testing::views(both)), 1u);
  // A store's own evictions are not news to it: a page it evicts to make room for a batch
  // that puts that page again keeps the place the batch gave it (its first page: the most
  // recently used), not the place of a page found on disk (the least).
  ASSERT_TRUE(put(*writer, pool, {"p0", "p3"}, 0).all_ok());  // evicts p2 and p0, puts p0
  EXPECT_EQ(writer->stats().evicted_pages, 3u);
  const std::vector<std::string> again{"p0", "p3"};
  EXPECT_EQ(writer->batch_exists(testing::views(again)), 2u);
  EXPECT_EQ(other->batch_exists(testing::views(again)), 2u);
  ASSERT_TRUE(put(*writer, pool, {"p4"}, 1).all_ok());
  EXPECT_TRUE(writer->exists("p0").value_or(false));
  EXPECT_FALSE(writer->exists("p3").value_or(true));
}

// take_evicted names exactly the pages eviction removed, by their key hashes, once; nothing
// until watch_evictions; beyond max_pending the oldest are dropped and counted.
TEST_F(StoreLifecycle, EvictedPagesAreNamedOnceWhenWatched) {
  auto s = open(room_for(4));
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  ASSERT_TRUE(put_each(*s, pool, {"p0", "p1", "p2", "p3"}));
  ASSERT_TRUE(put(*s, pool, {"p4"}, 4).all_ok());  // evicts p0, not watched
  EXPECT_TRUE(s->take_evicted().keys.empty());
  s->watch_evictions(2);
  ASSERT_TRUE(put(*s, pool, {"p5", "p6"}, 5).all_ok());  // evicts p1, p2; now p3 p4 p6 p5
  Store::Evicted e = s->take_evicted();
  EXPECT_EQ(e.keys, (std::vector<Hash128>{hash128("p1"), hash128("p2")}));
  EXPECT_EQ(e.dropped, 0u);
  EXPECT_TRUE(s->take_evicted().keys.empty());                 // each once
  ASSERT_TRUE(put(*s, pool, {"p7", "p8", "p9"}, 0).all_ok());  // evicts p3, p4, p6
  e = s->take_evicted();
  EXPECT_EQ(e.keys, (std::vector<Hash128>{hash128("p4"), hash128("p6")}));
  EXPECT_EQ(e.dropped, 1u);  // p3: over max_pending
  EXPECT_FALSE(s->exists("p3").value_or(true));
  s->watch_evictions(0);
  ASSERT_TRUE(put(*s, pool, {"pa"}, 0).all_ok());
  EXPECT_TRUE(s->take_evicted().keys.empty());
}

TEST_F(StoreLifecycle, EvictionNeverTearsAReadInFlight) {
  auto s = open(room_for(2));
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 4, kPage);
  ASSERT_TRUE(put(*s, pool, {"held"}).all_ok());
  // A reader opens the page (as a batch read does) ...
  AgentConfig ac;
  ac.backend = "posix";
  ac.registry = &builtin_backends();
  Agent agent = std::move(Agent::create(ac)).value();
  const std::string path = testing::page_file(*s, "held");
  Target t = std::move(agent.open_target({path, TargetMode::kRead, 0, {}})).value();
  // ... then two more pages evict it ...
  ASSERT_TRUE(put(*s, pool, {"a", "b"}, 1).all_ok());
  ASSERT_FALSE(s->exists("held").value_or(true));
  EXPECT_FALSE(std::filesystem::exists(path));
  // ... and the reader still reads every byte of it.
  AlignedBuffer buf = testing::make_buffer(kObject);
  Registration reg = std::move(agent.register_memory(buf.data(), buf.size())).value();
  MemDesc m{buf.data(), kObject};
  StorageDesc d{&t, 0, kObject};
  Transfer x = std::move(agent.make_request(TransferOp::kRead, {&m, 1}, {&d, 1})).value();
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_ASSERT_OK(x.first_error());
  EXPECT_EQ(
      testing::find_pattern_mismatch(buf.data() + 4096, kPage, std::hash<std::string>{}("held")),
      SIZE_MAX);
}

const uint64_t kSharedCapacity = room_for(64);

// A writer of CapacityIsOneBudgetAcrossProcesses: args are the store's directory and the
// writer's number. 3: a put failed, 4: the shared usage passed the capacity.
KVTIER_CHILD(lifecycle_capacity_writer, args) {
  const std::string w = args.str(1);
  auto s = open_at(args.str(0), kSharedCapacity);
  if (s == nullptr) return 2;
  PagePool pool(*s, 16, kPage);
  int code = 0;
  for (size_t round = 0; round < 10 * 64 / 16 + 4; ++round) {
    std::vector<std::string> keys;
    for (size_t i = 0; i < 16; ++i) {
      keys.push_back("w" + w + "-r" + std::to_string(round) + "-" + std::to_string(i));
    }
    if (!put_pages(*s, pool, keys).all_ok()) code = 3;
    // The shared usage, which bounds what is published at every moment. (A directory walk is
    // no snapshot while others evict and write: it is checked at the end.)
    const StoreStats st = s->stats();
    if (st.used_bytes + st.metadata_bytes > kSharedCapacity) code = 4;
  }
  return code;
}

// Three processes write ten times the capacity at once; the namespace never holds more than
// the capacity (the shared usage checked by the writers after every batch, the bytes on disk
// at the end).
TEST_F(StoreLifecycle, CapacityIsOneBudgetAcrossProcesses) {
  std::vector<testing::Child> writers;
  for (int w = 0; w < 3; ++w) {
    writers.push_back(testing::Child::start("lifecycle_capacity_writer",
                                            {dir_.file("store"), std::to_string(w)}));
  }
  for (testing::Child& w : writers) {
    EXPECT_EQ(w.wait(), 0) << "3: a put failed, 4: usage over capacity";
  }
  auto s = open(kSharedCapacity);
  ASSERT_NE(s, nullptr);
  const auto [n, bytes] = on_disk(*s);
  EXPECT_LE(bytes, kSharedCapacity);
  EXPECT_GT(n, 0u);
  EXPECT_EQ(s->stats().used_bytes, n * kCharged);  // alone again: exact
  EXPECT_EQ(bytes, n * kObject);
}

constexpr size_t kCrashKeys = 40, kCrashBatch = 8;

std::vector<std::string> crash_batch(size_t n) {
  return testing::round_robin_batch("crash-", kCrashKeys, kCrashBatch, n);
}

// The writer of the crash tests: args are the store's directory, its query, then the trap.
KVTIER_CHILD(lifecycle_crash_writer, args) {
  auto s = open_at(args.str(0), 0, args.str(1), fixed_namespace(),
                   testing::crash_writer_faults(args, 2));
  if (s == nullptr) return 2;
  return testing::run_crash_writer(crash_batch, [&](const std::vector<std::string>& keys) {
    PagePool pool(*s, keys.size(), kPage);
    // The content names the key: whichever version survives must be whole.
    return put_pages(*s, pool, keys).all_ok();
  });
}

// A writer is killed 44 times: 36 times held at an exact point of a page's write (before its
// temporary is created, before its bytes are written, or written and not yet published under
// its name), 8 times as soon as it reports some whole batches. Every page reads back whole or is
// a miss, every page of a batch the writer reported done is a hit, and no temporary outlives the
// next open.
void crash_test(const std::string& dir, const std::string& query) {
  const testing::CrashWriter writer{"lifecycle_crash_writer", {dir, query}, crash_batch};
  std::vector<testing::KillPoint> points = testing::kills_after_batches(8, 4);
  for (uint64_t i = 0; i < 12; ++i) {
    const uint64_t n = 5 * i + i % 3;  // the writer stops at its (n + 1)-th such call
    points.push_back({fmt::format("before temporary #{} is created", n + 1),
                      testing::TrapPoint{FaultOp::kOpenCreate, "", n, ""}});
    points.push_back(
        {fmt::format("before write #{}", n + 1), testing::TrapPoint{FaultOp::kWrite, "", n, ""}});
    points.push_back({fmt::format("a page written, before publish #{}", n + 1),
                      testing::TrapPoint{FaultOp::kPublish, "", n, ""}});
  }
  const std::vector<std::string> reported = testing::kill_writer_at_each(writer, points);
  ASSERT_FALSE(reported.empty()) << "no writer got through a batch";
  const std::set<std::string> done(reported.begin(), reported.end());
  auto s = open_at(dir, 0, query);
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 1, kPage);
  size_t hits = 0;
  for (size_t i = 0; i < kCrashKeys; ++i) {
    const std::string key = "crash-" + std::to_string(i);
    Status st = s->get(key, pool.slot(0), kPage);
    if (st.ok()) {
      ++hits;
      EXPECT_TRUE(pool.holds(0, kPage, std::hash<std::string>{}(key))) << key;
    } else {
      EXPECT_EQ(st.code(), StatusCode::kNotFound) << key << ": " << st.to_string();
      EXPECT_FALSE(done.contains(key)) << key << " was in a batch reported done";
    }
  }
  EXPECT_GE(hits, done.size());
  EXPECT_EQ(s->stats().get_corrupt, 0u);
  // Nothing left in the temporaries directory once a store has opened again.
  size_t temps = 0;
  for (const std::string& d : s->namespace_dirs()) {
    for (const auto& e : std::filesystem::directory_iterator(d + "/tmp")) {
      (void)e;
      ++temps;
    }
  }
  EXPECT_EQ(temps, 0u) << query;
}

TEST_F(StoreLifecycle, SigkillDuringWritesNeverLeavesAWrongPage) {
  crash_test(dir_.file("store"), "?backend=posix&layout=files");
}

TEST_F(StoreLifecycle, SigkillWithNamedTemporariesLeavesNoneBehind) {
  crash_test(dir_.file("store"), "?backend=posix&layout=files&use_tmpfile=0");
}

TEST_F(StoreLifecycle, CapacityNeedsAFileStore) {
  StoreConfig cfg;
  cfg.location = *parse_store_uri("mem://lifecycle-capacity");
  cfg.ns = fixed_namespace();
  // Another store keeps the memory instance alive, so what the refused open left shows.
  StoreConfig holder_cfg = cfg;
  holder_cfg.ns.model += "-holder";
  auto holder = testing::open_store(holder_cfg);
  ASSERT_NE(holder, nullptr);
  cfg.capacity_bytes = 1 << 20;
  Result<std::unique_ptr<Store>> s = Store::open(cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnsupported);
  // Refused before anything was written: no namespace directory, no manifest.
  KVTIER_ASSERT_OK_AND_ASSIGN(Inventory inv, take_inventory(cfg.location));
  ASSERT_EQ(inv.namespaces.size(), 1u);
  EXPECT_EQ(inv.namespaces[0].id, holder->namespace_id().hex());
}

TEST_F(StoreLifecycle, MetricsCountLatenciesErrorsAndRenderAsPrometheus) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  PagePool pool(*s, 8, kPage);
  const auto keys = testing::keys_for("m", 4);
  ASSERT_TRUE(put(*s, pool, keys).all_ok());
  std::vector<MutableBuffer> out;
  for (size_t i = 0; i < 4; ++i) out.push_back(pool.out(4 + i, kPage));
  // Damage one page: the read reports it as CORRUPT, counted by code.
  const std::string path = testing::page_file(*s, keys[2]);
  std::string bytes = testing::read_file(path);
  bytes[5000] ^= 1;
  testing::write_file(path, bytes);
  BatchResult r = s->batch_get(testing::views(keys), out);
  EXPECT_EQ(r.ok_count(), 3u);
  (void)s->batch_exists(testing::views(keys));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.put_latency.count, 1u);
  EXPECT_EQ(st.get_latency.count, 1u);
  EXPECT_EQ(st.exists_latency.count, 1u);
  uint64_t in_buckets = 0;
  for (uint64_t b : st.get_latency.buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, 1u);
  EXPECT_EQ(st.batches_in_flight, 0u);
  EXPECT_EQ(st.objects_open, 0u);
  EXPECT_EQ(st.errors_by_code.at("CORRUPT"), 1u);
  const std::string text = to_prometheus(st, "rank=\"0\"");
  EXPECT_NE(text.find("kvtier_get_hits_total{rank=\"0\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("kvtier_errors_total{rank=\"0\",code=\"CORRUPT\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_pages_rejected_total{rank=\"0\",reason=\"checksum\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kvtier_get_batch_seconds_count{rank=\"0\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("kvtier_put_batch_seconds_bucket{rank=\"0\",le=\"+Inf\"} 1\n"),
            std::string::npos);
}

// Label values are escaped as the text format requires: a backslash, a double quote and a
// line feed in a path cannot end the value or the line early. Every statistic is exported.
TEST(StoreMetrics, PrometheusEscapesLabelValuesAndNamesEveryStatistic) {
  StoreStats st;
  st.put_pages = 7;
  st.removes = 2;
  st.min_free_bytes = 5;
  st.errors_by_code["EIO\"x"] = 1;
  const std::string text = to_prometheus(st, MetricLabels{{"dir", "/a\"b\\c\nd"}, {"rank", "0"}});
  EXPECT_NE(text.find("kvtier_put_pages_total{dir=\"/a\\\"b\\\\c\\nd\",rank=\"0\"} 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kvtier_removes_total{dir="), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvtier_min_free_bytes gauge\n"), std::string::npos);
  EXPECT_NE(text.find("code=\"EIO\\\"x\"} 1\n"), std::string::npos) << text;
  // No raw line feed inside a sample: every line is a comment or name{...} value.
  size_t lines = 0;
  for (size_t i = 0, nl; i < text.size(); i = nl + 1) {
    nl = text.find('\n', i);
    ASSERT_NE(nl, std::string::npos);
    const std::string line = text.substr(i, nl - i);
    ++lines;
    if (line.starts_with("#")) continue;
    const size_t brace = line.rfind('}');
    ASSERT_NE(brace, std::string::npos) << line;
    EXPECT_EQ(line[brace + 1], ' ') << line;
  }
  size_t described = 0;
  st.for_each([&](const StatInfo& info, const auto&) {
    ++described;
    if (info.kind == StatKind::kText) return;
    EXPECT_NE(text.find("# TYPE kvtier_" + std::string(info.metric) + " "), std::string::npos)
        << info.name;
  });
  EXPECT_GT(described, 30u);
  EXPECT_GT(lines, described);
}

}  // namespace
}  // namespace kvtier
