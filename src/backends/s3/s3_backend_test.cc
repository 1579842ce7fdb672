// The s3 backend against a real S3 server (tests/s3/server.sh; skipped with the reason when
// there is none) and against a fault-injecting TCP proxy in front of it: open errors, corrupt
// objects, multipart uploads, retries through 503s and stalls, a server that stops mid-batch,
// descriptor counts, and secrets kept out of messages.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "kvtier/backends/builtin.h"
#include "kvtier/core/mutex.h"
#include "kvtier/core/unique_fd.h"
#include "kvtier/store/store.h"
#include "src/store/store_test_util.h"
#include "src/testing/test_util.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::PagePool;

// A TCP relay in front of the S3 server that can answer 503, stall, or drop everything.
// SigV4 signs the Host header as sent, so bytes are relayed unchanged.
//
// The proxy runs in the test's process, and its relays close their sockets on their own
// schedule, after they see the client's close. So that descriptor counts stay exact, every
// descriptor the proxy holds (its listening socket and both ends of each relay) is opened and
// closed under `fds_mu_` and listed in `held_`: `client_fds()` counts, under the same lock,
// the process's descriptors that are not the proxy's.
class FaultProxy {
 public:
  enum class Mode { kRelay, kFail503, kStall, kDrop };

  explicit FaultProxy(const std::string& endpoint) {
    // endpoint: http://127.0.0.1:PORT
    const size_t colon = endpoint.rfind(':');
    upstream_port_ = static_cast<uint16_t>(std::atoi(endpoint.c_str() + colon + 1));
    // Non-blocking, so that accept4 can run under fds_mu_ without waiting there.
    listen_ = open_socket(SOCK_NONBLOCK);
    const int one = 1;
    ::setsockopt(listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listen_.get(), 128), 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~FaultProxy() {
    stop_.store(true);
    acceptor_.join();
    std::vector<std::thread> relays;
    {
      std::lock_guard lock(mu_);
      relays = std::move(relays_);
    }
    for (auto& t : relays) t.join();
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  uint16_t port() const { return port_; }
  // The next `n` connections get `mode`; later ones are relayed. Connections open now are
  // closed, as a server closes idle ones, so that the client's next requests open new
  // connections and meet the fault (a client keeping its connections would never see it).
  void inject(Mode mode, int n) {
    mode_.store(mode);
    remaining_.store(n);
    generation_.fetch_add(1);
  }
  // Every connection from now on, and those open, get `mode`.
  void set_all(Mode mode) {
    mode_.store(mode);
    remaining_.store(INT32_MAX);
    generation_.fetch_add(1);
  }
  int injected() const { return injected_.load(); }
  // Requests of each method relayed so far, counted by their request lines ("GET /...").
  int64_t requests(std::string_view method) {
    std::lock_guard lock(mu_);
    auto it = methods_.find(std::string(method));
    return it == methods_.end() ? 0 : it->second;
  }
  // Connections held in kStall now, never answered.
  int stalled() const { return stalled_.load(); }

  // Relays at most `bytes` more from the server to the client, then holds what the server
  // sends until set_all() or inject() (which close open connections) or limit_down(-1).
  void limit_down(int64_t bytes) {
    down_target_.store(down_sent_.load() + bytes);
    down_budget_.store(bytes);
  }
  // Blocks until the bytes limit_down() allowed have reached the client.
  void wait_down_spent() {
    for (int64_t s = down_sent_.load(); s < down_target_.load(); s = down_sent_.load()) {
      down_sent_.wait(s);
    }
  }

  // The process's open descriptors that are not the proxy's, counted while the proxy can
  // neither open nor close one: exact whatever its relays are doing.
  size_t client_fds() {
    MutexLock lock(fds_mu_);
    return testing::open_fds() - held_.size();
  }
  // Descriptors the proxy holds now.
  size_t proxy_fds() {
    MutexLock lock(fds_mu_);
    return held_.size();
  }

 private:
  // One of the proxy's descriptors: a UniqueFd that is listed in held_ while it is open, and
  // leaves the list in the same critical section that closes it.
  class ProxyFd {
   public:
    ProxyFd() = default;
    ProxyFd(FaultProxy* owner, int fd) : owner_(owner), fd_(fd) {}  // fds_mu_ held
    ProxyFd(ProxyFd&& o) noexcept = default;
    // Swaps, so that the descriptor this one held is closed (and unlisted) by `o`.
    ProxyFd& operator=(ProxyFd&& o) noexcept {
      std::swap(owner_, o.owner_);
      std::swap(fd_, o.fd_);
      return *this;
    }
    ~ProxyFd() {
      if (!fd_.valid()) return;
      MutexLock lock(owner_->fds_mu_);
      owner_->held_.erase(fd_.get());
      fd_.reset();
    }
    int get() const { return fd_.get(); }

   private:
    FaultProxy* owner_ = nullptr;
    UniqueFd fd_;
  };

  ProxyFd open_socket(int flags) {
    MutexLock lock(fds_mu_);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    if (fd >= 0) held_.insert(fd);
    return ProxyFd(this, fd);
  }

  ProxyFd accept_one() {
    MutexLock lock(fds_mu_);
    const int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) held_.insert(fd);
    return ProxyFd(this, fd);
  }

  void accept_loop() {
    while (!stop_.load()) {
      pollfd p{listen_.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      ProxyFd c = accept_one();
      if (c.get() < 0) continue;
      std::lock_guard lock(mu_);
      relays_.emplace_back([this, c = std::move(c)]() mutable { serve(std::move(c)); });
    }
  }

  Mode take_mode() {
    int left = remaining_.load();
    while (left > 0) {
      if (remaining_.compare_exchange_weak(left, left - 1)) {
        injected_.fetch_add(1);
        return mode_.load();
      }
    }
    return Mode::kRelay;
  }

  void serve(ProxyFd client) {
    const Mode mode = take_mode();
    const int gen = generation_.load();
    if (mode == Mode::kDrop) return;  // closed at once
    if (mode == Mode::kFail503) {
      char buf[65536];
      (void)!::recv(client.get(), buf, sizeof buf, 0);  // the request head
      const char reply[] =
          "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: 62\r\n"
          "Connection: close\r\n\r\n<Error><Code>SlowDown</Code><Message>busy</Message></Error>";
      (void)!::send(client.get(), reply, sizeof reply - 1, MSG_NOSIGNAL);
      return;
    }
    if (mode == Mode::kStall) {
      // Holds the connection, reading nothing, until set_all()/inject() or the end.
      stalled_.fetch_add(1);
      while (!stop_.load() && generation_.load() == gen) std::this_thread::sleep_for(10ms);
      stalled_.fetch_sub(1);
      return;
    }
    ProxyFd up = open_socket(0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(upstream_port_);
    if (::connect(up.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    std::vector<char> buf(1 << 16);
    pollfd fds[2] = {{client.get(), POLLIN, 0}, {up.get(), POLLIN, 0}};
    while (!stop_.load() && generation_.load() == gen) {
      // Server to client only within the down budget (see limit_down).
      const size_t down = take_down_budget(buf.size());
      fds[1].events = down > 0 ? POLLIN : 0;
      fds[0].revents = fds[1].revents = 0;
      const int ready = ::poll(fds, 2, 20);
      for (int i = 0; i < 2 && ready > 0; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = ::recv(fds[i].fd, buf.data(), i == 1 ? down : buf.size(), 0);
        if (i == 1) give_back_down_budget(down - static_cast<size_t>(std::max<ssize_t>(n, 0)));
        if (n <= 0) return;
        if (i == 0) count_request_lines(std::string_view(buf.data(), static_cast<size_t>(n)));
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t k = ::send(fds[1 - i].fd, buf.data() + sent, n - sent, MSG_NOSIGNAL);
          if (k <= 0) return;
          sent += k;
        }
        if (i == 1) {
          down_sent_.fetch_add(n);
          down_sent_.notify_all();
        }
      }
      if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) == 0) give_back_down_budget(down);
    }
  }

  // Request lines in bytes from a client: "METHOD /path HTTP/1.1" at the start of a read or
  // after a CRLF (a request's first bytes follow the previous one's end; payloads of the
  // tests' pages hold no such line).
  void count_request_lines(std::string_view data) {
    std::lock_guard lock(mu_);
    for (const char* m : {"GET", "HEAD", "PUT", "POST", "DELETE"}) {
      const std::string line = std::string(m) + " /";
      for (size_t at = data.find(line); at != std::string_view::npos;
           at = data.find(line, at + 1)) {
        if (at == 0 || (at >= 2 && data.substr(at - 2, 2) == "\r\n")) ++methods_[m];
      }
    }
  }

  // Up to `want` bytes of the down budget (all of `want` when unlimited).
  size_t take_down_budget(size_t want) {
    int64_t b = down_budget_.load();
    for (;;) {
      if (b < 0) return want;
      const int64_t take = std::min<int64_t>(b, static_cast<int64_t>(want));
      if (down_budget_.compare_exchange_weak(b, b - take)) return static_cast<size_t>(take);
    }
  }
  void give_back_down_budget(size_t n) {
    if (n == 0) return;
    int64_t b = down_budget_.load();
    while (b >= 0 && !down_budget_.compare_exchange_weak(b, b + static_cast<int64_t>(n))) {
    }
  }

  uint16_t upstream_port_ = 0;
  uint16_t port_ = 0;
  Mutex fds_mu_;
  std::set<int> held_ KVTIER_GUARDED_BY(fds_mu_);
  ProxyFd listen_;
  std::atomic<bool> stop_{false};
  std::atomic<Mode> mode_{Mode::kRelay};
  std::atomic<int> remaining_{0};
  std::atomic<int> injected_{0};
  std::atomic<int> stalled_{0};
  std::atomic<int> generation_{0};
  std::atomic<int64_t> down_budget_{-1};  // -1: unlimited
  std::atomic<int64_t> down_sent_{0};
  std::atomic<int64_t> down_target_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> relays_;
  std::map<std::string, int64_t> methods_;  // guarded by mu_
};

class S3Backend : public ::testing::Test {
 protected:
  void SetUp() override {
    if (builtin_backends().find("s3") == nullptr) GTEST_SKIP() << "built without the s3 backend";
    if (!testing::s3_test_server().available())
      GTEST_SKIP() << testing::s3_test_server().skip_reason;
  }

  StoreLocation location(std::string_view extra = {}, std::string endpoint = {}) {
    testing::S3TestServer s = testing::s3_test_server();
    if (!endpoint.empty()) s.endpoint = std::move(endpoint);
    // Page objects unless the test asks for segments (layout=auto would pack small pages).
    const std::string query = extra.find("layout=") == std::string_view::npos
                                  ? "&layout=files" + std::string(extra)
                                  : std::string(extra);
    Result<StoreLocation> loc = parse_store_uri(s.uri(dir_.path(), query));
    EXPECT_TRUE(loc.ok()) << loc.status().to_string();
    return *loc;
  }

  testing::TempDir dir_;  // only its name is used: a fresh prefix per test
};

// These need no server.
TEST(S3BackendOpen, NoCredentialsIsAClearError) {
  if (builtin_backends().find("s3") == nullptr) GTEST_SKIP() << "built without the s3 backend";
  BackendParams p{{"bucket", "kv-test"},
                  {"endpoint", "http://127.0.0.1:1"},
                  {"access_key", ""},
                  {"secret_key", ""}};
  // Without credentials in the environment either (restored afterwards).
  const char* saved_key = std::getenv("AWS_ACCESS_KEY_ID");
  const char* saved_secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  const std::string key = saved_key ? saved_key : "", secret = saved_secret ? saved_secret : "";
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  Result<std::unique_ptr<Backend>> b = builtin_backends().find("s3")->factory(p);
  if (saved_key) ::setenv("AWS_ACCESS_KEY_ID", key.c_str(), 1);
  if (saved_secret) ::setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
}

TEST(S3BackendOpen, UnreachableEndpointFailsFastAndKeepsSecrets) {
  if (builtin_backends().find("s3") == nullptr) GTEST_SKIP() << "built without the s3 backend";
  const size_t fds = testing::open_fds();
  StoreConfig cfg;
  cfg.location = *parse_store_uri(
      "s3://kv-test/p?endpoint=http://127.0.0.1:1&deadline_ms=2000&access_key=AKID&"
      "secret_key=sup3rs3cret");
  cfg.ns = testing::test_namespace();
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::unique_ptr<Store>> s = Store::open(cfg);
  // Refused at once, each attempt: only a hang would take this long.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, testing::kHungCeiling);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().to_string();
  EXPECT_NE(s.status().message().find("cannot reach"), std::string::npos);
  EXPECT_EQ(s.status().to_string().find("sup3rs3cret"), std::string::npos);
  EXPECT_EQ(testing::open_fds(), fds);
}

TEST_F(S3Backend, WrongCredentialsFailAtOpen) {
  StoreConfig cfg;
  cfg.location = location();
  cfg.location.params["access_key"] = "NOSUCHKEY";
  cfg.location.params["secret_key"] = "wrongsecretwrongsecret";
  cfg.ns = testing::test_namespace();
  Result<std::unique_ptr<Store>> s = Store::open(cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied) << s.status().to_string();
  EXPECT_NE(s.status().message().find("credentials"), std::string::npos);
  EXPECT_EQ(s.status().to_string().find("wrongsecret"), std::string::npos);
}

TEST_F(S3Backend, MissingBucketFailsAtOpen) {
  StoreConfig cfg;
  cfg.location = location();
  cfg.location.params["bucket"] = "no-such-bucket-kvtier";
  cfg.ns = testing::test_namespace();
  Result<std::unique_ptr<Store>> s = Store::open(cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound) << s.status().to_string();
  EXPECT_NE(s.status().message().find("does not exist"), std::string::npos);
}

TEST_F(S3Backend, DescribeNamesTheEndpointNotTheSecret) {
  auto store = testing::open_store(location(), testing::test_namespace());
  ASSERT_NE(store, nullptr);
  const std::string d = store->backend_description();
  EXPECT_NE(d.find(testing::s3_test_server().endpoint), std::string::npos) << d;
  EXPECT_EQ(d.find(std::getenv("AWS_SECRET_ACCESS_KEY")), std::string::npos);
}

TEST_F(S3Backend, AppendsAreRefusedSoThereIsNothingToSync) {
  const StoreLocation loc = location();
  AgentConfig ac;
  ac.backend = "s3";
  ac.storage_class = StorageClass::kObject;
  ac.params = loc.params;
  ac.registry = &builtin_backends();
  KVTIER_ASSERT_OK_AND_ASSIGN(Agent agent, Agent::create(ac));
  const std::string key = loc.bases.front() + "/log";
  Result<Target> t = agent.open_target({key, TargetMode::kAppend, 0, {}});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnsupported) << t.status().to_string();
  EXPECT_NE(t.status().message().find("does not append"), std::string::npos)
      << t.status().message();
  KVTIER_ASSERT_OK_AND_ASSIGN(Target c, agent.open_target({key, TargetMode::kCreate, 4096, {}}));
  EXPECT_EQ(c.sync().code(), StatusCode::kInvalidArgument);
}

TEST_F(S3Backend, CorruptOrForeignObjectIsAMiss) {
  const StoreLocation loc = location();
  auto store = testing::open_store(loc, testing::test_namespace());
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 2, 65536);
  pool.fill(0, 65536, 7);
  KVTIER_ASSERT_OK(store->put("victim", pool.slot(0), 65536));

