// Descriptor accounting on every path: the process's open-fd count is the same before and
// after each operation, successful or failed. Includes the cases of the regression that
// motivated kvtier: one leaked descriptor per page per batch (167 -> 1,351 after one
// batch_set), leaks through file registration, and mixed operations checked after every step.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "kvtier/backends/builtin.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::open_fds;
using testing::PagePool;

constexpr size_t kPage = 16384;

class StoreFds : public ::testing::Test {
 protected:
  void SetUp() override {
    faults_ = std::make_shared<FaultInjector>();
    loc_ = *parse_store_uri(dir_.file("store") + "?backend=posix");
    store_ = testing::open_store(loc_, testing::test_namespace(), faults_);
    ASSERT_NE(store_, nullptr);
    pool_ = std::make_unique<PagePool>(*store_, 256, kPage);
    for (size_t i = 0; i < 256; ++i) pool_->fill(i, kPage, i);
    base_ = open_fds();
  }

  BatchResult put_batch(const std::vector<std::string>& keys, size_t first_slot = 0) {
    std::vector<ConstBuffer> in;
    for (size_t i = 0; i < keys.size(); ++i) in.push_back(pool_->in(first_slot + i, kPage));
    return store_->batch_put(testing::views(keys), in);
  }
  BatchResult get_batch(const std::vector<std::string>& keys, size_t first_slot = 128) {
    std::vector<MutableBuffer> out;
    for (size_t i = 0; i < keys.size(); ++i) out.push_back(pool_->out(first_slot + i, kPage));
    return store_->batch_get(testing::views(keys), out);
  }
  std::string page_file(std::string_view key) {
    // The only page under the namespace with this key's hash as its name.
    return testing::page_file(*store_, key);
  }

  testing::TempDir dir_;
  std::shared_ptr<FaultInjector> faults_;
  StoreLocation loc_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<PagePool> pool_;
  size_t base_ = 0;
};

TEST_F(StoreFds, SingleSetAndGet) {
  KVTIER_ASSERT_OK(store_->put("one", pool_->slot(0), kPage));
  EXPECT_EQ(open_fds(), base_) << "set";
  KVTIER_ASSERT_OK(store_->get("one", pool_->slot(200), kPage));
  EXPECT_EQ(open_fds(), base_) << "get";
  EXPECT_TRUE(pool_->holds(200, kPage, 0));
}

TEST_F(StoreFds, BatchOf128PagesLeavesNothingOpen) {
  // The original regression: one batch_set of 128 pages took a server from 167 to 1,351 fds.
  const auto keys = testing::keys_for("b", 128);
  ASSERT_TRUE(put_batch(keys).all_ok());
  EXPECT_EQ(open_fds(), base_) << "batch_set";
  ASSERT_TRUE(get_batch(keys).all_ok());
  EXPECT_EQ(open_fds(), base_) << "batch_get";
  EXPECT_EQ(store_->batch_exists(testing::views(keys)), 128u);
  EXPECT_EQ(open_fds(), base_) << "batch_exists";
  for (size_t i = 0; i < 128; ++i) ASSERT_TRUE(pool_->holds(128 + i, kPage, i)) << i;
}

TEST_F(StoreFds, MixedOperationsCountedAfterEveryStep) {
  KVTIER_ASSERT_OK(store_->put("k1", pool_->slot(1), kPage));
  EXPECT_EQ(open_fds(), base_) << "set";
  KVTIER_ASSERT_OK(store_->get("k1", pool_->slot(201), kPage));
  EXPECT_EQ(open_fds(), base_) << "get";
  ASSERT_TRUE(put_batch({"k2", "k3"}, 2).all_ok());
  EXPECT_EQ(open_fds(), base_) << "batch_set";
  ASSERT_TRUE(get_batch({"k2", "k3"}, 202).all_ok());
  EXPECT_EQ(open_fds(), base_) << "batch_get";
  EXPECT_TRUE(*store_->exists("k3"));
  EXPECT_EQ(open_fds(), base_) << "exists";
  EXPECT_EQ(store_->get("missing", pool_->slot(210), kPage).code(), StatusCode::kNotFound);
  EXPECT_EQ(open_fds(), base_) << "miss";
  KVTIER_ASSERT_OK(store_->remove("k2"));
  EXPECT_EQ(open_fds(), base_) << "remove";
  KVTIER_ASSERT_OK(store_->clear());
  EXPECT_EQ(open_fds(), base_) << "clear";
  for (int i = 1; i <= 3; ++i) EXPECT_TRUE(pool_->holds(200 + i, kPage, i)) << i;
}

TEST_F(StoreFds, DataIntegrityAcrossElementTypes) {
  // Typed pages (as tensors of float32/64, int32/64, bool and bfloat16 would be) come back
  // value for value.
  std::byte* src = pool_->slot(0);
  std::byte* dst = pool_->slot(128);
  auto round_trip = [&](const char* name, size_t bytes) {
    KVTIER_ASSERT_OK(store_->put(name, src, bytes));
    std::memset(dst, 0xA5, bytes);
    KVTIER_ASSERT_OK(store_->get(name, dst, bytes));
    EXPECT_EQ(std::memcmp(src, dst, bytes), 0) << name;
    EXPECT_EQ(open_fds(), base_) << name;
  };
  auto* f32 = reinterpret_cast<float*>(src);
  for (int i = 0; i < 1024; ++i) f32[i] = std::sin(static_cast<float>(i)) * 1e30f;
  f32[3] = NAN;
  f32[4] = -0.0f;
  f32[5] = INFINITY;
  round_trip("float32", 1024 * sizeof(float));
  auto* f64 = reinterpret_cast<double*>(src);
  for (int i = 0; i < 1024; ++i) f64[i] = 1.0 / (i + 1) - 1e300;
  round_trip("float64", 1024 * sizeof(double));
  auto* i32 = reinterpret_cast<int32_t*>(src);
  for (int i = 0; i < 1024; ++i) i32[i] = INT32_MIN + i * 977;
  round_trip("int32", 1024 * sizeof(int32_t));
  auto* i64 = reinterpret_cast<int64_t*>(src);
  for (int i = 0; i < 1024; ++i) i64[i] = INT64_MAX - i * 1000003;
  round_trip("int64", 1024 * sizeof(int64_t));
  auto* b = reinterpret_cast<bool*>(src);
  for (int i = 0; i < 1023; ++i) b[i] = (i % 3) == 0;
  round_trip("bool", 1023);
  auto* bf16 = reinterpret_cast<uint16_t*>(src);
  for (int i = 0; i < 2048; ++i) bf16[i] = static_cast<uint16_t>(i * 40503u);  // NaNs included
  round_trip("bfloat16", 2048 * sizeof(uint16_t));
}

TEST_F(StoreFds, RegisterAndDeregister) {
  {
    AlignedBuffer more = testing::make_buffer(1 << 20);
    KVTIER_ASSERT_OK_AND_ASSIGN(Registration r, store_->register_memory(more.data(), more.size()));
    EXPECT_EQ(open_fds(), base_) << "register";
  }
  EXPECT_EQ(open_fds(), base_) << "deregister";
}

TEST_F(StoreFds, RegisteredFilesLeaveNothingOpen) {
  // The transfer-layer equivalent of NIXL's register_files: open targets for many files,
  // then let the handles go.
  KVTIER_ASSERT_OK(put_batch(testing::keys_for("f", 64)).status);
  AgentConfig ac;
  ac.backend = "posix";
  ac.registry = &builtin_backends();
  KVTIER_ASSERT_OK_AND_ASSIGN(Agent agent, Agent::create(ac));
  const size_t before = open_fds();
  {
    std::vector<TargetSpec> specs;
    for (const auto& k : testing::keys_for("f", 64))
      specs.push_back({page_file(k), TargetMode::kRead, 0, {}});
    auto targets = agent.open_targets(specs);
    for (auto& t : targets) KVTIER_ASSERT_OK(t.status());
    EXPECT_EQ(open_fds(), before + 64);
  }
  EXPECT_EQ(open_fds(), before);
}

TEST_F(StoreFds, FailedOpenForRead) {
  ASSERT_TRUE(put_batch({"x0", "x1", "x2"}).all_ok());
  faults_->add(FaultRule{.op = FaultOp::kOpenRead, .error = EMFILE, .skip = 1, .count = 1});
  BatchResult r = get_batch({"x0", "x1", "x2"});
  KVTIER_EXPECT_OK(r.pages[0]);
  EXPECT_EQ(r.pages[1].code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(r.pages[1].retryable());
  KVTIER_EXPECT_OK(r.pages[2]);
  EXPECT_EQ(open_fds(), base_);
}

TEST_F(StoreFds, CorruptPage) {
  KVTIER_ASSERT_OK(store_->put("c", pool_->slot(0), kPage));
  const std::string f = page_file("c");
  std::string bytes = testing::read_file(f);
  bytes[5000] ^= 1;
  testing::write_file(f, bytes);
  EXPECT_EQ(store_->get("c", pool_->slot(128), kPage).code(), StatusCode::kCorrupt);
  EXPECT_EQ(open_fds(), base_);
}

TEST_F(StoreFds, MissingNamespaceDirectoryIsRecreatedUnderItsBase) {
  // Someone removed the namespace's tree under a running store; its base is still there.
  std::filesystem::remove_all(dir_.file("store") + "/kvtier");
  EXPECT_EQ(store_->get("gone", pool_->slot(128), kPage).code(), StatusCode::kNotFound);
  EXPECT_EQ(open_fds(), base_) << "get";
  KVTIER_EXPECT_OK(store_->put("again", pool_->slot(0), kPage));
  EXPECT_EQ(open_fds(), base_) << "put";
  KVTIER_EXPECT_OK(store_->get("again", pool_->slot(128), kPage));
  EXPECT_TRUE(pool_->holds(128, kPage, 0));
  EXPECT_EQ(open_fds(), base_);
}

TEST_F(StoreFds, AVanishedBaseIsNeverRecreated) {
  // The base itself is gone: so may be the filesystem it was on (a network mount detached
  // under the store), and a put must not make a tree on whatever lies beneath.
  std::filesystem::remove_all(dir_.file("store"));
  const Status st = store_->put("again", pool_->slot(0), kPage);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
  EXPECT_FALSE(std::filesystem::exists(dir_.file("store")));
  EXPECT_EQ(open_fds(), base_);
}

TEST_F(StoreFds, OpeningAStoreOnAFileFailsCleanly) {
  testing::write_file(dir_.file("plainfile"), "x");
  const size_t before = open_fds();
  Result<std::unique_ptr<Store>> s = Store::open(StoreConfig{
      .location = *parse_store_uri(dir_.file("plainfile")), .ns = testing::test_namespace()});
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(open_fds(), before);
}

TEST_F(StoreFds, PermissionDenied) {
  // CI runs as root, where modes do not bite: inject EACCES where the kernel would return it.
  ASSERT_TRUE(put_batch({"p0"}).all_ok());
  faults_->add(FaultRule{.op = FaultOp::kOpenCreate, .error = EACCES});
  faults_->add(FaultRule{.op = FaultOp::kOpenRead, .error = EACCES});
  BatchResult w = put_batch({"p1", "p2"});
  EXPECT_EQ(w.pages[0].code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(w.pages[1].code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(open_fds(), base_) << "put";
  EXPECT_EQ(store_->get("p0", pool_->slot(128), kPage).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(open_fds(), base_) << "get";
  faults_->clear();
  KVTIER_EXPECT_OK(store_->get("p0", pool_->slot(128), kPage)) << "nothing was lost";
}

TEST_F(StoreFds, NoSpaceWhileWriting) {
  // The targets are really opened; then every write fails with ENOSPC.
  faults_->add(FaultRule{.op = FaultOp::kWrite, .error = ENOSPC, .skip = 0, .count = 100});
  const auto keys = testing::keys_for("n", 32);
  BatchResult w = put_batch(keys);
  for (const Status& s : w.pages) EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(open_fds(), base_);
  EXPECT_EQ(store_->batch_exists(testing::views(keys)), 0u) << "no partial page is visible";
  EXPECT_TRUE(testing::list_files(store_->namespace_dirs()[0] + "/tmp").empty());
  faults_->clear();
  EXPECT_TRUE(put_batch(keys).all_ok());
}

TEST_F(StoreFds, NoSpaceOnPublish) {
  faults_->add(FaultRule{.op = FaultOp::kPublish, .error = ENOSPC, .skip = 1, .count = 1});
  BatchResult w = put_batch({"q0", "q1", "q2"});
  KVTIER_EXPECT_OK(w.pages[0]);
  EXPECT_EQ(w.pages[1].code(), StatusCode::kResourceExhausted);
  KVTIER_EXPECT_OK(w.pages[2]);
  EXPECT_EQ(w.ok_prefix(), 1u);
  EXPECT_EQ(open_fds(), base_);
}

TEST_F(StoreFds, ReadErrorMidBatch) {
  ASSERT_TRUE(put_batch({"r0", "r1"}).all_ok());
  faults_->add(FaultRule{.op = FaultOp::kRead, .path_contains = hash128("r1").hex(), .error = EIO});
  BatchResult r = get_batch({"r0", "r1"});
  KVTIER_EXPECT_OK(r.pages[0]);
  EXPECT_EQ(r.pages[1].code(), StatusCode::kUnavailable);
  EXPECT_EQ(open_fds(), base_);
}

// A real full filesystem: a 1 MiB tmpfs. Needs CAP_SYS_ADMIN (CI and this project's machines
// run as root); skipped otherwise.
TEST(StoreFdsTmpfs, RealENOSPC) {
  testing::TempDir dir;
  const std::string mnt = dir.file("mnt");
  ASSERT_TRUE(std::filesystem::create_directory(mnt));
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); the fault-injection ENOSPC tests cover this path";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  {
    auto store =
        testing::open_store(*parse_store_uri(mnt + "?backend=posix"), testing::test_namespace());
    ASSERT_NE(store, nullptr);
    PagePool pool(*store, 1, 100000);
    pool.fill(0, 100000, 1);
    const size_t base = open_fds();
    size_t stored = 0;
    Status last;
    for (int i = 0; i < 40; ++i) {
      last = store->put("t" + std::to_string(i), pool.slot(0), 100000);
      if (!last.ok()) break;
      ++stored;
    }
    ASSERT_FALSE(last.ok()) << "1 MiB should not hold 40 pages of 100 kB";
    EXPECT_EQ(last.code(), StatusCode::kResourceExhausted) << last.to_string();
    EXPECT_GT(stored, 0u);
    EXPECT_EQ(open_fds(), base);
    // Everything stored before the disk filled reads back; nothing partial is visible.
    PagePool check(*store, 1, 100000);
    for (size_t i = 0; i < stored; ++i) {
      KVTIER_ASSERT_OK(store->get("t" + std::to_string(i), check.slot(0), 100000));
      ASSERT_TRUE(check.holds(0, 100000, 1));
    }
    EXPECT_EQ(*store->exists("t" + std::to_string(stored)), false);
    // Freeing space makes writes work again.
    KVTIER_ASSERT_OK(store->remove("t0"));
    KVTIER_EXPECT_OK(store->put("after", pool.slot(0), 100000));
    EXPECT_EQ(open_fds(), base);
  }
}

}  // namespace
}  // namespace kvtier
