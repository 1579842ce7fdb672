// How pages' chunks are hashed (StoreConfig::chunk_hash): a store writes CRC-64 or XXH3 chunks
// as it is told (or the faster on its CPU), says so in each header, and reads pages written
// either way byte-exact, while a damaged page of either kind is still a miss. Both FILE
// layouts, buffered and direct I/O (pages staged, then hashed from staging).
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>

#include "format/page_format.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

// Five pieces of 100,000 bytes: the 256 KiB chunks span piece boundaries.
constexpr size_t kPieces = 5;
constexpr size_t kPiece = 100000;
constexpr size_t kPages = 4;

struct HashCase {
  std::string layout;
  DirectIo direct_io;
};

void PrintTo(const HashCase& c, std::ostream* os) {
  *os << c.layout << (c.direct_io == DirectIo::kOn ? ", direct I/O" : "");
}

std::string hash_case_name(const ::testing::TestParamInfo<HashCase>& info) {
  return info.param.layout + (info.param.direct_io == DirectIo::kOn ? "_direct" : "");
}

class StoreChunkHash : public ::testing::TestWithParam<HashCase> {
 protected:
  std::unique_ptr<Store> open(const std::string& chunk_hash) {
    StoreConfig cfg;
    cfg.location = *parse_store_uri(dir_.file("s") + "?backend=posix&layout=" + GetParam().layout);
    cfg.ns = testing::test_namespace();
    cfg.direct_io = GetParam().direct_io;
    cfg.chunk_hash = chunk_hash;
    return testing::open_store(std::move(cfg));
  }

  static std::vector<std::string> keys(const std::string& prefix) {
    std::vector<std::string> k;
    for (size_t i = 0; i < kPages; ++i) k.push_back(prefix + std::to_string(i));
    return k;
  }

  // Writes kPages pages named `prefix`N through `store`, patterns from `seed`.
  void write(Store& store, const std::string& prefix, uint64_t seed) {
    PagePool pool(store, kPages * kPieces, kPiece);
    std::vector<ConstBuffer> in;
    for (size_t i = 0; i < kPages * kPieces; ++i) {
      pool.fill(i, kPiece, seed + i);
      in.push_back(pool.in(i, kPiece));
    }
    const std::vector<std::string> k = keys(prefix);
    const std::vector<std::string_view> views(k.begin(), k.end());
    BatchResult r = store.batch_put(views, in);
    for (const Status& st : r.pages) KVTIER_EXPECT_OK(st);
  }

  // Reads them back through `store`: each page's status, and whether its bytes are exact.
  std::vector<Status> read(Store& store, const std::string& prefix, uint64_t seed) {
    PagePool pool(store, kPages * kPieces, kPiece);
    std::vector<MutableBuffer> out;
    for (size_t i = 0; i < kPages * kPieces; ++i) {
      std::memset(pool.slot(i), 0x5A, kPiece);
      out.push_back(pool.out(i, kPiece));
    }
    const std::vector<std::string> k = keys(prefix);
    const std::vector<std::string_view> views(k.begin(), k.end());
    BatchResult r = store.batch_get(views, out);
    for (size_t p = 0; p < kPages; ++p) {
      if (!r.pages[p].ok()) continue;
      for (size_t i = 0; i < kPieces; ++i) {
        EXPECT_TRUE(pool.holds(p * kPieces + i, kPiece, seed + p * kPieces + i))
            << prefix << p << " piece " << i;
      }
    }
    return r.pages;
  }

  testing::TempDir dir_;
};

