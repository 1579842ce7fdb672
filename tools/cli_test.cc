// The `kvtier` CLI end to end: bench, stat and verify as a user runs them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "src/testing/test_util.h"

namespace {

struct CliRun {
  int exit_code;
  std::string out;
};

// Runs the CLI with `args` (through the shell); its stdout, and its stderr with `with_stderr`.
CliRun run(const std::string& args, bool with_stderr = false) {
  const std::string cmd =
      std::string(KVTIER_CLI) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

nlohmann::json json_of(const CliRun& r) {
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

TEST(Cli, BenchVerifiesReportsAndClearsAfterItself) {
  kvtier::testing::TempDir dir;
  CliRun r = run("bench --dir " + dir.path() + " --page-bytes 70272 --pages 40 --batch 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = json_of(r);
  for (const char* k : {"write_gbps", "read_gbps", "pages", "page_bytes", "verified", "fds_before",
                        "fds_after", "backend"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["pages"], 40);
  // Every page read back once more, untimed, and compared byte for byte.
  EXPECT_EQ(j["byte_exact_pages"], 40);
  EXPECT_EQ(j["page_bytes"], 70272);
  // `auto` picks uring where io_uring works, posix otherwise, and says which.
  EXPECT_TRUE(j["backend"] == "uring" || j["backend"] == "posix") << j["backend"];
  EXPECT_NE(j["backend_selection"].get<std::string>().find("auto"), std::string::npos);
  EXPECT_EQ(j["fds_before"], j["fds_after"]);
  EXPECT_GT(j["read_gbps"].get<double>(), 0.0);
  nlohmann::json s = json_of(run("stat " + dir.path() + " --json"));
  EXPECT_EQ(s["pages"], 0) << "pages were not cleared";
}

// --pool-pages: batches take turns through a larger host pool (whole batches of it), every
// page still checked byte for byte.
TEST(Cli, BenchCyclesThroughALargerHostPool) {
  kvtier::testing::TempDir dir;
  CliRun r = run("bench --dir " + dir.path() +
                 " --page-bytes 4096 --pages 20 --batch 4 --pool-pages 10 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = json_of(r);
  EXPECT_EQ(j["pool_pages"], 12);  // rounded up to three batches
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["byte_exact_pages"], 20);
  EXPECT_EQ(json_of(run("bench --dir " + dir.path() + " --pages 2 --batch 2 --json"))["pool_pages"],
            2);
}

TEST(Cli, BenchRunsOnTheSegmentLayout) {
  kvtier::testing::TempDir dir;
  CliRun r = run("bench --dir " + dir.path() +
                 " --layout segments --page-bytes 70272 --pages 300 --batch 64 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = json_of(r);
  EXPECT_EQ(j["layout"], "segments");
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["byte_exact_pages"], 300);
  EXPECT_EQ(j["fds_before"], j["fds_after"]);
  // Without --layout: auto, which says what it chose and why.
  nlohmann::json big = json_of(run("bench --dir " + dir.path() + " --pages 4 --json"));
  EXPECT_EQ(big["layout"], "files");
  EXPECT_EQ(big["layout_choice"], "files (auto: pages of 8388608 B, 4 MiB or more)");
  nlohmann::json small =
      json_of(run("bench --dir " + dir.path() + " --page-bytes 70272 --pages 4 --json"));
  EXPECT_EQ(small["layout"], "segments");
  EXPECT_EQ(small["layout_choice"], "segments (auto: pages of 70272 B, below 4 MiB)");
  EXPECT_EQ(run("bench --dir " + dir.path() + " --layout blocks").exit_code, 2);
}

TEST(Cli, KeptPagesShowInStatAndVerifyFindsCorruption) {
  kvtier::testing::TempDir dir;
  ASSERT_EQ(run("bench --dir " + dir.path() +
                " --model qwen2.5-72b-tp8 --layout files --pages 6 --batch 4 --keep --json")
                .exit_code,
            0);
  nlohmann::json s = json_of(run("stat " + dir.path() + " --json"));
  EXPECT_EQ(s["pages"], 6);
  EXPECT_EQ(s["temp_files"], 0);
  ASSERT_EQ(s["namespaces"].size(), 1u);
  EXPECT_EQ(s["namespaces"][0]["manifest"]["model"], "kvtier-bench:qwen2.5-72b-tp8");
  EXPECT_EQ(s["namespaces"][0]["manifest"]["pieces_per_page"], 2);

  CliRun ok = run("verify " + dir.path() + " --json");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_EQ(json_of(ok)["intact"], 6);

  // Damage one page.
  std::string victim;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (e.is_regular_file() && e.path().filename().string().size() == 32) victim = e.path();
  }
  ASSERT_FALSE(victim.empty());
  std::string bytes = kvtier::testing::read_file(victim);
  bytes[bytes.size() / 2] ^= 0x20;
  kvtier::testing::write_file(victim, bytes);
  CliRun bad = run("verify " + dir.path() + " --json");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  nlohmann::json v = json_of(bad);
  ASSERT_EQ(v["corrupt"].size(), 1u);
  EXPECT_EQ(v["corrupt"][0]["path"], victim);
  EXPECT_EQ(v["intact"], 5);
  // Text mode lists it too.
  CliRun text = run("verify " + dir.path());
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.out.find("CORRUPT " + victim), std::string::npos) << text.out;
}

TEST(Cli, VerifyChecksPagesWhoseChunksWereHashedEitherWay) {
  // Two namespaces in one directory, one written with CRC-64 chunks and one with XXH3 (a
  // host with the other kind of CPU); verify checks each its own way.
  kvtier::testing::TempDir dir;
  for (const auto& [hash, bytes] : {std::pair{"crc64", "300000"}, std::pair{"xxh3", "400000"}}) {
    CliRun b = run("bench --uri 'file://" + dir.path() + "?chunk_hash=" + hash +
                   "' --layout files --page-bytes " + bytes + " --pages 3 --keep --json");
    ASSERT_EQ(b.exit_code, 0) << b.out;
    EXPECT_EQ(json_of(b)["chunk_hash"], std::string(hash) + " (chunk_hash=" + hash + ")");
  }
  CliRun ok = run("verify " + dir.path() + " --json");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_EQ(json_of(ok)["intact"], 6);
  // One byte of each namespace's first page file, in its payload's last chunk.
  std::map<uintmax_t, std::string> victims;  // by size: one of each page size
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (e.is_regular_file() && e.path().filename().string().size() == 32) {
      victims.emplace(e.file_size(), e.path());
    }
  }
  ASSERT_EQ(victims.size(), 2u);
  for (const auto& [size, path] : victims) {
    std::string bytes = kvtier::testing::read_file(path);
    bytes[4096 + 290000] ^= 0x04;
    kvtier::testing::write_file(path, bytes);
  }
  CliRun bad = run("verify " + dir.path() + " --json");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  nlohmann::json v = json_of(bad);
  EXPECT_EQ(v["corrupt"].size(), 2u) << bad.out;
  EXPECT_EQ(v["intact"], 4);
}

// --in-flight keeps several batches submitted per thread (submit_put/submit_get); each lane
// has its own pool slots, so a batch finishing out of order cannot return another's bytes.
TEST(Cli, BenchKeepsBatchesInFlightWithTheAsyncApi) {
  kvtier::testing::TempDir dir;
  CliRun r = run("bench --dir " + dir.path() +
                 " --page-bytes 70272 --pages 45 --batch 4 --threads 2 --in-flight 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = json_of(r);
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["in_flight"], 3);
  EXPECT_EQ(j["write"]["ok_pages"], 45);
  EXPECT_EQ(j["read"]["ok_pages"], 45);
  EXPECT_EQ(j["wrong_bytes_pages"], 0);
  EXPECT_EQ(j["byte_exact_pages"], 45);
  EXPECT_GT(j["read"]["batch_latency_ms"]["max"].get<double>(), 0.0);
  // Where each phase lies on the machine's monotonic clock: the write, then the read.
  const auto at = [&](const char* phase, const char* edge) { return j[phase][edge].get<double>(); };
  EXPECT_GT(at("write", "monotonic_began_s"), 0.0);
  EXPECT_LE(at("write", "monotonic_began_s"), at("write", "monotonic_ended_s"));
  EXPECT_LE(at("write", "monotonic_ended_s"), at("read", "monotonic_began_s"));
  EXPECT_LE(at("read", "monotonic_began_s"), at("read", "monotonic_ended_s"));
  EXPECT_EQ(j["fds_before"], j["fds_after"]);
  EXPECT_EQ(run("bench --dir " + dir.path() + " --in-flight 0").exit_code, 2);
}

TEST(Cli, BenchOnMemoryAndOtherShapes) {
  kvtier::testing::TempDir dir;
  CliRun r = run("bench --dir " + dir.path() +
                 " --backend dram --model deepseek-v3 --pages 5 --batch 2 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = json_of(r);
  EXPECT_EQ(j["backend"], "dram");
  EXPECT_EQ(j["page_bytes"], 4497408);
  EXPECT_EQ(j["verified"], true);
}

TEST(Cli, TextOutputNamesTheEssentials) {
  kvtier::testing::TempDir dir;
  CliRun r = run("bench --dir " + dir.path() + " --page-bytes 4096 --pages 8 --batch 4");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"GB/s", "pages/s", "p99", "verified yes", "fds", "backend "}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
}

TEST(Cli, UsageAndOpenErrorsExitTwo) {
  kvtier::testing::TempDir dir;
  EXPECT_EQ(run("").exit_code, 2);
  EXPECT_EQ(run("bench --pages 0").exit_code, 2);
  EXPECT_EQ(run("bench --model gpt-5").exit_code, 2);
  EXPECT_EQ(run("bench --dir /x --uri /y").exit_code, 2);
  EXPECT_EQ(run("verify " + dir.file("missing")).exit_code, 2);
  EXPECT_EQ(run("stat " + dir.file("missing")).exit_code, 2);
  EXPECT_EQ(run("stat gopher://x").exit_code, 2);
  // Never without an endpoint: with credentials about, that would be the public AWS one.
  EXPECT_EQ(run("bench --uri 's3://bucket/x?endpoint=http://127.0.0.1:1'").exit_code, 2);
  EXPECT_EQ(run("--help").exit_code, 0);
  EXPECT_EQ(run("bench --help").exit_code, 0);
}

TEST(Cli, UnknownAndUnparsableLocationParametersExitTwoNamingThem) {
  kvtier::testing::TempDir dir;
  const std::string file = "'file://" + dir.path();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"stat " + file + "?bogus=1'", "bogus"},
      {"bench --pages 4 --uri " + file + "?queue_dept=128'", "queue_dept"},
      {"bench --pages 4 --uri " + file + "?queue_depth=abc'", "queue_depth"},
      {"bench --pages 4 --uri " + file + "?backend=posix&io_threads=x'", "io_threads"},
      {"bench --pages 4 --uri 'mem://cli?io_threads=4'", "io_threads"},
      {"bench --pages 4 --uri 's3://bucket/x?endpoint=http://127.0.0.1:1&max_parallel=many'",
       "max_parallel"}};
  for (const auto& [args, named] : cases) {
    CliRun r = run(args, /*with_stderr=*/true);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
    if (r.out.find("no backend is built") != std::string::npos) continue;  // built without S3
    EXPECT_NE(r.out.find(named), std::string::npos) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("INVALID_ARGUMENT"), std::string::npos) << args << "\n" << r.out;
  }
}

