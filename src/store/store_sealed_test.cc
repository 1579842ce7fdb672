// Sealed stores (docs/security.md): pages come back byte-exact under their tenant's key, and
// as misses with no bytes given under any other key, tenant, name or place; nothing of a
// page's bytes, its key or the key material is stored in the clear. Both FILE layouts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <xxhash.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "format/sealed_page.h"
#include "kvtier/store/inspect.h"
#include "kvtier/store/store.h"
#include "seal/key_file.h"
#include "seal/tenant.h"
#include "sealed_test_fixture.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using namespace sealed_test;  // NOLINT(google-build-using-namespace)
using testing::PagePool;

TEST_P(SealedStore, PagesComeBackByteExact) {
  for (const DirectIo direct : {DirectIo::kOff, DirectIo::kOn}) {
    if (direct == DirectIo::kOn && layout_ == "segments") continue;  // compact records
    std::unique_ptr<Store> store = open(keys_a_, "alpha", direct);
    ASSERT_NE(store, nullptr);
    PagePool pool(*store, 8, 2 * kBigPiece);
    pool.fill(0, kPage, 1);
    KVTIER_ASSERT_OK(store->put("small", pool.slot(0), kPage));
    // A page of two pieces whose 256 KiB chunks straddle them.
    pool.fill(1, kBigPiece, 2);
    pool.fill(2, kBigPiece, 3);
    const std::vector<std::string_view> key = {"straddle"};
    const std::vector<ConstBuffer> in = {pool.in(1, kBigPiece), pool.in(2, kBigPiece)};
    ASSERT_TRUE(store->batch_put(key, in).all_ok());

    KVTIER_ASSERT_OK(store->get("small", pool.slot(3), kPage));
    EXPECT_TRUE(pool.holds(3, kPage, 1));
    const std::vector<MutableBuffer> out = {pool.out(4, kBigPiece), pool.out(5, kBigPiece)};
    ASSERT_TRUE(store->batch_get(key, out).all_ok());
    EXPECT_TRUE(pool.holds(4, kBigPiece, 2));
    EXPECT_TRUE(pool.holds(5, kBigPiece, 3));
    EXPECT_TRUE(*store->exists("small"));
    EXPECT_EQ(store->stats().get_hits, 2u);
    EXPECT_EQ(store->stats().get_corrupt, 0u);

    // Another store of the tenant (a restart) finds and opens them.
    store.reset();
    store = open(keys_a_, "alpha", direct);
    ASSERT_NE(store, nullptr);
    PagePool again(*store, 1, kPage);
    KVTIER_ASSERT_OK(store->get("small", again.slot(0), kPage));
    EXPECT_TRUE(again.holds(0, kPage, 1));
    store->clear().ignore_error();
  }
}

TEST_P(SealedStore, AnotherKeyOrTenantGetsMissesAndNoBytes) {
  std::unique_ptr<Store> alpha = open(keys_a_, "alpha");
  ASSERT_NE(alpha, nullptr);
  PagePool pool(*alpha, 2, kPage);
  pool.fill(0, kPage, 7);
  KVTIER_ASSERT_OK(alpha->put("shared-prefix", pool.slot(0), kPage));

  std::unique_ptr<Store> beta = open(keys_a_, "beta");    // same key file
  std::unique_ptr<Store> other = open(keys_b_, "alpha");  // another key file
  std::unique_ptr<Store> plain = open("", "");            // no key at all
  ASSERT_TRUE(beta && other && plain);
  for (Store* s : {beta.get(), other.get(), plain.get()}) {
    PagePool p(*s, 1, kPage);
    const Miss m = read_poisoned(*s, p, 0, "shared-prefix", kPage);
    EXPECT_EQ(m.status.code(), StatusCode::kNotFound) << m.status.to_string();
    EXPECT_TRUE(m.nothing_given);
    EXPECT_FALSE(*s->exists("shared-prefix"));
  }
  // Beta writes the same page key: each tenant reads its own bytes.
  PagePool bp(*beta, 2, kPage);
  bp.fill(0, kPage, 8);
  KVTIER_ASSERT_OK(beta->put("shared-prefix", bp.slot(0), kPage));
  KVTIER_ASSERT_OK(alpha->get("shared-prefix", pool.slot(1), kPage));
  EXPECT_TRUE(pool.holds(1, kPage, 7));
  KVTIER_ASSERT_OK(beta->get("shared-prefix", bp.slot(1), kPage));
  EXPECT_TRUE(bp.holds(1, kPage, 8));
}

