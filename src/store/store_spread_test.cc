// A batch's work over the store's threads (window/put_runs.h): page files written in runs of
// about 1 MiB that the caller and StoreConfig::cpus - 1 threads encode and write side by side.
// Pages cut into runs come back byte-exact whatever their pieces, I/O and sealing; a run that
// fails fails its page alone; the threads start only for a window of more than one run, are
// as many as asked, and go with the store. A get batch of small pages is cut in parts read,
// verified (and opened) side by side (Store::Impl::spreads_get), a miss in its place; one of
// large pages goes whole to the backend.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

constexpr const char* kKey = "2f2e3d4c5b6a79880f1e2d3c4b5a69780102030405060708090a0b0c0d0e0f11";

// Three pieces a page: a large page's runs straddle its pieces; small pages share a run.
const std::vector<size_t> kLargePieces = {(1 << 20) + 13, (700 << 10) + 1, (1536 << 10) + 5};
const std::vector<size_t> kSmallPieces = {30000, 20000, 20272};
// Whole 4 KiB blocks in page-aligned memory: direct I/O writes them in place, run by run.
const std::vector<size_t> kAlignedPieces = {1 << 20, 768 << 10, 1536 << 10};

// The threads of this process named `name`.
size_t threads_named(const std::string& name) {
  size_t n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;
  }
  return n;
}

// The same, once it is `n`: a joined thread's task can linger in /proc a moment after the
// join returns (the kernel releases it after it wakes the joiner). Gives up after 10 s.
size_t threads_named_become(const std::string& name, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  size_t now = threads_named(name);
  while (now != n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    now = threads_named(name);
  }
  return now;
}

struct SpreadCase {
  std::string name;
  std::string backend;
  DirectIo direct_io = DirectIo::kOff;
  bool sealed = false;
};

class StoreSpread : public ::testing::TestWithParam<SpreadCase> {
 protected:
  std::unique_ptr<Store> open(std::string_view query, std::shared_ptr<FaultInjector> faults = {}) {
    StoreConfig cfg;
    cfg.location = *parse_store_uri(dir_.file("s") + "?layout=files&backend=" + GetParam().backend +
                                    std::string(query));
    cfg.ns = testing::test_namespace();
    cfg.direct_io = GetParam().direct_io;
    if (GetParam().sealed) {
      const std::string keys = keys_dir_.file("keys");
      testing::write_file(keys, std::string("1 ") + kKey + "\n");
      EXPECT_EQ(::chmod(keys.c_str(), 0600), 0);
      cfg.key_file = keys;
    }
    testing::decorate(cfg, std::move(faults));
    return testing::open_store(std::move(cfg));
  }

  testing::TempDir dir_;
  testing::TempDir keys_dir_;
};

// A batch of large and small pages, the large ones cut into runs that straddle their pieces.
struct Batch {
  std::vector<std::string> names;
  std::vector<std::vector<size_t>> shapes;
  size_t bytes = 0;
  explicit Batch(const std::vector<bool>& large,
                 const std::vector<size_t>& large_pieces = kLargePieces) {
    for (size_t i = 0; i < large.size(); ++i) {
      names.push_back((large[i] ? "large-" : "small-") + std::to_string(i));
      shapes.push_back(large[i] ? large_pieces : kSmallPieces);
      for (size_t n : shapes.back()) bytes += n;
    }
  }
  std::vector<std::string_view> keys() const { return {names.begin(), names.end()}; }
};

// Lays `batch`'s pieces out in `memory` (a registered region), filled when `fill`.
template <typename Buffer>
std::vector<Buffer> pieces_of(const Batch& batch, std::byte* memory, bool fill) {
  std::vector<Buffer> out;
  size_t at = 0;
  for (size_t p = 0; p < batch.shapes.size(); ++p) {
    for (size_t q = 0; q < batch.shapes[p].size(); ++q) {
      const size_t n = batch.shapes[p][q];
      if (fill) testing::fill_pattern(memory + at, n, 1000 * p + q);
      out.push_back(Buffer{memory + at, n});
      at += (n + 4095) / 4096 * 4096;  // pieces page-aligned, as engines' pools are
    }
  }
  return out;
}

