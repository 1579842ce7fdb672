// A program that uses an installed kvtier, as a user's would: opens a store in the directory
// given, writes one page and reads it back, and checks every byte.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "kvtier/store/store.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  kvtier::Result<kvtier::StoreLocation> location = kvtier::parse_store_uri(argv[1]);
  if (!location.ok()) {
    std::fprintf(stderr, "%s\n", location.status().to_string().c_str());
    return 1;
  }
  kvtier::StoreConfig cfg;
  cfg.location = *location;
  cfg.ns.model = "installed-consumer";
  cfg.ns.dtype = "bfloat16";
  cfg.ns.layout = "page_first";
  cfg.ns.page_tokens = 64;
  kvtier::Result<std::unique_ptr<kvtier::Store>> store = kvtier::Store::open(cfg);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().to_string().c_str());
    return 1;
  }
  // Pages move in place from and to registered memory (a serving engine's host pool).
  std::vector<unsigned char> pool(2 << 16);
  kvtier::Result<kvtier::Registration> registration =
      (*store)->register_memory(pool.data(), pool.size());
  if (!registration.ok()) {
    std::fprintf(stderr, "register_memory: %s\n", registration.status().to_string().c_str());
    return 1;
  }
  const size_t half = pool.size() / 2;
  unsigned char* page = pool.data();
  unsigned char* back = pool.data() + half;
  for (size_t i = 0; i < half; ++i) page[i] = static_cast<unsigned char>(i * 131 + 7);
  if (kvtier::Status st = (*store)->put("page-0", page, half); !st.ok()) {
    std::fprintf(stderr, "put: %s\n", st.to_string().c_str());
    return 1;
  }
  if (kvtier::Status st = (*store)->get("page-0", back, half); !st.ok()) {
    std::fprintf(stderr, "get: %s\n", st.to_string().c_str());
    return 1;
  }
  if (std::memcmp(page, back, half) != 0) {
    std::fprintf(stderr, "the page read back differs\n");
    return 1;
  }
  std::printf("one page written and read back byte-exact\n");
  return 0;
}
