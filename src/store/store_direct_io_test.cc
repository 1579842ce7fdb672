// Direct I/O: in place when memory and sizes are aligned, through registered staging buffers
// when not (never refused), buffered with a counter or a stated reason otherwise, and
// interchangeable with buffered I/O on the same files.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "format/page_format.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

class StoreDirectIo : public ::testing::Test {
 protected:
  void SetUp() override { loc_ = *parse_store_uri(dir_.file("s") + "?backend=posix"); }

  std::unique_ptr<Store> open(DirectIo mode, uint64_t staging_bytes = 256 << 20) {
    StoreConfig cfg;
    cfg.location = loc_;
    cfg.ns = testing::test_namespace();
    cfg.direct_io = mode;
    cfg.staging_bytes = staging_bytes;
    auto s = testing::open_store(cfg);
    if (s && mode != DirectIo::kOff && s->stats().direct_io.starts_with("off")) {
      skip_reason_ = s->stats().direct_io;
    }
    return s;
  }

  testing::TempDir dir_;
  StoreLocation loc_;
  std::string skip_reason_;
};

#define SKIP_WITHOUT_DIRECT_IO() \
  if (!skip_reason_.empty()) GTEST_SKIP() << "no direct I/O here: " << skip_reason_

TEST_F(StoreDirectIo, AlignedPagesGoDirectInPlace) {
  auto s = open(DirectIo::kOn);
  ASSERT_NE(s, nullptr);
  SKIP_WITHOUT_DIRECT_IO();
  EXPECT_NE(s->stats().direct_io.find("alignment"), std::string::npos) << s->stats().direct_io;
  PagePool pool(*s, 2, 4 << 20);
  pool.fill(0, 4 << 20, 1);
  KVTIER_ASSERT_OK(s->put("a", pool.slot(0), 4 << 20));
  KVTIER_ASSERT_OK(s->get("a", pool.slot(1), 4 << 20));
  EXPECT_TRUE(pool.holds(1, 4 << 20, 1));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.direct_pages, 2u);
  EXPECT_EQ(st.staged_pages, 0u);
  EXPECT_EQ(st.direct_fallback_pages, 0u);
}

TEST_F(StoreDirectIo, UnalignedSizesAndMemoryAreStagedNeverRefused) {
  auto s = open(DirectIo::kOn);
  ASSERT_NE(s, nullptr);
  SKIP_WITHOUT_DIRECT_IO();
  PagePool pool(*s, 3, 80000);
  // DeepSeek-V3 page size 1: 70,272 bytes, not a multiple of 512.
  pool.fill(0, 70272, 2);
  KVTIER_ASSERT_OK(s->put("ds", pool.slot(0), 70272));
  KVTIER_ASSERT_OK(s->get("ds", pool.slot(1), 70272));
  EXPECT_TRUE(pool.holds(1, 70272, 2));
  // Aligned size, unaligned memory.
  std::byte* odd = pool.slot(2) + 8;
  testing::fill_pattern(odd, 65536, 3);
  KVTIER_ASSERT_OK(s->put("odd", odd, 65536));
  std::memset(pool.slot(0), 0, 65536);
  KVTIER_ASSERT_OK(s->get("odd", pool.slot(0), 65536));
  EXPECT_EQ(testing::find_pattern_mismatch(pool.slot(0), 65536, 3), SIZE_MAX);
  const StoreStats st = s->stats();
  EXPECT_EQ(st.staged_pages, 3u);  // ds put, ds get, odd put
  EXPECT_EQ(st.direct_pages, 1u);  // odd get into aligned memory
  // The object is padded to whole 4096-byte blocks.
  EXPECT_EQ(std::filesystem::file_size(testing::page_file(*s, "ds")), page::object_bytes(70272));
  EXPECT_EQ(page::object_bytes(70272), 4096u + 73728u);
}

TEST_F(StoreDirectIo, AutoGoesBufferedForUnalignedPagesAndCountsIt) {
  auto s = open(DirectIo::kAuto);
  ASSERT_NE(s, nullptr);
  SKIP_WITHOUT_DIRECT_IO();
  PagePool pool(*s, 2, 80000);
  pool.fill(0, 70272, 4);
  KVTIER_ASSERT_OK(s->put("p", pool.slot(0), 70272));
  KVTIER_ASSERT_OK(s->get("p", pool.slot(1), 70272));
  EXPECT_TRUE(pool.holds(1, 70272, 4));
  const StoreStats st = s->stats();
  EXPECT_EQ(st.direct_fallback_pages, 2u);
  EXPECT_EQ(st.staged_pages, 0u);
}

TEST_F(StoreDirectIo, FullStagingPoolFallsBackToBufferedWithACounter) {
  auto s = open(DirectIo::kOn, /*staging_bytes=*/64 << 10);  // smaller than one staged page
  ASSERT_NE(s, nullptr);
  SKIP_WITHOUT_DIRECT_IO();
  PagePool pool(*s, 2, 80000);
  pool.fill(0, 70272, 5);
  KVTIER_ASSERT_OK(s->put("f", pool.slot(0), 70272));
  KVTIER_ASSERT_OK(s->get("f", pool.slot(1), 70272));
  EXPECT_TRUE(pool.holds(1, 70272, 5));
  EXPECT_EQ(s->stats().direct_fallback_pages, 2u);
}

TEST_F(StoreDirectIo, DirectAndBufferedStoresReadEachOthersPages) {
  auto direct = open(DirectIo::kOn);
  ASSERT_NE(direct, nullptr);
  SKIP_WITHOUT_DIRECT_IO();
  auto buffered = open(DirectIo::kOff);
  PagePool dp(*direct, 2, 1310720), bp(*buffered, 2, 1310720);
  dp.fill(0, 1310720, 6);
  bp.fill(0, 70272, 7);
  KVTIER_ASSERT_OK(direct->put("from-direct", dp.slot(0), 1310720));
  KVTIER_ASSERT_OK(buffered->put("from-buffered", bp.slot(0), 70272));
  KVTIER_ASSERT_OK(buffered->get("from-direct", bp.slot(1), 1310720));
  EXPECT_TRUE(bp.holds(1, 1310720, 6));
  KVTIER_ASSERT_OK(direct->get("from-buffered", dp.slot(1), 70272));
  EXPECT_TRUE(dp.holds(1, 70272, 7));
}

TEST_F(StoreDirectIo, CorruptionIsStillCaught) {
  auto s = open(DirectIo::kOn);
  ASSERT_NE(s, nullptr);
  SKIP_WITHOUT_DIRECT_IO();
  PagePool pool(*s, 2, 1 << 20);
  pool.fill(0, 70272, 8);
  KVTIER_ASSERT_OK(s->put("c", pool.slot(0), 70272));
  const std::string f = testing::page_file(*s, "c");
  std::string bytes = testing::read_file(f);
  bytes[page::kHeaderBytes + 70000] ^= 4;
  testing::write_file(f, bytes);
  std::memset(pool.slot(1), 0x77, 70272);
  EXPECT_EQ(s->get("c", pool.slot(1), 70272).code(), StatusCode::kCorrupt);
  // A staged page that fails verification never reaches the caller's memory.
  for (size_t i = 0; i < 70272; ++i) ASSERT_EQ(pool.slot(1)[i], std::byte{0x77}) << i;
}

TEST_F(StoreDirectIo, NoDescriptorLeaksOnDirectPaths) {
  auto s = open(DirectIo::kOn);
  ASSERT_NE(s, nullptr);
  SKIP_WITHOUT_DIRECT_IO();
  PagePool pool(*s, 64, 70272);
  const size_t before = testing::open_fds();
  const auto keys = testing::keys_for("l", 64);
  std::vector<ConstBuffer> in;
  std::vector<MutableBuffer> out;
  for (size_t i = 0; i < 64; ++i) {
    in.push_back(pool.in(i, 70272));
    out.push_back(pool.out(i, 70272));
  }
  EXPECT_TRUE(s->batch_put(testing::views(keys), in).all_ok());
  EXPECT_TRUE(s->batch_get(testing::views(keys), out).all_ok());
  EXPECT_EQ(testing::open_fds(), before);
}

TEST(StoreDirectIoUnsupported, TmpfsRunsBufferedAndSaysWhy) {
  testing::TempDir dir;
  const std::string mnt = dir.file("mnt");
  ASSERT_TRUE(std::filesystem::create_directory(mnt));
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << ")";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  {
    StoreConfig cfg;
    cfg.location = *parse_store_uri(mnt + "?backend=posix");
    cfg.ns = testing::test_namespace();
    cfg.direct_io = DirectIo::kOn;
    auto s = testing::open_store(cfg);
    ASSERT_NE(s, nullptr);
    const std::string why = s->stats().direct_io;
    EXPECT_TRUE(why.starts_with("off: ")) << why;
    EXPECT_NE(why.find("direct I/O"), std::string::npos) << why;
    PagePool pool(*s, 2, 70272);
    pool.fill(0, 70272, 9);
    KVTIER_ASSERT_OK(s->put("t", pool.slot(0), 70272));
    KVTIER_ASSERT_OK(s->get("t", pool.slot(1), 70272));
    EXPECT_TRUE(pool.holds(1, 70272, 9));
    EXPECT_EQ(s->stats().direct_pages + s->stats().staged_pages, 0u);
  }
}

TEST(StoreDirectIoUnsupported, MemoryBackendSaysWhy) {
  StoreConfig cfg;
  cfg.location = *parse_store_uri("mem://direct-io-test");
  cfg.ns = testing::test_namespace();
  cfg.direct_io = DirectIo::kAuto;
  auto s = testing::open_store(cfg);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().direct_io, "off: the dram backend has no direct I/O");
}

TEST(DirectIoMode, Parse) {
  EXPECT_EQ(*parse_direct_io("auto"), DirectIo::kAuto);
  EXPECT_EQ(*parse_direct_io("on"), DirectIo::kOn);
  EXPECT_EQ(*parse_direct_io("off"), DirectIo::kOff);
  EXPECT_EQ(parse_direct_io("yes").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(direct_io_name(DirectIo::kAuto), "auto");
}

}  // namespace
}  // namespace kvtier