TEST_F(SealedPageFiles, APageMovedToAnotherNameOrTenantIsAMissWithNoBytes) {
  std::unique_ptr<Store> alpha = open(keys_a_, "alpha");
  std::unique_ptr<Store> beta = open(keys_a_, "beta");
  ASSERT_TRUE(alpha && beta);
  PagePool pool(*alpha, 3, kPage);
  pool.fill(0, kPage, 1);
  pool.fill(1, kPage, 2);
  KVTIER_ASSERT_OK(alpha->put("one", pool.slot(0), kPage));
  KVTIER_ASSERT_OK(alpha->put("two", pool.slot(1), kPage));
  const std::string one = page_file(*alpha, name_of(keys_a_, "alpha", "one"));
  const std::string two = page_file(*alpha, name_of(keys_a_, "alpha", "two"));
  ASSERT_TRUE(std::filesystem::exists(one) && std::filesystem::exists(two));

  // "one" copied over "two": the bytes are alpha's, sealed under alpha's key, but bound to
  // another page key.
  std::filesystem::copy_file(one, two, std::filesystem::copy_options::overwrite_existing);
  Miss m = read_poisoned(*alpha, pool, 2, "two", kPage);
  EXPECT_EQ(m.status.code(), StatusCode::kCorrupt) << m.status.to_string();
  EXPECT_TRUE(m.nothing_given);
  EXPECT_EQ(testing::rejected(*alpha, "place"), 1u);

  // Alpha's "one" copied to where beta keeps its "one".
  const std::string beta_one = page_file(*beta, name_of(keys_a_, "beta", "one"));
  std::filesystem::create_directories(std::filesystem::path(beta_one).parent_path());
  std::filesystem::copy_file(one, beta_one);
  PagePool bp(*beta, 1, kPage);
  m = read_poisoned(*beta, bp, 0, "one", kPage);
  EXPECT_EQ(m.status.code(), StatusCode::kCorrupt) << m.status.to_string();
  EXPECT_TRUE(m.nothing_given);
  EXPECT_EQ(testing::rejected(*beta, "place"), 1u);

  // A store in the clear given alpha's sealed file under its own name for "one".
  std::unique_ptr<Store> plain = open("", "");
  ASSERT_NE(plain, nullptr);
  const std::string plain_one = testing::page_file(*plain, "one");
  std::filesystem::create_directories(std::filesystem::path(plain_one).parent_path());
  std::filesystem::copy_file(one, plain_one);
  PagePool pp(*plain, 1, kPage);
  m = read_poisoned(*plain, pp, 0, "one", kPage);
  EXPECT_EQ(m.status.code(), StatusCode::kCorrupt) << m.status.to_string();
  EXPECT_NE(m.status.message().find("sealed"), std::string_view::npos);
  EXPECT_EQ(testing::rejected(*plain, "sealing"), 1u);
  // And alpha given a page in the clear under its name for "one".
  PagePool plain_pool(*plain, 1, kPage);
  plain_pool.fill(0, kPage, 5);
  KVTIER_ASSERT_OK(plain->put("clear", plain_pool.slot(0), kPage));
  std::filesystem::copy_file(testing::page_file(*plain, "clear"), one,
                             std::filesystem::copy_options::overwrite_existing);
  m = read_poisoned(*alpha, pool, 2, "one", kPage);
  EXPECT_EQ(m.status.code(), StatusCode::kCorrupt) << m.status.to_string();
  EXPECT_TRUE(m.nothing_given);
  EXPECT_EQ(testing::rejected(*alpha, "sealing"), 1u);
  EXPECT_EQ(testing::rejected_total(*alpha), 2u);
}

TEST_F(SealedPageFiles, EveryByteOfASealedPageIsChecked) {
  std::unique_ptr<Store> store = open(keys_a_, "alpha");
  ASSERT_NE(store, nullptr);
  constexpr size_t kSmall = 4096;
  PagePool pool(*store, 2, kSmall);
  pool.fill(0, kSmall, 9);
  KVTIER_ASSERT_OK(store->put("sample", pool.slot(0), kSmall));
  const std::string file = page_file(*store, name_of(keys_a_, "alpha", "sample"));
  const std::string good = testing::read_file(file);
  ASSERT_EQ(good.size(), 2 * page::kHeaderBytes);
  // The header's fields, sealed key, tags and salt (the rest of the block is padding), then
  // every payload byte.
  const size_t header_used = 128 + page::sealed_area_bytes(std::string("sample").size(), kSmall);
  std::vector<size_t> positions;
  for (size_t i = 0; i < header_used; ++i) positions.push_back(i);
  for (size_t i = 0; i < kSmall; ++i) positions.push_back(page::kHeaderBytes + i);
  for (const size_t i : positions) {
    std::string bad = good;
    bad[i] ^= 0x01;
    testing::write_file(file, bad);
    const Miss m = read_poisoned(*store, pool, 1, "sample", kSmall);
    ASSERT_FALSE(m.status.ok()) << "byte " << i;
    EXPECT_TRUE(m.nothing_given) << "byte " << i;
  }
  testing::write_file(file, good);
  KVTIER_ASSERT_OK(store->get("sample", pool.slot(1), kSmall));
  EXPECT_TRUE(pool.holds(1, kSmall, 9));
  // Each flip was read and refused, counted once: a damaged header as such, a damaged
  // sealed key, tag or payload as a chunk that did not open.
  EXPECT_EQ(testing::rejected_total(*store), positions.size());
  EXPECT_GT(testing::rejected(*store, "header"), 0u);
  EXPECT_GE(testing::rejected(*store, "tag"), kSmall);
}

TEST_F(SealedSegments, ARecordMovedIsAMiss) {
  std::unique_ptr<Store> store = open(keys_a_, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 3, kPage);
  const std::vector<std::string_view> keys = {"first", "second"};
  ASSERT_TRUE(put_seeded(*store, pool, keys, 1).all_ok());
  // The two records lie back to back in one segment: swap them.
  std::string seg_path;
  for (const std::string& f : stored_files()) {
    if (f.size() > 4 && f.compare(f.size() - 4, 4, ".seg") == 0) seg_path = f;
  }
  ASSERT_FALSE(seg_path.empty());
  std::string seg = testing::read_file(seg_path);
  std::vector<size_t> at;
  for (size_t p = seg.find("KVTPAGE1"); p != std::string::npos; p = seg.find("KVTPAGE1", p + 1)) {
    at.push_back(p);
  }
  ASSERT_EQ(at.size(), 2u);
  const size_t len = at[1] - at[0];
  std::string swapped = seg;
  swapped.replace(at[0], len, seg.substr(at[1], len));
  swapped.replace(at[1], len, seg.substr(at[0], len));
  testing::write_file(seg_path, swapped);
  for (const std::string_view key : keys) {
    const Miss m = read_poisoned(*store, pool, 2, key, kPage);
    EXPECT_FALSE(m.status.ok()) << key;
    EXPECT_TRUE(m.nothing_given) << key;
  }
}

