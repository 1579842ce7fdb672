// Key material never reaches a text a sealed store gives (docs/security.md, "Keys stay
// secret"): the errors of refused and malformed key files, of reads and of caller mistakes,
// stats() and its Prometheus text. (What the CLI prints: cli_test.)
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "format/page_format.h"
#include "kvtier/store/store.h"
#include "sealed_test_fixture.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using namespace sealed_test;  // NOLINT(google-build-using-namespace)
using testing::PagePool;

class Secrets : public SealedStoreBase, public ::testing::TestWithParam<std::string> {
 protected:
  Secrets() : SealedStoreBase(GetParam()) {}
  void SetUp() override { write_key_files(); }
};

// Every text of `s`: its statistics' texts and their Prometheus exposition.
void add_stats(const Store& s, std::vector<std::string>& texts) {
  const StoreStats st = s.stats();
  st.for_each([&](const StatInfo&, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>) {
      texts.push_back(value);
    }
  });
  texts.push_back(to_prometheus(st, MetricLabels{{"rank", "0"}}));
}

TEST_P(Secrets, NoTextTheStoreGivesHoldsKeyBytes) {
  std::vector<std::string> texts;
  // Key files refused: malformed lines that hold a key's digits, and a file others may read.
  const std::string a2 = kKeyA2;
  for (const std::string& bad :
       {"2 " + a2.substr(0, 63) + "z\n", "2 " + a2 + "00\n",
        "2 " + a2 + "\n2 " + std::string(kKeyA1) + "\n", "x " + a2 + "\n", a2 + "\n"}) {
    const std::string path = write_keys("bad", bad);
    Result<std::unique_ptr<Store>> s = try_open(path, "alpha");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().to_string();
    texts.push_back(s.status().to_string());
  }
  const std::string open_to_all = write_keys("open", "2 " + a2 + "\n");
  ASSERT_EQ(::chmod(open_to_all.c_str(), 0644), 0);
  Result<std::unique_ptr<Store>> refused = try_open(open_to_all, "alpha");
  ASSERT_FALSE(refused.ok());
  texts.push_back(refused.status().to_string());

  // A sealed store at work: pages written and read, a caller's mistake, a damaged page, a miss.
  std::unique_ptr<Store> store = open(keys_a_, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 2, kPage);
  pool.fill(0, kPage, 4);
  KVTIER_ASSERT_OK(store->put("one", pool.slot(0), kPage));
  KVTIER_ASSERT_OK(store->put("two", pool.slot(0), kPage));
  KVTIER_ASSERT_OK(store->get("one", pool.slot(1), kPage));
  const Status mistake = store->get("one", pool.slot(1), kPage - 8);
  EXPECT_EQ(mistake.code(), StatusCode::kInvalidArgument) << mistake.to_string();
  texts.push_back(mistake.to_string());
  texts.push_back(store->get("never", pool.slot(1), kPage).to_string());
  if (layout_ == "files") {
    const std::string file = page_file(*store, name_of(keys_a_, "alpha", "two"));
    std::string bytes = testing::read_file(file);
    bytes[page::kHeaderBytes + 5] ^= 1;
    testing::write_file(file, bytes);
    const Status damaged = store->get("two", pool.slot(1), kPage);
    EXPECT_EQ(damaged.code(), StatusCode::kCorrupt) << damaged.to_string();
    texts.push_back(damaged.to_string());
  }
  add_stats(*store, texts);
  EXPECT_NE(store->stats().sealing.find("alpha"), std::string::npos);

  const std::vector<std::string> secrets = key_texts({kKeyA2, kKeyA1});
  for (const std::string& t : texts) {
    EXPECT_FALSE(t.empty());
    for (const std::string& s : secrets) {
      EXPECT_EQ(t.find(s), std::string::npos) << "key material in: " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Secrets, ::testing::Values("files", "segments"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvtier
