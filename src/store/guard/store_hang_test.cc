// Locations that hang (guard.h): a FUSE filesystem whose operations block on command
// (src/testing/hangfs.cc) stands for a mount whose server is gone. Every call on it returns by
// its deadline, nothing touches the caller's memory after the return, nothing written during
// the hang is published, the base fails fast while it hangs, and serves again once it answers.
// Skips, with the reason, where FUSE cannot be mounted (no /dev/fuse, not root, no helper).
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "guard/guard.h"
#include "kvtier/core/unique_fd.h"
#include "kvtier/store/inspect.h"
#include "src/store/store_test_util.h"

extern char** environ;

namespace kvtier {
namespace {

using namespace kvtier::testing;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kDeadlineMs = 400;
// What a call may take beyond its deadline in these tests: scheduling on a loaded 2-core
// machine under sanitizers (the slack measured on an idle one is in docs/benchmarks.md).
constexpr milliseconds kSlack{1500};

// Times a call on the hung mount: it must return by the deadline plus the slack. Each time is
// printed ("hung call: clear 402 ms"), so a run shows the longest of each call.
class HungCall {
 public:
  explicit HungCall(std::string name) : name_(std::move(name)), t0_(Clock::now()) {}
  ~HungCall() {
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0_);
    std::printf("hung call: %s %lld ms\n", name_.c_str(), static_cast<long long>(took.count()));
    std::fflush(stdout);  // the trail of calls survives a test that is killed later
    EXPECT_LT(took, milliseconds(kDeadlineMs) + kSlack) << name_;
  }
  HungCall(const HungCall&) = delete;
  HungCall& operator=(const HungCall&) = delete;

 private:
  std::string name_;
  Clock::time_point t0_;
};

// Deadline misses so far: a call that fails fast (its base known not to answer) waits for no
// deadline, so it adds none. Counted, not timed: on a loaded machine a call that waited for
// nothing may still take longer than a deadline.
uint64_t misses(const Store& store) {
  return store.stats().deadline_misses;
}

// The kvtier_hangfs helper, mounted on a fresh directory for one test.
class HangFs {
 public:
  HangFs() {
#ifndef KVTIER_HANGFS
    skip_ = "kvtier_hangfs is not built (no libfuse3 at configure time)";
    return;
#else
    if (::geteuid() != 0) {
      skip_ = "mounting FUSE needs root";
      return;
    }
    if (::access("/dev/fuse", R_OK | W_OK) != 0) {
      skip_ = std::string("/dev/fuse is not usable here: ") + std::strerror(errno);
      return;
    }
    std::filesystem::create_directories(backing());
    std::filesystem::create_directories(mount());
    int in_fds[2], out_fds[2];
    if (::pipe2(in_fds, O_CLOEXEC) != 0) {
      skip_ = "pipe failed";
      return;
    }
    UniqueFd in[2] = {UniqueFd(in_fds[0]), UniqueFd(in_fds[1])};
    if (::pipe2(out_fds, O_CLOEXEC) != 0) {
      skip_ = "pipe failed";
      return;
    }
    UniqueFd out[2] = {UniqueFd(out_fds[0]), UniqueFd(out_fds[1])};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0].get(), 0);
    posix_spawn_file_actions_adddup2(&fa, out[1].get(), 1);
    const std::string helper = KVTIER_HANGFS;
    const std::string b = backing(), m = mount();
    char* argv[] = {const_cast<char*>(helper.c_str()), const_cast<char*>(b.c_str()),
                    const_cast<char*>(m.c_str()), nullptr};
    const int rc = ::posix_spawn(&pid_, helper.c_str(), &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    // The child's ends close here (in[0], out[1] go out of scope).
    to_ = std::move(in[1]);
    from_ = std::move(out[0]);
    if (rc != 0) {
      pid_ = -1;
      skip_ = std::string("cannot start kvtier_hangfs: ") + std::strerror(rc);
      return;
    }
    if (!wait_line("mounted")) {
      skip_ = "kvtier_hangfs could not mount (its stderr says why): FUSE is not available here";
    }
#endif
  }

