// Per-page overheads of the store, with Google Benchmark (Release builds):
//   kvtier_microbench [--benchmark_filter=...]
// Key routing, header encode and verify, checksum throughput by size, and batch_exists of 128
// keys on a real directory (what SGLang calls before every prefetch).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "capacity/page_index.h"
#include "format/page_format.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/checksum.h"
#include "kvtier/core/unique_fd.h"
#include "kvtier/store/store.h"
#include "naming/routing.h"
#include "seal/key_file.h"
#include "seal/page_seal.h"
#include "seal/tenant.h"

namespace kvtier {
namespace {

// A SGLang-style key: 64 hex digits.
std::string sglang_key(uint64_t i) {
  return hash128(std::to_string(i)).hex() + hash128(std::to_string(i + 1)).hex();
}

// A store in an emptied temporary directory `name` (removed again by ~BenchDir), namespace
// model `name`.
struct BenchDir {
  explicit BenchDir(const char* name) : path(std::filesystem::temp_directory_path() / name) {
    std::filesystem::remove_all(path);
    config.location = *parse_store_uri(path);
    config.ns.model = name;
  }
  ~BenchDir() { std::filesystem::remove_all(path); }
  const std::string path;
  StoreConfig config;
};

void BM_RouteKey(benchmark::State& state) {
  routing::Router router({"/mnt/nvme0/kv", "/mnt/nvme1/kv"}, hash128("namespace"));
  std::vector<std::string> keys;
  for (int i = 0; i < 1024; ++i) keys.push_back(sglang_key(i));
  size_t i = 0;
  for (auto _ : state) {
    routing::Route r = router.route(keys[i++ & 1023]);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_RouteKey);

page::Header sample_header(const std::string& key) {
  page::Header h;
  h.namespace_id = hash128("namespace");
  h.key_hash = hash128(key);
  h.payload_bytes = 8 << 20;
  h.payload_checksum = 42;
  h.piece_count = 2;
  h.piece_bytes = 4 << 20;
  h.key = key;
  return h;
}

void BM_HeaderEncode(benchmark::State& state) {
  AlignedBuffer block = std::move(AlignedBuffer::allocate(page::kHeaderBytes)).value();
  const std::string key = sglang_key(1);
  const page::Header h = sample_header(key);
  for (auto _ : state) {
    page::encode(h, std::span<std::byte, page::kHeaderBytes>(block.data(), page::kHeaderBytes));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_HeaderEncode);

void BM_HeaderVerify(benchmark::State& state) {
  AlignedBuffer block = std::move(AlignedBuffer::allocate(page::kHeaderBytes)).value();
  const std::string key = sglang_key(1);
  const page::Header h = sample_header(key);
  const auto span = std::span<std::byte, page::kHeaderBytes>(block.data(), page::kHeaderBytes);
  page::encode(h, span);
  const page::Expectation expect{h.namespace_id, key, h.payload_bytes, 2, 4 << 20};
  for (auto _ : state) {
    Result<page::Header> got = page::decode(span);
    benchmark::DoNotOptimize(page::check(*got, expect).ok());
  }
}
BENCHMARK(BM_HeaderVerify);

// XXH3-64: header checksums (and, in format 1, the payload's chunks).
void BM_Checksum(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  AlignedBuffer buf = std::move(AlignedBuffer::allocate(n)).value();
  std::memset(buf.data(), 0x5a, n);
  for (auto _ : state) benchmark::DoNotOptimize(checksum64(buf.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_Checksum)->Arg(70272)->Arg(256 << 10)->Arg(1310720)->Arg(4 << 20)->Arg(256 << 20);

// CRC-64 (ISA-L): the payload's chunk checksums, hashed by every verified read.
void BM_Crc64(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  AlignedBuffer buf = std::move(AlignedBuffer::allocate(n)).value();
  std::memset(buf.data(), 0x5a, n);
  for (auto _ : state) benchmark::DoNotOptimize(crc64(buf.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_Crc64)->Arg(70272)->Arg(256 << 10)->Arg(1310720)->Arg(4 << 20)->Arg(256 << 20);

// Sealing (seal/): one tenant under a throw-away key file, what a sealed put and get cost per
// chunk beside BM_Crc64 (what a plain get's verification costs) and `openssl speed -evp
// aes-256-gcm -bytes N` (the cipher's own limit on this machine).
struct SealBench {
  SealBench() {
    char dir[] = "/tmp/kvtier-seal-bench-XXXXXX";
    path = std::string(::mkdtemp(dir)) + "/keys";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const std::string line = "1 " + std::string(64, '7') + "\n";
    if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      std::abort();
    }
    ::close(fd);
    file = std::move(seal::KeyFile::load(path)).value();
    ::unlink(path.c_str());
    ::rmdir(path.substr(0, path.rfind('/')).c_str());
    tenant = std::move(seal::Tenant::derive(file, "bench")).value();
    sealer = std::move(seal::Sealer::start(tenant.current())).value();
  }
  std::string path;
  seal::KeyFile file;
  seal::Tenant tenant;
  seal::Sealer sealer;
};
SealBench& seal_bench() {
  static SealBench b;
  return b;
}

// A chunk of `n` bytes sealed from the caller's memory into staging (what a sealed put does).
void BM_SealChunk(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  SealBench& b = seal_bench();
  AlignedBuffer in = std::move(AlignedBuffer::allocate(n)).value();
  AlignedBuffer out = std::move(AlignedBuffer::allocate(n)).value();
  std::memset(in.data(), 0x5a, n);
  const std::span<const std::byte> pieces[] = {{static_cast<const std::byte*>(in.data()), n}};
  const std::byte bound[120] = {};
  seal::Tag tag{};
  for (auto _ : state) {
    const uint64_t page = b.sealer.next_page().value();
    if (!b.sealer
             .seal_chunk(page, 0, 1, bound, pieces, {static_cast<std::byte*>(out.data()), n}, tag)
             .ok()) {
      state.SkipWithError("seal failed");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_SealChunk)->Arg(64 << 10)->Arg(256 << 10)->Arg(4 << 20);

// A chunk of `n` bytes opened in place in the caller's memory (what a sealed get does).
void BM_OpenChunk(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  SealBench& b = seal_bench();
  AlignedBuffer plain = std::move(AlignedBuffer::allocate(n)).value();
  AlignedBuffer sealed = std::move(AlignedBuffer::allocate(n)).value();
  AlignedBuffer work = std::move(AlignedBuffer::allocate(n)).value();
  std::memset(plain.data(), 0x5a, n);
  const std::span<const std::byte> pieces[] = {{static_cast<const std::byte*>(plain.data()), n}};
  const std::byte bound[120] = {};
  seal::Tag tag{};
  const uint64_t page = b.sealer.next_page().value();
  if (!b.sealer
           .seal_chunk(page, 0, 1, bound, pieces, {static_cast<std::byte*>(sealed.data()), n}, tag)
           .ok()) {
    state.SkipWithError("seal failed");
  }
  seal::Opener opener(b.tenant);
  std::span<std::byte> data{static_cast<std::byte*>(work.data()), n};
  for (auto _ : state) {
    // Opening in place changes the bytes: each round opens the same sealed bytes again (the
    // copy is outside the timing).
    state.PauseTiming();
    std::memcpy(work.data(), sealed.data(), n);
    state.ResumeTiming();
    if (!opener.open_chunk(b.sealer.key_id(), b.sealer.salt(), page, 0, 1, bound, data, tag).ok()) {
      state.SkipWithError("open failed");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_OpenChunk)->Arg(64 << 10)->Arg(256 << 10)->Arg(4 << 20);

// A page key's name on storage: HMAC-SHA256 under the tenant's naming key.
void BM_KeyedName(benchmark::State& state) {
  SealBench& b = seal_bench();
  const std::string key = sglang_key(1);
  for (auto _ : state) benchmark::DoNotOptimize(seal::keyed_name(b.tenant.current(), key));
}
BENCHMARK(BM_KeyedName);

// batch_exists of 128 present keys, answered from the store's page index.
void BM_BatchExists128(benchmark::State& state) {
  BenchDir dir("kvtier-microbench");
  StoreConfig& cfg = dir.config;
  auto store = std::move(Store::open(cfg)).value();
  AlignedBuffer page = std::move(AlignedBuffer::allocate(4096)).value();
  Registration reg = std::move(store->register_memory(page.data(), page.size())).value();
  std::vector<std::string> keys;
  for (int i = 0; i < 128; ++i) keys.push_back(sglang_key(i));
  for (const auto& k : keys) {
    if (!store->put(k, page.data(), page.size()).ok()) state.SkipWithError("put failed");
  }
  std::vector<std::string_view> views(keys.begin(), keys.end());
  for (auto _ : state) {
    if (store->batch_exists(views) != 128) state.SkipWithError("batch_exists short");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 128);
  reg.reset();
  store.reset();
}
BENCHMARK(BM_BatchExists128)->Unit(benchmark::kMicrosecond);

// The same 128 keys by one stat() of each page path: what batch_exists cost without an index.
void BM_StatPerKey128(benchmark::State& state) {
  BenchDir dir("kvtier-microbench-stat");
  StoreConfig& cfg = dir.config;
  auto store = std::move(Store::open(cfg)).value();
  AlignedBuffer page = std::move(AlignedBuffer::allocate(4096)).value();
  Registration reg = std::move(store->register_memory(page.data(), page.size())).value();
  std::vector<std::string> paths;
  for (int i = 0; i < 128; ++i) {
    const std::string key = sglang_key(i);
    if (!store->put(key, page.data(), page.size()).ok()) state.SkipWithError("put failed");
    const std::string hex = hash128(key).hex();
    paths.push_back(store->namespace_dirs()[0] + "/" + hex.substr(0, 2) + "/" + hex);
  }
  for (auto _ : state) {
    for (const std::string& p : paths) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0) state.SkipWithError("stat failed");
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 128);
  reg.reset();
  store.reset();
}
BENCHMARK(BM_StatPerKey128)->Unit(benchmark::kMicrosecond);

// The page index in memory: time and heap bytes per page for N pages.
void BM_IndexInsert(benchmark::State& state) {
  const auto n = static_cast<uint64_t>(state.range(0));
  for (auto _ : state) {
    // Large arrays are mmapped by malloc (hblkhd), small blocks come from the heap (uordblks).
    const auto heap = [] { return mallinfo2().uordblks + mallinfo2().hblkhd; };
    const size_t before = heap();
    PageIndex index;
    for (uint64_t i = 0; i < n; ++i) index.put({hash128(&i, sizeof i), 0, 8192});
    state.counters["heap_bytes_per_page"] =
        static_cast<double>(heap() - before) / static_cast<double>(n);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_IndexInsert)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->Iterations(1);

// Store::open over N pages on disk (names only: a fixed page geometry), i.e. the index build
// by listing. The pages are empty files with page names: only their names are read.
void BM_OpenIndexScan(benchmark::State& state) {
  const auto n = static_cast<uint64_t>(state.range(0));
  BenchDir dir("kvtier-microbench-scan");
  StoreConfig& cfg = dir.config;
  cfg.ns.piece_bytes = 4096;
  const std::string ns_dir = std::move(Store::open(cfg)).value()->namespace_dirs()[0];
  for (uint64_t i = 0; i < n; ++i) {
    const std::string hex = hash128(&i, sizeof i).hex();
    const std::string fan = ns_dir + "/" + hex.substr(0, 2);
    if (i < 256) std::filesystem::create_directories(fan);
    const UniqueFd fd(::open((fan + "/" + hex).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    if (!fd.valid()) {
      std::filesystem::create_directories(fan);
      --i;
    }
  }
  for (auto _ : state) {
    auto store = std::move(Store::open(cfg)).value();
    if (store->stats().pages != n) state.SkipWithError("index short");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_OpenIndexScan)->Arg(1 << 20)->Unit(benchmark::kMillisecond)->Iterations(3);

// Writing batches of 128 new pages into a store that is full: every page evicts one. Compare
// with BM_PutBatch128 (no capacity) for the cost of eviction per page.
void put_batches(benchmark::State& state, uint64_t capacity) {
  BenchDir dir("kvtier-microbench-evict");
  StoreConfig& cfg = dir.config;
  cfg.ns.piece_bytes = 4096;
  cfg.capacity_bytes = capacity;
  auto store = std::move(Store::open(cfg)).value();
  AlignedBuffer page = std::move(AlignedBuffer::allocate(4096)).value();
  Registration reg = std::move(store->register_memory(page.data(), page.size())).value();
  std::vector<ConstBuffer> pieces(128, ConstBuffer{page.data(), page.size()});
  uint64_t next = 0;
  auto batch = [&] {
    std::vector<std::string> keys;
    for (int i = 0; i < 128; ++i) keys.push_back(sglang_key(static_cast<int>(next++)));
    std::vector<std::string_view> views(keys.begin(), keys.end());
    if (!store->batch_put(views, pieces).all_ok()) state.SkipWithError("put failed");
  };
  batch();  // full from here on
  for (auto _ : state) batch();
  state.counters["evicted_pages"] = static_cast<double>(store->stats().evicted_pages);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 128);
  reg.reset();
  store.reset();
}
void BM_PutBatch128(benchmark::State& state) {
  put_batches(state, 0);
}
void BM_PutBatch128Evicting(benchmark::State& state) {
  put_batches(state, 128 * 8192);
}
BENCHMARK(BM_PutBatch128)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PutBatch128Evicting)->Unit(benchmark::kMicrosecond);

// Reading batches of 128 page-cache-hot pages into the 128 slots of a registered pool: the
// per-page cost of a hot read (open, read, verify, close) at a model's page size. Arguments:
// page bytes, 1 to verify payload checksums (0: headers only), pages stored (read in turn,
// 128 at a time; more pages than fit in the CPU's cache make the page cache a memory source).
void BM_GetBatch128(benchmark::State& state) {
  const auto bytes = static_cast<uint64_t>(state.range(0));
  const auto stored = static_cast<uint64_t>(state.range(2));
  BenchDir dir("kvtier-microbench-get");
  StoreConfig& cfg = dir.config;
  cfg.verify_payload = state.range(1) != 0;
  auto store = std::move(Store::open(cfg)).value();
  const uint64_t slot = (bytes + 4095) / 4096 * 4096;
  AlignedBuffer pool = std::move(AlignedBuffer::allocate(128 * slot)).value();
  std::memset(pool.data(), 0x5a, pool.size());
  Registration reg = std::move(store->register_memory(pool.data(), pool.size())).value();
  std::vector<MutableBuffer> pieces;
  std::vector<ConstBuffer> sources;
  for (uint64_t i = 0; i < 128; ++i) {
    pieces.push_back(MutableBuffer{pool.data() + i * slot, bytes});
    sources.push_back(ConstBuffer{pool.data() + i * slot, bytes});
  }
  std::vector<std::vector<std::string>> batches(std::max<uint64_t>(1, stored / 128));
  std::vector<std::vector<std::string_view>> views(batches.size());
  for (size_t b = 0; b < batches.size(); ++b) {
    for (uint64_t i = 0; i < 128; ++i) batches[b].push_back(sglang_key(b * 128 + i));
    views[b].assign(batches[b].begin(), batches[b].end());
    if (!store->batch_put(views[b], sources).all_ok()) state.SkipWithError("put failed");
  }
  size_t next = 0;
  for (auto _ : state) {
    if (!store->batch_get(views[next], pieces).all_ok()) state.SkipWithError("get failed");
    next = (next + 1) % views.size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 128 * bytes));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 128);
  reg.reset();
  store.reset();
}
BENCHMARK(BM_GetBatch128)
    ->ArgsProduct({{70272}, {1, 0}, {128, 4096}})
    ->ArgsProduct({{1310720, 4 << 20}, {1, 0}, {256}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
