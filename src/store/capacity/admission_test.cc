// Admission (admission.h): the policy's decisions on small generated workloads (a one-off page
// declined, a page written again taken, a workload shift switching the rule back, stores of a
// namespace sharing what was written and what was asked), and the store with it: a declined
// page reports success and is a miss, no wrong byte under churn in either layout, the capacity
// held with two stores writing to one namespace, and admission=always taking every page.
#include "capacity/admission.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvtier/store/store.h"
#include "src/store/layout/segments_test_fixture.h"
#include "src/store/store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;
using testing::seed_of;
using testing::TempDir;
using testing::views;

constexpr size_t kCapacityPages = 64;

// The workloads, as an engine asks for them: each request is a chain of keys.
//   one-offs: `prompts` shared prompts of 4 keys, each request one of them and 8 keys never
//             asked again. An LRU cache of 8 x prompts pages loses the prompts to the one-offs
//             (a prompt comes back after 8 x prompts new pages); declining first writes keeps
//             them.
//   asked-twice: every request's keys are new, and asked for once more by the next request,
//             never again: taking every page hits them; declining first writes never does.
std::vector<std::vector<std::string>> one_offs(size_t requests, size_t first = 0,
                                               size_t prompts = 8) {
  std::vector<std::vector<std::string>> out;
  for (size_t r = first; r < first + requests; ++r) {
    std::vector<std::string> keys;
    for (size_t i = 0; i < 4; ++i)
      keys.push_back("prompt-" + std::to_string(r % prompts) + "-" + std::to_string(i));
    for (size_t i = 0; i < 8; ++i) {
      keys.push_back("once-" + std::to_string(r) + "-" + std::to_string(i));
    }
    out.push_back(std::move(keys));
  }
  return out;
}

std::vector<std::vector<std::string>> asked_twice(size_t requests) {
  std::vector<std::vector<std::string>> out;
  for (size_t r = 0; r < requests; ++r) {
    std::vector<std::string> keys;
    for (size_t i = 0; i < 8; ++i) {
      keys.push_back("twice-" + std::to_string(r / 2) + "-" + std::to_string(i));
    }
    out.push_back(std::move(keys));
  }
  return out;
}

std::vector<Hash128> hashes(const std::vector<std::string>& keys) {
  std::vector<Hash128> out;
  for (const std::string& k : keys) out.push_back(hash128(k));
  return out;
}

// The policy alone, fed as a full store feeds it: a request's keys are looked up, then the
// ones an LRU cache of the same size would miss are written (held ones are not asked about).
class AdmissionPolicyTest : public ::testing::Test {
 protected:
  void run(const std::vector<std::vector<std::string>>& requests) {
    for (const auto& keys : requests) {
      policy_.on_lookup(hashes(keys));
      for (const std::string& k : keys) (void)policy_.admit(hash128(k), 1, /*full=*/true);
    }
  }
  AdmissionPolicy policy_{kCapacityPages};  // pages of one byte each
};

TEST_F(AdmissionPolicyTest, TakesEveryPageUntilDecliningMeasuresBetter) {
  EXPECT_FALSE(policy_.declining());
  EXPECT_TRUE(policy_.admit(hash128("first"), 1, /*full=*/true));
  run(asked_twice(100));
  EXPECT_FALSE(policy_.declining()) << policy_.describe();
}

TEST_F(AdmissionPolicyTest, OneOffPagesAreDeclinedAndAPageWrittenAgainIsTaken) {
  run(one_offs(200));
  ASSERT_TRUE(policy_.declining()) << policy_.describe();
  EXPECT_NE(policy_.describe().find("declining first writes"), std::string::npos);
  const Hash128 page = hash128("new page");
  EXPECT_FALSE(policy_.admit(page, 1, /*full=*/true)) << "a first write is declined";
  EXPECT_TRUE(policy_.admit(page, 1, /*full=*/true)) << "the second write is taken";
  // With room, nothing is declined.
  EXPECT_TRUE(policy_.admit(hash128("another new page"), 1, /*full=*/false));
}

TEST_F(AdmissionPolicyTest, AWorkloadShiftSwitchesTheRuleBack) {
  run(one_offs(200));
  ASSERT_TRUE(policy_.declining()) << policy_.describe();
  run(asked_twice(400));
  EXPECT_FALSE(policy_.declining()) << policy_.describe();
  EXPECT_TRUE(policy_.admit(hash128("after the shift"), 1, /*full=*/true));
  // And back again when one-offs return.
  run(one_offs(400, 1000));
  EXPECT_TRUE(policy_.declining()) << policy_.describe();
}

// Two policies of one namespace (two stores, two processes) sharing the doorkeeper's file: a
// page first written through one is written before for the other; each with its own, it is
// declined by both. The generations roll over for both, whichever adds.
TEST(AdmissionDoorkeeper, StoresOfANamespaceShareWhatWasWritten) {
  TempDir dir;
  auto file = [&]() {
    Result<std::unique_ptr<SharedFile>> f =
        AdmissionPolicy::open_doorkeeper_file(dir.path(), kCapacityPages * 16384);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() ? std::move(f).value() : nullptr;
  };
  AdmissionPolicy a(kCapacityPages, file());
  AdmissionPolicy b(kCapacityPages, file());
  AdmissionPolicy own(kCapacityPages);  // a store that could not map the file
  for (AdmissionPolicy* p : {&a, &b, &own}) {
    for (const auto& keys : one_offs(200)) {
      p->on_lookup(hashes(keys));
      for (const std::string& k : keys) (void)p->admit(hash128(k), 1, /*full=*/true);
    }
    ASSERT_TRUE(p->declining()) << p->describe();
  }
  const Hash128 page = hash128("written through a, then through b");
  EXPECT_FALSE(a.admit(page, 1, /*full=*/true)) << "a first write is declined";
  EXPECT_FALSE(own.admit(page, 1, /*full=*/true)) << "not shared: a first write for it too";
  EXPECT_TRUE(b.admit(page, 1, /*full=*/true)) << "written before, through a";

  // A generation is eight capacities of writes: after two of them, added through b, a page
  // written through a is forgotten by both.
  const Hash128 old = hash128("written long ago");
  EXPECT_FALSE(a.admit(old, 1, /*full=*/true));
  for (size_t i = 0; i < 2 * 8 * kCapacityPages; ++i) {
    (void)b.admit(hash128("later-" + std::to_string(i)), 1, /*full=*/true);
  }
  EXPECT_FALSE(a.admit(old, 1, /*full=*/true)) << "forgotten: a first write again";
  EXPECT_TRUE(b.admit(old, 1, /*full=*/true)) << "the write just before, through a";
}

// Two policies of one namespace sharing the ring of keys asked, with requests alternating
// between them (round robin over two servers): each one's shadows replay every request, so
// both see the prompts come back after 8 requests' one-offs, more than the capacity holds, and
// both decline first writes, as one store seeing every request does. Each fed only its own
// half, a prompt comes back after 4 of its requests, which the capacity holds: both take every
// page.
TEST(AdmissionShadows, StoresOfANamespaceReplayEachOthersLookups) {
  TempDir dir;
  auto file = [&]() {
    Result<std::unique_ptr<KeyRing>> f =
        AdmissionPolicy::open_lookups_file(dir.path(), kCapacityPages * 16384);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() ? std::move(f).value() : nullptr;
  };
  AdmissionPolicy a(kCapacityPages, nullptr, file());
  AdmissionPolicy b(kCapacityPages, nullptr, file());
  AdmissionPolicy own_a(kCapacityPages), own_b(kCapacityPages);  // could not map the file
  for (AdmissionPolicy* p : {&a, &b, &own_a, &own_b}) {
    (void)p->admit(hash128("sizes the shadows"), 1, /*full=*/true);
  }
  const auto requests = one_offs(400);
  for (size_t r = 0; r < requests.size(); ++r) {
    for (AdmissionPolicy* p : r % 2 == 0 ? std::vector{&a, &own_a} : std::vector{&b, &own_b}) {
      p->on_lookup(hashes(requests[r]));
      for (const std::string& k : requests[r]) (void)p->admit(hash128(k), 1, /*full=*/true);
    }
  }
  EXPECT_TRUE(a.declining()) << a.describe();
  EXPECT_TRUE(b.declining()) << b.describe();
  EXPECT_FALSE(own_a.declining()) << "fed half the requests: " << own_a.describe();
  EXPECT_FALSE(own_b.declining()) << "fed half the requests: " << own_b.describe();

  // A store asked nothing since it looked replays the others' requests the next time it is
  // asked, as many as the ring still holds: through b alone, the workload shifts to pages
  // asked again at once (72,000 keys, more than the ring's 1,024 at this capacity), and a, asked
  // one request,
  // follows.
  for (const auto& keys : asked_twice(9000)) {
    b.on_lookup(hashes(keys));
    for (const std::string& k : keys) (void)b.admit(hash128(k), 1, /*full=*/true);
  }
  ASSERT_FALSE(b.declining()) << b.describe();
  EXPECT_TRUE(a.declining()) << "not asked since: " << a.describe();
  a.on_lookup(hashes({"one more request"}));
  EXPECT_FALSE(a.declining()) << a.describe();
}

// The store, driven as SGLang's HiCache drives its L3 store: batch_exists on a request's keys,
// batch_get of the run found, batch_set of the rest. Every page read back is checked.
class StoreAdmission : public ::testing::TestWithParam<std::string> {
 protected:
  static constexpr size_t kBytes = 16384;
  static constexpr size_t kPages = 512;   // the capacity, in pages
  static constexpr size_t kPrompts = 64;  // one_offs(): a prompt returns after 512 new pages

  std::unique_ptr<Store> open(const std::string& admission, uint64_t capacity = 0) {
    StoreConfig cfg;
    cfg.location =
        *parse_store_uri("file://" + dir_.file("store") + "?backend=posix&layout=" + GetParam() +
                         (admission.empty() ? "" : "&admission=") + admission);
    cfg.ns = testing::test_namespace("admission");
    // Files: a page takes its object (a 4 KiB header block, then the payload); segments take
    // their segment files (1 MiB each): room for 512 to 600 pages.
    cfg.capacity_bytes = capacity ? capacity : kPages * (kBytes + 4096);
    return testing::open_store(std::move(cfg));
  }

  // A store of the namespace (adaptive), as one more process opens it, with its pool.
  struct Writer {
    std::unique_ptr<Store> store;
    std::unique_ptr<PagePool> pool;
  };
  Writer writer() {
    Writer w{open(""), nullptr};
    if (w.store) w.pool = std::make_unique<PagePool>(*w.store, 16, kBytes);
    return w;
  }

  struct Tally {
    size_t hits = 0, asked = 0, wrong = 0;
  };

  static void replay(Store& s, PagePool& pool, const std::vector<std::vector<std::string>>& reqs,
                     Tally& t) {
    for (const auto& keys : reqs) {
      t.asked += keys.size();
      const size_t n = s.batch_exists(views(keys));
      size_t found = 0;
      if (n > 0) {
        std::vector<MutableBuffer> out;
        for (size_t i = 0; i < n; ++i) {
          pool.clear(i);
          out.push_back(pool.out(i, kBytes));
        }
        const BatchResult got = s.batch_get(views({keys.begin(), keys.begin() + n}), out);
        found = got.ok_prefix();
        for (size_t i = 0; i < found; ++i) {
          if (!pool.holds(i, kBytes, seed_of(keys[i]))) ++t.wrong;
        }
      }
      t.hits += found;
      if (found == keys.size()) continue;
      const std::vector<std::string> rest(keys.begin() + found, keys.end());
      std::vector<ConstBuffer> in;
      for (size_t i = 0; i < rest.size(); ++i) {
        pool.fill(i, kBytes, seed_of(rest[i]));
        in.push_back(pool.in(i, kBytes));
      }
      const BatchResult put = s.batch_put(views(rest), in);
      ASSERT_TRUE(put.all_ok()) << "a declined page is not an error";
    }
  }

  TempDir dir_;
};

TEST_P(StoreAdmission, ADeclinedPageReportsSuccessAndIsAMiss) {
  auto s = open("");  // adaptive by default
  ASSERT_NE(s, nullptr);
  EXPECT_NE(s->stats().admission.find("adaptive"), std::string::npos) << s->stats().admission;
  PagePool pool(*s, 16, kBytes);
  Tally t;
  replay(*s, pool, one_offs(600, 0, kPrompts), t);
  EXPECT_EQ(t.wrong, 0u);
  StoreStats st = s->stats();
  ASSERT_NE(st.admission.find("declining first writes"), std::string::npos) << st.admission;
  EXPECT_GT(st.declined_pages, 0u);
  EXPECT_GT(st.admitted_pages, 0u);
  EXPECT_LE(st.used_bytes, st.capacity_bytes);

  // A page written once now reports success and is not there; written again, it is.
  const std::string key = "written twice";
  pool.fill(0, kBytes, seed_of(key));
  KVTIER_EXPECT_OK(s->put(key, pool.slot(0), kBytes));
  EXPECT_EQ(s->stats().declined_pages, st.declined_pages + 1);
  EXPECT_FALSE(*s->exists(key));
  KVTIER_EXPECT_OK(s->put(key, pool.slot(0), kBytes));
  EXPECT_TRUE(*s->exists(key));
  pool.clear(1);
  KVTIER_EXPECT_OK(s->get(key, pool.slot(1), kBytes));
  EXPECT_TRUE(pool.holds(1, kBytes, seed_of(key)));
  // A caller error is reported, never declined: memory outside every registration.
  std::vector<std::byte> outside(kBytes);
  EXPECT_EQ(s->put("unregistered", outside.data(), kBytes).code(), StatusCode::kInvalidArgument);
  // The prompts, which the one-offs would have pushed out, are kept: most of each request's
  // first four keys are hits once the rule holds.
  Tally later;
  replay(*s, pool, one_offs(kPrompts, 600, kPrompts), later);
  EXPECT_EQ(later.wrong, 0u);
  EXPECT_GE(later.hits, kPrompts * 4 * 3 / 4) << s->stats().admission;
}

TEST_P(StoreAdmission, AlwaysTakesEveryPage) {
  auto s = open("always");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().admission, "always");
  PagePool pool(*s, 16, kBytes);
  Tally t;
  replay(*s, pool, one_offs(600, 0, kPrompts), t);
  EXPECT_EQ(t.wrong, 0u);
  const StoreStats st = s->stats();
  EXPECT_EQ(st.declined_pages, 0u);
  EXPECT_EQ(st.admitted_pages, 0u);
  EXPECT_GT(st.evicted_pages, 0u);
  EXPECT_LE(st.used_bytes, st.capacity_bytes);
}

// Churn: the workload shifts back and forth while two stores (as two processes of a host)
// write to one namespace with one capacity; nothing read back is another page's bytes, and the
// capacity holds after every request.
TEST_P(StoreAdmission, NoWrongByteAndTheCapacityHeldWithTwoWriters) {
  Writer a = writer(), b = writer();
  ASSERT_NE(a.store, nullptr);
  ASSERT_NE(b.store, nullptr);
  Tally t;
  for (size_t round = 0; round < 4; ++round) {
    const auto reqs = round % 2 == 0 ? one_offs(600, round * 1000, kPrompts) : asked_twice(300);
    for (size_t r = 0; r < reqs.size(); ++r) {
      Writer& w = r % 2 == 0 ? a : b;
      replay(*w.store, *w.pool, {reqs[r]}, t);
      const StoreStats st = a.store->stats();
      ASSERT_LE(st.used_bytes, st.capacity_bytes) << "round " << round << " request " << r;
    }
  }
  EXPECT_EQ(t.wrong, 0u);
  EXPECT_GT(t.hits, 0u);
  EXPECT_GT(a.store->stats().declined_pages + b.store->stats().declined_pages, 0u);
}

// Two stores of a namespace on one host share what was written: once both decline first
// writes, a page written through one and then through the other is taken.
TEST_P(StoreAdmission, APageWrittenThroughAnotherStoreIsWrittenBefore) {
  Writer wa = writer(), wb = writer();
  ASSERT_NE(wa.store, nullptr);
  ASSERT_NE(wb.store, nullptr);
  Store *a = wa.store.get(), *b = wb.store.get();
  PagePool &pa = *wa.pool, &pb = *wb.pool;
  Tally t;
  replay(*a, pa, one_offs(600, 0, kPrompts), t);
  replay(*b, pb, one_offs(600, 1000, kPrompts), t);
  ASSERT_NE(a->stats().admission.find("declining first writes"), std::string::npos)
      << a->stats().admission;
  ASSERT_NE(b->stats().admission.find("declining first writes"), std::string::npos)
      << b->stats().admission;
  const std::string key = "written through a, then b";
  pa.fill(0, kBytes, seed_of(key));
  KVTIER_EXPECT_OK(a->put(key, pa.slot(0), kBytes));
  EXPECT_FALSE(*a->exists(key)) << "a first write is declined";
  const uint64_t admitted = b->stats().admitted_pages;
  pb.fill(0, kBytes, seed_of(key));
  KVTIER_EXPECT_OK(b->put(key, pb.slot(0), kBytes));
  EXPECT_EQ(b->stats().admitted_pages, admitted + 1);
  EXPECT_TRUE(*b->exists(key));
  pa.clear(1);
  KVTIER_EXPECT_OK(a->get(key, pa.slot(1), kBytes));
  EXPECT_TRUE(pa.holds(1, kBytes, seed_of(key)));
}

// Two stores of a namespace on one host, requests alternating between them, decide from every
// request: a prompt comes back after 64 requests' one-offs (more than the capacity holds), not
// after the 32 one store sees (which it holds), so both decline first writes.
TEST_P(StoreAdmission, StoresOfANamespaceDecideFromEveryRequest) {
  Writer a = writer(), b = writer();
  ASSERT_NE(a.store, nullptr);
  ASSERT_NE(b.store, nullptr);
  Tally t;
  const auto reqs = one_offs(600, 0, kPrompts);
  for (size_t r = 0; r < reqs.size(); ++r) {
    Writer& w = r % 2 == 0 ? a : b;
    replay(*w.store, *w.pool, {reqs[r]}, t);
  }
  EXPECT_EQ(t.wrong, 0u);
  for (Writer* w : {&a, &b}) {
    const std::string rule = w->store->stats().admission;
    EXPECT_NE(rule.find("declining first writes"), std::string::npos) << rule;
  }
}

TEST_P(StoreAdmission, AnUnknownAdmissionIsRefused) {
  StoreConfig cfg;
  cfg.location = *parse_store_uri("file://" + dir_.file("store") + "?layout=" + GetParam() +
                                  "&admission=sometimes");
  cfg.ns = testing::test_namespace("admission");
  cfg.capacity_bytes = 1 << 30;
  Result<std::unique_ptr<Store>> s = Store::open(cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("admission"), std::string::npos) << s.status().to_string();
}

TEST_P(StoreAdmission, WithoutACapacityEveryPageIsTaken) {
  StoreConfig cfg;
  cfg.location = *parse_store_uri("file://" + dir_.file("store") + "?layout=" + GetParam());
  cfg.ns = testing::test_namespace("admission");
  auto s = testing::open_store(std::move(cfg));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().admission, "always (adaptive needs a capacity_bytes)");
}

INSTANTIATE_TEST_SUITE_P(Layouts, StoreAdmission, ::testing::Values("files", "segments"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvtier
