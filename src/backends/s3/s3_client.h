// An S3 client on libcurl multi handles: requests signed by libcurl (SigV4), run in parallel up
// to a bound over reused connections, retried with jittered backoff, and bounded by a deadline.
// Bodies stream from and into caller memory (no extra copies).
//
// The client runs `loops` event-loop threads, each with its own multi handle, connections and
// share of max_parallel; requests are handed to them in turn, so the bytes of many requests
// (and whatever their on_done does with them) move on several cores. A request stays on the
// loop it was given, retries included.
//
// Thread-safety: start() and run() may be called from any thread. Requests complete on an
// event-loop thread (their `on_done` runs there and must not block).
// Lifetime: destroying the client completes every request still queued or in flight with
// kCancelled, then stops the loops.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/core/status.h"

namespace kvtier::s3 {

using Clock = std::chrono::steady_clock;

struct ClientOptions {
  std::string endpoint;  // scheme://host[:port], no trailing slash
  std::string region;
  std::string bucket;
  bool virtual_host = false;  // bucket.host addressing instead of host/bucket
  std::string ca_bundle;      // https: CA certificates file; empty: the system's
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  size_t max_parallel = 32;  // requests in flight at once, all loops together
  size_t loops = 1;          // event-loop threads (at most max_parallel)
  uint32_t max_attempts = 4;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds backoff_base{20};
  std::chrono::milliseconds backoff_cap{1000};
};

// One HTTP request against the bucket. Fill the request fields, start it, read the response
// fields once it is done.
struct Request {
  // -- request --
  std::string method = "GET";  // GET, PUT, HEAD, DELETE, POST
  std::string key;             // object key, unencoded; empty: the bucket itself
  std::vector<std::pair<std::string, std::string>> query;  // sent sorted, as name=value
  std::vector<std::string> headers;                        // "Name: value"
  std::string body;                                     // PUT/POST body when `body_pieces` is empty
  std::vector<std::span<const std::byte>> body_pieces;  // PUT body, streamed in order
  // GET: the response body lands here in order (a ranged GET: exactly the range); when
  // empty the body is kept in `response` (up to 16 MiB).
  std::vector<std::span<std::byte>> sink;
  Clock::time_point deadline = Clock::time_point::max();
  std::function<void(Request&)> on_done;  // on the event-loop thread

  // -- response --
  Status status;       // OK for 2xx; mapped otherwise (see s3_responses.h)
  long http_code = 0;  // last attempt's
  std::string response;
  std::string etag;
  std::string upload_id;  // filled by callers that parse it
  uint64_t content_length = 0;
  uint64_t object_size = 0;  // a ranged GET's: the whole object's size (Content-Range); 0: none
  int64_t last_modified_s = -1;
  uint64_t received = 0;  // body bytes that landed in `sink`
  uint32_t attempts = 0;

  // Set from any thread: the request ends with kCancelled as soon as the loop sees it.
  std::atomic<bool> cancel{false};

  // -- the client's bookkeeping --
  uint64_t sent_ = 0;
  size_t piece_ = 0;
  uint64_t piece_off_ = 0;
  bool sink_overflow_ = false;
  Clock::time_point retry_at_{};
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> create(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Queues `r`; it completes (on_done, then done) on the loop thread.
  void start(std::shared_ptr<Request> r);
  // Starts every request and waits until all are done.
  void run_all(std::span<const std::shared_ptr<Request>> requests);
  // One request, waited for.
  Status run(const std::shared_ptr<Request>& r);
  // Wakes the loop (to notice a cancel).
  void wake();

  const ClientOptions& options() const;
  size_t loops() const { return loops_.size(); }
  std::string url_for(const Request& r) const;  // never contains secrets

 private:
  struct Impl;  // one event loop
  Client(ClientOptions options, std::vector<std::unique_ptr<Impl>> loops);
  Impl& next_loop();

  ClientOptions options_;
  std::vector<std::unique_ptr<Impl>> loops_;
  std::atomic<size_t> turn_{0};
};

}  // namespace kvtier::s3
