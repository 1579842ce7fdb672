#include "kvtier/store/inspect.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "kvtier/store/store.h"
#include "page_format.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

TEST(Inspect, InventoryCountsPagesBytesNamespacesAndTemporaries) {
  testing::TempDir dir;
  const StoreLocation loc = *parse_store_uri(dir.file("s") + "?backend=posix");
  auto a = testing::open_store(loc, testing::test_namespace("model-a"));
  auto b = testing::open_store(loc, testing::test_namespace("model-b"));
  PagePool pa(*a, 1, 10000), pb(*b, 1, 10000);
  for (int i = 0; i < 5; ++i) KVTIER_ASSERT_OK(a->put("k" + std::to_string(i), pa.slot(0), 10000));
  for (int i = 0; i < 3; ++i) KVTIER_ASSERT_OK(b->put("k" + std::to_string(i), pb.slot(0), 1000));
  testing::write_file(a->namespace_dirs()[0] + "/tmp/x.deadbeef.1.1.kvtmp", "partial");

  KVTIER_ASSERT_OK_AND_ASSIGN(Inventory inv, take_inventory(loc));
  ASSERT_EQ(inv.namespaces.size(), 2u);
  EXPECT_EQ(inv.pages, 8u);
  EXPECT_EQ(inv.bytes, 5 * page::object_bytes(10000) + 3 * page::object_bytes(1000));
  EXPECT_EQ(page::object_bytes(10000), 4096u + 12288u) << "padded to 4096-byte blocks";
  EXPECT_EQ(inv.temp_files, 1u);
  for (const NamespaceSummary& ns : inv.namespaces) {
    const auto j = nlohmann::json::parse(ns.manifest_json);
    if (ns.id == a->namespace_id().hex()) {
      EXPECT_EQ(j["model"], "model-a");
      EXPECT_EQ(ns.pages, 5u);
      EXPECT_EQ(ns.bytes, 5 * page::object_bytes(10000));
    } else {
      EXPECT_EQ(ns.id, b->namespace_id().hex());
      EXPECT_EQ(j["model"], "model-b");
      EXPECT_EQ(ns.pages, 3u);
    }
  }
}

TEST(Inspect, VerifyListsEachCorruptPage) {
  testing::TempDir dir;
  const StoreLocation loc = *parse_store_uri(dir.file("s") + "?backend=posix");
  auto s = testing::open_store(loc, testing::test_namespace());
  PagePool p(*s, 1, 20000);
  p.fill(0, 20000, 3);
  for (int i = 0; i < 10; ++i) KVTIER_ASSERT_OK(s->put("v" + std::to_string(i), p.slot(0), 20000));
  KVTIER_ASSERT_OK_AND_ASSIGN(VerifyReport clean, verify_store(loc));
  EXPECT_EQ(clean.pages, 10u);
  EXPECT_EQ(clean.intact, 10u);
  EXPECT_TRUE(clean.problems.empty());

  auto file_of = [&](std::string_view key) { return testing::page_file(*s, key); };
  std::string bytes = testing::read_file(file_of("v3"));
  bytes[page::kHeaderBytes + 999] ^= 1;
  testing::write_file(file_of("v3"), bytes);
  std::filesystem::resize_file(file_of("v7"), 5000);
  uint64_t last_done = 0, last_total = 0;
  KVTIER_ASSERT_OK_AND_ASSIGN(VerifyReport bad, verify_store(loc, [&](uint64_t d, uint64_t t) {
                                last_done = d;
                                last_total = t;
                              }));
  EXPECT_EQ(bad.pages, 10u);
  EXPECT_EQ(bad.intact, 8u);
  ASSERT_EQ(bad.problems.size(), 2u);
  std::set<std::string> paths;
  for (const auto& pr : bad.problems) {
    paths.insert(pr.path);
    EXPECT_EQ(pr.status.code(), StatusCode::kCorrupt);
  }
  EXPECT_EQ(paths, (std::set<std::string>{file_of("v3"), file_of("v7")}));
  EXPECT_EQ(last_done, 10u);
  EXPECT_EQ(last_total, 10u);
}

TEST(Inspect, MissingDirectoryIsAnError) {
  testing::TempDir dir;
  Result<Inventory> inv = take_inventory(*parse_store_uri(dir.file("nope")));
  EXPECT_EQ(inv.status().code(), StatusCode::kNotFound);
}

TEST(Inspect, DirectoryWithoutKvtierDataIsEmpty) {
  testing::TempDir dir;
  KVTIER_ASSERT_OK_AND_ASSIGN(Inventory inv, take_inventory(*parse_store_uri(dir.path())));
  EXPECT_EQ(inv.pages, 0u);
  EXPECT_TRUE(inv.namespaces.empty());
}

}  // namespace
}  // namespace kvtier