  ~HangFs() {
    to_.reset();  // end of stdin: the helper releases, unmounts and exits
    if (pid_ <= 0) return;
    // Its exit is waited for as an event (a pidfd), at most kHungCeiling: a helper stuck in
    // its own teardown (libfuse's readers on a device it closed) is killed, said so on stderr,
    // and its mount detached, rather than holding the test until ctest's timeout.
    UniqueFd exited(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)));
    pollfd p{exited.get(), POLLIN, 0};
    if (exited.valid() &&
        ::poll(&p, 1, static_cast<int>(milliseconds(kHungCeiling).count())) == 0) {
      std::fprintf(stderr,
                   "kvtier_hangfs (pid %d) had not exited %lld s after the end of its input: "
                   "killed, %s detached\n",
                   static_cast<int>(pid_), static_cast<long long>(kHungCeiling.count()),
                   mount().c_str());
      ::kill(pid_, SIGKILL);
      ::umount2(mount().c_str(), MNT_DETACH);
    }
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }

  const std::string& skip_reason() const {
    return skip_;
  }
  std::string backing() const {
    return dir_.file("backing");
  }
  std::string mount() const {
    return dir_.file("mnt");
  }

  void hang() {
    command("hang", "hung");
  }
  void release() {
    command("release", "released");
  }
  // Operations that have blocked so far (reads what the helper said).
  unsigned long blocked() {
    drain();
    return blocked_;
  }

 private:
  void command(const std::string& cmd, const std::string& ack) {
    const std::string line = cmd + "\n";
    ASSERT_EQ(::write(to_.get(), line.data(), line.size()), static_cast<ssize_t>(line.size()));
    ASSERT_TRUE(wait_line(ack)) << "kvtier_hangfs did not answer '" << cmd << "'";
  }

  // Reads lines until `want` (true) or the helper ends (false), within the hang ceiling.
  bool wait_line(const std::string& want) {
    const auto until = Clock::now() + kHungCeiling;
    for (;;) {
      if (take_line(want)) return true;
      const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{from_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[256];
      const ssize_t n = ::read(from_.get(), buf, sizeof(buf));
      if (n <= 0) return false;
      pending_.append(buf, static_cast<size_t>(n));
    }
  }
  // Consumes complete lines; true when one equals `want`.
  bool take_line(const std::string& want) {
    for (size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
      const std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (line.rfind("blocked ", 0) == 0) blocked_ = std::stoul(line.substr(8));
      if (!want.empty() && line == want) return true;
    }
    return false;
  }
  void drain() {
    pollfd p{from_.get(), POLLIN, 0};
    while (::poll(&p, 1, 0) > 0) {
      char buf[256];
      const ssize_t n = ::read(from_.get(), buf, sizeof(buf));
      if (n <= 0) break;
      pending_.append(buf, static_cast<size_t>(n));
    }
    take_line("");
  }

  TempDir dir_;
  std::string skip_;
  pid_t pid_ = -1;
  UniqueFd to_;
  UniqueFd from_;
  std::string pending_;
  unsigned long blocked_ = 0;
};

size_t thread_count() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

#ifdef KVTIER_CLI
// The CLI run with `args`, its stdout and stderr into one pipe: its exit status, what it
// wrote, and how long until it exited.
struct CliRun {
  int status = -1;
  std::string output;
  milliseconds took{0};
};
CliRun run_cli(const std::vector<std::string>& args) {
  CliRun run;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return run;
  UniqueFd rd(fds[0]), wr(fds[1]);
  std::vector<std::string> all{KVTIER_CLI};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 2);
  const auto t0 = Clock::now();
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  wr.reset();
  if (rc != 0) return run;
  char buf[4096];
  for (ssize_t n; (n = ::read(rd.get(), buf, sizeof buf)) > 0;) {
    run.output.append(buf, static_cast<size_t>(n));
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  run.took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
  run.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return run;
}

// Waits (within the hang ceiling) until process `pid`, not a child of this one, has ended.
bool wait_process_end(pid_t pid) {
  UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd.valid()) return errno == ESRCH;  // gone already
  pollfd p{fd.get(), POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(milliseconds(kHungCeiling).count())) == 1;
}
#endif

// The lines a store reports about its bases' health, and a way to wait for the next one.
struct HealthLog {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;

  std::function<void(std::string_view)> sink() {
    return [this](std::string_view line) {
      {
        std::lock_guard<std::mutex> lock(mu);
        lines.emplace_back(line);
      }
      cv.notify_all();
    };
  }
  // Waits (within the hang ceiling) until `n` lines have been reported.
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, kHungCeiling, [&] { return lines.size() >= n; });
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return lines.size();
  }
};

class StoreHang : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!fs_.skip_reason().empty()) GTEST_SKIP() << fs_.skip_reason();
  }

  // A store on the mount (and on `local` too when given), deadline kDeadlineMs (0: none).
  std::unique_ptr<Store> open(const std::string& extra_base = {},
                              uint64_t deadline_ms = kDeadlineMs) {
    return open_store(config(extra_base, deadline_ms));
  }
  StoreConfig config(const std::string& extra_base = {}, uint64_t deadline_ms = kDeadlineMs) {
    StoreConfig cfg;
    std::string uri = "file://" + fs_.mount() + "/store";
    if (!extra_base.empty()) uri += "," + extra_base;
    uri += "?layout=" + GetParam() + "&deadline_ms=" + std::to_string(deadline_ms) +
           "&probe_interval_ms=10";
    Result<StoreLocation> loc = parse_store_uri(uri);
    EXPECT_TRUE(loc.ok()) << loc.status().to_string();
    cfg.location = *loc;
    cfg.ns = test_namespace();
    cfg.ns.piece_bytes = kPage;
    cfg.ns.pieces_per_page = 1;
    cfg.on_health_change = health_.sink();
    return cfg;
  }

  // A store on the mount with kPages pages written through a registered pool (slots
  // 0..kPages-1 hold them, kPages.. are for reading back).
  struct Written {
    std::unique_ptr<Store> store;
    std::unique_ptr<PagePool> pool;
    std::vector<std::string> keys;
    PagePool::Batch batch;
  };
  // The pages are written by a store without a deadline (a busy machine may take longer than
  // kDeadlineMs to write them: that is not what these tests are about), then found by the
  // store returned.
  Written written(const std::string& prefix) {
    Written w;
    w.keys = keys_for(prefix, kPages);
    {
      auto writer = open({}, /*deadline_ms=*/0);
      EXPECT_NE(writer, nullptr);
      if (!writer) return w;
      PagePool pool(*writer, kPages, kPage);
      const PagePool::Batch batch = pool.fill_batch(kPages, kPage);
      EXPECT_TRUE(writer->batch_put(views(w.keys), batch.in).all_ok());
    }
    w.store = open();
    EXPECT_NE(w.store, nullptr);
    if (!w.store) return w;
    w.pool = std::make_unique<PagePool>(*w.store, 2 * kPages, kPage);
    w.batch = w.pool->fill_batch(kPages, kPage);
    EXPECT_EQ(w.store->batch_exists(views(w.keys)), kPages);
    return w;
  }

  // Waits until the store serves again and no guard thread is left in the kernel.
  void wait_recovered(Store& store) {
    ASSERT_TRUE(store.wait_health(/*answering=*/true, kHungCeiling)) << store.stats().health;
  }

  static constexpr size_t kPage = 64 << 10;
  static constexpr size_t kPages = 16;
  // The guard threads and descriptors a test's store starts from, taken after a store was
  // opened and closed first (what the process starts once and keeps, a sanitizer's background
  // thread, is then in it); back_to_baseline(): once the mount answers, the threads left alone
  // end and every descriptor they held is released.
  void take_baseline() {
    open().reset();
    ASSERT_TRUE(guard::wait_threads_at_most(0, kHungCeiling));  // that store's threads ended
    threads_before_ = guard::threads_alive();
    fds_before_ = open_fds();
  }
  void back_to_baseline() const {
    EXPECT_TRUE(guard::wait_threads_at_most(threads_before_, kHungCeiling))
        << guard::threads_alive() << " guard threads, " << threads_before_ << " before";
    EXPECT_EQ(open_fds(), fds_before_);
  }

  HangFs fs_;
  size_t threads_before_ = 0;
  size_t fds_before_ = 0;
  HealthLog health_;
};

TEST_P(StoreHang, GetReturnsByItsDeadlineAndNothingWritesTheBuffersAfter) {
  Written w = written("hang-get");
  ASSERT_NE(w.store, nullptr);
  auto& store = w.store;
  PagePool& pool = *w.pool;
  const auto& keys = w.keys;
  const auto& batch = w.batch;
  EXPECT_NE(store->stats().isolation.find("fuse"), std::string::npos) << store->stats().isolation;

  fs_.hang();
  for (size_t i = 0; i < kPages; ++i) pool.fill(kPages + i, kPage, 1000 + i);  // canaries
  const auto t0 = Clock::now();
  BatchResult r = store->batch_get(views(keys), batch.out);
  const auto took = Clock::now() - t0;
  ASSERT_TRUE(r.status.ok());
  for (const Status& st : r.pages)
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  EXPECT_LT(took, milliseconds(kDeadlineMs) + kSlack);
  EXPECT_GE(fs_.blocked(), 1u) << "no call reached the mount";
  ASSERT_TRUE(health_.wait_for(1));
  EXPECT_NE(health_.lines[0].find("not answering"), std::string::npos) << health_.lines[0];

  // While it hangs the base fails fast: no second wait for the deadline.
  const uint64_t missed = misses(*store);
  r = store->batch_get(views(keys), batch.out);
  EXPECT_EQ(misses(*store), missed);
  for (const Status& st : r.pages) EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  StoreStats s = store->stats();
  EXPECT_EQ(s.locations_unhealthy, 1u);
  EXPECT_GE(s.deadline_misses, kPages);
  EXPECT_EQ(s.unhealthy_refusals, kPages);
  EXPECT_GE(s.threads_stuck, 1u);
  EXPECT_NE(s.health.find("not answering"), std::string::npos) << s.health;

  fs_.release();
  wait_recovered(*store);
  ASSERT_TRUE(health_.wait_for(2));
  EXPECT_NE(health_.lines[1].find("answers again"), std::string::npos) << health_.lines[1];
  // The late reads finished after the release: none of them reached the caller's memory.
  for (size_t i = 0; i < kPages; ++i) {
    EXPECT_TRUE(pool.holds(kPages + i, kPage, 1000 + i)) << "page " << i << " written late";
  }
  r = store->batch_get(views(keys), batch.out);
  ASSERT_TRUE(r.all_ok());
  for (size_t i = 0; i < kPages; ++i) EXPECT_TRUE(pool.holds(kPages + i, kPage, i)) << i;
  EXPECT_EQ(health_.count(), 2u) << "one line per change of state";
}

TEST_P(StoreHang, APutThatMissesItsDeadlineIsNeverPublished) {
  auto store = open();
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 2 * kPages, kPage);
  const auto keys = keys_for("hang-put", kPages);
  const auto batch = pool.fill_batch(kPages, kPage);

  fs_.hang();
  const auto t0 = Clock::now();
  BatchResult r = store->batch_put(views(keys), batch.in);
  EXPECT_LT(Clock::now() - t0, milliseconds(kDeadlineMs) + kSlack);
  for (const Status& st : r.pages)
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  // The caller reuses its memory at once.
  for (size_t i = 0; i < kPages; ++i) pool.fill(i, kPage, 5000 + i);
  fs_.release();
  wait_recovered(*store);

  // Nothing of the late write is found, by this store or a fresh one.
  EXPECT_EQ(store->batch_exists(views(keys)), 0u);
  r = store->batch_get(views(keys), batch.out);
  for (const Status& st : r.pages) EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
  store.reset();
  auto again = open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->batch_exists(views(keys)), 0u);
  if (GetParam() == "files") {
    // The abandoned temporaries are gone.
    for (const std::string& f : list_files(fs_.backing())) {
      EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
    }
  }
}

TEST_P(StoreHang, SubmittedAndSinglePageCallsKeepTheDeadlineToo) {
  Written w = written("hang-async");
  ASSERT_NE(w.store, nullptr);
  auto& store = w.store;
  const auto& keys = w.keys;
  const auto& batch = w.batch;

  fs_.hang();
  const auto t0 = Clock::now();
  BatchTicket ticket = store->submit_get(views(keys), batch.out);
  ASSERT_TRUE(ticket.wait(kHungCeiling).ok());
  EXPECT_LT(Clock::now() - t0, milliseconds(kDeadlineMs) + kSlack);
  BatchResult r = ticket.take();
  for (const Status& st : r.pages)
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  // Single pages, now that the base is known not to answer: at once.
  const uint64_t missed = misses(*store);
  EXPECT_EQ(store->get(keys[0], batch.out[0].data, kPage).code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->put("one-more", batch.in[0].data, kPage).code(), StatusCode::kUnavailable);
  Result<bool> there = store->exists(keys[0]);
  ASSERT_FALSE(there.ok());
  EXPECT_EQ(there.status().code(), StatusCode::kUnavailable) << there.status().to_string();
  BatchTicket put = store->submit_put(views(keys), batch.in);
  ASSERT_TRUE(put.wait(kHungCeiling).ok());
  for (const Status& st : put.take().pages) EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(misses(*store), missed);
  fs_.release();
  wait_recovered(*store);
  EXPECT_TRUE(store->get(keys[0], batch.out[0].data, kPage).ok());
  Result<bool> back = store->exists(keys[0]);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back);
}

TEST_P(StoreHang, ExistsReturnsByItsDeadline) {
  const auto keys = keys_for("hang-exists", kPages);
  {
    auto writer = open();
    ASSERT_NE(writer, nullptr);
    PagePool pool(*writer, 2 * kPages, kPage);
    const auto batch = pool.fill_batch(kPages, kPage);
    ASSERT_TRUE(writer->batch_put(views(keys), batch.in).all_ok());
  }
  auto store = open();  // its index may not know the pages: it must ask the mount
  ASSERT_NE(store, nullptr);
  auto single = open();  // asked one key at a time
  ASSERT_NE(single, nullptr);
  fs_.hang();
  // A key no store holds: only the mount could tell, and it does not answer.
  auto t0 = Clock::now();
  Result<bool> one = single->exists("never-written");
  EXPECT_LT(Clock::now() - t0, milliseconds(kDeadlineMs) + kSlack);
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().code(), StatusCode::kDeadlineExceeded) << one.status().to_string();
  t0 = Clock::now();
  const size_t found = store->batch_exists(views(keys));
  EXPECT_LT(Clock::now() - t0, milliseconds(kDeadlineMs) + kSlack);
  EXPECT_LE(found, kPages);
  // The base is probed; the probe hangs too, and the base stops serving.
  ASSERT_TRUE(store->wait_health(/*answering=*/false, kHungCeiling));
  EXPECT_EQ(store->stats().locations_unhealthy, 1u);
  const uint64_t missed = misses(*store);
  EXPECT_EQ(store->batch_exists(views(keys)), 0u);
  one = store->exists(keys[0]);
  EXPECT_EQ(misses(*store), missed);
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().code(), StatusCode::kUnavailable) << one.status().to_string();
  fs_.release();
  wait_recovered(*store);
  EXPECT_EQ(store->batch_exists(views(keys)), kPages);
  one = store->exists(keys[0]);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_TRUE(*one);
  wait_recovered(*single);
  one = single->exists("never-written");
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_FALSE(*one);
}

TEST_P(StoreHang, AnotherBaseKeepsServingWhileOneHangs) {
  TempDir local;
  auto store = open(local.path());
  ASSERT_NE(store, nullptr);
  constexpr size_t n = 48;
  PagePool pool(*store, 2 * n, kPage);
  const auto keys = keys_for("two-bases", n);
  const auto batch = pool.fill_batch(n, kPage);
  ASSERT_TRUE(store->batch_put(views(keys), batch.in).all_ok());

  fs_.hang();
  BatchResult r = store->batch_get(views(keys), batch.out);
  size_t ok = 0, late = 0;
  for (size_t i = 0; i < n; ++i) {
    if (r.pages[i].ok()) {
      ++ok;
      EXPECT_TRUE(pool.holds(n + i, kPage, i)) << i;
    } else {
      EXPECT_EQ(r.pages[i].code(), StatusCode::kDeadlineExceeded) << r.pages[i].to_string();
      ++late;
    }
  }
  EXPECT_GT(ok, 0u);
  EXPECT_GT(late, 0u);
  EXPECT_EQ(ok + late, n);
  // Again while it hangs: the same pages read, the others fail at once.
  const uint64_t missed = misses(*store);
  r = store->batch_get(views(keys), batch.out);
  EXPECT_EQ(misses(*store), missed);
  EXPECT_EQ(r.ok_count(), ok);
  // Writes too: pages of the base that answers are stored, within the deadline.
  const auto more = keys_for("two-bases-more", n);
  const auto t2 = Clock::now();
  r = store->batch_put(views(more), batch.in);
  EXPECT_LT(Clock::now() - t2, milliseconds(kDeadlineMs) + kSlack);
  EXPECT_GT(r.ok_count(), 0u);
  std::vector<bool> stored;
  for (const Status& st : r.pages) stored.push_back(st.ok());
  fs_.release();
  wait_recovered(*store);
  EXPECT_TRUE(store->batch_get(views(keys), batch.out).all_ok());
  r = store->batch_get(views(more), batch.out);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(r.pages[i].ok(), stored[i]) << i << ": " << r.pages[i].to_string();
    if (stored[i]) {
      EXPECT_TRUE(pool.holds(n + i, kPage, i)) << i;
    }
  }
}