TEST_P(SealedStore, NothingOfThePagesTheirKeysOrTheKeyIsStoredInTheClear) {
  std::unique_ptr<Store> store = open(keys_a_, "alpha");
  ASSERT_NE(store, nullptr);
  constexpr size_t kPages = 6;
  PagePool pool(*store, kPages, kPage);
  std::vector<std::string> keys;
  std::vector<std::string_view> views;
  std::vector<ConstBuffer> in;
  for (size_t i = 0; i < kPages; ++i) {
    keys.push_back("prompt-prefix-" + std::to_string(i) + "-of-a-secret-conversation");
    pool.fill(i, kPage, 100 + i);
    in.push_back(pool.in(i, kPage));
  }
  for (const std::string& k : keys) views.push_back(k);
  ASSERT_TRUE(store->batch_put(views, in).all_ok());

  // Every 64-byte window of every page's plaintext, by its hash.
  std::unordered_set<uint64_t> windows;
  for (size_t i = 0; i < kPages; ++i) {
    for (size_t off = 0; off + 64 <= kPage; ++off) {
      windows.insert(XXH3_64bits(pool.slot(i) + off, 64));
    }
  }
  const std::vector<std::string> secrets = key_texts({kKeyA2, kKeyA1});
  const std::vector<std::string> files = stored_files();
  ASSERT_FALSE(files.empty());
  size_t scanned = 0;
  for (const std::string& f : files) {
    const std::string bytes = testing::read_file(f);
    scanned += bytes.size();
    for (size_t off = 0; off + 64 <= bytes.size(); ++off) {
      ASSERT_EQ(windows.count(XXH3_64bits(bytes.data() + off, 64)), 0u)
          << f << " holds 64 bytes of a page at " << off;
    }
    for (const std::string& k : keys) {
      EXPECT_EQ(bytes.find(k.substr(0, 20)), std::string::npos) << f << " names a page key";
    }
    for (const std::string& s : secrets) {
      EXPECT_EQ(bytes.find(s), std::string::npos) << f << " holds key material";
    }
  }
  EXPECT_GE(scanned, kPages * kPage);
}

TEST_P(SealedStore, KeysNeverComeFromAUriOrAFileOthersMayRead) {
  for (const std::string_view q : {"&key=00ff", "&key_file=/tmp/k", "&master_key=x"}) {
    Result<StoreLocation> loc = parse_store_uri(uri(q));
    ASSERT_FALSE(loc.ok()) << q;
    EXPECT_EQ(loc.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(loc.status().message().find("00ff"), std::string_view::npos);
  }
  ASSERT_EQ(::chmod(keys_b_.c_str(), 0644), 0);
  Result<std::unique_ptr<Store>> s = try_open(keys_b_, "");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.status().message().find(std::string(kKeyB).substr(0, 12)), std::string_view::npos);
  // A tenant needs a key; the URI's tenant= names one.
  s = try_open("", "alpha");
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().to_string();
  s = try_open("", "", "&tenant=alpha");
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().to_string();
  s = try_open(keys_a_, "", "&tenant=alpha");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  PagePool pool(**s, 2, kPage);
  pool.fill(0, kPage, 3);
  KVTIER_ASSERT_OK((*s)->put("k", pool.slot(0), kPage));
  std::unique_ptr<Store> alpha = open(keys_a_, "alpha");
  ASSERT_NE(alpha, nullptr);
  PagePool ap(*alpha, 1, kPage);
  KVTIER_ASSERT_OK(alpha->get("k", ap.slot(0), kPage));
  EXPECT_TRUE(ap.holds(0, kPage, 3));
}

TEST_P(SealedStore, TheEnvironmentNamesTheKeyFile) {
  std::unique_ptr<Store> alpha = open(keys_a_, "alpha");
  ASSERT_NE(alpha, nullptr);
  PagePool pool(*alpha, 2, kPage);
  pool.fill(0, kPage, 4);
  KVTIER_ASSERT_OK(alpha->put("env", pool.slot(0), kPage));
  ASSERT_EQ(::setenv(seal::kKeyFileVariable, keys_a_.c_str(), 1), 0);
  Result<std::unique_ptr<Store>> s = try_open("", "alpha");
  ASSERT_EQ(::unsetenv(seal::kKeyFileVariable), 0);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  PagePool p(**s, 1, kPage);
  KVTIER_ASSERT_OK((*s)->get("env", p.slot(0), kPage));
  EXPECT_TRUE(p.holds(0, kPage, 4));
}

