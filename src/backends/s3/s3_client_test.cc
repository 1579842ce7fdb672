// The S3 client's event loops: requests spread over them, max_parallel shared out, and every
// request a loop holds ends when the client is destroyed. Against the S3 server in the
// environment (tests/s3/server.sh; skipped with the reason when there is none), and against a
// local socket that never answers.
#include "s3_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/core/mutex.h"
#include "kvtier/core/unique_fd.h"
#include "src/testing/test_util.h"

namespace kvtier::s3 {
namespace {

ClientOptions options_for(std::string endpoint, std::string bucket, std::string region) {
  ClientOptions o;
  o.endpoint = std::move(endpoint);
  o.bucket = std::move(bucket);
  o.region = std::move(region);
  const char* key = std::getenv("AWS_ACCESS_KEY_ID");
  const char* secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  o.access_key = key != nullptr ? key : "test-key";
  o.secret_key = secret != nullptr ? secret : "test-secret";
  return o;
}

TEST(S3Client, LoopsAreAtLeastOneAndAtMostMaxParallel) {
  ClientOptions o = options_for("http://127.0.0.1:9", "b", "us-east-1");
  o.max_parallel = 2;
  o.loops = 4;
  Result<std::unique_ptr<Client>> c = Client::create(o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->loops(), 2u);
  EXPECT_EQ((*c)->options().max_parallel, 2u);
  o.loops = 0;
  c = Client::create(o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->loops(), 1u);
}

TEST(S3Client, RequestsAreSpreadOverTheLoops) {
  const testing::S3TestServer& server = testing::s3_test_server();
  if (!server.available()) GTEST_SKIP() << server.skip_reason;
  ClientOptions o = options_for(server.endpoint, server.bucket, server.region);
  o.max_parallel = 4;
  o.loops = 2;
  Result<std::unique_ptr<Client>> c = Client::create(o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ((*c)->loops(), 2u);

  Mutex mu;
  std::set<std::thread::id> threads;
  std::vector<std::shared_ptr<Request>> heads;
  for (int i = 0; i < 8; ++i) {
    auto r = std::make_shared<Request>();
    r->method = "HEAD";  // of the bucket
    r->deadline = Clock::now() + std::chrono::seconds(60);
    r->on_done = [&](Request&) {
      MutexLock lock(mu);
      threads.insert(std::this_thread::get_id());
    };
    heads.push_back(std::move(r));
  }
  (*c)->run_all(heads);
  for (const auto& r : heads) EXPECT_TRUE(r->status.ok()) << r->status.to_string();
  MutexLock lock(mu);
  EXPECT_EQ(threads.size(), 2u);  // handed out in turn: both loops completed requests
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

// One loop and one request at a time: every request reuses the same libcurl handle, which is
// never reset; each must still send its own method, headers and body and nothing of the last.
TEST(S3Client, OneHandleServesEveryMethodInTurn) {
  const testing::S3TestServer& server = testing::s3_test_server();
  if (!server.available()) GTEST_SKIP() << server.skip_reason;
  ClientOptions o = options_for(server.endpoint, server.bucket, server.region);
  o.max_parallel = 1;
  o.loops = 1;
  Result<std::unique_ptr<Client>> c = Client::create(o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto until = Clock::now() + std::chrono::seconds(60);
  const std::string key = "client-test/one-handle-" + std::to_string(::getpid());
  auto request = [&](const char* method) {
    auto r = std::make_shared<Request>();
    r->method = method;
    r->key = key;
    r->deadline = until;
    return r;
  };
  std::string body(200000, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 23);

  for (int round = 0; round < 2; ++round) {
    auto put = request("PUT");
    put->body_pieces = {std::as_bytes(std::span(body))};
    ASSERT_TRUE((*c)->run(put).ok()) << put->status.to_string();
    ASSERT_FALSE(put->etag.empty());

    auto head = request("HEAD");  // after a PUT: no body sent, none read
    ASSERT_TRUE((*c)->run(head).ok()) << head->status.to_string();
    EXPECT_EQ(head->content_length, body.size());
    EXPECT_EQ(head->etag, put->etag);
    EXPECT_TRUE(head->response.empty());

    std::string back(1000, '\0');
    auto get = request("GET");  // after a HEAD: the body comes back (NOBODY cleared)
    get->headers = {"Range: bytes=1000-1999"};
    get->sink = {std::as_writable_bytes(std::span(back))};
    ASSERT_TRUE((*c)->run(get).ok()) << get->status.to_string();
    EXPECT_EQ(get->received, back.size());
    EXPECT_EQ(back, body.substr(1000, 1000));
    EXPECT_EQ(get->object_size, body.size());

    auto list = request("GET");  // a bucket listing after a ranged GET: no Range, no sink
    list->key.clear();
    list->query = {{"list-type", "2"}, {"prefix", key}};
    ASSERT_TRUE((*c)->run(list).ok()) << list->status.to_string();
    EXPECT_NE(list->response.find(key), std::string::npos) << list->response;

    auto del = request("DELETE");
    ASSERT_TRUE((*c)->run(del).ok()) << del->status.to_string();
    auto gone = request("HEAD");  // after a DELETE: a HEAD again, not a DELETE
    EXPECT_EQ((*c)->run(gone).code(), StatusCode::kNotFound) << gone->status.to_string();
  }
}

TEST(S3Client, DestroyingTheClientEndsWhatEveryLoopHolds) {
  // A listening socket nobody accepts from: connections complete in the kernel's backlog,
  // requests are sent, and no answer ever comes.
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(listener.valid());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener.get(), 64), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  ClientOptions o =
      options_for("http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)), "b", "us-east-1");
  o.max_parallel = 4;
  o.loops = 2;
  Result<std::unique_ptr<Client>> c = Client::create(o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();

  std::vector<std::shared_ptr<Request>> gets;
  for (int i = 0; i < 6; ++i) {  // more than max_parallel: some wait in a loop's queue
    auto r = std::make_shared<Request>();
    r->key = "never-answered-" + std::to_string(i);
    gets.push_back(r);
    (*c)->start(r);
  }
  c->reset();
  for (const auto& r : gets) EXPECT_EQ(r->status.code(), StatusCode::kCancelled) << r->key;
}

}  // namespace
}  // namespace kvtier::s3
