// One behaviour suite, run on every backend configuration through the agent: the backends
// must agree on round trips, misses, replacement, listing, removal and concurrency.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "kvtier/backends/builtin.h"
#include "kvtier/backends/dram/dram_backend.h"
#include "kvtier/backends/posix/posix_backend.h"
#include "kvtier/backends/uring/uring_backend.h"
#include "kvtier/transfer/agent.h"
#include "src/testing/child_process.h"
#include "src/testing/test_util.h"

namespace kvtier {
namespace {

struct BackendCase {
  std::string label;
  std::string backend;
  BackendParams params;
  bool is_file;
};

void PrintTo(const BackendCase& c, std::ostream* os) {
  *os << c.label;
}

std::string case_name(const ::testing::TestParamInfo<BackendCase>& info) {
  return info.param.label;
}

class BackendBehaviour : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    AgentConfig c;
    c.backend = GetParam().backend;
    c.params = GetParam().params;
    if (c.params.count("instance")) c.params["instance"] += dir_.path();  // fresh per test
    c.registry = &builtin_backends();
    auto a = Agent::create(c);
    if (!a.ok() && GetParam().backend == "uring" && builtin_backends().find("uring") != nullptr &&
        a.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << "io_uring is not available here: " << a.status().to_string();
    }
    if (!a.ok() && builtin_backends().find(GetParam().backend) == nullptr) {
      GTEST_SKIP() << "built without the " << GetParam().backend << " backend";
    }
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    agent_ = std::make_unique<Agent>(std::move(a).value());
    buf_ = testing::make_buffer(kBufBytes);
    auto r = agent_->register_memory(buf_.data(), buf_.size());
    ASSERT_TRUE(r.ok());
    reg_ = std::move(r).value();
  }

  std::string path(std::string_view name) const { return dir_.file(name); }

  Status write(const std::string& p, const std::byte* src, uint64_t n) {
    KVTIER_ASSIGN_OR_RETURN(Target t, agent_->open_target({p, TargetMode::kCreate, n, {}}));
    MemDesc m{const_cast<std::byte*>(src), n};
    StorageDesc s{&t, 0, n};
    KVTIER_ASSIGN_OR_RETURN(Transfer x, agent_->make_request(TransferOp::kWrite, {&m, 1}, {&s, 1}));
    KVTIER_RETURN_IF_ERROR(x.post());
    x.wait();
    KVTIER_RETURN_IF_ERROR(x.first_error());
    return t.publish();
  }

  Status read(const std::string& p, std::byte* dst, uint64_t n, uint64_t* size = nullptr) {
    KVTIER_ASSIGN_OR_RETURN(Target t, agent_->open_target({p, TargetMode::kRead, 0, {}}));
    if (size) *size = t.size();
    MemDesc m{dst, n};
    StorageDesc s{&t, 0, n};
    KVTIER_ASSIGN_OR_RETURN(Transfer x, agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1}));
    KVTIER_RETURN_IF_ERROR(x.post());
    x.wait();
    return x.first_error();
  }

  static constexpr size_t kBufBytes = 20 << 20;
  testing::TempDir dir_;
  std::unique_ptr<Agent> agent_;
  AlignedBuffer buf_;
  Registration reg_;
};

TEST_P(BackendBehaviour, RoundTripOfManySizes) {
  const size_t half = kBufBytes / 2;
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4096}, size_t{70272}, size_t{(4 << 20) + 1}}) {
    SCOPED_TRACE(n);
    testing::fill_pattern(buf_.data(), n, n);
    const std::string p = path("obj-" + std::to_string(n));
    KVTIER_ASSERT_OK(write(p, buf_.data(), n));
    std::memset(buf_.data() + half, 0, n);
    uint64_t size = 0;
    KVTIER_ASSERT_OK(read(p, buf_.data() + half, n, &size));
    EXPECT_EQ(size, n);
    EXPECT_EQ(testing::find_pattern_mismatch(buf_.data() + half, n, n), SIZE_MAX);
  }
}

TEST_P(BackendBehaviour, AppendedBytesSyncOnFileBackendsAppendsAreRefusedElsewhere) {
  testing::fill_pattern(buf_.data(), 8192, 3);
  KVTIER_ASSERT_OK(write(path("log"), buf_.data(), 4096));
  Result<Target> t = agent_->open_target({path("log"), TargetMode::kAppend, 0, {}});
  if (!GetParam().is_file) {
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kUnsupported) << t.status().to_string();
    EXPECT_NE(t.status().message().find("append"), std::string::npos) << t.status().message();
  } else {
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    KVTIER_EXPECT_OK(t->sync());  // nothing appended yet: harmless
    MemDesc m{buf_.data() + 4096, 4096};
    StorageDesc s{&*t, 4096, 4096};
    KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                                agent_->make_request(TransferOp::kWrite, {&m, 1}, {&s, 1}));
    KVTIER_ASSERT_OK(x.post());
    x.wait();
    KVTIER_ASSERT_OK(x.first_error());
    KVTIER_ASSERT_OK(t->sync());
    std::byte* dst = buf_.data() + (1 << 20);
    uint64_t size = 0;
    KVTIER_ASSERT_OK(read(path("log"), dst, 8192, &size));
    EXPECT_EQ(size, 8192u);
    EXPECT_EQ(testing::find_pattern_mismatch(dst, 8192, 3), SIZE_MAX);
  }
  // Only append targets sync: read targets have nothing to, create targets publish durably.
  KVTIER_ASSERT_OK_AND_ASSIGN(Target r,
                              agent_->open_target({path("log"), TargetMode::kRead, 0, {}}));
  EXPECT_EQ(r.sync().code(), StatusCode::kInvalidArgument);
  KVTIER_ASSERT_OK_AND_ASSIGN(Target c,
                              agent_->open_target({path("new"), TargetMode::kCreate, 4096, {}}));
  Status st = c.sync();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("publish durably"), std::string::npos) << st.message();
  EXPECT_EQ(Target().sync().code(), StatusCode::kInvalidArgument);
}

TEST(BackendSync, BackendsWithoutAppendsRefuseItClearly) {
  // The default of Backend::sync, which dram and s3 keep: they never open kAppend targets.
  KVTIER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> dram,
                              create_dram_backend({{"instance", "backend-sync"}}));
  KVTIER_ASSERT_OK_AND_ASSIGN(std::unique_ptr<BackendTarget> t,
                              dram->open({"obj", TargetMode::kCreate, 4096, {}}));
  Status st = dram->sync(*t);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("dram"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("does not append"), std::string::npos) << st.message();
}

TEST_P(BackendBehaviour, MissingObjectIsNotFound) {
  Result<Target> t = agent_->open_target({path("nope"), TargetMode::kRead, 0, {}});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(agent_->stat(path("nope")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(agent_->remove(path("nope")).code(), StatusCode::kNotFound);
}

TEST_P(BackendBehaviour, PublishReplacesAtomicallyAndOpenTargetsKeepTheirObject) {
  testing::fill_pattern(buf_.data(), 8192, 1);
  KVTIER_ASSERT_OK(write(path("k"), buf_.data(), 8192));
  KVTIER_ASSERT_OK_AND_ASSIGN(Target old,
                              agent_->open_target({path("k"), TargetMode::kRead, 0, {}}));
  testing::fill_pattern(buf_.data(), 4096, 2);
  KVTIER_ASSERT_OK(write(path("k"), buf_.data(), 4096));  // replaces

  std::byte* dst = buf_.data() + (1 << 20);
  uint64_t size = 0;
  KVTIER_ASSERT_OK(read(path("k"), dst, 4096, &size));
  EXPECT_EQ(size, 4096u);
  EXPECT_EQ(testing::find_pattern_mismatch(dst, 4096, 2), SIZE_MAX);

  // The target opened before the replacement still reads the old object, whole.
  EXPECT_EQ(old.size(), 8192u);
  MemDesc m{dst, 8192};
  StorageDesc s{&old, 0, 8192};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1}));
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_ASSERT_OK(x.first_error());
  EXPECT_EQ(testing::find_pattern_mismatch(dst, 8192, 1), SIZE_MAX);
}

