// The uring backend beyond the shared behaviour suite: fallback to posix when io_uring is
// blocked, cancellation and destruction in flight, concurrent submitters, and descriptors.
#include "kvtier/backends/uring/uring_backend.h"

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>

#include "kvtier/backends/builtin.h"
#include "kvtier/transfer/agent.h"
#include "src/testing/child_process.h"
#include "src/testing/test_util.h"

namespace kvtier {
namespace {

Result<Agent> uring_agent(BackendParams params = {}) {
  AgentConfig c;
  c.backend = "uring";
  c.params = std::move(params);
  c.registry = &builtin_backends();
  return Agent::create(c);
}

#define SKIP_WITHOUT_URING(result)                                            \
  if (!(result).ok() && (result).status().code() == StatusCode::kUnavailable) \
  GTEST_SKIP() << "io_uring is not available here: " << (result).status().to_string()

// Makes io_uring_setup fail with EPERM in this process, as a container's seccomp profile does.
bool block_io_uring_with_seccomp() {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])),
                            filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

KVTIER_CHILD(install_seccomp_filter, args) {
  (void)args;
  return block_io_uring_with_seccomp() ? 0 : 1;
}

// Whether this process may install a seccomp filter (a container may forbid it): asked in a
// child, since a filter cannot be removed once installed.
bool seccomp_filters_allowed() {
  return testing::Child::start("install_seccomp_filter").wait() == 0;
}

#define SKIP_WITHOUT_SECCOMP()                                                        \
  if (!seccomp_filters_allowed())                                                     \
  GTEST_SKIP() << "this process may not install seccomp filters, so io_uring cannot " \
                  "be blocked on purpose here"

TEST(UringFallback, SeccompBlockedIoUringFallsBackToPosixAndSaysWhy) {
  SKIP_WITHOUT_SECCOMP();
  // In a child process: the filter cannot be removed once installed.
  EXPECT_EXIT(
      {
        if (!block_io_uring_with_seccomp()) {
          std::fprintf(stderr, "cannot install a seccomp filter: %s\n", std::strerror(errno));
          std::exit(3);
        }
        AgentConfig c;
        c.registry = &builtin_backends();  // backend "auto", FILE
        Result<Agent> a = Agent::create(c);
        if (!a.ok()) {
          std::fprintf(stderr, "no backend: %s\n", a.status().to_string().c_str());
          std::exit(1);
        }
        const BackendSelection& sel = a->selection();
        const std::string summary = sel.summary();
        std::fprintf(stderr, "selection: %s\n", summary.c_str());
        const bool ok = sel.chosen == "posix" && sel.rejected.size() == 1 &&
                        summary.find("uring") != std::string::npos &&
                        summary.find("Operation not permitted") != std::string::npos;
        std::exit(ok ? 0 : 2);
      },
      ::testing::ExitedWithCode(0), "selection: posix \\(auto; skipped uring: .*io_uring_setup");
}

TEST(UringFallback, ExplicitUringUnderSeccompIsAClearError) {
  SKIP_WITHOUT_SECCOMP();
  EXPECT_EXIT(
      {
        if (!block_io_uring_with_seccomp()) std::exit(3);
        Result<Agent> a = uring_agent();
        std::fprintf(stderr, "%s\n", a.status().to_string().c_str());
        std::exit(!a.ok() && a.status().code() == StatusCode::kUnavailable ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "UNAVAILABLE: .*io_uring_setup.*Operation not permitted");
}

class UringInFlight : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = uring_agent({{"queue_depth", "8"}});
    SKIP_WITHOUT_URING(a);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    agent_ = std::make_unique<Agent>(std::move(a).value());
    buf_ = testing::make_buffer(kPieces * kPiece * 2);
    auto r = agent_->register_memory(buf_.data(), buf_.size());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    reg_ = std::move(r).value();
    testing::fill_pattern(buf_.data(), kPieces * kPiece, 5);
    KVTIER_ASSERT_OK_AND_ASSIGN(
        Target w,
        agent_->open_target({dir_.file("big"), TargetMode::kCreate, kPieces * kPiece, {}}));
    std::vector<MemDesc> m;
    std::vector<StorageDesc> s;
    for (size_t i = 0; i < kPieces; ++i) {
      m.push_back({buf_.data() + i * kPiece, kPiece});
      s.push_back({&w, i * kPiece, kPiece});
    }
    KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, agent_->make_request(TransferOp::kWrite, m, s));
    KVTIER_ASSERT_OK(x.post());
    x.wait();
    KVTIER_ASSERT_OK(x.first_error());
    KVTIER_ASSERT_OK(w.publish());
  }

  // A read of every piece into the second half of the buffer.
  Result<Transfer> read_all(const Target& t) {
    std::vector<MemDesc> m;
    std::vector<StorageDesc> s;
    for (size_t i = 0; i < kPieces; ++i) {
      m.push_back({buf_.data() + (kPieces + i) * kPiece, kPiece});
      s.push_back({&t, i * kPiece, kPiece});
    }
    return agent_->make_request(TransferOp::kRead, m, s);
  }

  static constexpr size_t kPieces = 256, kPiece = 64 << 10;
  testing::TempDir dir_;
  std::unique_ptr<Agent> agent_;
  AlignedBuffer buf_;
  Registration reg_;
};

