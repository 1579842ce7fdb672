#include "test_util.h"

#include <stdlib.h>

#include <cstdlib>
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

const S3TestServer& s3_test_server() {
  static const S3TestServer server = [] {
    S3TestServer s;
    auto env = [](const char* name) {
      const char* v = std::getenv(name);
      return v == nullptr ? std::string() : std::string(v);
    };
    // The credentials come from the server's env file, into this process only (and what it
    // starts): scripts/with-s3-server exports the file's name, not the keys.
    if (const std::string file = env("KVTIER_TEST_S3_ENV_FILE"); !file.empty()) {
      std::ifstream in(file);
      if (!in) ADD_FAILURE() << "cannot read KVTIER_TEST_S3_ENV_FILE " << file;
      for (std::string line; std::getline(in, line);) {
        const size_t eq = line.find('=');
        if (eq == std::string::npos) continue;
        const std::string name = line.substr(0, eq);
        if (name == "AWS_ACCESS_KEY_ID" || name == "AWS_SECRET_ACCESS_KEY") {
          ::setenv(name.c_str(), line.substr(eq + 1).c_str(), 1);
        }
      }
    }
    s.endpoint = env("KVTIER_TEST_S3_ENDPOINT");
    s.region = env("KVTIER_TEST_S3_REGION");
    s.bucket = env("KVTIER_TEST_S3_BUCKET");
    if (s.region.empty()) s.region = "us-east-1";
    if (s.endpoint.empty() || s.bucket.empty()) {
      const std::string why = env("KVTIER_TEST_S3_UNAVAILABLE");
      s.skip_reason = why.empty() ? "no S3 server: KVTIER_TEST_S3_ENDPOINT and _BUCKET are not set "
                                    "(`make test` starts one with tests/s3/server.sh)"
                                  : "no S3 server: " + why;
    } else if (env("AWS_ACCESS_KEY_ID").empty() || env("AWS_SECRET_ACCESS_KEY").empty()) {
      s.skip_reason =
          "no S3 credentials: neither KVTIER_TEST_S3_ENV_FILE nor AWS_ACCESS_KEY_ID and "
          "AWS_SECRET_ACCESS_KEY give them";
    }
    return s;
  }();
  return server;
}

std::string S3TestServer::uri(std::string_view prefix, std::string_view extra_query) const {
  std::string p(prefix);
  for (char& c : p) {
    if (c == '?' || c == '&' || c == '%' || c == '#') c = '_';
  }
  // A test about deadlines sets its own; the rest must not fail on a slow machine.
  const std::string deadline =
      extra_query.find("deadline_ms=") == std::string_view::npos
          ? "&deadline_ms=" + std::to_string(std::chrono::milliseconds(kHungCeiling).count())
          : std::string();
  return "s3://" + bucket + "/" + p + "?endpoint=" + endpoint + "&region=" + region +
         std::string(extra_query) + deadline;
}

}  // namespace kvtier::testing