  // Overwrite the object with garbage of the same size through a raw PUT.
  AgentConfig ac;
  ac.backend = "s3";
  ac.storage_class = StorageClass::kObject;
  ac.params = loc.params;
  ac.registry = &builtin_backends();
  Agent agent = std::move(Agent::create(ac)).value();
  std::string page;
  const std::string ns_dir = store->namespace_dirs().front();
  KVTIER_ASSERT_OK(agent.list(ns_dir, {}, [&](const ObjectInfo& fan) {
    if (!fan.is_dir || fan.name.size() != 2) return ok_status();
    return agent.list(ns_dir + "/" + fan.name, {}, [&](const ObjectInfo& e) {
      page = ns_dir + "/" + fan.name + "/" + e.name;
      return ok_status();
    });
  }));
  ASSERT_FALSE(page.empty());
  AlignedBuffer garbage = testing::make_buffer(65536 + 4096);
  testing::fill_pattern(garbage.data(), garbage.size(), 99);
  Registration reg = std::move(agent.register_memory(garbage.data(), garbage.size())).value();
  Target t = std::move(agent.open_target({page, TargetMode::kCreate, garbage.size(), {}})).value();
  MemDesc m{garbage.data(), garbage.size()};
  StorageDesc sd{&t, 0, garbage.size()};
  Transfer x = std::move(agent.make_request(TransferOp::kWrite, {&m, 1}, {&sd, 1})).value();
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_ASSERT_OK(x.first_error());
  KVTIER_ASSERT_OK(t.publish());

