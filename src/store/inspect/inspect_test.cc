#include "kvtier/store/inspect.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "format/page_format.h"
#include "kvtier/store/store.h"
#include "src/store/store_test_util.h"

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

TEST(Inspect, ClearNamespaceIsSeenByStoresAlreadyOpen) {
  testing::TempDir dir;
  const StoreLocation loc = *parse_store_uri(dir.file("s") + "?backend=posix");
  auto writer = testing::open_store(loc, testing::test_namespace("model-a"));
  auto reader = testing::open_store(loc, testing::test_namespace("model-a"));
  auto other = testing::open_store(loc, testing::test_namespace("model-b"));
  PagePool pw(*writer, 1, 10000), po(*other, 1, 10000);
  const auto keys = testing::keys_for("c", 8);
  for (const std::string& k : keys) {
    KVTIER_ASSERT_OK(writer->put(k, pw.slot(0), 10000));
    KVTIER_ASSERT_OK(other->put(k, po.slot(0), 10000));
  }
  EXPECT_EQ(reader->batch_exists(testing::views(keys)), 8u);  // now indexed by the reader
  const std::string id = writer->namespace_id().hex();
  KVTIER_ASSERT_OK_AND_ASSIGN(std::vector<PageListing> pages, list_pages(loc, id));
  ASSERT_EQ(pages.size(), 8u);

  // Pages of another namespace, or an id that is not one, are refused before anything goes.
  KVTIER_ASSERT_OK_AND_ASSIGN(std::vector<PageListing> others,
                              list_pages(loc, other->namespace_id().hex()));
  EXPECT_EQ(clear_namespace(loc, id, others).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(clear_namespace(loc, "../x", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other->batch_exists(testing::views(keys)), 8u);

  // Removing the pages alone leaves the reader's index answering for them (a bounded miss,
  // as after gc); the clear's new generation is what drops it.
  std::span<const PageListing> all(pages);
  KVTIER_ASSERT_OK_AND_ASSIGN(RemovalReport gone, remove_pages(loc, all.first(3)));
  EXPECT_EQ(gone.pages, 3u);
  EXPECT_EQ(reader->batch_exists(testing::views(keys)), 8u);
  KVTIER_ASSERT_OK_AND_ASSIGN(RemovalReport cleared, clear_namespace(loc, id, all.subspan(3)));
  KVTIER_EXPECT_OK(cleared.first_error);
  EXPECT_EQ(cleared.pages, 5u);
  EXPECT_EQ(reader->batch_exists(testing::views(keys)), 0u);
  EXPECT_EQ(writer->batch_exists(testing::views(keys)), 0u);
  EXPECT_EQ(reader->stats().pages, 0u);
  // The other namespace keeps its pages and its index.
  EXPECT_EQ(other->batch_exists(testing::views(keys)), 8u);
  // Pages written after the clear are found again by the reader.
  KVTIER_ASSERT_OK(writer->put(keys[0], pw.slot(0), 10000));
  EXPECT_EQ(reader->batch_exists(testing::views(keys)), 1u);
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
                                return true;
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

// The CLI stops long runs on Ctrl-C through these callbacks.
TEST(Inspect, ProgressCallbacksStopVerifyListingAndRemoval) {
  testing::TempDir dir;
  const StoreLocation loc = *parse_store_uri(dir.file("s") + "?backend=posix");
  auto s = testing::open_store(loc, testing::test_namespace());
  PagePool p(*s, 1, 4096);
  p.fill(0, 4096, 5);
  constexpr int kPages = 2500;
  for (int i = 0; i < kPages; ++i) {
    KVTIER_ASSERT_OK(s->put("p" + std::to_string(i), p.slot(0), 4096));
  }

  KVTIER_ASSERT_OK_AND_ASSIGN(VerifyReport part,
                              verify_store(loc, [](uint64_t done, uint64_t) { return done < 4; }));
  EXPECT_TRUE(part.stopped);
  EXPECT_EQ(part.pages, 4u);
  EXPECT_EQ(part.intact, 4u);

  uint64_t calls = 0;
  Result<std::vector<PageListing>> stopped = list_pages(loc, {}, [&](uint64_t found) {
    ++calls;
    return found < 10;
  });
  EXPECT_EQ(stopped.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(calls, 10u);
  KVTIER_ASSERT_OK_AND_ASSIGN(std::vector<PageListing> all,
                              list_pages(loc, {}, [](uint64_t) { return true; }));
  ASSERT_EQ(all.size(), static_cast<size_t>(kPages));

  // Removal stops after the first group of pages; the rest stay.
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  KVTIER_ASSERT_OK_AND_ASSIGN(RemovalReport removed,
                              remove_pages(loc, all, [&](uint64_t done, uint64_t total) {
                                seen.emplace_back(done, total);
                                return false;
                              }));
  EXPECT_TRUE(removed.stopped);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].second, static_cast<uint64_t>(kPages));
  EXPECT_EQ(removed.pages, seen[0].first);
  EXPECT_LT(removed.pages, static_cast<uint64_t>(kPages));
  KVTIER_ASSERT_OK_AND_ASSIGN(Inventory left, take_inventory(loc));
  EXPECT_EQ(left.pages, kPages - removed.pages);

  // Without a callback (or one that goes on) everything goes, in groups.
  seen.clear();
  KVTIER_ASSERT_OK_AND_ASSIGN(std::vector<PageListing> rest, list_pages(loc));
  KVTIER_ASSERT_OK_AND_ASSIGN(RemovalReport all_removed,
                              remove_pages(loc, rest, [&](uint64_t done, uint64_t total) {
                                seen.emplace_back(done, total);
                                return true;
                              }));
  EXPECT_FALSE(all_removed.stopped);
  EXPECT_EQ(all_removed.pages, rest.size());
  EXPECT_GE(seen.size(), 2u);
  EXPECT_EQ(seen.back().first, rest.size());
  KVTIER_ASSERT_OK_AND_ASSIGN(Inventory none, take_inventory(loc));
  EXPECT_EQ(none.pages, 0u);
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