TEST_P(StoreChunkHash, PagesWrittenEitherWayAreReadByteExactByEither) {
  {
    auto crc = open("crc64");
    ASSERT_NE(crc, nullptr);
    EXPECT_EQ(crc->stats().chunk_hash, "crc64 (chunk_hash=crc64)");
    write(*crc, "crc-", 100);
  }
  {
    auto xxh = open("xxh3");
    ASSERT_NE(xxh, nullptr);
    EXPECT_EQ(xxh->stats().chunk_hash, "xxh3 (chunk_hash=xxh3)");
    for (const Status& st : read(*xxh, "crc-", 100)) KVTIER_EXPECT_OK(st);
    write(*xxh, "xxh-", 200);
    for (const Status& st : read(*xxh, "xxh-", 200)) KVTIER_EXPECT_OK(st);
  }
  auto crc = open("crc64");
  ASSERT_NE(crc, nullptr);
  for (const Status& st : read(*crc, "xxh-", 200)) KVTIER_EXPECT_OK(st);
  for (const Status& st : read(*crc, "crc-", 100)) KVTIER_EXPECT_OK(st);
  EXPECT_EQ(testing::rejected_total(*crc), 0u);
  // The default is one of the two, said with why.
  auto chosen = open("");
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(chosen->stats().chunk_hash,
            std::string(chunk_hash_name(fastest_chunk_hash())) + " (auto: the faster on this CPU)");
  for (const Status& st : read(*chosen, "xxh-", 200)) KVTIER_EXPECT_OK(st);
}

// The same, where a page's bytes are a file of their own to damage.
class StoreChunkHashFiles : public StoreChunkHash {};

TEST_P(StoreChunkHashFiles, AFlippedByteOfAPageOfEitherKindIsAMissToEitherReader) {
  for (const std::string writer : {"crc64", "xxh3"}) {
    for (const std::string reader : {"crc64", "xxh3"}) {
      SCOPED_TRACE(writer + " page, " + reader + " reader");
      const std::string prefix = writer + "-for-" + reader + "-";
      {
        auto w = open(writer);
        ASSERT_NE(w, nullptr);
        write(*w, prefix, 7);
      }
      auto r = open(reader);
      ASSERT_NE(r, nullptr);
      // The header says how its chunks were hashed.
      const std::string first = testing::read_file(testing::page_file(*r, prefix + "0"));
      uint32_t flags = 0;
      std::memcpy(&flags, first.data() + 12, 4);
      EXPECT_EQ(flags, writer == "xxh3" ? page::kFlagXxh3Chunks : 0u);
      // The last byte of page 1's last piece: its last chunk, which spans two pieces.
      const std::string file = testing::page_file(*r, prefix + "1");
      std::string bytes = testing::read_file(file);
      bytes[page::kHeaderBytes + kPieces * kPiece - 1] ^= 0x01;
      testing::write_file(file, bytes);
      const std::vector<Status> got = read(*r, prefix, 7);
      KVTIER_EXPECT_OK(got[0]);
      EXPECT_EQ(got[1].code(), StatusCode::kCorrupt) << got[1].to_string();
      KVTIER_EXPECT_OK(got[2]);
      EXPECT_EQ(testing::rejected(*r, "checksum"), 1u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, StoreChunkHash,
                         ::testing::Values(HashCase{"files", DirectIo::kOff},
                                           HashCase{"segments", DirectIo::kOff},
                                           HashCase{"files", DirectIo::kOn}),
                         hash_case_name);
INSTANTIATE_TEST_SUITE_P(PageFiles, StoreChunkHashFiles,
                         ::testing::Values(HashCase{"files", DirectIo::kOff},
                                           HashCase{"files", DirectIo::kOn}),
                         hash_case_name);

TEST(StoreChunkHashUri, TheUriNamesItAndAnUnknownNameIsRefused) {
  testing::TempDir dir;
  StoreConfig cfg;
  cfg.location = *parse_store_uri(dir.file("s") + "?backend=posix&chunk_hash=xxh3");
  cfg.ns = testing::test_namespace();
  auto s = testing::open_store(cfg);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().chunk_hash, "xxh3 (chunk_hash=xxh3)");
  s.reset();
  cfg.location = *parse_store_uri(dir.file("s") + "?backend=posix&chunk_hash=md5");
  Result<std::unique_ptr<Store>> bad = Store::open(cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("chunk_hash 'md5' (use auto, crc64 or xxh3)"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace kvtier
