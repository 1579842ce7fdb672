#include "test_util.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvtier::testing {

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/kvtier-test-XXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  if (made == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << tmpl << "): " << std::strerror(errno);
    return;
  }
  path_ = made;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

size_t open_fds() {
  Result<size_t> n = count_open_fds();
  if (!n.ok()) {
    ADD_FAILURE() << n.status().to_string();
    return 0;
  }
  return *n;
}

namespace {
uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

void fill_pattern(void* data, size_t size, uint64_t seed) {
  auto* p = static_cast<unsigned char*>(data);
  uint64_t s = seed * 0x2545f4914f6cdd1dull + size;
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t v = splitmix(s);
    std::memcpy(p + i, &v, 8);
  }
  if (i < size) {
    const uint64_t v = splitmix(s);
    std::memcpy(p + i, &v, size - i);
  }
}

size_t find_pattern_mismatch(const void* data, size_t size, uint64_t seed) {
  std::vector<unsigned char> expect(size);
  fill_pattern(expect.data(), size, seed);
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    if (p[i] != expect[i]) return i;
  }
  return SIZE_MAX;
}

AlignedBuffer make_buffer(size_t size) {
  Result<AlignedBuffer> b = AlignedBuffer::allocate(size);
  if (!b.ok()) {
    ADD_FAILURE() << b.status().to_string();
    return AlignedBuffer();
  }
  return std::move(b).value();
}

std::vector<std::string> list_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) {
      out.push_back(std::filesystem::relative(it->path(), dir).string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

}  // namespace kvtier::testing