TEST_P(BackendBehaviour, UnpublishedObjectsLeaveNothingBehind) {
  KVTIER_ASSERT_OK(agent_->make_dirs(path("tmp")));
  {
    KVTIER_ASSERT_OK_AND_ASSIGN(
        Target t, agent_->open_target({path("ghost"), TargetMode::kCreate, 4096, path("tmp")}));
    MemDesc m{buf_.data(), 4096};
    StorageDesc s{&t, 0, 4096};
    KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                                agent_->make_request(TransferOp::kWrite, {&m, 1}, {&s, 1}));
    KVTIER_ASSERT_OK(x.post());
    x.wait();
    KVTIER_ASSERT_OK(x.first_error());
    // Not visible before publishing.
    EXPECT_EQ(agent_->stat(path("ghost")).status().code(), StatusCode::kNotFound);
  }
  EXPECT_EQ(agent_->stat(path("ghost")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*agent_->count_temporaries(path("tmp")), 0u);
  if (GetParam().is_file) {
    EXPECT_TRUE(testing::list_files(dir_.path()).empty());
  }
}

TEST_P(BackendBehaviour, PublishCreatesItsMissingDirectoryButNoneAbove) {
  testing::fill_pattern(buf_.data(), 100, 3);
  KVTIER_ASSERT_OK(agent_->make_dirs(path("t")));
  KVTIER_ASSERT_OK(agent_->make_dirs(path("a/b")));
  auto publish = [&](const std::string& p) {
    Result<Target> t = agent_->open_target({p, TargetMode::kCreate, 100, path("t")});
    if (!t.ok()) return t.status();
    MemDesc m{buf_.data(), 100};
    StorageDesc s{&*t, 0, 100};
    Result<Transfer> x = agent_->make_request(TransferOp::kWrite, {&m, 1}, {&s, 1});
    if (!x.ok()) return x.status();
    KVTIER_RETURN_IF_ERROR(x->post());
    x->wait();
    KVTIER_RETURN_IF_ERROR(x->first_error());
    return t->publish();
  };
  KVTIER_ASSERT_OK(publish(path("a/b/c/obj")));
  KVTIER_ASSERT_OK_AND_ASSIGN(ObjectInfo info, agent_->stat(path("a/b/c/obj")));
  EXPECT_EQ(info.size, 100u);
  EXPECT_FALSE(info.is_dir);
  // Two levels missing: the directory above is not made (on FILE backends, where directories
  // are real: a vanished ancestor may be a vanished filesystem).
  Status deep = publish(path("x/y/obj"));
  if (GetParam().backend != "dram") {
    EXPECT_EQ(deep.code(), StatusCode::kNotFound) << deep.to_string();
    EXPECT_EQ(agent_->stat(path("x")).status().code(), StatusCode::kNotFound);
  }
}

TEST_P(BackendBehaviour, ListShowsDirectChildrenWithDetails) {
  for (const char* n : {"d/x", "d/y", "d/sub/z"}) KVTIER_ASSERT_OK(write(path(n), buf_.data(), 10));
  std::set<std::string> files, dirs;
  KVTIER_ASSERT_OK(
      agent_->list(path("d"), ListOptions{.with_details = true}, [&](const ObjectInfo& e) {
        (e.is_dir ? dirs : files).insert(e.name);
        if (!e.is_dir) {
          EXPECT_EQ(e.size, 10u);
        }
        return ok_status();
      }));
  EXPECT_EQ(files, (std::set<std::string>{"x", "y"}));
  EXPECT_EQ(dirs, (std::set<std::string>{"sub"}));
  EXPECT_EQ(agent_->list(path("nodir"), {}, [](const ObjectInfo&) { return ok_status(); }).code(),
            StatusCode::kNotFound);
}