size_t region_bytes(const Batch& batch) {
  size_t n = 0;
  for (const auto& shape : batch.shapes)
    for (size_t piece : shape) n += (piece + 4095) / 4096 * 4096;
  return n;
}

// Puts `batch`, filled in `memory`, through `s`: every page stored.
void put_batch(Store& s, const Batch& batch, AlignedBuffer& memory) {
  Registration reg = std::move(s.register_memory(memory.data(), memory.size())).value();
  BatchResult r = s.batch_put(batch.keys(), pieces_of<ConstBuffer>(batch, memory.data(), true));
  KVTIER_ASSERT_OK(r.status);
  for (const Status& st : r.pages) KVTIER_ASSERT_OK(st);
}

// Every piece of `batch` in `memory` holds what pieces_of filled it with.
void expect_pages(const Batch& batch, const std::byte* memory, const std::vector<Status>& pages) {
  size_t at = 0;
  for (size_t p = 0; p < batch.shapes.size(); ++p) {
    for (size_t q = 0; q < batch.shapes[p].size(); ++q) {
      const size_t n = batch.shapes[p][q];
      if (pages[p].ok()) {
        EXPECT_EQ(testing::find_pattern_mismatch(memory + at, n, 1000 * p + q), SIZE_MAX)
            << batch.names[p] << " piece " << q;
      }
      at += (n + 4095) / 4096 * 4096;
    }
  }
}

TEST_P(StoreSpread, PagesCutInRunsComeBackByteExact) {
  for (const auto* large : {&kLargePieces, &kAlignedPieces})
    for (const char* cpus : {"&cpus=1", "&cpus=2", "&cpus=3"}) {
      SCOPED_TRACE(std::string(cpus) + (large == &kAlignedPieces ? ", aligned" : ", unaligned"));
      std::filesystem::remove_all(dir_.file("s"));
      auto s = open(cpus);
      ASSERT_NE(s, nullptr);
      const Batch batch({true, false, false, true, false, true}, *large);
      AlignedBuffer in = testing::make_buffer(region_bytes(batch));
      AlignedBuffer out = testing::make_buffer(region_bytes(batch));
      Registration rin = std::move(s->register_memory(in.data(), in.size())).value();
      Registration rout = std::move(s->register_memory(out.data(), out.size())).value();
      const auto keys = batch.keys();
      const auto put = pieces_of<ConstBuffer>(batch, in.data(), true);
      BatchResult r = s->batch_put(keys, put);
      KVTIER_ASSERT_OK(r.status);
      for (const Status& st : r.pages) KVTIER_EXPECT_OK(st);
      std::memset(out.data(), 0x5a, out.size());
      const auto get = pieces_of<MutableBuffer>(batch, out.data(), false);
      r = s->batch_get(keys, get);
      KVTIER_ASSERT_OK(r.status);
      for (const Status& st : r.pages) KVTIER_EXPECT_OK(st);
      expect_pages(batch, out.data(), r.pages);
      if (GetParam().direct_io == DirectIo::kOn && !GetParam().sealed && large == &kAlignedPieces &&
          !s->stats().direct_io.starts_with("off")) {
        // The large pages went out in place, run by run (and came back the same way).
        EXPECT_GE(s->stats().direct_pages, 6u) << s->stats().direct_io;
      }
      // And again, through a store opened afresh (nothing of the writer's memory).
      s.reset();
      s = open(cpus);
      ASSERT_NE(s, nullptr);
      Registration again = std::move(s->register_memory(out.data(), out.size())).value();
      std::memset(out.data(), 0x5a, out.size());
      r = s->batch_get(keys, get);
      for (const Status& st : r.pages) KVTIER_EXPECT_OK(st);
      expect_pages(batch, out.data(), r.pages);
    }
}

