// The one-core memory ceiling of a read benchmark: copies `pages` pages of `page_bytes` from a
// source pool into a destination pool, `batch` pages each (the footprint of kvtier bench's
// read phase), on one thread. Prints the median GB/s of --reps runs as JSON.
//   kvtier_memcpy_ceiling --page-bytes 8388608 --pages 256 --batch 128 [--reps 5]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/aligned_buffer.h"

int main(int argc, char** argv) {
  uint64_t page = 4 << 20, pages = 256, batch = 128, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--page-bytes")
      page = v;
    else if (flag == "--pages")
      pages = v;
    else if (flag == "--batch")
      batch = v;
    else if (flag == "--reps")
      reps = v;
    else {
      fmt::print(stderr, "usage: {} --page-bytes N --pages N --batch N [--reps N]\n", argv[0]);
      return 2;
    }
  }
  if (page == 0 || pages == 0 || batch == 0 || reps == 0) return 2;
  auto src = kvtier::AlignedBuffer::allocate(pages * page);
  auto dst = kvtier::AlignedBuffer::allocate(batch * page);
  if (!src.ok() || !dst.ok()) {
    fmt::print(stderr, "cannot allocate {} bytes\n", (pages + batch) * page);
    return 1;
  }
  std::memset(src->data(), 0x33, src->size());  // both pools touched before timing, as in
  std::memset(dst->data(), 0x44, dst->size());  // kvtier bench's warmed host pool
  std::vector<double> gbps;
  for (uint64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t p = 0; p < pages; ++p) {
      const uint64_t slot = p % batch;
      std::memcpy(dst->data() + slot * page, src->data() + p * page, page);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gbps.push_back(static_cast<double>(pages * page) / s / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  fmt::print("{{\"memcpy_gbps\": {:.3f}, \"min\": {:.3f}, \"max\": {:.3f}, \"reps\": {}}}\n",
             gbps[gbps.size() / 2], gbps.front(), gbps.back(), reps);
  return 0;
}
