// Helpers shared by kvtier's tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/unique_fd.h"

namespace kvtier::testing {

// How long a test waits for something that must happen before it calls the code under test
// hung. Only a hang takes this long: tests wait for events (a completion, a pipe, a condition),
// and this ceiling turns a hang into a failure; it is never a judgement of speed (tests run
// under sanitizers on loaded 2-core machines; speed is measured by the benchmarks).
inline constexpr std::chrono::seconds kHungCeiling{120};

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

// True in a ThreadSanitizer build. TSan cannot start threads in a child forked from a
// multi-threaded process, so the tests that fork writers skip there (their in-process
// counterparts run under it).
constexpr bool under_thread_sanitizer() {
#if defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

// Descriptors this process holds (fails the test when /proc cannot be read).
size_t open_fds();

// Deterministic bytes: the same (seed, size) always gives the same content.
void fill_pattern(void* data, size_t size, uint64_t seed);
// Index of the first byte that differs from the pattern, or SIZE_MAX when all match.
size_t find_pattern_mismatch(const void* data, size_t size, uint64_t seed);

// An aligned, zero-filled buffer (fails the test on allocation failure).
AlignedBuffer make_buffer(size_t size);

// Every path under `dir` (files only), relative to it.
std::vector<std::string> list_files(const std::string& dir);

std::string read_file(const std::string& path);
void write_file(const std::string& path, std::string_view bytes);

// The S3 server of the tests, from the environment scripts/with-s3-server sets up
// (KVTIER_TEST_S3_ENDPOINT, _REGION, _BUCKET). Its credentials are read from the file
// KVTIER_TEST_S3_ENV_FILE names (or else taken from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY) and set in this process's environment on the first call, so that only
// the tests that use the server hold them. `skip_reason` is set when there is none.
struct S3TestServer {
  std::string endpoint;
  std::string region;
  std::string bucket;
  std::string skip_reason;
  bool available() const { return skip_reason.empty(); }
  // s3://bucket/<prefix>?endpoint=...&region=...<extra_query>, with a deadline only a hang
  // reaches (kHungCeiling) unless extra_query sets deadline_ms.
  std::string uri(std::string_view prefix, std::string_view extra_query = {}) const;
};
const S3TestServer& s3_test_server();

}  // namespace kvtier::testing

// Status assertions that print the status and accept `<< more`:
//   KVTIER_ASSERT_OK(store.put(...)) << "while writing page " << i;
#define KVTIER_ASSERT_OK(expr)                                         \
  switch (0)                                                           \
  case 0:                                                              \
  default:                                                             \
    if (const ::kvtier::Status kvtier_st_ = (expr); kvtier_st_.ok()) { \
    } else                                                             \
      GTEST_FAIL() << #expr << ": " << kvtier_st_.to_string() << " "

#define KVTIER_EXPECT_OK(expr)                                         \
  switch (0)                                                           \
  case 0:                                                              \
  default:                                                             \
    if (const ::kvtier::Status kvtier_st_ = (expr); kvtier_st_.ok()) { \
    } else                                                             \
      ADD_FAILURE() << #expr << ": " << kvtier_st_.to_string() << " "

// `auto x = KVTIER_ASSERT_OK_AND_TAKE(result_expr);` is not possible with gtest's ASSERT
// (it returns void), so tests use this two-step form:
#define KVTIER_ASSERT_OK_AND_ASSIGN(lhs, expr)                     \
  auto KVTIER_CONCAT_(kvtier_r_, __LINE__) = (expr);               \
  ASSERT_TRUE(KVTIER_CONCAT_(kvtier_r_, __LINE__).ok())            \
      << KVTIER_CONCAT_(kvtier_r_, __LINE__).status().to_string(); \
  lhs = std::move(KVTIER_CONCAT_(kvtier_r_, __LINE__)).value()