// A put whose pages on the hung base block in the kernel (creating a segment, opening a file)
// holds nothing the other base's pages need: they are stored and read back meanwhile, and
// only the hung base misses its deadline and is marked as not answering.
TEST_P(StoreHang, APutStuckOnOneBaseHoldsUpNoOtherBase) {
  TempDir local;
  auto store = open(local.path());
  ASSERT_NE(store, nullptr);
  constexpr size_t n = 48;
  PagePool pool(*store, 2 * n, kPage);
  const auto keys = keys_for("stuck-put", n);
  const auto batch = pool.fill_batch(n, kPage);

  fs_.hang();
  BatchResult r = store->batch_put(views(keys), batch.in);
  std::vector<bool> stored;
  for (size_t i = 0; i < n; ++i) {
    stored.push_back(r.pages[i].ok());
    if (!r.pages[i].ok()) {
      EXPECT_EQ(r.pages[i].code(), StatusCode::kDeadlineExceeded) << r.pages[i].to_string();
    }
  }
  const size_t on_local = r.ok_count();
  EXPECT_GT(on_local, 0u);
  EXPECT_LT(on_local, n);
  EXPECT_EQ(store->stats().locations_unhealthy, 1u) << store->stats().health;
  // While it hangs: the local base's pages read back, and more of them are stored and read,
  // no call waiting for a deadline (the hung base's pages refused at once).
  const uint64_t missed = misses(*store);
  r = store->batch_get(views(keys), batch.out);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(r.pages[i].ok(), stored[i]) << i << ": " << r.pages[i].to_string();
    if (stored[i]) {
      EXPECT_TRUE(pool.holds(n + i, kPage, i)) << i;
    }
  }
  const auto more = keys_for("stuck-put-more", n);
  r = store->batch_put(views(more), batch.in);
  EXPECT_GT(r.ok_count(), 0u);
  EXPECT_EQ(store->batch_get(views(more), batch.out).ok_count(), r.ok_count());
  EXPECT_EQ(misses(*store), missed);
  EXPECT_EQ(store->stats().locations_unhealthy, 1u) << store->stats().health;
  fs_.release();
  wait_recovered(*store);
  EXPECT_TRUE(store->batch_put(views(keys), batch.in).all_ok());
  EXPECT_TRUE(store->batch_get(views(keys), batch.out).all_ok());
}

TEST_P(StoreHang, CloseReturnsWhileIoIsStuckAndThreadsStayBounded) {
  ASSERT_NO_FATAL_FAILURE(take_baseline());
  {
    Written w = written("close");
    ASSERT_NE(w.store, nullptr);
    auto& store = w.store;
    const auto& keys = w.keys;
    const auto& batch = w.batch;
    fs_.hang();
    // Callers on four threads while the mount hangs: a first round of calls blocks what it
    // blocks (the base's guard threads, the backend's kernel workers, one probe); the rounds
    // after fail fast and add no thread.
    auto round = [&](int calls) {
      std::vector<std::thread> callers;
      for (int t = 0; t < 4; ++t) {
        callers.emplace_back([&, t] {
          std::vector<MutableBuffer> out(batch.out.begin(), batch.out.end());
          for (int c = 0; c < calls; ++c) {
            BatchResult r = t % 2 ? store->batch_get(views(keys), out)
                                  : store->batch_put(views(keys), batch.in);
            for (const Status& st : r.pages) EXPECT_FALSE(st.ok());
          }
        });
      }
      for (auto& c : callers) c.join();
    };
    round(1);
    const size_t after_first = thread_count();
    round(20);
    EXPECT_LE(thread_count(), after_first) << "threads grew while the mount hung";
    EXPECT_LE(store->stats().threads_stuck, 4u) << "more than guard_threads stuck";
    HungCall t("closing, threads stuck");
    store.reset();
  }
  fs_.release();
  // The stuck threads return, finish and end; they held every descriptor they opened.
  back_to_baseline();
}

// An open whose location hangs returns DEADLINE_EXCEEDED by the deadline. The open goes on
// alone once the mount answers, gives up at its next step, and leaves no thread or descriptor.
TEST_P(StoreHang, OpenReturnsByItsDeadline) {
  ASSERT_NO_FATAL_FAILURE(take_baseline());
  fs_.hang();
  std::optional<Result<std::unique_ptr<Store>>> s;
  {
    HungCall t("open");
    s.emplace(Store::open(config()));
  }
  ASSERT_FALSE(s->ok());
  EXPECT_EQ(s->status().code(), StatusCode::kDeadlineExceeded) << s->status().to_string();
  EXPECT_NE(s->status().message().find("deadline"), std::string_view::npos);
  EXPECT_GE(fs_.blocked(), 1u) << "the open did not reach the mount";
  fs_.release();
  back_to_baseline();
  EXPECT_EQ(health_.count(), 0u) << "a store the caller never got said nothing";
  auto again = open();
  ASSERT_NE(again, nullptr);
}

// A clear that misses its deadline reports it; the store serves nothing until the clear has
// ended, and once the mount answers the namespace holds none of its pages: the clear was
// finished, not left half done.
TEST_P(StoreHang, AClearThatMissesItsDeadlineIsFinishedOnceTheMountAnswers) {
  Written w = written("hang-clear");
  ASSERT_NE(w.store, nullptr);
  auto& store = w.store;
  fs_.hang();
  Status st;
  {
    HungCall t("clear");
    st = store->clear();
  }
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  EXPECT_GE(fs_.blocked(), 1u);
  ASSERT_TRUE(health_.wait_for(1));
  EXPECT_NE(health_.lines[0].find("a clear missed its deadline"), std::string::npos)
      << health_.lines[0];
  // While it is owed: calls fail at once, a second clear too.
  const uint64_t missed = misses(*store);
  EXPECT_EQ(store->clear().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->put("after-clear", w.batch.in[0].data, kPage).code(), StatusCode::kUnavailable);
  EXPECT_EQ(misses(*store), missed);
  EXPECT_EQ(store->stats().locations_unhealthy, 1u);
  fs_.release();
  wait_recovered(*store);
  ASSERT_TRUE(health_.wait_for(2));
  EXPECT_NE(health_.lines[1].find("answers again"), std::string::npos) << health_.lines[1];
  // The namespace after recovery: no page, for this store, a fresh one, and on storage.
  EXPECT_EQ(store->batch_exists(views(w.keys)), 0u);
  auto fresh = open({}, /*deadline_ms=*/0);
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->batch_exists(views(w.keys)), 0u);
  Result<StoreLocation> loc = parse_store_uri(fs_.backing() + "/store");
  ASSERT_TRUE(loc.ok());
  Result<std::vector<PageListing>> pages = list_pages(*loc);
  ASSERT_TRUE(pages.ok()) << pages.status().to_string();
  EXPECT_EQ(pages->size(), 0u);
  // And it serves again.
  EXPECT_TRUE(store->batch_put(views(w.keys), w.batch.in).all_ok());
  EXPECT_EQ(fresh->batch_exists(views(w.keys)), kPages);
}

// A remove that misses its deadline happens once the mount answers (one unlink, or one remove
// entry): after recovery the page is gone and every other page is there.
TEST_P(StoreHang, ARemoveThatMissesItsDeadlineHappensOnceTheMountAnswers) {
  Written w = written("hang-remove");
  ASSERT_NE(w.store, nullptr);
  auto& store = w.store;
  fs_.hang();
  Status st;
  {
    HungCall t("remove");
    st = store->remove(w.keys[0]);
  }
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
  EXPECT_EQ(store->remove(w.keys[1]).code(), StatusCode::kUnavailable);
  fs_.release();
  wait_recovered(*store);
  auto fresh = open({}, /*deadline_ms=*/0);
  ASSERT_NE(fresh, nullptr);
  Result<bool> gone = fresh->exists(w.keys[0]);
  ASSERT_TRUE(gone.ok()) << gone.status().to_string();
  EXPECT_FALSE(*gone);
  Result<StoreLocation> loc = parse_store_uri(fs_.backing() + "/store");
  ASSERT_TRUE(loc.ok());
  Result<std::vector<PageListing>> pages = list_pages(*loc);
  ASSERT_TRUE(pages.ok()) << pages.status().to_string();
  EXPECT_EQ(pages->size(), kPages - 1);
  const std::vector<std::string_view> all = views(w.keys);
  const std::vector<std::string_view> rest(all.begin() + 1, all.end());
  EXPECT_EQ(fresh->batch_exists(rest), kPages - 1);
  EXPECT_EQ(store->batch_exists(rest), kPages - 1);
}