TEST_F(UringInFlight, CancelStopsWhatHasNotStartedAndKeepsWhatFinished) {
  KVTIER_ASSERT_OK_AND_ASSIGN(Target t,
                              agent_->open_target({dir_.file("big"), TargetMode::kRead, 0, {}}));
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, read_all(t));
  KVTIER_ASSERT_OK(x.post());
  x.cancel();
  KVTIER_ASSERT_OK(x.wait(testing::kHungCeiling));
  size_t ok = 0, cancelled = 0;
  for (size_t i = 0; i < kPieces; ++i) {
    const Status& st = x.results()[i];
    if (st.ok()) {
      ++ok;
      EXPECT_EQ(std::memcmp(buf_.data() + (kPieces + i) * kPiece, buf_.data() + i * kPiece, kPiece),
                0)
          << "piece " << i << " reported OK with wrong bytes";
    } else {
      EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.to_string();
      ++cancelled;
    }
  }
  EXPECT_EQ(ok + cancelled, kPieces);
  // The request can run again, whole.
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_EXPECT_OK(x.first_error());
}

TEST_F(UringInFlight, DestroyingAnInFlightRequestDrainsIt) {
  const size_t fds = testing::open_fds();
  for (int round = 0; round < 20; ++round) {
    KVTIER_ASSERT_OK_AND_ASSIGN(Target t,
                                agent_->open_target({dir_.file("big"), TargetMode::kRead, 0, {}}));
    KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, read_all(t));
    KVTIER_ASSERT_OK(x.post());
  }  // each request cancelled and drained here, its target closed after it
  EXPECT_EQ(testing::open_fds(), fds);
}

TEST_F(UringInFlight, PrefetchAndBackupThreadsAtOnce) {
  std::atomic<int> failures{0};
  std::thread reader([&] {
    for (int i = 0; i < 30; ++i) {
      auto t = agent_->open_target({dir_.file("big"), TargetMode::kRead, 0, {}});
      if (!t.ok()) {
        ++failures;
        continue;
      }
      auto x = read_all(*t);
      if (!x.ok() || !x->post().ok()) {
        ++failures;
        continue;
      }
      x->wait();
      if (!x->first_error().ok()) ++failures;
    }
  });
  std::thread writer([&] {
    for (int i = 0; i < 30; ++i) {
      auto t = agent_->open_target(
          {dir_.file("w" + std::to_string(i % 3)), TargetMode::kCreate, kPiece * 16, {}});
      if (!t.ok()) {
        ++failures;
        continue;
      }
      std::vector<MemDesc> m;
      std::vector<StorageDesc> s;
      for (size_t p = 0; p < 16; ++p) {
        m.push_back({buf_.data() + p * kPiece, kPiece});
        s.push_back({&*t, p * kPiece, kPiece});
      }
      auto x = agent_->make_request(TransferOp::kWrite, m, s);
      if (!x.ok() || !x->post().ok()) {
        ++failures;
        continue;
      }
      x->wait();
      if (!x->first_error().ok() || !t->publish().ok()) ++failures;
    }
  });
  reader.join();
  writer.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(UringDescriptors, RingsAndTheirEventFdsGoWithTheBackend) {
  const size_t before = testing::open_fds();
  {
    auto a = uring_agent({{"rings", "3"}});
    SKIP_WITHOUT_URING(a);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(testing::open_fds(), before + 6) << "a ring and an eventfd per ring";
    EXPECT_NE(a->backend_description().find("3 rings"), std::string::npos)
        << a->backend_description();
  }
  EXPECT_EQ(testing::open_fds(), before);
}

TEST(UringDescriptors, DescribesFixedBuffers) {
  auto a = uring_agent();
  SKIP_WITHOUT_URING(a);
  ASSERT_TRUE(a.ok());
  EXPECT_NE(a->backend_description().find("fixed buffers"), std::string::npos)
      << a->backend_description();
  auto plain = uring_agent({{"fixed_buffers", "0"}});
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(plain->backend_description().find("no fixed buffers"), std::string::npos);
}

TEST(UringParams, BadParametersAreRejected) {
  EXPECT_EQ(uring_agent({{"queue_depth", "0"}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(uring_agent({{"rings", "1000"}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(uring_agent({{"fixed_buffers", "maybe"}}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
