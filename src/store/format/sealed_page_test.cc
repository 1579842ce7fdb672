// The sealed header's layout: sizes, round trip, and every byte of it checked.
#include "format/sealed_page.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>

namespace kvtier::page {
namespace {

struct Block {
  alignas(4096) std::array<std::byte, kHeaderBytes> bytes{};
  std::span<std::byte, kHeaderBytes> span() { return bytes; }
};

Header sample(std::string_view key, uint64_t payload, uint32_t header_bytes = kHeaderBytes) {
  Header h;
  h.namespace_id = hash128("ns");
  h.key_hash = Hash128{0x1111, 0x2222};  // a keyed name
  h.payload_bytes = payload;
  h.piece_count = 2;
  h.piece_bytes = payload / 2;
  h.created_ns = 42;
  h.key = key;
  h.header_bytes = header_bytes;
  return h;
}

// Encodes a sealed header whose slots hold recognisable bytes.
void encode_sample(const Header& h, Block& b) {
  SealedSlots s = encode_sealed(h, 7, 123456789, b.span());
  for (size_t i = 0; i < s.sealed_key.size(); ++i) s.sealed_key[i] = std::byte(0xa0 + i % 16);
  std::memset(s.key_tag.data(), 0xbb, s.key_tag.size());
  std::memset(s.salt.data(), 0xcc, s.salt.size());
  for (size_t i = 0; i < s.chunk_tags.size(); ++i) s.chunk_tags[i] = std::byte(i % 251);
  finish_sealed(b.span());
}

TEST(SealedPage, ChunksGrowOnlyWhenTheirTagsWouldNotFit) {
  EXPECT_EQ(sealed_chunk_bytes(64 << 10), 256u << 10);
  EXPECT_EQ(sealed_chunk_count(64 << 10), 1u);
  EXPECT_EQ(sealed_chunk_bytes(8 << 20), 256u << 10);
  EXPECT_EQ(sealed_chunk_count(8 << 20), 32u);
  EXPECT_EQ(sealed_chunk_bytes(45 << 20), 256u << 10);
  EXPECT_EQ(sealed_chunk_bytes(46 << 20), 512u << 10);
  for (uint64_t payload : {uint64_t{1}, uint64_t{4096}, uint64_t{70272}, uint64_t{8} << 20,
                           uint64_t{100} << 20, uint64_t{1} << 32, kMaxSealedPayloadBytes}) {
    EXPECT_LE(128 + sealed_area_bytes(kMaxKeyBytes, payload), kHeaderBytes) << payload;
    EXPECT_LE(compact_sealed_header_bytes(kMaxKeyBytes, payload), kHeaderBytes) << payload;
  }
  // A compact record's header holds the sealed area, rounded to 64.
  EXPECT_EQ(compact_sealed_header_bytes(16, 64 << 10), 256u);  // 128 + 16 + 48 + 16 = 208
}

TEST(SealedPage, RoundTripWithoutTheKeyInTheClear) {
  for (uint32_t header_bytes : {uint32_t{kHeaderBytes}, compact_sealed_header_bytes(24, 8 << 20)}) {
    Block b;
    const std::string key = "sglang:0123456789abcdef!";
    encode_sample(sample(key, 8 << 20, header_bytes), b);
    EXPECT_TRUE(is_sealed(b.span()));
    const std::string_view all(reinterpret_cast<const char*>(b.bytes.data()), b.bytes.size());
    EXPECT_EQ(all.find("0123456789abcdef"), std::string_view::npos);

    SealedView v;
    Result<Header> h = decode_sealed(b.span(), v);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_TRUE(h->key.empty());
    EXPECT_EQ(h->key_hash, (Hash128{0x1111, 0x2222}));
    EXPECT_EQ(h->payload_bytes, 8u << 20);
    EXPECT_EQ(h->header_bytes, header_bytes);
    EXPECT_EQ(v.key_id, 7u);
    EXPECT_EQ(v.page_number, 123456789u);
    EXPECT_EQ(v.chunk_bytes, 256u << 10);
    EXPECT_EQ(v.bound.data(), b.bytes.data());
    EXPECT_EQ(v.bound.size(), 120u);
    ASSERT_EQ(v.sealed_key.size(), key.size());
    EXPECT_EQ(v.sealed_key[1], std::byte{0xa1});
    EXPECT_EQ(v.key_tag[15], std::byte{0xbb});
    EXPECT_EQ(v.salt[31], std::byte{0xcc});
    ASSERT_EQ(v.chunk_tags.size(), 32u * 16);
    EXPECT_EQ(v.chunk_tags[300], std::byte{300 % 251});
    // The same block is never taken for a page in the clear.
    Result<Header> plain = decode(b.span());
    ASSERT_FALSE(plain.ok());
    EXPECT_NE(plain.status().message().find("sealed"), std::string_view::npos);
  }
}

TEST(SealedPage, EveryByteOfTheHeaderIsChecked) {
  Block good;
  const std::string key = "page-key";
  encode_sample(sample(key, 1 << 20), good);
  const size_t covered = 128 + sealed_area_bytes(key.size(), 1 << 20);
  for (size_t i = 0; i < covered; ++i) {
    if (i >= 120 && i < 128) continue;  // the checksum itself: changing it is a mismatch too
    Block bad = good;
    bad.bytes[i] ^= std::byte{0x01};
    SealedView v;
    EXPECT_FALSE(decode_sealed(bad.span(), v).ok()) << "byte " << i;
  }
  Block bad = good;
  bad.bytes[121] ^= std::byte{0x01};
  SealedView v;
  EXPECT_FALSE(decode_sealed(bad.span(), v).ok());
}

TEST(SealedPage, APageInTheClearIsNotTakenForASealedOne) {
  Block b;
  Header h = sample("k", 4096);
  h.key_hash = hash128("k");
  encode(h, b.span());
  EXPECT_FALSE(is_sealed(b.span()));
  SealedView v;
  Result<Header> r = decode_sealed(b.span(), v);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("clear"), std::string_view::npos);
}

}  // namespace
}  // namespace kvtier::page
