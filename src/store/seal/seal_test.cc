// The seal room alone: key files, tenant keys, keyed names, and sealing chunks.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "seal/key_file.h"
#include "seal/page_seal.h"
#include "seal/secret.h"
#include "seal/tenant.h"
#include "src/testing/test_util.h"

namespace kvtier::seal {
namespace {

constexpr const char* kKeyA = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr const char* kKeyB = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

std::string write_key_file(const testing::TempDir& dir, const std::string& name,
                           const std::string& text, mode_t mode = 0600) {
  const std::string path = dir.file(name);
  testing::write_file(path, text);
  EXPECT_EQ(::chmod(path.c_str(), mode), 0);
  return path;
}

KeyFile load_ok(const std::string& path) {
  Result<KeyFile> f = KeyFile::load(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return *std::move(f);
}

Tenant tenant_ok(const KeyFile& file, std::string_view name) {
  Result<Tenant> t = Tenant::derive(file, name);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return *std::move(t);
}

std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

constexpr bool under_address_sanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return false;
#endif
}

// The VmFlags line of the mapping that holds `p` in /proc/self/smaps.
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > 8) {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return {};
}

TEST(Secret, IsZeroedLeftOutOfCoreDumpsAndMovedNotCopied) {
  Result<Secret> s = Secret::make(32);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->size(), 32u);
  for (std::byte b : s->bytes()) EXPECT_EQ(b, std::byte{0});
  const std::string flags = vm_flags_of(s->bytes().data());
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the secret";
  EXPECT_NE(flags.find(" dd"), std::string::npos) << flags;  // VM_DONTDUMP
  // The sanitizers' mlock is a no-op that reports success: only a build without them can
  // tell.
  if (s->locked() && !under_address_sanitizer() && !testing::under_thread_sanitizer()) {
    EXPECT_NE(flags.find(" lo"), std::string::npos) << flags;  // VM_LOCKED
  }
  const std::byte* where = s->bytes().data();
  Secret moved = *std::move(s);
  EXPECT_EQ(moved.bytes().data(), where);
}

TEST(KeyFile, FirstKeyIsCurrentOthersAreFoundById) {
  testing::TempDir dir;
  const std::string path = write_key_file(
      dir, "keys", std::string("# rotated 2026-12\n\n7 ") + kKeyB + "\n  3\t" + kKeyA + "  \n");
  KeyFile f = load_ok(path);
  EXPECT_EQ(f.current().id, 7u);
  ASSERT_EQ(f.keys().size(), 2u);
  ASSERT_NE(f.find(3), nullptr);
  EXPECT_EQ(f.find(3)->bytes.bytes()[0], std::byte{0x00});
  EXPECT_EQ(f.find(3)->bytes.bytes()[1], std::byte{0x11});
  EXPECT_EQ(f.current().bytes.bytes()[0], std::byte{0xfe});
  EXPECT_EQ(f.find(4), nullptr);
}

TEST(KeyFile, OthersMayNotReadOrWriteIt) {
  testing::TempDir dir;
  for (mode_t mode : {0640, 0604, 0620, 0602, 0644}) {
    const std::string path =
        write_key_file(dir, "keys" + std::to_string(mode), std::string("1 ") + kKeyA + "\n", mode);
    Result<KeyFile> f = KeyFile::load(path);
    ASSERT_FALSE(f.ok()) << "mode " << std::oct << mode;
    EXPECT_EQ(f.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(f.status().message().find("chmod 600"), std::string::npos) << f.status().to_string();
  }
  EXPECT_TRUE(KeyFile::load(write_key_file(dir, "ro", std::string("1 ") + kKeyA, 0400)).ok());
}

TEST(KeyFile, MalformedLinesAreRefusedWithoutQuotingThem) {
  testing::TempDir dir;
  const std::string secretish = std::string(kKeyA).substr(0, 62);
  const std::vector<std::string> bad = {
      std::string("1 ") + secretish + "\n",               // short
      std::string("1 ") + secretish + "zz\n",             // not hex
      std::string(kKeyA) + "\n",                          // no id
      std::string("0 ") + kKeyA + "\n",                   // id 0
      std::string("4294967296 ") + kKeyA + "\n",          // id too large
      std::string("x1 ") + kKeyA + "\n",                  // id not a number
      std::string("1 ") + kKeyA + "\n1 " + kKeyB + "\n",  // id twice
      "# nothing but comments\n\n",                       // no key
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    Result<KeyFile> f = KeyFile::load(write_key_file(dir, "bad" + std::to_string(i), bad[i]));
    ASSERT_FALSE(f.ok()) << i;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << f.status().to_string();
    const std::string text(f.status().message());
    EXPECT_EQ(text.find(secretish.substr(0, 16)), std::string::npos) << text;
    EXPECT_EQ(text.find(std::string(kKeyB).substr(0, 16)), std::string::npos) << text;
  }
}

TEST(KeyFile, TheEnvironmentNamesTheFile) {
  testing::TempDir dir;
  const std::string path = write_key_file(dir, "keys", std::string("9 ") + kKeyA + "\n");
  ASSERT_EQ(::unsetenv(kKeyFileVariable), 0);
  EXPECT_EQ(KeyFile::from_environment().status().code(), StatusCode::kNotFound);
  ASSERT_EQ(::setenv(kKeyFileVariable, path.c_str(), 1), 0);
  Result<KeyFile> f = KeyFile::from_environment();
  ASSERT_EQ(::unsetenv(kKeyFileVariable), 0);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->current().id, 9u);
  EXPECT_EQ(KeyFile::load(dir.file("missing")).status().code(), StatusCode::kNotFound);
}

class SealTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ =
        load_ok(write_key_file(dir_, "keys", std::string("2 ") + kKeyB + "\n1 " + kKeyA + "\n"));
    old_file_ = load_ok(write_key_file(dir_, "old", std::string("1 ") + kKeyA + "\n"));
  }

  // Seals `plain` as chunk 0 of 1 of a new page; returns the page number.
  uint64_t seal(const Sealer& s, uint64_t page, std::string_view bound, std::string_view plain,
                std::vector<std::byte>& out, Tag& tag) {
    out.assign(plain.size(), std::byte{0});
    const std::span<const std::byte> in[] = {as_bytes(plain)};
    EXPECT_TRUE(s.seal_chunk(page, 0, 1, as_bytes(bound), in, out, tag).ok());
    return page;
  }

  testing::TempDir dir_;
  KeyFile file_;
  KeyFile old_file_;
};

TEST_F(SealTest, TenantsGetTheirOwnKeysAndNames) {
  Tenant a = tenant_ok(file_, "alpha");
  Tenant a2 = tenant_ok(file_, "alpha");
  Tenant b = tenant_ok(file_, "beta");
  EXPECT_EQ(a.current().key_id, 2u);
  ASSERT_NE(a.find(1), nullptr);
  const auto same = [](const Secret& x, const Secret& y) {
    return std::memcmp(x.bytes().data(), y.bytes().data(), x.size()) == 0;
  };
  EXPECT_TRUE(same(a.current().seal, a2.current().seal));
  EXPECT_FALSE(same(a.current().seal, b.current().seal));
  EXPECT_FALSE(same(a.current().seal, a.current().name));
  EXPECT_FALSE(same(a.current().seal, *&a.find(1)->seal));
  EXPECT_FALSE(same(a.current().seal, file_.current().bytes));

  const std::string key = "sglang:page:0123456789abcdef";
  const Hash128 plain = hash128(key.data(), key.size());
  EXPECT_EQ(keyed_name(a.current(), key), keyed_name(a2.current(), key));
  EXPECT_NE(keyed_name(a.current(), key), keyed_name(b.current(), key));
  EXPECT_NE(keyed_name(a.current(), key), keyed_name(*a.find(1), key));
  EXPECT_NE(keyed_name(a.current(), key), plain);
  EXPECT_NE(keyed_name(a.current(), key), keyed_name(a.current(), key + "x"));

  // Each name is HMAC-SHA256 under the naming key, whichever thread's context computed it.
  for (const TenantKey* k : {&a.current(), a.find(1), &b.current()}) {
    for (const std::string& page_key : {key, std::string(1000, 'q'), std::string("x")}) {
      unsigned char mac[32];
      unsigned int n = 0;
      HMAC(EVP_sha256(), k->name.bytes().data(), static_cast<int>(k->name.size()),
           reinterpret_cast<const unsigned char*>(page_key.data()), page_key.size(), mac, &n);
      uint64_t high = 0, low = 0;
      for (int i = 0; i < 8; ++i) high = high << 8 | mac[i];
      for (int i = 8; i < 16; ++i) low = low << 8 | mac[i];
      EXPECT_EQ(keyed_name(*k, page_key), (Hash128{high, low}));
      Hash128 elsewhere;
      std::thread([&] { elsewhere = keyed_name(*k, page_key); }).join();
      EXPECT_EQ(elsewhere, (Hash128{high, low}));
    }
  }

  for (std::string_view bad :
       {std::string_view(""), std::string_view("a/b"), std::string_view("a b"),
        std::string_view("..\n"), std::string_view("\0", 1)}) {
    EXPECT_EQ(Tenant::derive(file_, bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(Tenant::derive(file_, std::string(65, 'x')).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(SealTest, AChunkOpensInPlaceFromFragments) {
  Tenant t = tenant_ok(file_, "alpha");
  Result<Sealer> s = Sealer::start(t.current());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  std::vector<std::byte> plain(300'000);
  testing::fill_pattern(plain.data(), plain.size(), 42);
  const std::span<const std::byte> whole(plain);
  // A chunk made of three pieces of the caller's memory.
  const std::span<const std::byte> in[] = {whole.first(1000), whole.subspan(1000, 99'000),
                                           whole.subspan(100'000)};
  std::vector<std::byte> sealed(plain.size());
  Tag tag{};
  Result<uint64_t> page = s->next_page();
  ASSERT_TRUE(page.ok());
  ASSERT_TRUE(s->seal_chunk(*page, 3, 5, as_bytes("bound"), in, sealed, tag).ok());
  EXPECT_NE(std::memcmp(sealed.data(), plain.data(), 64), 0);

  Opener opener(t);
  ASSERT_TRUE(
      opener.open_chunk(s->key_id(), s->salt(), *page, 3, 5, as_bytes("bound"), sealed, tag).ok());
  EXPECT_EQ(testing::find_pattern_mismatch(sealed.data(), sealed.size(), 42), SIZE_MAX);
}

TEST_F(SealTest, AnythingChangedIsCorruptAndLeavesNoBytes) {
  Tenant t = tenant_ok(file_, "alpha");
  Result<Sealer> s = Sealer::start(t.current());
  ASSERT_TRUE(s.ok());
  const std::string plain = "the keys and values of layer 0, heads 0-7, tokens 0-63 ......";
  const std::string bound = "namespace|page key|61|key id 2";
  std::vector<std::byte> sealed;
  Tag tag{};
  const uint64_t page = seal(*s, *s->next_page(), bound, plain, sealed, tag);
  Opener opener(t);

  const auto opens = [&](std::vector<std::byte> data, const Tag& tg, std::string_view bd,
                         uint64_t pg = ~uint64_t{0}, uint32_t chunk = 0, uint32_t chunks = 1,
                         const Salt* salt = nullptr) {
    const Status st =
        opener.open_chunk(s->key_id(), salt ? *salt : s->salt(), pg == ~uint64_t{0} ? page : pg,
                          chunk, chunks, as_bytes(bd), data, tg);
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
      for (std::byte b : data) EXPECT_EQ(b, std::byte{0});
    }
    return st.ok();
  };
  ASSERT_TRUE(opens(sealed, tag, bound));
  for (size_t i = 0; i < sealed.size(); ++i) {
    for (uint8_t bit : {0x01, 0x80}) {
      std::vector<std::byte> bad = sealed;
      bad[i] ^= std::byte{bit};
      EXPECT_FALSE(opens(bad, tag, bound)) << "payload byte " << i;
    }
  }
  for (size_t i = 0; i < tag.size(); ++i) {
    Tag bad = tag;
    bad[i] ^= std::byte{0x01};
    EXPECT_FALSE(opens(sealed, bad, bound)) << "tag byte " << i;
  }
  for (size_t i = 0; i < bound.size(); ++i) {
    std::string bad = bound;
    bad[i] ^= 0x01;
    EXPECT_FALSE(opens(sealed, tag, bad)) << "bound byte " << i;
  }
  EXPECT_FALSE(opens(sealed, tag, bound.substr(1)));
  EXPECT_FALSE(opens(std::vector<std::byte>(sealed.begin(), sealed.end() - 1), tag, bound));
  EXPECT_FALSE(opens(sealed, tag, bound, page + 1));
  EXPECT_FALSE(opens(sealed, tag, bound, page, 1, 2));  // another place in a page
  EXPECT_FALSE(opens(sealed, tag, bound, page, 0, 2));  // a page that had more chunks
  Salt other = s->salt();
  other[31] ^= std::byte{1};
  EXPECT_FALSE(opens(sealed, tag, bound, page, 0, 1, &other));
}

TEST_F(SealTest, AnotherTenantOrKeyGetsAMissNeverBytes) {
  Tenant alpha = tenant_ok(file_, "alpha");
  Tenant beta = tenant_ok(file_, "beta");
  Tenant alpha_old = tenant_ok(old_file_, "alpha");
  Result<Sealer> s = Sealer::start(alpha.current());
  ASSERT_TRUE(s.ok());
  const std::string plain(4096, 'k');
  std::vector<std::byte> sealed;
  Tag tag{};
  const uint64_t page = seal(*s, *s->next_page(), "b", plain, sealed, tag);

  std::vector<std::byte> data = sealed;
  Status st = Opener(beta).open_chunk(s->key_id(), s->salt(), page, 0, 1, as_bytes("b"), data, tag);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
  EXPECT_EQ(std::count(data.begin(), data.end(), std::byte{0}), 4096);

  // A key file that no longer holds key 2: pages sealed under it are misses.
  data = sealed;
  st = Opener(alpha_old).open_chunk(s->key_id(), s->salt(), page, 0, 1, as_bytes("b"), data, tag);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
  EXPECT_EQ(std::count(data.begin(), data.end(), std::byte{0}), 4096);
  // A page claiming to be under key 1 (which it was not sealed with) does not open either.
  data = sealed;
  st = Opener(alpha).open_chunk(1, s->salt(), page, 0, 1, as_bytes("b"), data, tag);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();

  // An earlier key still opens what it sealed.
  Result<Sealer> old = Sealer::start(*alpha.find(1));
  ASSERT_TRUE(old.ok());
  const uint64_t old_page = seal(*old, *old->next_page(), "b", plain, sealed, tag);
  data = sealed;
  EXPECT_TRUE(
      Opener(alpha).open_chunk(1, old->salt(), old_page, 0, 1, as_bytes("b"), data, tag).ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.data()), data.size()), plain);
}

TEST_F(SealTest, AMillionSealsUnderOneKeyNeverRepeatANonce) {
  Tenant t = tenant_ok(file_, "alpha");
  Result<Sealer> a = Sealer::start(t.current());
  Result<Sealer> b = Sealer::start(t.current());
  ASSERT_TRUE(a.ok() && b.ok());
  // Two sessions under one tenant key: their keys differ because their salts do.
  EXPECT_NE(a->salt(), b->salt());

  // A million chunks sealed by one session, from two threads: every (page, chunk) and so
  // every nonce is new.
  constexpr int kPages = 250'000;
  constexpr uint32_t kChunks = 4;
  std::vector<uint64_t> pages[2];
  std::vector<Nonce> nonces[2];
  const auto work = [&](int w) {
    const std::string plain = "x";
    std::vector<std::byte> out(1);
    Tag tag{};
    for (int i = 0; i < kPages / 2; ++i) {
      Result<uint64_t> page = a->next_page();
      ASSERT_TRUE(page.ok());
      pages[w].push_back(*page);
      for (uint32_t c = 0; c < kChunks; ++c) {
        const std::span<const std::byte> in[] = {as_bytes(plain)};
        ASSERT_TRUE(a->seal_chunk(*page, c, kChunks, {}, in, out, tag).ok());
        nonces[w].push_back(nonce_of(*page, c));
      }
    }
  };
  std::thread t1(work, 0);
  work(1);
  t1.join();
  std::set<Nonce> seen;
  for (const auto& n : nonces) seen.insert(n.begin(), n.end());
  EXPECT_EQ(seen.size(), size_t{kPages} * kChunks);
  std::unordered_set<uint64_t> distinct(pages[0].begin(), pages[0].end());
  distinct.insert(pages[1].begin(), pages[1].end());
  EXPECT_EQ(distinct.size(), size_t{kPages});
}

}  // namespace
}  // namespace kvtier::seal