TEST_P(StoreSpread, AFailedRunFailsItsPageAlone) {
  auto faults = std::make_shared<FaultInjector>();
  auto s = open("&cpus=2", faults);
  ASSERT_NE(s, nullptr);
  const Batch batch({true, true, true});
  AlignedBuffer in = testing::make_buffer(region_bytes(batch));
  AlignedBuffer out = testing::make_buffer(region_bytes(batch));
  Registration rin = std::move(s->register_memory(in.data(), in.size())).value();
  Registration rout = std::move(s->register_memory(out.data(), out.size())).value();
  const auto keys = batch.keys();
  // One write fails (ENOSPC), in the middle of the batch.
  faults->add(FaultRule{.op = FaultOp::kWrite, .error = ENOSPC, .skip = 5, .count = 1});
  BatchResult r = s->batch_put(keys, pieces_of<ConstBuffer>(batch, in.data(), true));
  KVTIER_ASSERT_OK(r.status);
  size_t failed = 0;
  for (const Status& st : r.pages) {
    if (st.ok()) continue;
    ++failed;
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  }
  EXPECT_EQ(failed, 1u);
  std::memset(out.data(), 0x5a, out.size());
  BatchResult g = s->batch_get(keys, pieces_of<MutableBuffer>(batch, out.data(), false));
  for (size_t p = 0; p < keys.size(); ++p) {
    // The failed page was never published: a miss. The others are whole.
    EXPECT_EQ(g.pages[p].code(), r.pages[p].ok() ? StatusCode::kOk : StatusCode::kNotFound)
        << keys[p] << ": " << g.pages[p].to_string();
  }
  expect_pages(batch, out.data(), g.pages);
}

TEST_P(StoreSpread, ThreadsStartForWindowsOfManyRunsAndGoWithTheStore) {
  const std::string name = "kvtier-spread";
  const size_t before = threads_named(name);
  {
    auto s = open("&cpus=3");
    ASSERT_NE(s, nullptr);
    const Batch small({false, false, false});  // one run: the caller's alone
    AlignedBuffer m = testing::make_buffer(region_bytes(Batch({true, true})));
    Registration reg = std::move(s->register_memory(m.data(), m.size())).value();
    BatchResult r = s->batch_put(small.keys(), pieces_of<ConstBuffer>(small, m.data(), true));
    for (const Status& st : r.pages) KVTIER_ASSERT_OK(st);
    EXPECT_EQ(threads_named(name), before) << "a window of one run started threads";
    const Batch large({true, true});
    r = s->batch_put(large.keys(), pieces_of<ConstBuffer>(large, m.data(), true));
    for (const Status& st : r.pages) KVTIER_ASSERT_OK(st);
    EXPECT_EQ(threads_named(name), before + 2) << "cpus=3: the caller and two threads";
  }
  EXPECT_EQ(threads_named_become(name, before), before) << "the store's threads outlived it";
  {
    auto s = open("&cpus=1");
    ASSERT_NE(s, nullptr);
    const Batch large({true, true});
    AlignedBuffer m = testing::make_buffer(region_bytes(large));
    Registration reg = std::move(s->register_memory(m.data(), m.size())).value();
    BatchResult r = s->batch_put(large.keys(), pieces_of<ConstBuffer>(large, m.data(), true));
    for (const Status& st : r.pages) KVTIER_ASSERT_OK(st);
    EXPECT_EQ(threads_named(name), before) << "cpus=1: the caller alone";
  }
}

TEST_P(StoreSpread, AGetOfSmallPagesIsSpreadAndByteExact) {
  // Sixteen pages of 70 KB: about 1.1 MiB, a batch the backend would read on the caller's
  // thread. One of them removed: a miss in its place, the others whole. With two CPUs the
  // batch is cut in a part per thread; with eight, in four parts of about 256 KiB.
  const Batch batch(std::vector<bool>(16, false));
  AlignedBuffer in = testing::make_buffer(region_bytes(batch));
  AlignedBuffer out = testing::make_buffer(region_bytes(batch));
  for (const size_t cpus : {2, 8}) {
    SCOPED_TRACE(cpus);
    const std::string query = "&cpus=" + std::to_string(cpus);
    std::filesystem::remove_all(dir_.file("s"));
    {
      auto s = open(query);
      ASSERT_NE(s, nullptr);
      ASSERT_NO_FATAL_FAILURE(put_batch(*s, batch, in));
      KVTIER_ASSERT_OK(s->remove(batch.names[5]));
    }
    const std::string name = "kvtier-spread";
    EXPECT_EQ(threads_named_become(name, 0), 0u);
    auto s = open(query);  // a store that has put nothing: its threads start for the get
    ASSERT_NE(s, nullptr);
    Registration reg = std::move(s->register_memory(out.data(), out.size())).value();
    std::memset(out.data(), 0x5a, out.size());
    BatchResult g = s->batch_get(batch.keys(), pieces_of<MutableBuffer>(batch, out.data(), false));
    KVTIER_ASSERT_OK(g.status);
    ASSERT_EQ(g.pages.size(), batch.names.size());
    for (size_t p = 0; p < g.pages.size(); ++p) {
      EXPECT_EQ(g.pages[p].code(), p == 5 ? StatusCode::kNotFound : StatusCode::kOk)
          << batch.names[p] << ": " << g.pages[p].to_string();
    }
    expect_pages(batch, out.data(), g.pages);
    EXPECT_EQ(threads_named(name), cpus - 1) << "the get ran on the caller and the store's threads";
    EXPECT_EQ(s->stats().get_hits, 15u);
  }
}

TEST_P(StoreSpread, AGetOfLargePagesGoesWholeToTheBackend) {
  // Two pages of 3.3 MiB: more than a part, each split by the backend itself.
  const Batch batch({true, true});
  AlignedBuffer m = testing::make_buffer(region_bytes(batch));
  {
    auto s = open("&cpus=2");
    ASSERT_NE(s, nullptr);
    ASSERT_NO_FATAL_FAILURE(put_batch(*s, batch, m));
  }
  const std::string name = "kvtier-spread";
  EXPECT_EQ(threads_named_become(name, 0), 0u);
  auto s = open("&cpus=2");
  ASSERT_NE(s, nullptr);
  Registration reg = std::move(s->register_memory(m.data(), m.size())).value();
  std::memset(m.data(), 0x5a, m.size());
  BatchResult g = s->batch_get(batch.keys(), pieces_of<MutableBuffer>(batch, m.data(), false));
  KVTIER_ASSERT_OK(g.status);
  for (const Status& st : g.pages) KVTIER_EXPECT_OK(st);
  expect_pages(batch, m.data(), g.pages);
  EXPECT_EQ(threads_named(name), 0u) << "a get of large pages started the store's threads";
}

TEST(StoreSpreadConfig, CpusMustBeAWholeNumberFromOne) {
  testing::TempDir dir;
  for (const char* bad : {"0", "-1", "two", "1025", ""}) {
    StoreConfig cfg;
    cfg.location = *parse_store_uri(dir.file("s") + "?cpus=" + bad);
    cfg.ns = testing::test_namespace();
    Result<std::unique_ptr<Store>> s = Store::open(cfg);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("cpus="), std::string::npos) << s.status().to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, StoreSpread,
    ::testing::Values(SpreadCase{"posix", "posix"}, SpreadCase{"uring", "uring"},
                      SpreadCase{"posix_direct", "posix", DirectIo::kOn},
                      SpreadCase{"uring_direct", "uring", DirectIo::kOn},
                      SpreadCase{"posix_sealed", "posix", DirectIo::kOff, true},
                      SpreadCase{"uring_sealed_direct", "uring", DirectIo::kOn, true}),
    [](const ::testing::TestParamInfo<SpreadCase>& i) { return i.param.name; });

}  // namespace
}  // namespace kvtier
