// The fixture of the sealed-store tests (store_sealed_test.cc, store_rotation_test.cc): two
// key files (alpha's with a current and an earlier key, another with one key), stores of
// either FILE layout opened under them, where a page's name puts its file, and a read that
// tells whether a miss gave any byte.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/store/store.h"
#include "seal/key_file.h"
#include "seal/tenant.h"
#include "store_test_util.h"

namespace kvtier::sealed_test {

using testing::PagePool;

constexpr const char* kKeyA2 = "a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0";
constexpr const char* kKeyA1 = "1f2e3d4c5b6a79880f1e2d3c4b5a69780102030405060708090a0b0c0d0e0f10";
constexpr const char* kKeyB = "0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de0badc0de";
constexpr size_t kPage = 70272;       // DeepSeek-V3, page size 1: one chunk
constexpr size_t kBigPiece = 300000;  // two pieces of it: chunks straddle pieces

class SealedStoreBase {
 protected:
  explicit SealedStoreBase(std::string layout) : layout_(std::move(layout)) {}
  void write_key_files() {
    keys_a_ = write_keys("a", std::string("2 ") + kKeyA2 + "\n1 " + kKeyA1 + "\n");
    keys_b_ = write_keys("b", std::string("2 ") + kKeyB + "\n");
  }

  std::string write_keys(const std::string& name, const std::string& text) {
    const std::string path = keys_dir_.file(name);
    testing::write_file(path, text);
    EXPECT_EQ(::chmod(path.c_str(), 0600), 0);
    return path;
  }

  std::string uri(std::string_view extra = "") const {
    return dir_.file("s") + "?backend=posix&layout=" + layout_ + std::string(extra);
  }

  Result<std::unique_ptr<Store>> try_open(const std::string& key_file, const std::string& tenant,
                                          std::string_view extra = "",
                                          DirectIo direct = DirectIo::kOff,
                                          uint64_t staging_bytes = 0) {
    StoreConfig cfg;
    if (staging_bytes != 0) cfg.staging_bytes = staging_bytes;
    KVTIER_ASSIGN_OR_RETURN(cfg.location, parse_store_uri(uri(extra)));
    cfg.ns = testing::test_namespace();
    cfg.key_file = key_file;
    cfg.tenant = tenant;
    cfg.direct_io = direct;
    return Store::open(cfg);
  }
  std::unique_ptr<Store> open(const std::string& key_file, const std::string& tenant = "",
                              DirectIo direct = DirectIo::kOff) {
    Result<std::unique_ptr<Store>> s = try_open(key_file, tenant, "", direct);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // The name `key` has on storage under `key_file`'s current key for `tenant`.
  static Hash128 name_of(const std::string& key_file, const std::string& tenant,
                         std::string_view key) {
    seal::KeyFile f = std::move(seal::KeyFile::load(key_file)).value();
    seal::Tenant t = std::move(seal::Tenant::derive(f, tenant)).value();
    return seal::keyed_name(t.current(), key);
  }
  // A page file's path (files layout).
  std::string page_file(const Store& store, const Hash128& name) const {
    const std::string hex = name.hex();
    return store.namespace_dirs()[0] + "/" + hex.substr(0, 2) + "/" + hex;
  }

  // Every regular file under the store's directory.
  std::vector<std::string> stored_files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.file("s"))) {
      if (e.is_regular_file()) out.push_back(e.path().string());
    }
    return out;
  }

  std::string layout_;
  testing::TempDir dir_;
  testing::TempDir keys_dir_;
  std::string keys_a_;
  std::string keys_b_;
};

// Both layouts.
class SealedStore : public SealedStoreBase, public ::testing::TestWithParam<std::string> {
 protected:
  SealedStore() : SealedStoreBase(GetParam()) {}
  void SetUp() override { write_key_files(); }
};
// One layout's own cases.
class SealedPageFiles : public SealedStoreBase, public ::testing::Test {
 protected:
  SealedPageFiles() : SealedStoreBase("files") {}
  void SetUp() override { write_key_files(); }
};
class SealedSegments : public SealedStoreBase, public ::testing::Test {
 protected:
  SealedSegments() : SealedStoreBase("segments") {}
  void SetUp() override { write_key_files(); }
};

// Puts `keys` as one batch of kPage-byte pages from `pool`'s first slots, slot i filled with
// seed first_seed + i.
inline BatchResult put_seeded(Store& store, PagePool& pool,
                              const std::vector<std::string_view>& keys, uint64_t first_seed) {
  std::vector<ConstBuffer> in;
  for (size_t i = 0; i < keys.size(); ++i) {
    pool.fill(i, kPage, first_seed + i);
    in.push_back(pool.in(i, kPage));
  }
  return store.batch_put(keys, in);
}

// Sealed stores on the test S3 server (each test skips, saying why, where there is none), of
// the layout the test is given.
class SealedS3Base : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!testing::s3_test_server().available()) {
      GTEST_SKIP() << testing::s3_test_server().skip_reason;
    }
  }
  std::string write_keys(const std::string& name, const std::string& text) {
    const std::string path = keys_dir_.file(name);
    testing::write_file(path, text);
    EXPECT_EQ(::chmod(path.c_str(), 0600), 0);
    return path;
  }
  std::unique_ptr<Store> open(const std::string& key_file, const std::string& tenant) {
    StoreConfig cfg;
    Result<StoreLocation> loc =
        parse_store_uri(testing::s3_test_server().uri(dir_.path(), "&layout=" + GetParam()));
    EXPECT_TRUE(loc.ok()) << loc.status().to_string();
    if (!loc.ok()) return nullptr;
    cfg.location = *loc;
    cfg.ns = testing::test_namespace();
    cfg.key_file = key_file;
    cfg.tenant = tenant;
    Result<std::unique_ptr<Store>> s = Store::open(cfg);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  testing::TempDir dir_;
  testing::TempDir keys_dir_;
};

// How key material could show in a text or a file: each key's hex in both cases, a prefix of
// its raw bytes, and of its base64.
inline std::vector<std::string> key_texts(std::initializer_list<const char*> hex_keys) {
  std::vector<std::string> texts;
  for (const char* hex : hex_keys) {
    texts.emplace_back(hex);
    std::string raw;
    for (size_t i = 0; i < 64; i += 2) {
      raw.push_back(static_cast<char>(std::stoi(std::string(hex + i, 2), nullptr, 16)));
    }
    texts.push_back(raw.substr(0, 16));
    std::string upper = hex;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    texts.push_back(upper.substr(0, 24));
    texts.push_back(std::string(hex).substr(0, 24));
    static constexpr char kB64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string b64;
    for (size_t i = 0; i + 2 < raw.size(); i += 3) {
      const uint32_t v = (uint32_t{static_cast<uint8_t>(raw[i])} << 16) |
                         (uint32_t{static_cast<uint8_t>(raw[i + 1])} << 8) |
                         static_cast<uint8_t>(raw[i + 2]);
      for (int s = 18; s >= 0; s -= 6) b64.push_back(kB64[(v >> s) & 63]);
    }
    texts.push_back(b64.substr(0, 20));
  }
  return texts;
}

// Reads `key` (one piece of `bytes`) into a slot poisoned with 0x5A; returns the status and
// whether the slot still holds only the poison or zeros (no byte given).
struct Miss {
  Status status;
  bool nothing_given = true;
};
inline Miss read_poisoned(Store& store, PagePool& pool, size_t slot, std::string_view key,
                          size_t bytes) {
  std::memset(pool.slot(slot), 0x5A, bytes);
  Miss m;
  m.status = store.get(key, pool.slot(slot), bytes);
  for (size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<unsigned char>(pool.slot(slot)[i]);
    if (b != 0x5A && b != 0) {
      m.nothing_given = false;
      break;
    }
  }
  return m;
}

}  // namespace kvtier::sealed_test
