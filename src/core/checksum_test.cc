#include "kvtier/core/checksum.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtier {
namespace {

TEST(Checksum, StreamingEqualsOneShot) {
  std::string data(100000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  const uint64_t whole = checksum64(data);
  for (size_t split : {size_t{0}, size_t{1}, size_t{4095}, size_t{65536}, data.size()}) {
    Checksum64Stream s;
    s.update(data.data(), split);
    s.update(data.data() + split, data.size() - split);
    EXPECT_EQ(s.digest(), whole) << split;
  }
}

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

TEST(Hash128, DistinctKeysDistinctHashes) {
  EXPECT_NE(hash128("a"), hash128("b"));
  EXPECT_EQ(hash128("same"), hash128("same"));
  EXPECT_EQ(hash128("abc").hex().size(), 32u);
}

}  // namespace
}  // namespace kvtier