TEST_P(BackendBehaviour, RemoveIfIdentityOnlyRemovesThatObject) {
  KVTIER_ASSERT_OK(write(path("r"), buf_.data(), 10));
  KVTIER_ASSERT_OK_AND_ASSIGN(ObjectInfo first, agent_->stat(path("r")));
  KVTIER_ASSERT_OK(write(path("r"), buf_.data(), 20));  // replaced
  EXPECT_EQ(agent_->remove(path("r"), &first.identity).code(), StatusCode::kNotFound);
  KVTIER_ASSERT_OK_AND_ASSIGN(ObjectInfo second, agent_->stat(path("r")));
  EXPECT_EQ(second.size, 20u);
  KVTIER_EXPECT_OK(agent_->remove(path("r"), &second.identity));
  EXPECT_EQ(agent_->stat(path("r")).status().code(), StatusCode::kNotFound);
}

TEST_P(BackendBehaviour, ContiguousDescriptorsOfOneObject) {
  // 64 descriptors that continue each other (a header and pieces): one vectored call each way
  // on the posix backend, the same bytes everywhere.
  constexpr size_t kPieces = 64, kPiece = 3000;
  testing::fill_pattern(buf_.data(), kPieces * kPiece, 9);
  KVTIER_ASSERT_OK_AND_ASSIGN(
      Target w, agent_->open_target({path("multi"), TargetMode::kCreate, kPieces * kPiece, {}}));
  std::vector<MemDesc> m;
  std::vector<StorageDesc> s;
  for (size_t i = 0; i < kPieces; ++i) {
    // Memory pieces in reverse order: storage order is what matters.
    const size_t src = (kPieces - 1 - i) * kPiece;
    m.push_back({buf_.data() + src, kPiece});
    s.push_back({&w, i * kPiece, kPiece});
  }
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, agent_->make_request(TransferOp::kWrite, m, s));
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_ASSERT_OK(x.first_error());
  KVTIER_ASSERT_OK(w.publish());

  std::byte* dst = buf_.data() + (4 << 20);
  KVTIER_ASSERT_OK(read(path("multi"), dst, kPieces * kPiece));
  for (size_t i = 0; i < kPieces; ++i) {
    ASSERT_EQ(std::memcmp(dst + i * kPiece, buf_.data() + (kPieces - 1 - i) * kPiece, kPiece), 0)
        << i;
  }
}

// The threads a transfer's descriptors completed on.
std::set<std::thread::id> completing_threads(Transfer& x) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  TransferCallbacks cb;
  cb.on_descriptor = [&](size_t, const Status&) {
    std::lock_guard lock(mu);
    ids.insert(std::this_thread::get_id());
  };
  EXPECT_TRUE(x.post(std::move(cb)).ok());
  x.wait();
  EXPECT_TRUE(x.first_error().ok()) << x.first_error().to_string();
  return ids;
}

TEST_P(BackendBehaviour, SmallBatchesRunOnTheCallersThreadLargeOnesOnTheBackends) {
  // FILE backends run batches of up to inline_bytes on the caller's thread and larger ones on
  // their own; dram copies every batch on the caller's thread.
  const auto it = GetParam().params.find("inline_bytes");
  const uint64_t default_bytes = GetParam().backend == "uring" ? UringBackendOptions{}.inline_bytes
                                                               : PosixBackendOptions{}.inline_bytes;
  const uint64_t inline_bytes =
      it == GetParam().params.end() ? default_bytes : std::stoull(it->second);
  const std::set<std::thread::id> caller{std::this_thread::get_id()};
  // 4 pieces of one object, a batch of 64 KiB and one of 8 MiB.
  for (uint64_t piece : {uint64_t{16} << 10, uint64_t{2} << 20}) {
    SCOPED_TRACE(piece);
    const uint64_t n = 4 * piece;
    const bool inline_expected = !GetParam().is_file || n <= inline_bytes;
    testing::fill_pattern(buf_.data(), n, piece);
    KVTIER_ASSERT_OK_AND_ASSIGN(
        Target w,
        agent_->open_target({path("p" + std::to_string(piece)), TargetMode::kCreate, n, {}}));
    std::vector<MemDesc> m;
    std::vector<StorageDesc> s;
    for (uint64_t off = 0; off < n; off += piece) {
      m.push_back({buf_.data() + off, piece});
      s.push_back({&w, off, piece});
    }
    KVTIER_ASSERT_OK_AND_ASSIGN(Transfer wx, agent_->make_request(TransferOp::kWrite, m, s));
    const std::set<std::thread::id> wrote = completing_threads(wx);
    KVTIER_ASSERT_OK(w.publish());

    KVTIER_ASSERT_OK_AND_ASSIGN(
        Target r,
        agent_->open_target({path("p" + std::to_string(piece)), TargetMode::kRead, 0, {}}));
    for (size_t i = 0; i < m.size(); ++i) {
      m[i].addr = buf_.data() + kBufBytes / 2 + i * piece;
      s[i].target = &r;
    }
    KVTIER_ASSERT_OK_AND_ASSIGN(Transfer rx, agent_->make_request(TransferOp::kRead, m, s));
    const std::set<std::thread::id> read = completing_threads(rx);
    EXPECT_EQ(testing::find_pattern_mismatch(buf_.data() + kBufBytes / 2, n, piece), SIZE_MAX);
    for (const auto* ids : {&wrote, &read}) {
      if (inline_expected) {
        EXPECT_EQ(*ids, caller) << "a batch of " << n << " bytes should run on the caller's thread";
      } else {
        EXPECT_EQ(ids->count(std::this_thread::get_id()), 0u)
            << "a batch of " << n << " bytes should run on the backend's threads";
      }
    }
  }
}

TEST_P(BackendBehaviour, ConcurrentWritersAndReaders) {
  constexpr int kThreads = 4, kRounds = 30;
  constexpr size_t kSize = 65536;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::byte* src = buf_.data() + t * 2 * kSize;
      std::byte* dst = src + kSize;
      for (int i = 0; i < kRounds; ++i) {
        const uint64_t seed = t * 1000 + i;
        testing::fill_pattern(src, kSize, seed);
        const std::string p = path("c" + std::to_string(t) + "-" + std::to_string(i % 5));
        if (!write(p, src, kSize).ok() || !read(p, dst, kSize).ok() ||
            testing::find_pattern_mismatch(dst, kSize, seed) != SIZE_MAX) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, BackendBehaviour,
    ::testing::Values(BackendCase{"posix", "posix", {}, true},
                      BackendCase{"posix_pool_only", "posix", {{"inline_bytes", "0"}}, true},
                      BackendCase{"posix_short_io", "posix", {{"max_io_bytes", "777"}}, true},
                      BackendCase{"posix_named_temps", "posix", {{"use_tmpfile", "0"}}, true},
                      BackendCase{"uring", "uring", {}, true},
                      BackendCase{"uring_rings_only", "uring", {{"inline_bytes", "0"}}, true},
                      BackendCase{"uring_short_io", "uring", {{"max_io_bytes", "777"}}, true},
                      BackendCase{"uring_rings_short_io",
                                  "uring",
                                  {{"max_io_bytes", "777"}, {"inline_bytes", "0"}},
                                  true},
                      BackendCase{"uring_plain_buffers", "uring", {{"fixed_buffers", "0"}}, true},
                      BackendCase{"dram", "dram", {{"instance", "behaviour"}}, false}),
    case_name);

// ---- posix specifics ----

class PosixBackend : public ::testing::Test {
 protected:
  Agent make(BackendParams params = {}) {
    AgentConfig c;
    c.backend = "posix";
    c.params = std::move(params);
    c.registry = &builtin_backends();
    return std::move(Agent::create(c)).value();
  }
  testing::TempDir dir_;
};

TEST_F(PosixBackend, ReadOfAFileThatShrankIsCorruptNotComplete) {
  Agent a = make();
  AlignedBuffer buf = testing::make_buffer(16384);
  KVTIER_ASSERT_OK_AND_ASSIGN(Registration reg, a.register_memory(buf.data(), buf.size()));
  testing::write_file(dir_.file("f"), std::string(8192, 'x'));
  KVTIER_ASSERT_OK_AND_ASSIGN(Target t, a.open_target({dir_.file("f"), TargetMode::kRead, 0, {}}));
  ASSERT_EQ(::truncate(dir_.file("f").c_str(), 5000), 0);
  MemDesc m{buf.data(), 8192};
  StorageDesc s{&t, 0, 8192};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, a.make_request(TransferOp::kRead, {&m, 1}, {&s, 1}));
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  EXPECT_EQ(x.results()[0].code(), StatusCode::kCorrupt) << x.results()[0].to_string();
  EXPECT_NE(x.results()[0].message().find("3192 bytes short"), std::string::npos)
      << x.results()[0].message();
}

KVTIER_CHILD(ends_at_once, args) {
  (void)args;
  return 0;
}

TEST_F(PosixBackend, NamedTemporariesOfDeadWritersAreSweptLiveOnesKept) {
  Agent a = make({{"use_tmpfile", "0"}});
  const std::string tmp = dir_.file("tmp");
  KVTIER_ASSERT_OK(a.make_dirs(tmp));
  // A live temporary of our own, to learn this host's tag from its name.
  KVTIER_ASSERT_OK_AND_ASSIGN(Target live,
                              a.open_target({dir_.file("p"), TargetMode::kCreate, 1, tmp}));
  std::vector<std::string> names = testing::list_files(tmp);
  ASSERT_EQ(names.size(), 1u);
  const std::string mine = names[0];  // p.<host>.<pid>.<seq>.kvtmp
  const size_t host_at = mine.find('.') + 1;
  const std::string host = mine.substr(host_at, 8);

  testing::Child ended = testing::Child::start("ends_at_once");
  const pid_t child = ended.pid();
  ASSERT_GT(child, 0);
  ASSERT_EQ(ended.wait(), 0);  // a pid that is certainly dead now

  const std::string dead = "q." + host + "." + std::to_string(child) + ".7.kvtmp";
  const std::string foreign_fresh = "r.0badbeef.1.1.kvtmp";
  const std::string foreign_old = "s.0badbeef.1.2.kvtmp";
  for (const auto& n : {dead, foreign_fresh, foreign_old}) testing::write_file(tmp + "/" + n, "x");
  const timespec two_hours_ago[2] = {{::time(nullptr) - 7200, 0}, {::time(nullptr) - 7200, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (tmp + "/" + foreign_old).c_str(), two_hours_ago, 0), 0);

  EXPECT_EQ(*a.count_temporaries(tmp), 4u);
  KVTIER_ASSERT_OK_AND_ASSIGN(size_t swept, a.sweep_temporaries(tmp, 3600));
  EXPECT_EQ(swept, 2u);
  EXPECT_EQ(testing::list_files(tmp), (std::vector<std::string>{mine, foreign_fresh}));
}

TEST_F(PosixBackend, DurablePublishWorks) {
  Agent a = make();
  AlignedBuffer buf = testing::make_buffer(4096);
  KVTIER_ASSERT_OK_AND_ASSIGN(Registration reg, a.register_memory(buf.data(), buf.size()));
  KVTIER_ASSERT_OK_AND_ASSIGN(
      Target t, a.open_target({dir_.file("d/f"), TargetMode::kCreate, 4096, dir_.path()}));
  MemDesc m{buf.data(), 4096};
  StorageDesc s{&t, 0, 4096};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, a.make_request(TransferOp::kWrite, {&m, 1}, {&s, 1}));
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_ASSERT_OK(x.first_error());
  KVTIER_ASSERT_OK(t.publish(PublishOptions{.durable = true}));
  EXPECT_TRUE(std::filesystem::exists(dir_.file("d/f")));
}

}  // namespace
}  // namespace kvtier
