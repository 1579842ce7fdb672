#include "kvtier/store/uri.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "kvtier/backends/builtin.h"
#include "src/testing/test_util.h"

namespace kvtier {
namespace {

TEST(StoreUri, PlainPathAndFileUri) {
  Result<StoreLocation> a = parse_store_uri("/var/cache/kv/");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->storage_class, StorageClass::kFile);
  EXPECT_EQ(a->bases, std::vector<std::string>{"/var/cache/kv"});
  EXPECT_EQ(a->backend, "auto");
  Result<StoreLocation> b = parse_store_uri("file:///var/cache/kv");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bases, a->bases);
}

TEST(StoreUri, DeadlineAndIsolationAreTheStoresParametersOnFileLocations) {
  Result<StoreLocation> a =
      parse_store_uri("file:///mnt/a?deadline_ms=500&isolate=on&io_threads=4&probe_interval_ms=9");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->params, (BackendParams{{"io_threads", "4"}}));
  EXPECT_EQ(a->store_params,
            (BackendParams{{"deadline_ms", "500"}, {"isolate", "on"}, {"probe_interval_ms", "9"}}));
  Result<StoreLocation> again = parse_store_uri(a->uri());
  ASSERT_TRUE(again.ok()) << a->uri();
  EXPECT_EQ(again->params, a->params);
  EXPECT_EQ(again->store_params, a->store_params);
  // On S3 deadline_ms is the backend's (its requests' deadline).
  Result<StoreLocation> s3 = parse_store_uri("s3://bucket-x/p?deadline_ms=700");
  if (s3.ok()) {
    EXPECT_EQ(s3->params.at("deadline_ms"), "700");
    EXPECT_TRUE(s3->store_params.empty());
  }
}

TEST(StoreUri, RelativePathsBecomeAbsolute) {
  Result<StoreLocation> a = parse_store_uri("data/../kv");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->bases[0], (std::filesystem::current_path() / "kv").string());
}

TEST(StoreUri, SeveralBasesAndParameters) {
  Result<StoreLocation> a =
      parse_store_uri("file:///mnt/a,/mnt/b?backend=posix&io_threads=16&x=a%20b");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->bases, (std::vector<std::string>{"/mnt/a", "/mnt/b"}));
  EXPECT_EQ(a->backend, "posix");
  EXPECT_EQ(a->params.at("io_threads"), "16");
  EXPECT_EQ(a->params.at("x"), "a b");
  Result<StoreLocation> again = parse_store_uri(a->uri());
  ASSERT_TRUE(again.ok()) << a->uri();
  EXPECT_EQ(again->bases, a->bases);
  EXPECT_EQ(again->backend, "posix");
}

// parse(uri()) gives the same location back, parameters included, whatever the paths and
// values hold.
TEST(StoreUri, UriRoundTripsPathsAndParameters) {
  for (const std::string& u :
       {std::string("file:///mnt/a%2Cb,/mnt/100%25/c%3Fd?backend=posix&io_threads=16&"
                    "x=a%26b%3Dc%25d%20e&y=line%0Afeed&z=,?/"),
        std::string("mem://odd%3Fname%25?instance=a%26b"),
        std::string("s3://kv-cache/team%20a/x%3Fy%25z?endpoint=http://127.0.0.1:7480&"
                    "region=us-east-1&ca_bundle=/etc/a%26b.pem")}) {
    SCOPED_TRACE(u);
    if (u.starts_with("s3://") && builtin_backends().find("s3") == nullptr) continue;
    KVTIER_ASSERT_OK_AND_ASSIGN(StoreLocation a, parse_store_uri(u));
    const std::string printed = a.uri();
    KVTIER_ASSERT_OK_AND_ASSIGN(StoreLocation b, parse_store_uri(printed));
    EXPECT_EQ(b.storage_class, a.storage_class) << printed;
    EXPECT_EQ(b.bases, a.bases) << printed;
    EXPECT_EQ(b.backend, a.backend) << printed;
    EXPECT_EQ(b.params, a.params) << printed;
    EXPECT_EQ(b.uri(), printed);
  }
  KVTIER_ASSERT_OK_AND_ASSIGN(StoreLocation f, parse_store_uri("file:///mnt/a%2Cb?x=a%26b"));
  EXPECT_EQ(f.bases, std::vector<std::string>{"/mnt/a,b"});
  EXPECT_EQ(f.params.at("x"), "a&b");
}

TEST(StoreUri, Memory) {
  Result<StoreLocation> a = parse_store_uri("mem://cache1");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->storage_class, StorageClass::kMemory);
  EXPECT_EQ(a->params.at("instance"), "cache1");
}

TEST(StoreUri, Errors) {
  EXPECT_EQ(parse_store_uri("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("file://").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("file:///a,/a").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("gopher://x").status().code(), StatusCode::kInvalidArgument);
  // A scheme this build knows but lacks the backend for is kUnsupported, as uri.h says.
  if (builtin_backends().find("s3") == nullptr) {
    EXPECT_EQ(parse_store_uri("s3://bucket/x").status().code(), StatusCode::kUnsupported);
  } else {
    EXPECT_TRUE(parse_store_uri("s3://bucket/x").ok());
  }
  EXPECT_EQ(parse_store_uri("file:///a?novalue").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("file:///a%zz").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("file:///a%2").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("s3://B/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("s3://ab/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_store_uri("s3://bucket/a/../b").status().code(), StatusCode::kInvalidArgument);
}

TEST(StoreUri, S3) {
  if (builtin_backends().find("s3") == nullptr) GTEST_SKIP() << "built without S3";
  Result<StoreLocation> a = parse_store_uri(
      "s3://kv-cache/team%20a//pages/?endpoint=http://127.0.0.1:7480&region=us-east-1&"
      "secret_key=hunter2&session_token=abc");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->storage_class, StorageClass::kObject);
  EXPECT_EQ(a->backend, "s3");
  EXPECT_EQ(a->bases, std::vector<std::string>{"/team a/pages"});
  EXPECT_EQ(a->params.at("bucket"), "kv-cache");
  EXPECT_EQ(a->params.at("endpoint"), "http://127.0.0.1:7480");
  EXPECT_EQ(a->params.at("secret_key"), "hunter2");
  // Secrets never print.
  const std::string printed = a->uri();
  EXPECT_EQ(printed.find("hunter2"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("abc"), std::string::npos) << printed;
  EXPECT_NE(printed.find("s3://kv-cache/team a/pages?"), std::string::npos) << printed;

  Result<StoreLocation> b = parse_store_uri("s3://kv-cache");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bases, std::vector<std::string>{"/"});
  EXPECT_EQ(b->uri(), "s3://kv-cache");
}

}  // namespace
}  // namespace kvtier