  Status st = store->get("victim", pool.slot(1), 65536);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
  EXPECT_EQ(store->stats().get_corrupt, 1u);
  // Dropped: the next read is a plain miss.
  EXPECT_EQ(store->get("victim", pool.slot(1), 65536).code(), StatusCode::kNotFound);
}

// A read of a stored page is one GET: no HEAD asks its size first (the store knows it, and
// the GET's answer is checked against it). What a HEAD knew still counts: a caller's wrong
// buffers are its mistake (the page stays), an absent page a miss, a damaged one dropped.
TEST_F(S3Backend, AReadOfAStoredPageIsOneRoundTrip) {
  FaultProxy proxy(testing::s3_test_server().endpoint);
  auto store = testing::open_store(location({}, proxy.endpoint()), testing::test_namespace());
  ASSERT_NE(store, nullptr);
  constexpr size_t kPage = 65536 + 100;  // not 4 KiB aligned: the object has a padded tail
  PagePool pool(*store, 16, kPage + 4096);
  std::vector<std::string> keys;
  std::vector<ConstBuffer> in;
  std::vector<MutableBuffer> back;
  for (size_t i = 0; i < 8; ++i) {
    keys.push_back(fmt::format("one-trip-{}", i));
    pool.fill(i, kPage, 40 + i);
    in.push_back(pool.in(i, kPage));
    back.push_back(pool.out(8 + i, kPage));
  }
  ASSERT_TRUE(store->batch_put(testing::views(keys), in).all_ok());
  const int64_t heads = proxy.requests("HEAD"), gets = proxy.requests("GET");
  const BatchResult r = store->batch_get(testing::views(keys), back);
  ASSERT_TRUE(r.all_ok()) << r.status.to_string();
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(pool.holds(8 + i, kPage, 40 + i)) << i;
  EXPECT_EQ(proxy.requests("HEAD"), heads);
  EXPECT_EQ(proxy.requests("GET"), gets + 8);

  EXPECT_EQ(store->get("never-stored", pool.slot(8), kPage).code(), StatusCode::kNotFound);
  // Buffers of another size: the caller's mistake, told apart by a HEAD; the page stays.
  EXPECT_EQ(store->get(keys[0], pool.slot(8), kPage - 4096).code(), StatusCode::kInvalidArgument);
  KVTIER_EXPECT_OK(store->get(keys[0], pool.slot(8), kPage));
  EXPECT_TRUE(pool.holds(8, kPage, 40));
  EXPECT_EQ(store->stats().get_corrupt, 0u);
}