// stats() of a store whose capacity ledger is on the hung mount returns by the deadline,
// used_bytes named as unknown; closing that store (whose ledger descriptors close on the
// mount) returns by the deadline too, and its thread ends once the mount answers.
TEST_P(StoreHang, StatsAndCloseReturnByTheDeadlineWhenTheLedgerHangs) {
  ASSERT_NO_FATAL_FAILURE(take_baseline());
  {
    StoreConfig cfg = config();
    cfg.capacity_bytes = uint64_t{1} << 30;
    auto store = open_store(cfg);
    ASSERT_NE(store, nullptr);
    PagePool pool(*store, kPages, kPage);
    const auto keys = keys_for("hang-stats", kPages);
    ASSERT_TRUE(store->batch_put(views(keys), pool.fill_batch(kPages, kPage).in).all_ok());
    const uint64_t used = store->stats().used_bytes;
    EXPECT_GT(used, 0u);
    fs_.hang();
    StoreStats s;
    {
      HungCall t("stats");
      s = store->stats();
    }
    EXPECT_EQ(s.used_bytes, 0u);
    EXPECT_NE(s.health.find("used_bytes unknown"), std::string::npos) << s.health;
    EXPECT_EQ(s.locations_unhealthy, 1u) << s.health;
    {
      HungCall t("stats (again)");
      s = store->stats();
    }
    EXPECT_EQ(s.locations_unhealthy, 1u) << s.health;
    {
      HungCall t("close");
      store.reset();
    }
  }
  fs_.release();
  back_to_baseline();
}

// Closing a store whose state holds descriptors on the mount (its capacity ledger's files,
// which the kernel flushes on close) returns by the deadline while the mount hangs: the rest
// of the close ends alone once it answers, and releases every descriptor.
TEST_P(StoreHang, CloseReturnsByItsDeadlineWhenReleasingTouchesTheMount) {
  ASSERT_NO_FATAL_FAILURE(take_baseline());
  {
    StoreConfig cfg = config();
    cfg.capacity_bytes = uint64_t{1} << 30;
    auto store = open_store(cfg);
    ASSERT_NE(store, nullptr);
    fs_.hang();
    HungCall t("closing, descriptors on the mount");
    store.reset();
  }
  EXPECT_GE(fs_.blocked(), 1u) << "closing did not reach the mount";
  fs_.release();
  back_to_baseline();
  EXPECT_EQ(health_.count(), 0u) << "a line after the close returned";
}

// The CLI's commands on the hung mount: each stops waiting by its deadline, exits with status
// 3 and says why; their processes go on alone once the mount answers, and the clear among them
// then clears the whole namespace.
TEST_P(StoreHang, CliCommandsStopWaitingByTheirDeadline) {
#ifndef KVTIER_CLI
  GTEST_SKIP() << "the kvtier CLI is not built";
#else
  Written w = written("hang-cli");
  ASSERT_NE(w.store, nullptr);
  const std::string ns = w.store->namespace_id().hex();
  w.store.reset();
  const std::string where = fs_.mount() + "/store";
  const std::string ms = std::to_string(kDeadlineMs);
  const std::vector<std::vector<std::string>> commands = {
      {"stat", "file://" + where + "?deadline_ms=" + ms},
      {"ls", where, "--deadline-ms", ms},
      {"verify", where, "--deadline-ms", ms},
      {"gc", where, "--to", "1GiB", "--deadline-ms", ms},
      {"clear", where, "--namespace", ns, "--deadline-ms", ms},
  };
  fs_.hang();
  std::vector<pid_t> left;
  for (const auto& args : commands) {
    CliRun run = run_cli(args);
    std::printf("hung call: kvtier %s %lld ms\n", args[0].c_str(),
                static_cast<long long>(run.took.count()));
    EXPECT_LT(run.took, milliseconds(kDeadlineMs) + kSlack) << args[0];
    EXPECT_EQ(run.status, 3) << args[0] << ": " << run.output;
    EXPECT_NE(run.output.find("did not answer within the deadline of " + ms + " ms"),
              std::string::npos)
        << run.output;
    const size_t at = run.output.find("process ");
    ASSERT_NE(at, std::string::npos) << run.output;
    left.push_back(static_cast<pid_t>(std::stol(run.output.substr(at + 8))));
  }
  fs_.release();
  for (pid_t pid : left) EXPECT_TRUE(wait_process_end(pid)) << pid;
  // The clear ended whole: no page of the namespace is left.
  Result<StoreLocation> loc = parse_store_uri(fs_.backing() + "/store");
  ASSERT_TRUE(loc.ok());
  Result<std::vector<PageListing>> pages = list_pages(*loc);
  ASSERT_TRUE(pages.ok()) << pages.status().to_string();
  EXPECT_EQ(pages->size(), 0u);
  CliRun stat = run_cli({"stat", where, "--deadline-ms", ms});
  EXPECT_EQ(stat.status, 0) << stat.output;
#endif
}

INSTANTIATE_TEST_SUITE_P(Layouts, StoreHang, ::testing::Values("files", "segments"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace kvtier
