// Per-page overheads of the store, with Google Benchmark (Release builds):
//   kvtier_microbench [--benchmark_filter=...]
// Key routing, header encode and verify, checksum throughput by size, and batch_exists of 128
// keys on a real directory (what SGLang calls before every prefetch).
#include <benchmark/benchmark.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../src/store/page_format.h"
#include "../src/store/routing.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/checksum.h"
#include "kvtier/store/store.h"

namespace kvtier {
namespace {

// A SGLang-style key: 64 hex digits.
std::string sglang_key(uint64_t i) {
  return hash128(std::to_string(i)).hex() + hash128(std::to_string(i + 1)).hex();
}

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

void BM_Checksum(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  AlignedBuffer buf = std::move(AlignedBuffer::allocate(n)).value();
  std::memset(buf.data(), 0x5a, n);
  for (auto _ : state) benchmark::DoNotOptimize(checksum64(buf.data(), n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}
BENCHMARK(BM_Checksum)->Arg(70272)->Arg(1310720)->Arg(4 << 20)->Arg(256 << 20);

// batch_exists of 128 present keys (stat per key until the index arrives).
void BM_BatchExists128(benchmark::State& state) {
  const std::string dir = std::filesystem::temp_directory_path() / "kvtier-microbench";
  std::filesystem::remove_all(dir);
  StoreConfig cfg;
  cfg.location = *parse_store_uri(dir);
  cfg.ns.model = "microbench";
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
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_BatchExists128)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvtier

BENCHMARK_MAIN();