// Small pages packed (layout=segments): a batch is one upload of its segment and one of its
// summary, and reading it back costs a ranged GET per get_bytes (1 MiB) of adjacent records,
// not one per page, with no HEAD; a store opening later learns them with a LIST and a GET of
// each summary at the size listed.
TEST_F(S3Backend, PackedSmallPagesCostARequestPerMiB) {
  FaultProxy proxy(testing::s3_test_server().endpoint);
  const StoreLocation loc = location("&layout=segments&segment_lanes=1", proxy.endpoint());
  auto store = testing::open_store(loc, testing::test_namespace());
  ASSERT_NE(store, nullptr);
  constexpr size_t kPage = 65536;
  constexpr size_t kPages = 64;  // 4 MiB
  PagePool pool(*store, 2 * kPages, kPage);
  std::vector<std::string> keys;
  std::vector<ConstBuffer> in;
  std::vector<MutableBuffer> back;
  for (size_t i = 0; i < kPages; ++i) {
    keys.push_back(fmt::format("packed-{}", i));
    pool.fill(i, kPage, 70 + i);
    in.push_back(pool.in(i, kPage));
    back.push_back(pool.out(kPages + i, kPage));
  }
  const int64_t puts = proxy.requests("PUT");
  ASSERT_TRUE(store->batch_put(testing::views(keys), in).all_ok());
  EXPECT_EQ(proxy.requests("PUT"), puts + 2) << "the segment and its summary";
  const int64_t heads = proxy.requests("HEAD"), gets = proxy.requests("GET");
  BatchResult r = store->batch_get(testing::views(keys), back);
  ASSERT_TRUE(r.all_ok()) << r.status.to_string();
  for (size_t i = 0; i < kPages; ++i) EXPECT_TRUE(pool.holds(kPages + i, kPage, 70 + i)) << i;
  EXPECT_EQ(proxy.requests("HEAD"), heads);
  EXPECT_GE(proxy.requests("GET"), gets + 4);
  EXPECT_LE(proxy.requests("GET"), gets + 5);

  // What opening a store costs in HEADs alone (its namespace's manifest and generation),
  // measured on an empty namespace; a store opening where the pages are pays no more.
  int64_t before = proxy.requests("HEAD");
  ASSERT_NE(testing::open_store(loc, testing::test_namespace("empty-model")), nullptr);
  const int64_t open_heads = proxy.requests("HEAD") - before;
  before = proxy.requests("HEAD");
  auto later = testing::open_store(loc, testing::test_namespace());
  ASSERT_NE(later, nullptr);
  PagePool other(*later, kPages, kPage);
  std::vector<MutableBuffer> into;
  for (size_t i = 0; i < kPages; ++i) into.push_back(other.out(i, kPage));
  r = later->batch_get(testing::views(keys), into);
  ASSERT_TRUE(r.all_ok()) << r.status.to_string();
  for (size_t i = 0; i < kPages; ++i) EXPECT_TRUE(other.holds(i, kPage, 70 + i)) << i;
  EXPECT_EQ(proxy.requests("HEAD") - before, open_heads) << "summaries are read at the size listed";
}

TEST_F(S3Backend, MultipartUploadsOfLargePages) {
  auto store = testing::open_store(location("&multipart_bytes=6000000&part_bytes=5242880"),
                                   testing::test_namespace());
  ASSERT_NE(store, nullptr);
  constexpr size_t kPage = (12 << 20) + 123;  // three parts
  PagePool pool(*store, 2, kPage + 4096);
  pool.fill(0, kPage, 3);
  KVTIER_ASSERT_OK(store->put("big", pool.slot(0), kPage));
  KVTIER_ASSERT_OK(store->get("big", pool.slot(1), kPage));
  EXPECT_TRUE(pool.holds(1, kPage, 3));
}

TEST_F(S3Backend, RetriesThrough503sAndStalledConnections) {
  FaultProxy proxy(testing::s3_test_server().endpoint);
  auto store = testing::open_store(
      location("&max_attempts=6&deadline_ms=15000&max_parallel=4", proxy.endpoint()),
      testing::test_namespace());
  ASSERT_NE(store, nullptr);
  constexpr size_t kPages = 16, kPage = 40000;
  PagePool pool(*store, 2 * kPages, kPage);
  const auto keys = testing::keys_for("retry", kPages);
  auto [in, out] = pool.fill_batch(kPages, kPage);
  proxy.inject(FaultProxy::Mode::kFail503, 3);
  BatchResult w = store->batch_put(testing::views(keys), in);
  EXPECT_TRUE(w.all_ok()) << (w.pages.empty() ? w.status : w.pages[0]).to_string();
  EXPECT_EQ(proxy.injected(), 3);
  proxy.inject(FaultProxy::Mode::kFail503, 2);
  BatchResult r = store->batch_get(testing::views(keys), out);
  EXPECT_TRUE(r.all_ok());
  for (size_t i = 0; i < kPages; ++i) EXPECT_TRUE(pool.holds(kPages + i, kPage, i)) << i;
}

