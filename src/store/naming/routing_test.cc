#include "naming/routing.h"

#include <gtest/gtest.h>

#include <map>

#include "format/page_format.h"

namespace kvtier::routing {
namespace {

TEST(Routing, PathIsBaseNamespaceFanoutAndHashNeverTheKey) {
  Router r({"/data"}, hash128("ns"));
  for (std::string key : {std::string("../../etc/passwd"), std::string("/abs/path"),
                          std::string("a\0b", 3), std::string(".."), std::string("x/y/z")}) {
    const Route route = r.route(key);
    const std::string ns = hash128("ns").hex();
    const std::string hex = hash128(key).hex();
    EXPECT_EQ(route.path, "/data/kvtier/" + ns + "/" + hex.substr(0, 2) + "/" + hex);
    EXPECT_EQ(route.path.find(".."), std::string::npos);
    EXPECT_TRUE(is_page_name(route.path.substr(route.path.rfind('/') + 1)));
  }
}

TEST(Routing, KeyLimits) {
  EXPECT_EQ(validate_key("").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(validate_key(std::string(page::kMaxKeyBytes, 'k')).ok());
  EXPECT_EQ(validate_key(std::string(page::kMaxKeyBytes + 1, 'k')).code(),
            StatusCode::kInvalidArgument);
}

TEST(Routing, SeveralBasesSpreadEvenlyAndStably) {
  Router r({"/a", "/b", "/c"}, hash128("ns"));
  std::map<size_t, int> count;
  for (int i = 0; i < 3000; ++i) ++count[r.route("key" + std::to_string(i)).base];
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_GT(count[b], 800) << b;
    EXPECT_LT(count[b], 1200) << b;
  }
  Router again({"/a", "/b", "/c"}, hash128("ns"));
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(r.route("k" + std::to_string(i)).path, again.route("k" + std::to_string(i)).path);
  }
}

TEST(Routing, AddingABaseMovesOnlyTheKeysThatLandOnIt) {
  Router two({"/a", "/b"}, hash128("ns"));
  Router three({"/a", "/b", "/c"}, hash128("ns"));
  int moved_elsewhere = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string k = "key" + std::to_string(i);
    const size_t before = two.route(k).base;
    const size_t after = three.route(k).base;
    if (after != 2 && after != before) ++moved_elsewhere;
  }
  EXPECT_EQ(moved_elsewhere, 0);
}

TEST(Routing, Names) {
  EXPECT_TRUE(is_fanout_name("0f"));
  EXPECT_FALSE(is_fanout_name("0F"));
  EXPECT_FALSE(is_fanout_name("tmp"));
  EXPECT_TRUE(is_page_name(hash128("x").hex()));
  EXPECT_FALSE(is_page_name("namespace.json"));
}

}  // namespace
}  // namespace kvtier::routing
