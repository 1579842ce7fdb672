#include "kvtier/core/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>  // the library's XXH3, to compare with

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace kvtier {
namespace {

TEST(Checksum, DetectsASingleFlippedBit) {
  std::string data(70272, 'k');
  const uint64_t a = checksum64(data);
  data[35000] ^= 0x01;
  EXPECT_NE(checksum64(data), a);
}

TEST(Checksum, KnownVectorsPinTheAlgorithm) {
  // XXH3-64 and XXH3-128 of the empty input (xxHash's published reference values): pages
  // written by one build must verify on another.
  EXPECT_EQ(checksum64("", 0), 0x2D06800538D394C2ull);
  const Hash128 h = hash128("", 0);
  EXPECT_EQ(h.high, 0x99AA06D3014798D8ull);
  EXPECT_EQ(h.low, 0x6001C324468D497Full);
  EXPECT_EQ(h.hex(), "99aa06d3014798d86001c324468d497f");
}

// Runs check(p, n) over pseudo-random bytes of the sizes 0..300 and `edges`, each at offsets
// 0, 1, 7 and 63, until it returns false; returns where it did ("" if never).
template <typename Check>
std::string first_failure(std::initializer_list<size_t> edges, Check check) {
  std::vector<unsigned char> data(std::max<size_t>(300, std::max(edges)) + 64);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 300; ++n) sizes.push_back(n);
  sizes.insert(sizes.end(), edges);
  for (size_t n : sizes) {
    for (size_t offset : {0, 1, 7, 63}) {
      if (!check(data.data() + offset, n)) {
        return std::to_string(n) + " bytes at offset " + std::to_string(offset);
      }
    }
  }
  return "";
}

TEST(Checksum, EqualsTheLibraryAtEverySizeAndAlignment) {
  // checksum64 is XXH3-64 through libxxhash's run-time dispatch: it must agree with the
  // plain entry point bit for bit, or pages written on one machine would not verify on
  // another. Sizes cover XXH3's short, medium and long paths, stripe and block edges, and the
  // 256 KiB checksum chunk.
  EXPECT_EQ(first_failure({1023, 1024, 1025, 4095, 4096, 4097, 65535, 65536, 70272, 262143, 262144,
                           262145, 1 << 20},
                          [](const unsigned char* p, size_t n) {
                            return checksum64(p, n) == XXH3_64bits(p, n);
                          }),
            "");
}

// CRC-64/XZ by its definition, one bit at a time: what every build's crc64 must equal.
uint64_t crc64_by_definition(const unsigned char* p, size_t n, uint64_t crc = 0) {
  constexpr uint64_t kReflectedPolynomial = 0xC96C5795D7870F42ull;  // ECMA-182
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (kReflectedPolynomial & (0 - (crc & 1)));
  }
  return ~crc;
}

TEST(Crc64, KnownVectorsPinTheAlgorithm) {
  // The catalogued check value of CRC-64/XZ, and the empty input.
  EXPECT_EQ(crc64("123456789", 9), 0x995DC9BBDF1939FAull);
  EXPECT_EQ(crc64("", 0), 0u);
}

TEST(Crc64, EqualsTheDefinitionAtEverySizeAndAlignment) {
  // ISA-L picks vector code by CPU: a page written on one machine must verify on another.
  // Sizes cover the short tails and fold-block edges of that code, and the 256 KiB chunk.
  EXPECT_EQ(
      first_failure({511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097, 70272, 262143, 262144},
                    [](const unsigned char* p, size_t n) {
                      return crc64(p, n) == crc64_by_definition(p, n);
                    }),
      "");
}

TEST(Crc64, ContinuesAnEarlierResult) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  const uint64_t whole = crc64(data.data(), data.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{4095}, size_t{65536}, data.size()}) {
    EXPECT_EQ(crc64(data.data() + split, data.size() - split, crc64(data.data(), split)), whole)
        << split;
  }
  data[35000] ^= 0x01;
  EXPECT_NE(crc64(data.data(), data.size()), whole);
}

// Splits `data` at `cuts` (offsets, ascending) and hashes the parts with a PartsHash.
uint64_t hash_in_parts(ChunkHash hash, const std::string& data, std::vector<size_t> cuts) {
  PartsHash h(hash);
  size_t at = 0;
  cuts.push_back(data.size());
  for (size_t cut : cuts) {
    h.add(data.data() + at, cut - at);
    at = cut;
  }
  return h.digest();
}

TEST(PartsHash, EqualsTheWholeBufferHashHoweverItIsCut) {
  // A chunk that spans a page's pieces is hashed in parts; a reader whose pieces are cut
  // elsewhere (or staged whole) must get the same value.
  std::string data(262144, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 9));
  const uint64_t crc = crc64(data.data(), data.size());
  const uint64_t xxh = XXH3_64bits(data.data(), data.size());
  const std::vector<std::vector<size_t>> cuttings = {
      {}, {0}, {1}, {100000}, {100000, 100000, 200000}, {64, 128, 192, 4096, 65536, 262143}};
  for (const auto& cuts : cuttings) {
    EXPECT_EQ(hash_in_parts(ChunkHash::kCrc64, data, cuts), crc) << cuts.size() << " cuts";
    EXPECT_EQ(hash_in_parts(ChunkHash::kXxh3, data, cuts), xxh) << cuts.size() << " cuts";
  }
  PartsHash empty(ChunkHash::kXxh3);
  EXPECT_EQ(empty.digest(), checksum64("", 0));
  data[200000] ^= 0x01;
  EXPECT_NE(hash_in_parts(ChunkHash::kXxh3, data, {100000}), xxh);
  EXPECT_NE(hash_in_parts(ChunkHash::kCrc64, data, {100000}), crc);
}

TEST(PartsHash, TheFastestHashIsOneOfTheTwoAndStaysTheSame) {
  const ChunkHash fastest = fastest_chunk_hash();
  EXPECT_TRUE(fastest == ChunkHash::kCrc64 || fastest == ChunkHash::kXxh3);
  EXPECT_EQ(fastest_chunk_hash(), fastest);  // timed once per process
  EXPECT_EQ(chunk_hash_name(ChunkHash::kCrc64), "crc64");
  EXPECT_EQ(chunk_hash_name(ChunkHash::kXxh3), "xxh3");
}

TEST(Hash128, DistinctKeysDistinctHashes) {
  EXPECT_NE(hash128("a"), hash128("b"));
  EXPECT_EQ(hash128("same"), hash128("same"));
  EXPECT_EQ(hash128("abc").hex().size(), 32u);
}

}  // namespace
}  // namespace kvtier