TEST_F(S3Backend, UnresponsiveServerGivesMissesWithinTheDeadline) {
  const auto keys = testing::keys_for("stall", 8);
  {
    // Written straight to the server with no deadline to meet (S3TestServer::uri): the test
    // is the read's.
    auto writer = testing::open_store(location(), testing::test_namespace());
    ASSERT_NE(writer, nullptr);
    PagePool pool(*writer, 8, 16384);
    std::vector<ConstBuffer> in;
    for (size_t i = 0; i < 8; ++i) in.push_back(pool.in(i, 16384));
    ASSERT_TRUE(writer->batch_put(testing::views(keys), in).all_ok());
  }
  FaultProxy proxy(testing::s3_test_server().endpoint);
  auto store = testing::open_store(location("&deadline_ms=3000", proxy.endpoint()),
                                   testing::test_namespace());
  ASSERT_NE(store, nullptr);
  PagePool pool(*store, 8, 16384);
  std::vector<MutableBuffer> out;
  for (size_t i = 0; i < 8; ++i) out.push_back(pool.out(i, 16384));
  proxy.set_all(FaultProxy::Mode::kStall);
  const auto t0 = std::chrono::steady_clock::now();
  BatchResult r = store->batch_get(testing::views(keys), out);
  const auto took = std::chrono::steady_clock::now() - t0;
  // The server still holds the requests unanswered: the deadline ended the batch, not an
  // answer. (How near the deadline it ends is the machine's speed; only a hang is failed.)
  EXPECT_GT(proxy.stalled(), 0) << "the batch ended only once the server let go";
  EXPECT_LT(took, testing::kHungCeiling) << "the batch waited for the server";
  EXPECT_EQ(r.ok_count(), 0u);
  for (const Status& s : r.pages) {
    EXPECT_TRUE(s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable)
        << s.to_string();
  }
}

// The server's going away ends the batch (its connections close, the retries are refused),
// not the deadline: the store's deadline here is one only a hang reaches (S3TestServer::uri),
// so that a slow machine cannot fail the setup's 16 MiB of writes or the get before the
// server goes.
TEST_F(S3Backend, ServerStoppedMidBatchEndsEveryPage) {
  FaultProxy proxy(testing::s3_test_server().endpoint);
  auto store =
      testing::open_store(location("&max_parallel=2", proxy.endpoint()), testing::test_namespace());
  ASSERT_NE(store, nullptr);
  constexpr size_t kPages = 64, kPage = 256 << 10;
  PagePool pool(*store, 2 * kPages, kPage);
  const auto keys = testing::keys_for("stop", kPages);
  auto [in, out] = pool.fill_batch(kPages, kPage);
  ASSERT_TRUE(store->batch_put(testing::views(keys), in).all_ok());
  // A page and a half of the 64 reach the client; then the relays hold the rest, so the batch
  // is certainly mid-way when the server goes.
  proxy.limit_down(kPage * 3 / 2);
  BatchTicket t = store->submit_get(testing::views(keys), out);
  proxy.wait_down_spent();
  proxy.set_all(FaultProxy::Mode::kDrop);  // the server goes away, mid-batch
  KVTIER_ASSERT_OK(t.wait(testing::kHungCeiling)) << "the batch outlived the server";
  BatchResult r = t.take();
  size_t failed = 0;
  for (size_t i = 0; i < kPages; ++i) {
    if (r.pages[i].ok()) {
      EXPECT_TRUE(pool.holds(kPages + i, kPage, i)) << i;  // what arrived is whole
    } else {
      ++failed;
    }
  }
  EXPECT_GT(failed, 0u);
  EXPECT_LE(kPages - failed, 1u) << "more than the page and a half let through arrived";
}

// The S3 client's descriptors only: the proxy's relays close their sockets on their own
// schedule, so they are left out of every count (FaultProxy::client_fds).
TEST_F(S3Backend, NoDescriptorGrowthAfterAThousandOperationsWithFaults) {
  FaultProxy proxy(testing::s3_test_server().endpoint);
  const size_t before = proxy.client_fds();
  auto store = testing::open_store(
      location("&deadline_ms=3000&max_attempts=3&max_parallel=8", proxy.endpoint()),
      testing::test_namespace());
  ASSERT_NE(store, nullptr);
  // A registration keeps the store's agent, and so its S3 client, alive: the pool goes too.
  auto pool = std::make_unique<PagePool>(*store, 16, 8192);
  const auto keys = testing::keys_for("fd", 8);
  std::vector<ConstBuffer> in;
  std::vector<MutableBuffer> out;
  for (size_t i = 0; i < 8; ++i) {
    in.push_back(pool->in(i, 8192));
    out.push_back(pool->out(8 + i, 8192));
  }
  ASSERT_TRUE(store->batch_put(testing::views(keys), in).all_ok());
  const size_t steady = proxy.client_fds();
  size_t ops = 0;
  for (int round = 0; ops < 1000; ++round) {
    if (round % 5 == 0) proxy.inject(FaultProxy::Mode::kFail503, 2);
    if (round % 7 == 0) proxy.inject(FaultProxy::Mode::kDrop, 1);
    (void)store->batch_get(testing::views(keys), out);
    (void)store->batch_put(testing::views(keys), in);
    (void)store->batch_exists(testing::views(keys));
    ops += 8 + 8 + 8;
  }
  EXPECT_GT(proxy.injected(), 0);
  // Connections in the client's cache are bounded by max_parallel (each holds one socket).
  EXPECT_LE(proxy.client_fds(), steady + 8);
  store.reset();
  pool.reset();
  // Every descriptor the client opened is closed by the time it is destroyed.
  EXPECT_EQ(proxy.client_fds(), before);
}

// The count above is only as good as the proxy's bookkeeping: each relayed connection is two
// descriptors of the proxy's, none of the client's.
TEST_F(S3Backend, ProxyDescriptorsAreCountedApartFromTheClients) {
  FaultProxy proxy(testing::s3_test_server().endpoint);
  EXPECT_EQ(proxy.proxy_fds(), 1u);  // the listening socket
  const size_t before = proxy.client_fds();
  EXPECT_EQ(proxy.client_fds() + proxy.proxy_fds(), testing::open_fds());
  // A raw connection of the test's own: one client descriptor, and a relay of two.
  UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_GE(c.get(), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(proxy.port());
  ASSERT_EQ(::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  // The relay is up once a request gets its answer through it.
  const char req[] = "HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n";
  ASSERT_EQ(::send(c.get(), req, sizeof req - 1, MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof req - 1));
  char buf[4096];
  ASSERT_GT(::recv(c.get(), buf, sizeof buf, 0), 0);
  EXPECT_EQ(proxy.proxy_fds(), 3u);
  EXPECT_EQ(proxy.client_fds(), before + 1);
  c.reset();
  EXPECT_EQ(proxy.client_fds(), before);  // whether or not the relay has closed yet
}

}  // namespace
}  // namespace kvtier