// A directory name holding a double quote, a backslash and a line feed stays one label value.
TEST(Cli, PrometheusEscapesTheDirectoryLabel) {
  kvtier::testing::TempDir dir;
  const std::string odd = dir.path() + "/we\"ird\\dir\nx";
  ASSERT_EQ(run("bench --dir '" + odd + "' --page-bytes 4096 --pages 2 --batch 2 --keep").exit_code,
            0);
  CliRun prom = run("stat '" + odd + "' --prometheus");
  ASSERT_EQ(prom.exit_code, 0) << prom.out;
  EXPECT_NE(prom.out.find("dir=\"" + dir.path() + "/we\\\"ird\\\\dir\\nx/"), std::string::npos)
      << prom.out;
  for (size_t i = 0, nl; i < prom.out.size(); i = nl + 1) {
    nl = prom.out.find('\n', i);
    ASSERT_NE(nl, std::string::npos);
    const std::string line = prom.out.substr(i, nl - i);
    EXPECT_TRUE(line.starts_with("# ") || line.starts_with("kvtier_")) << line;
  }
}

TEST(Cli, SizesTakeUnitsLikePython) {
  kvtier::testing::TempDir dir;
  CliRun r = run("bench --dir " + dir.path() +
                 " --page-bytes 65536 --pages 8 --batch 8 --capacity 3MiB --keep --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(json_of(r)["capacity_bytes"], 3145728);
  EXPECT_EQ(run("gc " + dir.path() + " --to 200kb --json").exit_code, 0);
  EXPECT_LE(json_of(run("stat " + dir.path() + " --json"))["bytes"].get<uint64_t>(), 200000u);
  EXPECT_EQ(run("gc " + dir.path() + " --to lots").exit_code, 2);
  EXPECT_EQ(run("bench --dir " + dir.path() + " --capacity 1XB").exit_code, 2);
}

TEST(Cli, UnreachableS3EndpointExitsTwo) {
  // Credentials in the location, so the client gets as far as connecting whatever the
  // environment holds; nothing listens on port 1 of loopback.
  const auto t0 = std::chrono::steady_clock::now();
  CliRun r =
      run("bench --pages 4 --uri "
          "'s3://bucket/x?endpoint=http://127.0.0.1:1&deadline_ms=2000&access_key=AKIDCLITEST&"
          "secret_key=clitestsecret'",
          /*with_stderr=*/true);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("cannot reach"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("clitestsecret"), std::string::npos) << r.out;
  // Refused at once, each attempt: only a hang would take this long.
  EXPECT_LT(took, kvtier::testing::kHungCeiling) << "an unreachable server must not hang";
}

TEST(Cli, CapacityBoundsTheBenchAndEvictionsAreMissesNotCorruption) {
  kvtier::testing::TempDir dir;
  // 64 pages of 69,632-byte objects into a budget of about 26 of them beside what the store
  // keeps (1.1 MiB: its 256 fan-out directories, the ledger, the shared files), one file each.
  CliRun r = run("bench --dir " + dir.path() +
                 " --layout files --page-bytes 65536 --pages 64 --batch 16 --capacity 3000000 "
                 "--keep --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = json_of(r);
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["capacity_bytes"], 3000000);
  EXPECT_GT(j["evicted_pages"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["read_misses"], j["evicted_pages"]);
  // What the tree takes, as du counts it, pages and what is beside them apart.
  nlohmann::json s = json_of(run("stat " + dir.path() + " --json"));
  const uint64_t allocated = s["allocated_bytes"].get<uint64_t>();
  EXPECT_LE(allocated, 3000000u);
  EXPECT_GE(allocated, s["bytes"].get<uint64_t>() + s["metadata_bytes"].get<uint64_t>());
  EXPECT_GT(s["metadata_bytes"].get<uint64_t>(), 0u);
  // A capacity too small for what the store keeps beside its pages is refused, saying why.
  CliRun small = run("bench --dir " + dir.path() +
                         " --layout files --page-bytes 65536 "
                         "--capacity 1000000",
                     /*with_stderr=*/true);
  EXPECT_EQ(small.exit_code, 2) << small.out;
  EXPECT_NE(small.out.find("is too small"), std::string::npos) << small.out;
}

// The same maintenance on a segment store: records are listed, verified and repaired in
// their segments; gc and clear remove whole segments.
TEST(Cli, StatLsVerifyRepairGcAndClearWorkOnSegmentStores) {
  kvtier::testing::TempDir dir;
  const std::string uri = "'file://" + dir.path() + "?layout=segments'";
  ASSERT_EQ(run("bench --dir " + dir.path() +
                " --layout segments --page-bytes 65536 --pages 20 --batch 10 --keep")
                .exit_code,
            0);
  nlohmann::json s = json_of(run("stat " + dir.path() + " --json"));
  EXPECT_EQ(s["pages"], 20);
  ASSERT_EQ(s["namespaces"].size(), 1u);
  EXPECT_EQ(s["namespaces"][0]["segments"], 1);
  EXPECT_EQ(s["namespaces"][0]["other_files"], 0);
  const uint64_t record = s["bytes"].get<uint64_t>() / 20;
  EXPECT_LT(record, 65536u + 4096u) << "compact records, not 4 KiB headers";
  nlohmann::json pages = json_of(run("ls " + dir.path() + " --json"));
  ASSERT_EQ(pages.size(), 20u);
  const std::string ns = pages[0]["namespace"];
  EXPECT_TRUE(pages[0].contains("offset"));
  EXPECT_EQ(json_of(run("verify " + dir.path() + " --json"))["intact"], 20);

  // Damage one record in the middle of its segment: verify finds exactly it; --repair
  // forgets it (a remove entry); the store's other pages stay.
  const std::string segment = pages[7]["path"];
  const uint64_t offset = pages[7]["offset"];
  {
    std::string bytes = kvtier::testing::read_file(segment);
    bytes[offset + 30000] ^= 1;
    kvtier::testing::write_file(segment, bytes);
  }
  CliRun bad = run("verify " + dir.path() + " --json");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  ASSERT_EQ(json_of(bad)["corrupt"].size(), 1u);
  EXPECT_EQ(json_of(bad)["intact"], 19);
  EXPECT_EQ(json_of(run("verify " + dir.path() + " --repair --json"))["repaired"], 1);
  EXPECT_EQ(run("verify " + dir.path()).exit_code, 0);
  EXPECT_EQ(json_of(run("stat " + dir.path() + " --json"))["pages"], 19);

  // gc to less than one record removes every record, so the segment goes whole.
  nlohmann::json gc = json_of(run("gc " + dir.path() + " --to 1000 --json"));
  EXPECT_EQ(gc["removed_pages"], 19);
  s = json_of(run("stat " + dir.path() + " --json"));
  EXPECT_EQ(s["pages"], 0);
  EXPECT_EQ(s["namespaces"][0]["segments"], 0);

  // clear after the same pages were written twice, by two writers: the older copies go too
  // (nothing is found again once the newer ones are removed).
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(run("bench --dir " + dir.path() +
                  " --layout segments --page-bytes 65536 --pages 8 --batch 4 --keep")
                  .exit_code,
              0);
  }
  s = json_of(run("stat " + dir.path() + " --json"));
  EXPECT_EQ(s["pages"], 8);
  EXPECT_EQ(s["namespaces"][0]["segments"], 2);
  EXPECT_EQ(run("clear " + dir.path() + " --namespace " + ns.substr(0, 8)).exit_code, 0);
  s = json_of(run("stat " + dir.path() + " --json"));
  EXPECT_EQ(s["pages"], 0);
  EXPECT_EQ(s["namespaces"][0]["segments"], 0);
  EXPECT_EQ(s["namespaces"][0]["segment_bytes"], 0);
}

TEST(Cli, LsGcClearAndRepairMaintainAStore) {
  kvtier::testing::TempDir dir;
  ASSERT_EQ(run("bench --dir " + dir.path() +
                " --layout files --page-bytes 65536 --pages 20 --batch 10 --keep")
                .exit_code,
            0);
  nlohmann::json pages = json_of(run("ls " + dir.path() + " --json"));
  ASSERT_EQ(pages.size(), 20u);
  const std::string ns = pages[0]["namespace"];
  EXPECT_EQ(json_of(run("ls " + dir.path() + " --json --namespace ffff")).size(), 0u);

  // Prometheus text names every namespace's pages and bytes.
  CliRun prom = run("stat " + dir.path() + " --prometheus");
  ASSERT_EQ(prom.exit_code, 0);
  EXPECT_NE(prom.out.find("# TYPE kvtier_pages gauge"), std::string::npos) << prom.out;
  EXPECT_NE(prom.out.find("kvtier_pages{namespace=\"" + ns + "\""), std::string::npos);

  // gc keeps at most --to bytes, oldest first.
  nlohmann::json gc = json_of(run("gc " + dir.path() + " --to 300000 --json"));
  EXPECT_EQ(gc["removed_pages"], 16);
  EXPECT_LE(json_of(run("stat " + dir.path() + " --json"))["bytes"].get<uint64_t>(), 300000u);

  // gc also removes temporaries no writer will publish: here two of another host's writers,
  // one older than --temp-age (abandoned), one fresh (perhaps still writing).
  {
    const std::string page = pages[0]["path"];
    const std::string tmp = page.substr(0, page.rfind('/', page.rfind('/') - 1)) + "/tmp";
    const std::string old_temp = tmp + "/" + std::string(pages[0]["page"]) + ".ffffffff.1.0.kvtmp";
    const std::string new_temp = tmp + "/" + std::string(pages[0]["page"]) + ".ffffffff.1.1.kvtmp";
    kvtier::testing::write_file(old_temp, "half a page");
    kvtier::testing::write_file(new_temp, "half a page");
    const struct timespec two_hours_ago[2] = {{::time(nullptr) - 7200, 0},
                                              {::time(nullptr) - 7200, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, old_temp.c_str(), two_hours_ago, 0), 0);
    EXPECT_EQ(json_of(run("stat " + dir.path() + " --json"))["temp_files"], 2);
    gc = json_of(run("gc " + dir.path() + " --to 300000 --temp-age 3600 --json"));
    EXPECT_EQ(gc["removed_pages"], 0);
    EXPECT_EQ(gc["removed_temporaries"], 1);
    EXPECT_NE(::access(new_temp.c_str(), F_OK), -1);
    EXPECT_EQ(::access(old_temp.c_str(), F_OK), -1);
    ASSERT_EQ(::unlink(new_temp.c_str()), 0);
  }

  // A damaged page: verify exits 1; --repair removes it; verify is clean again.
  pages = json_of(run("ls " + dir.path() + " --json"));
  ASSERT_EQ(pages.size(), 4u);
  {
    std::string bytes = kvtier::testing::read_file(pages[0]["path"]);
    bytes[5000] ^= 1;
    kvtier::testing::write_file(pages[0]["path"], bytes);
  }
  EXPECT_EQ(run("verify " + dir.path()).exit_code, 1);
  EXPECT_EQ(json_of(run("verify " + dir.path() + " --repair --json"))["repaired"], 1);
  EXPECT_EQ(run("verify " + dir.path()).exit_code, 0);

  // clear removes one namespace's pages and, as Store::clear does, rewrites the namespace's
  // clear generation (which open stores watch); an unknown namespace is a usage error.
  const std::string generation = dir.path() + "/kvtier/" + ns + "/generation";
  EXPECT_FALSE(std::filesystem::exists(generation));
  EXPECT_EQ(run("clear " + dir.path() + " --namespace 0000000000").exit_code, 2);
  EXPECT_EQ(run("clear " + dir.path() + " --namespace " + ns.substr(0, 8)).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(generation));
  EXPECT_EQ(json_of(run("stat " + dir.path() + " --json"))["pages"], 0);
}

// Two tenants' sealed pages in one directory: every command that reads pages reads as the
// tenant it is given (--key-file, --tenant), and without a key sees only headers.
TEST(Cli, CommandsReadAsTheTenantTheyAreGiven) {
  kvtier::testing::TempDir dir;
  kvtier::testing::TempDir keys_dir;
  const std::string keys = keys_dir.file("keys");
  kvtier::testing::write_file(
      keys, "3 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n");
  ASSERT_EQ(::chmod(keys.c_str(), 0600), 0);
  const std::string as_alpha = " --key-file " + keys + " --tenant alpha";
  const std::string as_beta = " --key-file " + keys + " --tenant beta";
  for (const auto& [who, pages] : {std::pair{as_alpha, "6"}, std::pair{as_beta, "4"}}) {
    ASSERT_EQ(run("bench --dir " + dir.path() + " --layout files --page-bytes 65536 --pages " +
                  pages + " --batch 2 --keep" + who)
                  .exit_code,
              0);
  }
  ASSERT_EQ(json_of(run("ls " + dir.path() + " --json")).size(), 10u);
  nlohmann::json alpha = json_of(run("ls " + dir.path() + " --json" + as_alpha));
  ASSERT_EQ(alpha.size(), 6u);
  EXPECT_EQ(alpha[0]["key_id"], 3);
  const std::string ns = alpha[0]["namespace"];

  nlohmann::json stat = json_of(run("stat " + dir.path() + " --json" + as_beta));
  EXPECT_EQ(stat["tenant"]["pages"], 4);
  EXPECT_EQ(stat["tenant"]["pages_by_key_id"]["3"], 4);
  EXPECT_EQ(stat["tenant"]["others_sealed"], 6);
  EXPECT_EQ(stat["tenant"]["clear"], 0);

  // One byte of one of alpha's payloads: its header, place and size still check out, so only
  // a verify with alpha's key finds it (and only alpha's pages are opened).
  {
    std::string bytes = kvtier::testing::read_file(alpha[0]["path"]);
    bytes[5000] ^= 1;
    kvtier::testing::write_file(alpha[0]["path"], bytes);
  }
  nlohmann::json v = json_of(run("verify " + dir.path() + " --json"));
  EXPECT_EQ(v["ok"], true);
  EXPECT_EQ(v["sealed_not_opened"], 10);
  CliRun keyed = run("verify " + dir.path() + " --json" + as_alpha);
  EXPECT_EQ(keyed.exit_code, 1) << keyed.out;
  v = json_of(keyed);
  EXPECT_EQ(v["corrupt"].size(), 1u);
  EXPECT_EQ(v["sealed_opened"], 5);
  EXPECT_EQ(v["sealed_not_opened"], 4);
  EXPECT_EQ(json_of(run("verify " + dir.path() + " --json" + as_beta))["ok"], true);

  // clear and gc touch the tenant's pages alone.
  CliRun cleared = run("clear " + dir.path() + " --namespace " + ns + as_beta);
  EXPECT_EQ(cleared.exit_code, 0) << cleared.out;
  EXPECT_EQ(json_of(run("ls " + dir.path() + " --json")).size(), 6u);
  EXPECT_EQ(json_of(run("gc " + dir.path() + " --to 0 --json" + as_beta))["removed_pages"], 0);
  EXPECT_EQ(json_of(run("gc " + dir.path() + " --to 0 --json" + as_alpha))["removed_pages"], 6);

  // Nothing the commands print, out or err, holds the key's digits.
  for (const std::string& cmd :
       {"stat " + dir.path() + as_alpha, "stat " + dir.path() + " --json" + as_alpha,
        "stat " + dir.path() + " --prometheus" + as_alpha, "ls " + dir.path() + as_alpha,
        "verify " + dir.path() + as_alpha,
        "bench --dir " + dir.path() + " --page-bytes 4096 --pages 4 --json" + as_alpha,
        "bench --dir " + dir.path() + " --page-bytes 4096 --pages 4" + as_alpha}) {
    const CliRun r = run(cmd, /*with_stderr=*/true);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.out;
    EXPECT_EQ(r.out.find("00112233445566778899"), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_EQ(r.out.find("00112233445566778899AA"), std::string::npos) << cmd;
  }

  // A key file others may read is refused, naming no key byte.
  ASSERT_EQ(::chmod(keys.c_str(), 0644), 0);
  CliRun refused = run("ls " + dir.path() + as_alpha, /*with_stderr=*/true);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(refused.out.find("00112233"), std::string::npos) << refused.out;
}

}  // namespace
