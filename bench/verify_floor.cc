// What verifying a page-cache read costs without kvtier around it: each thread reads its own
// files (page cache hot) in chunks (256 KiB unless --chunk-kib) with pread into its part of a
// pool, and in every other round hashes the chunk right after each read as kvtier checks a
// payload chunk: with the hash its stores write on this CPU (--hash auto: fastest_chunk_hash(),
// CRC-64 or XXH3-64), or the one named.
// Prints, as JSON, the median GB/s of the rounds with and without the hash and the median
// of the rounds' costs (1 - hashed/plain, each hashed round against the plain round after it).
//   kvtier_verify_floor --dir DIR [--threads 2] [--files 128] [--pool-mib 512] [--reps 5]
//                       [--chunk-kib 256] [--hash auto|crc64|xxh3]
// Files are 8 MiB each (a Llama-3-8B page) and are removed at the end.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/checksum.h"
#include "kvtier/core/unique_fd.h"

namespace {

constexpr uint64_t kFileBytes = 8 << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  uint64_t threads = 2, files = 128, pool_mib = 512, reps = 5, chunk_kib = 256;
  std::string hash_name = "auto";
  CLI::App app{
      "What hashing each 256 KiB chunk right after its pread costs, without kvtier: "
      "threads read their own hot 8 MiB files into a pool, hashing in alternate rounds. "
      "Prints JSON."};
  app.add_option("--dir", dir, "Directory for the files (removed at the end)")->required();
  app.add_option("--threads", threads, "Reading threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--files", files, "8 MiB files per thread")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--pool-mib", pool_mib, "Pool per thread, MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--reps", reps, "Rounds with and without the hash")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--chunk-kib", chunk_kib, "Bytes per read and hash, KiB (a divisor of 8 MiB)")
      ->capture_default_str()
      ->check(CLI::IsMember({4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}));
  app.add_option("--hash", hash_name,
                 "Chunk hash: auto (what kvtier's stores write on this CPU), crc64 or xxh3")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "crc64", "xxh3"}));
  CLI11_PARSE(app, argc, argv);
  const kvtier::ChunkHash how = *kvtier::chunk_hash_named(hash_name);  // checked above
  const uint64_t pool_bytes = pool_mib << 20;
  const uint64_t kChunkBytes = chunk_kib << 10;
  if (pool_bytes < 2 * kChunkBytes) {
    fmt::print(stderr, "--pool-mib must hold two chunks\n");
    return 1;
  }

  std::vector<kvtier::UniqueFd> fds;
  std::vector<std::string> paths;
  auto pool = kvtier::AlignedBuffer::allocate(threads * pool_bytes);
  if (!pool.ok()) {
    fmt::print(stderr, "cannot allocate {} bytes\n", threads * pool_bytes);
    return 1;
  }
  std::fill_n(pool->data(), pool->size(), std::byte{0x5a});
  // The files' bytes, from a buffer of a file's size (a pool may be smaller than a file).
  auto content = kvtier::AlignedBuffer::allocate(kFileBytes);
  if (!content.ok()) {
    fmt::print(stderr, "cannot allocate {} bytes\n", kFileBytes);
    return 1;
  }
  std::fill_n(content->data(), content->size(), std::byte{0x5a});
  for (uint64_t f = 0; f < threads * files; ++f) {
    paths.push_back(fmt::format("{}/verify-floor.{}", dir, f));
    kvtier::UniqueFd fd(::open(paths.back().c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid() ||
        ::pwrite(fd.get(), content->data(), kFileBytes, 0) != static_cast<ssize_t>(kFileBytes)) {
      fmt::print(stderr, "cannot write {}: {}\n", paths.back(), std::strerror(errno));
      for (const std::string& p : paths) ::unlink(p.c_str());
      return 1;
    }
    fds.push_back(std::move(fd));
  }

  // Round r hashes when r is odd; round 0 warms the page cache and the pool up.
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> sink{0};
  std::vector<double> seconds;
  auto started = std::chrono::steady_clock::now();
  std::barrier sync(static_cast<std::ptrdiff_t>(threads), [&]() noexcept {
    const auto now = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(now - started).count());
    started = std::chrono::steady_clock::now();
  });
  const uint64_t rounds = 1 + 2 * reps;
  std::vector<std::thread> workers;
  for (uint64_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::byte* mine = pool->data() + t * pool_bytes;
      uint64_t sum = 0;
      for (uint64_t r = 0; r < rounds; ++r) {
        const bool hash = r % 2 == 1;
        uint64_t at = 0;
        for (uint64_t f = 0; f < files; ++f) {
          const int fd = fds[t * files + f].get();
          for (uint64_t off = 0; off < kFileBytes; off += kChunkBytes) {
            std::byte* d = mine + at;
            at = at + 2 * kChunkBytes > pool_bytes ? 0 : at + kChunkBytes;
            if (::pread(fd, d, kChunkBytes, static_cast<off_t>(off)) !=
                static_cast<ssize_t>(kChunkBytes)) {
              failed = true;
            }
            if (hash) {
              kvtier::PartsHash h(how);
              h.add(d, kChunkBytes);
              sum += h.digest();
            }
          }
        }
        sync.arrive_and_wait();
      }
      sink += sum;
    });
  }
  for (std::thread& w : workers) w.join();
  for (const std::string& p : paths) ::unlink(p.c_str());
  if (failed) {
    fmt::print(stderr, "a read came back short\n");
    return 1;
  }

  const double bytes = static_cast<double>(threads * files * kFileBytes);
  std::vector<double> plain, hashed, cost;
  for (uint64_t r = 1; r + 1 < seconds.size(); r += 2) {
    plain.push_back(bytes / seconds[r + 1] / 1e9);  // rounds 2, 4, ...: plain
    hashed.push_back(bytes / seconds[r] / 1e9);     // rounds 1, 3, ...: hashed
    cost.push_back(1 - hashed.back() / plain.back());
  }
  fmt::print(
      "{{\"threads\": {}, \"files\": {}, \"pool_mib\": {}, \"chunk_kib\": {}, \"reps\": {}, "
      "\"hash\": \"{}\", \"read_gbps\": {:.3f}, \"read_hashed_gbps\": {:.3f}, "
      "\"hash_cost\": {:.4f}, \"sink\": {}}}\n",
      threads, files, pool_mib, chunk_kib, plain.size(), kvtier::chunk_hash_name(how),
      median(plain), median(hashed), median(cost), sink.load() & 1);
  return 0;
}