TEST_P(SealedStore, ConcurrentPutsWaitForStagingRatherThanFail) {
  // Room to seal three pages at once; four threads put batches of eight.
  const uint64_t staging = 3 * align_up(page::object_bytes(kPage), uint64_t{64} << 10);
  Result<std::unique_ptr<Store>> opened = try_open(keys_a_, "alpha", "", DirectIo::kOff, staging);
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  Store& store = **opened;
  constexpr size_t kThreads = 4, kPerThread = 8;
  PagePool pool(store, kThreads * kPerThread * 2, kPage);
  std::vector<std::string> keys;
  for (size_t i = 0; i < kThreads * kPerThread; ++i) {
    keys.push_back("page-" + std::to_string(i));
    pool.fill(i, kPage, 500 + i);
  }
  std::vector<std::thread> threads;
  std::vector<BatchResult> results(kThreads);
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::string_view> ks;
      std::vector<ConstBuffer> in;
      for (size_t i = t * kPerThread; i < (t + 1) * kPerThread; ++i) {
        ks.push_back(keys[i]);
        in.push_back(pool.in(i, kPage));
      }
      results[t] = store.batch_put(ks, in);
    });
  }
  for (std::thread& th : threads) th.join();
  for (size_t t = 0; t < kThreads; ++t) {
    for (const Status& st : results[t].pages) EXPECT_TRUE(st.ok()) << st.to_string();
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    KVTIER_ASSERT_OK(store.get(keys[i], pool.slot(keys.size() + i), kPage));
    EXPECT_TRUE(pool.holds(keys.size() + i, kPage, 500 + i)) << keys[i];
  }
}

TEST_F(SealedPageFiles, PagesLargerThanTheStagingAreSealedRunByRun) {
  // Page files are sealed run by run into buffers the writing threads hold for one run, so
  // a staging of 1 MiB seals pages of 6 MiB (whole-page staging would refuse them), from
  // two pieces whose chunks straddle them, in the clear's buffered and direct I/O alike.
  constexpr uint64_t kStaging = uint64_t{1} << 20;
  constexpr size_t kPiece = 3 * (size_t{1} << 20) + 4000;
  for (DirectIo direct : {DirectIo::kOff, DirectIo::kOn}) {
    Result<std::unique_ptr<Store>> opened = try_open(keys_a_, "alpha", "&cpus=2", direct, kStaging);
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    Store& store = **opened;
    PagePool pool(store, 12, kPiece);
    std::vector<std::string_view> keys = {"big-0", "big-1", "big-2"};
    std::vector<ConstBuffer> in;
    for (size_t i = 0; i < 6; ++i) {
      pool.fill(i, kPiece, 40 + i);
      in.push_back(pool.in(i, kPiece));
    }
    const BatchResult put = store.batch_put(keys, in);
    for (const Status& st : put.pages) EXPECT_TRUE(st.ok()) << st.to_string();
    std::vector<MutableBuffer> out;
    for (size_t i = 6; i < 12; ++i) out.push_back(pool.out(i, kPiece));
    ASSERT_TRUE(store.batch_get(keys, out).all_ok());
    for (size_t i = 0; i < 6; ++i) EXPECT_TRUE(pool.holds(6 + i, kPiece, 40 + i)) << i;
    EXPECT_EQ(store.stats().get_corrupt, 0u);
    // Nothing of the plaintext reached the files: a sealed run went out, not the caller's.
    for (const std::string& f : stored_files()) {
      const std::string bytes = testing::read_file(f);
      const std::string_view plain(reinterpret_cast<const char*>(in[0].data) + 1000, 64);
      EXPECT_EQ(bytes.find(plain), std::string::npos) << f;
    }
    store.clear().ignore_error();
  }
}

TEST_P(SealedStore, VerifyChecksWhatItCanWithoutTheKeyAndRepairsNothingIntact) {
  std::unique_ptr<Store> store = open(keys_a_, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 3, kPage);
  const std::vector<std::string_view> keys = {"v1", "v2"};
  ASSERT_TRUE(put_seeded(*store, pool, keys, 1).all_ok());
  Result<StoreLocation> loc = parse_store_uri(uri());
  ASSERT_TRUE(loc.ok());
  Result<VerifyReport> report = verify_store(*loc);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->pages, 2u);
  EXPECT_EQ(report->intact, 2u);
  EXPECT_TRUE(report->problems.empty());
  // A sealed header damaged where no key is needed to see it.
  for (const std::string& f : stored_files()) {
    std::string bytes = testing::read_file(f);
    const size_t at = bytes.find("KVTPAGE1");
    if (at == std::string::npos) continue;
    bytes[at + 40] ^= 0x01;  // inside the key hash
    testing::write_file(f, bytes);
    break;
  }
  report = verify_store(*loc);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->intact, 1u);
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_EQ(report->problems[0].status.code(), StatusCode::kCorrupt);
}

TEST_P(SealedStore, GcRemovesTheRetiredKeysPagesAndNothingElse) {
  // Pages sealed under key 2, then under key 7 (a new first line); key 2 retired.
  const std::string keys_new =
      write_keys("new", std::string("7 ") + kKeyB + "\n2 " + kKeyA2 + "\n");
  std::unique_ptr<Store> old_store = open(keys_a_, "alpha");
  ASSERT_NE(old_store, nullptr);
  PagePool pool(*old_store, 2, kPage);
  pool.fill(0, kPage, 1);
  KVTIER_ASSERT_OK(old_store->put("old-1", pool.slot(0), kPage));
  KVTIER_ASSERT_OK(old_store->put("old-2", pool.slot(0), kPage));
  old_store.reset();
  std::unique_ptr<Store> store = open(keys_new, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool np(*store, 2, kPage);
  np.fill(0, kPage, 2);
  KVTIER_ASSERT_OK(store->put("new-1", np.slot(0), kPage));
  store.reset();

  Result<StoreLocation> loc = parse_store_uri(uri());
  ASSERT_TRUE(loc.ok());
  Result<std::vector<PageListing>> pages = list_pages(*loc);
  ASSERT_TRUE(pages.ok()) << pages.status().to_string();
  ASSERT_EQ(pages->size(), 3u);
  Result<std::vector<uint32_t>> ids = sealed_key_ids(*loc, *pages);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  std::vector<PageListing> retired;
  for (size_t i = 0; i < pages->size(); ++i) {
    if ((*ids)[i] == 2) retired.push_back((*pages)[i]);
  }
  EXPECT_EQ(retired.size(), 2u);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 7u), 1);
  Result<RemovalReport> removed = remove_pages(*loc, retired);
  ASSERT_TRUE(removed.ok()) << removed.status().to_string();
  EXPECT_EQ(removed->pages, 2u);

  store = open(keys_new, "alpha");
  ASSERT_NE(store, nullptr);
  PagePool after(*store, 1, kPage);
  KVTIER_ASSERT_OK(store->get("new-1", after.slot(0), kPage));
  EXPECT_TRUE(after.holds(0, kPage, 2));
  pages = list_pages(*loc);
  ASSERT_TRUE(pages.ok());
  EXPECT_EQ(pages->size(), 1u);
}

// Client-side sealing on an object store: the server holds only what a FILE store would.
class SealedS3 : public SealedS3Base {
 protected:
  void SetUp() override {
    SealedS3Base::SetUp();
    if (!IsSkipped()) keys_ = write_keys("keys", std::string("4 ") + kKeyA2 + "\n");
  }
  std::string keys_;
};

TEST_P(SealedS3, PagesComeBackAndOtherTenantsGetMisses) {
  std::unique_ptr<Store> alpha = open(keys_, "alpha");
  ASSERT_NE(alpha, nullptr);
  PagePool pool(*alpha, 4, kPage);
  const std::vector<std::string_view> keys = {"s3-one", "s3-two"};
  ASSERT_TRUE(put_seeded(*alpha, pool, keys, 31).all_ok());
  const std::vector<MutableBuffer> out = {pool.out(2, kPage), pool.out(3, kPage)};
  ASSERT_TRUE(alpha->batch_get(keys, out).all_ok());
  EXPECT_TRUE(pool.holds(2, kPage, 31));
  EXPECT_TRUE(pool.holds(3, kPage, 32));
  EXPECT_EQ(alpha->stats().sealing.find(kKeyA2), std::string::npos);

  std::unique_ptr<Store> beta = open(keys_, "beta");
  std::unique_ptr<Store> plain = open("", "");
  ASSERT_TRUE(beta && plain);
  for (Store* s : {beta.get(), plain.get()}) {
    PagePool p(*s, 1, kPage);
    const Miss m = read_poisoned(*s, p, 0, "s3-one", kPage);
    EXPECT_EQ(m.status.code(), StatusCode::kNotFound) << m.status.to_string();
    EXPECT_TRUE(m.nothing_given);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SealedS3, ::testing::Values("files", "segments"),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Layouts, SealedStore, ::testing::Values("files", "segments"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvtier
