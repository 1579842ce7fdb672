// Bad input gets a clear error and loses nothing: mismatched lists, null or unregistered
// buffers, empty and oversized keys, huge sizes, path-like keys, bad configurations.
#include <gtest/gtest.h>

#include <filesystem>

#include "format/page_format.h"
#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

class StoreBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    loc_ = *parse_store_uri(dir_.file("base") + "?backend=posix");
    store_ = testing::open_store(loc_, testing::test_namespace());
    ASSERT_NE(store_, nullptr);
    pool_ = std::make_unique<PagePool>(*store_, 4, 8192);
    pool_->fill(0, 8192, 1);
    KVTIER_ASSERT_OK(store_->put("keep-me", pool_->slot(0), 8192));
  }

  void TearDown() override {
    // Nothing was lost along the way.
    if (!store_) return;
    KVTIER_EXPECT_OK(store_->get("keep-me", pool_->slot(3), 8192));
    EXPECT_TRUE(pool_->holds(3, 8192, 1));
  }

  testing::TempDir dir_;
  StoreLocation loc_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<PagePool> pool_;
};

TEST_F(StoreBadInput, MismatchedListLengths) {
  const std::vector<std::string_view> keys = {"a", "b", "c"};
  const std::vector<ConstBuffer> two = {pool_->in(0, 8192), pool_->in(1, 8192)};
  BatchResult r = store_->batch_put(keys, two);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("2 pieces for 3 keys"), std::string::npos)
      << r.status.message();
  EXPECT_TRUE(r.pages.empty());
  EXPECT_EQ(store_->batch_exists(keys), 0u);
  const std::vector<MutableBuffer> none;
  EXPECT_EQ(store_->batch_get(keys, none).status.code(), StatusCode::kInvalidArgument);
  const std::vector<std::string_view> no_keys;
  EXPECT_EQ(store_->batch_get(no_keys, std::vector<MutableBuffer>{pool_->out(1, 10)}).status.code(),
            StatusCode::kInvalidArgument);
  BatchResult empty = store_->batch_get(no_keys, none);
  KVTIER_EXPECT_OK(empty.status);
  EXPECT_TRUE(empty.pages.empty());
}

TEST_F(StoreBadInput, NullAndUnregisteredBuffers) {
  EXPECT_EQ(store_->put("n", nullptr, 100).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->get("keep-me", nullptr, 8192).code(), StatusCode::kInvalidArgument);
  std::vector<char> heap(8192, 'x');
  Status st = store_->put("heap", heap.data(), heap.size());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not inside any registered region"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("piece 0"), std::string::npos) << st.message();
  EXPECT_EQ(store_->get("keep-me", heap.data(), heap.size()).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(*store_->exists("heap"));
  EXPECT_GE(store_->stats().invalid_requests, 4u);
}

TEST_F(StoreBadInput, BufferStraddlingTheEndOfItsRegistration) {
  // The last slot plus one byte runs past the pool.
  Status st = store_->put("straddle", pool_->slot(3), 8193);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreBadInput, ReleasedRegistrationIsRejected) {
  pool_->release();
  EXPECT_EQ(store_->put("late", pool_->slot(0), 8192).code(), StatusCode::kInvalidArgument);
  pool_ = std::make_unique<PagePool>(*store_, 4, 8192);  // for TearDown
}

TEST_F(StoreBadInput, EmptyAndOversizedKeys) {
  EXPECT_EQ(store_->put("", pool_->slot(0), 8192).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->get("", pool_->slot(0), 8192).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->exists("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->remove("").code(), StatusCode::kInvalidArgument);
  const std::string huge(page::kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(store_->put(huge, pool_->slot(0), 8192).code(), StatusCode::kInvalidArgument);
  const std::string biggest(page::kMaxKeyBytes, 'k');
  KVTIER_EXPECT_OK(store_->put(biggest, pool_->slot(0), 8192));
  KVTIER_EXPECT_OK(store_->get(biggest, pool_->slot(1), 8192));
  const std::vector<std::string_view> keys = {"", "fine"};
  const std::vector<ConstBuffer> pieces = {pool_->in(0, 8192), pool_->in(1, 8192)};
  BatchResult r = store_->batch_put(keys, pieces);
  EXPECT_EQ(r.pages[0].code(), StatusCode::kInvalidArgument);
  KVTIER_EXPECT_OK(r.pages[1]);
}

TEST_F(StoreBadInput, HugeSizes) {
  EXPECT_EQ(store_->put("h", pool_->slot(0), size_t{1} << 62).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->get("keep-me", pool_->slot(0), SIZE_MAX).code(), StatusCode::kInvalidArgument);
  const std::vector<ConstBuffer> overflow = {{pool_->slot(0), SIZE_MAX}, {pool_->slot(1), 2}};
  const std::vector<std::string_view> one = {"o"};
  EXPECT_EQ(store_->batch_put(one, overflow).pages[0].code(), StatusCode::kInvalidArgument);
}

TEST_F(StoreBadInput, PathLikeKeysNeverEscapeTheBase) {
  // A sentinel beside the base directory that a path traversal would reach.
  testing::write_file(dir_.file("passwd"), "root:x:0:0");
  const std::vector<std::string> keys = {"../../passwd",
                                         "../passwd",
                                         "/etc/passwd",
                                         "..",
                                         ".",
                                         "a/b/c",
                                         std::string("nul\0key", 7),
                                         std::string("\0", 1),
                                         "~root",
                                         "con",
                                         "x\ny",
                                         std::string(300, '/')};
  for (size_t i = 0; i < keys.size(); ++i) {
    pool_->fill(1, 8192, 50 + i);
    KVTIER_ASSERT_OK(store_->put(keys[i], pool_->slot(1), 8192)) << i;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    KVTIER_ASSERT_OK(store_->get(keys[i], pool_->slot(2), 8192)) << i;
    EXPECT_TRUE(pool_->holds(2, 8192, 50 + i)) << i;
  }
  EXPECT_EQ(testing::read_file(dir_.file("passwd")), "root:x:0:0");
  // Every file is under base/kvtier/<namespace>/ and named by hashes only.
  const std::string ns = store_->namespace_id().hex();
  for (const std::string& f : testing::list_files(dir_.path())) {
    if (f == "passwd") continue;
    EXPECT_EQ(f.rfind("base/kvtier/" + ns + "/", 0), 0u) << f;
    EXPECT_EQ(f.find(".."), std::string::npos) << f;
  }
  EXPECT_EQ(testing::list_files(dir_.file("base")).size(), keys.size() + 2)  // + keep-me + manifest
      << "one file per key";
}

TEST_F(StoreBadInput, BadConfigurations) {
  StoreConfig cfg;
  cfg.location = loc_;
  cfg.ns = testing::test_namespace();
  cfg.ns.tp = {3, 2};
  EXPECT_EQ(Store::open(cfg).status().code(), StatusCode::kInvalidArgument);

  cfg.ns = testing::test_namespace();
  cfg.backend = "nixl";
  Result<std::unique_ptr<Store>> s = Store::open(cfg);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("unknown backend"), std::string::npos);

  cfg.backend.clear();
  cfg.location.bases.clear();
  EXPECT_EQ(Store::open(cfg).status().code(), StatusCode::kInvalidArgument);
}

// A typo in a location is an error naming it, on every storage class and through decorators,
// never a silently ignored parameter or a quiet fall back from uring to posix.
TEST_F(StoreBadInput, UnknownAndUnparsableLocationParameters) {
  const std::string base = dir_.file("strict");
  struct Case {
    std::string uri;
    std::string named;
  };
  std::vector<Case> cases = {{"file://" + base + "?bogus=1", "bogus"},
                             {"file://" + base + "?queue_dept=128", "queue_dept"},
                             {"file://" + base + "?queue_depth=abc", "queue_depth"},
                             {"file://" + base + "?backend=posix&io_threads=x", "io_threads"},
                             {"file://" + base + "?backend=posix&queue_depth=8", "queue_depth"},
                             {"file://" + base + "?use_tmpfile=maybe", "use_tmpfile"},
                             {"file://" + base + "?deadline_ms=soon", "deadline_ms"},
                             {"file://" + base + "?probe_interval_ms=0", "probe_interval_ms"},
                             {"file://" + base + "?isolate=maybe", "isolate"},
                             {"mem://strict?io_threads=4", "io_threads"},
                             {"s3://kvtier-test/p?max_parallel=lots", "max_parallel"},
                             {"s3://kvtier-test/p?regoin=eu", "regoin"}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.uri);
    Result<StoreLocation> parsed = parse_store_uri(k.uri);
    if (parsed.status().code() == StatusCode::kUnsupported) continue;  // built without S3
    KVTIER_ASSERT_OK_AND_ASSIGN(StoreLocation loc, std::move(parsed));
    StoreConfig cfg;
    cfg.location = loc;
    cfg.ns = testing::test_namespace();
    for (bool faulty : {false, true}) {
      if (faulty) {
        auto faults = std::make_shared<FaultInjector>();
        cfg.decorate = [faults](std::unique_ptr<Backend> b) {
          return make_fault_backend(std::move(b), faults);
        };
      }
      Result<std::unique_ptr<Store>> s = Store::open(cfg);
      if (loc.storage_class == StorageClass::kObject &&
          s.status().code() == StatusCode::kUnsupported) {
        continue;  // built without S3
      }
      EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().to_string();
      EXPECT_NE(s.status().message().find(k.named), std::string::npos) << s.status().to_string();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(base)) << "a refused location must leave nothing behind";
}

}  // namespace
}  // namespace kvtier
