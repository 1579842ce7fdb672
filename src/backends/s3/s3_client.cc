#include "s3_client.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "kvtier/core/mutex.h"
#include "kvtier/core/unique_fd.h"
#include "s3_responses.h"
#include "s3_url.h"

namespace kvtier::s3 {
namespace {

constexpr size_t kMaxResponseBytes = size_t{16} << 20;

}  // namespace

struct Client::Impl {
  struct Attempt {
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    std::shared_ptr<Request> req;
  };

  explicit Impl(ClientOptions o) : opt(std::move(o)), rng(std::random_device{}()) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  // Stops the loop (every request not done ends as cancelled) and frees its handles.
  ~Impl() {
    if (loop.joinable()) {
      {
        MutexLock lock(mu);
        stopping = true;
      }
      curl_multi_wakeup(multi);
      loop.join();
    }
    for (CURL* easy : idle) curl_easy_cleanup(easy);
    if (multi != nullptr) curl_multi_cleanup(multi);
  }

  void start(std::shared_ptr<Request> r) {
    {
      MutexLock lock(mu);
      if (stopping) {
        r->status = cancelled_error("the S3 client is shutting down");
        if (std::function<void(Request&)> done = std::move(r->on_done)) {
          r->on_done = nullptr;
          done(*r);
        }
        return;
      }
      done_flags[r.get()] = false;
      incoming.push_back(std::move(r));
    }
    curl_multi_wakeup(multi);
  }

  ClientOptions opt;
  std::string sigv4;
  CURLM* multi = nullptr;
  std::thread loop;

  Mutex mu;
  std::condition_variable done_cv;
  std::deque<std::shared_ptr<Request>> incoming KVTIER_GUARDED_BY(mu);
  bool stopping KVTIER_GUARDED_BY(mu) = false;

  // Loop thread only.
  std::deque<std::shared_ptr<Request>> pending;
  std::vector<std::shared_ptr<Request>> retrying;
  std::unordered_map<CURL*, std::unique_ptr<Attempt>> active;
  std::vector<CURL*> idle;
  std::mt19937_64 rng;

  std::string what(const Request& r) const {
    return fmt::format("S3 {} '{}'", r.method, r.key.empty() ? opt.bucket : r.key);
  }

  static size_t on_header(char* data, size_t size, size_t n, void* ud) {
    auto* a = static_cast<Attempt*>(ud);
    const size_t len = size * n;
    std::string_view line(data, len);
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
    if (line.starts_with("HTTP/")) {
      a->req->etag.clear();  // a new response (after 100-continue or a redirect)
      a->req->object_size = 0;
      return len;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return len;
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (name == "etag") {
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      a->req->etag = std::string(value);
    } else if (name == "content-range") {
      // "bytes FIRST-LAST/SIZE" (SIZE "*" when the server does not know it).
      const size_t slash = value.rfind('/');
      uint64_t size = 0;
      if (slash != std::string_view::npos &&
          std::from_chars(value.data() + slash + 1, value.data() + value.size(), size).ec ==
              std::errc()) {
        a->req->object_size = size;
      }
    }
    return len;
  }

  static size_t on_write(char* data, size_t size, size_t n, void* ud) {
    auto* a = static_cast<Attempt*>(ud);
    Request& r = *a->req;
    const size_t len = size * n;
    long code = 0;
    curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 300 || r.sink.empty()) {
      if (r.response.size() + len > kMaxResponseBytes) return 0;
      r.response.append(data, len);
      return len;
    }
    size_t done = 0;
    while (done < len) {
      if (r.piece_ >= r.sink.size()) {
        r.sink_overflow_ = true;
        return 0;  // more bytes than the object should have: abort
      }
      std::span<std::byte> p = r.sink[r.piece_];
      const size_t take = std::min<size_t>(p.size() - r.piece_off_, len - done);
      std::memcpy(p.data() + r.piece_off_, data + done, take);
      done += take;
      r.piece_off_ += take;
      if (r.piece_off_ == p.size()) {
        ++r.piece_;
        r.piece_off_ = 0;
      }
    }
    r.received += len;
    return len;
  }

  static size_t on_read(char* buf, size_t size, size_t n, void* ud) {
    auto* a = static_cast<Attempt*>(ud);
    Request& r = *a->req;
    const size_t room = size * n;
    if (r.body_pieces.empty()) {
      const size_t take = std::min<size_t>(room, r.body.size() - r.sent_);
      std::memcpy(buf, r.body.data() + r.sent_, take);
      r.sent_ += take;
      return take;
    }
    size_t done = 0;
    while (done < room && r.piece_ < r.body_pieces.size()) {
      std::span<const std::byte> p = r.body_pieces[r.piece_];
      const size_t take = std::min<size_t>(p.size() - r.piece_off_, room - done);
      std::memcpy(buf + done, p.data() + r.piece_off_, take);
      done += take;
      r.piece_off_ += take;
      if (r.piece_off_ == p.size()) {
        ++r.piece_;
        r.piece_off_ = 0;
      }
    }
    r.sent_ += done;
    return done;
  }

  static int on_seek(void* ud, curl_off_t offset, int origin) {
    auto* a = static_cast<Attempt*>(ud);
    Request& r = *a->req;
    if (origin != SEEK_SET || offset < 0) return CURL_SEEKFUNC_CANTSEEK;
    auto left = static_cast<uint64_t>(offset);
    r.sent_ = left;
    if (r.body_pieces.empty()) return left <= r.body.size() ? CURL_SEEKFUNC_OK : CURL_SEEKFUNC_FAIL;
    r.piece_ = 0;
    r.piece_off_ = 0;
    while (r.piece_ < r.body_pieces.size() && left >= r.body_pieces[r.piece_].size()) {
      left -= r.body_pieces[r.piece_].size();
      ++r.piece_;
    }
    r.piece_off_ = left;
    return CURL_SEEKFUNC_OK;
  }

  uint64_t body_bytes(const Request& r) const {
    if (r.body_pieces.empty()) return r.body.size();
    uint64_t n = 0;
    for (const auto& p : r.body_pieces) n += p.size();
    return n;
  }

  // The options every request of this client shares; set once per handle.
  void set_constant_options(CURL* easy) {
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(easy, CURLOPT_USERNAME, opt.access_key.c_str());
    curl_easy_setopt(easy, CURLOPT_PASSWORD, opt.secret_key.c_str());
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(opt.connect_timeout.count()));
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &Impl::on_header);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Impl::on_write);
    curl_easy_setopt(easy, CURLOPT_READFUNCTION, &Impl::on_read);
    curl_easy_setopt(easy, CURLOPT_SEEKFUNCTION, &Impl::on_seek);
    // libcurl's receive and upload buffers are allocated per transfer: at 64 KiB they come from
    // malloc's heap and are reused. Larger ones (512 KiB and 1 MiB before) sit above malloc's
    // mmap and trim thresholds and came back as fresh pages, faulted in on every transfer: a
    // 1 MiB PUT took 2.4-3.2 CPU s/GB with them, 1.3-1.5 without (bench/s3_compare.py).
    curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 64L * 1024);
    curl_easy_setopt(easy, CURLOPT_UPLOAD_BUFFERSIZE, 64L * 1024);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, &Impl::open_socket);
    curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, this);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, &Impl::close_socket);
    curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA, this);
    if (!opt.ca_bundle.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, opt.ca_bundle.c_str());
  }

  void begin(std::shared_ptr<Request> r) {
    const auto now = Clock::now();
    if (r->cancel.load()) return finish(r, cancelled_error(what(*r) + ": cancelled"));
    if (now >= r->deadline) {
      return finish(r, deadline_exceeded_error(fmt::format(
                           "{}: deadline passed after {} attempt(s)", what(*r), r->attempts)));
    }
    // Handles are reused without curl_easy_reset, which would put every option back to its
    // default (and the buffer sizes with them, so that setting them again reallocates the
    // buffers): the options that never change are set once per handle, and every option any
    // request sets is set again, or cleared, by each.
    CURL* easy = nullptr;
    if (!idle.empty()) {
      easy = idle.back();
      idle.pop_back();
    } else {
      easy = curl_easy_init();
      if (easy == nullptr) return finish(r, internal_error("curl_easy_init failed"));
      set_constant_options(easy);
    }
    auto a = std::make_unique<Attempt>();
    a->easy = easy;
    a->req = r;
    ++r->attempts;
    r->response.clear();
    r->etag.clear();
    r->received = 0;
    r->sent_ = 0;
    r->piece_ = 0;
    r->piece_off_ = 0;
    r->sink_overflow_ = false;
    r->http_code = 0;

    const std::string url = object_url(opt, *r);
    curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(r->deadline - now).count();
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                     r->deadline == Clock::time_point::max()
                         ? 0L
                         : static_cast<long>(std::max<int64_t>(1, left)));
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, a.get());
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, a.get());
    curl_easy_setopt(easy, CURLOPT_READDATA, a.get());
    curl_easy_setopt(easy, CURLOPT_SEEKDATA, a.get());
    curl_easy_setopt(easy, CURLOPT_PRIVATE, a.get());

    // libcurl signs these (x-amz-* headers are part of the signature).
    curl_slist* h = nullptr;
    bool has_sha = false;
    for (const std::string& line : r->headers) {
      h = curl_slist_append(h, line.c_str());
      has_sha = has_sha || line.starts_with("x-amz-content-sha256:");
    }
    if (!has_sha) h = curl_slist_append(h, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!opt.session_token.empty()) {
      h = curl_slist_append(h, ("x-amz-security-token: " + opt.session_token).c_str());
    }
    a->headers = h;
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, h);

    // The method: back to a plain GET first (HTTPGET also clears NOBODY and UPLOAD).
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, nullptr);
    curl_easy_setopt(easy, CURLOPT_FILETIME, r->method == "HEAD" ? 1L : 0L);
    if (r->method == "HEAD") {
      curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
    } else if (r->method == "PUT") {
      curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body_bytes(*r)));
    } else if (r->method == "POST") {
      curl_easy_setopt(easy, CURLOPT_POST, 1L);
      curl_easy_setopt(easy, CURLOPT_POSTFIELDS, r->body.data());
      curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r->body.size()));
    } else if (r->method != "GET") {
      curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, r->method.c_str());
    }
    const CURLMcode mc = curl_multi_add_handle(multi, easy);
    if (mc != CURLM_OK) {
      curl_slist_free_all(a->headers);
      idle.push_back(easy);
      return finish(
          r, internal_error(fmt::format("curl_multi_add_handle: {}", curl_multi_strerror(mc))));
    }
    active.emplace(easy, std::move(a));
  }

  // One attempt ended: retry it, or finish the request.
  void attempt_done(CURL* easy, CURLcode result) {
    auto it = active.find(easy);
    if (it == active.end()) return;
    std::unique_ptr<Attempt> a = std::move(it->second);
    active.erase(it);
    curl_multi_remove_handle(multi, easy);
    curl_slist_free_all(a->headers);
    std::shared_ptr<Request> r = std::move(a->req);

    long code = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    r->http_code = code;
    curl_off_t length = -1;
    curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    r->content_length = length > 0 ? static_cast<uint64_t>(length) : 0;
    curl_off_t filetime = -1;
    curl_easy_getinfo(easy, CURLINFO_FILETIME_T, &filetime);
    r->last_modified_s = filetime;
    idle.push_back(easy);

    if (r->cancel.load()) return finish(r, cancelled_error(what(*r) + ": cancelled"));
    Status st;
    bool retry = false;
    if (result != CURLE_OK) {
      if (result == CURLE_WRITE_ERROR && r->sink_overflow_) {
        return finish(r, corrupt_error(what(*r) + ": the object is larger than expected"));
      }
      retry = retryable_curl(result);
      const std::string msg =
          fmt::format("{}: {} ({})", what(*r), curl_easy_strerror(result), opt.endpoint);
      st = result == CURLE_OPERATION_TIMEDOUT ? deadline_exceeded_error(msg)
                                              : unavailable_error(msg);
    } else if (code >= 200 && code < 300) {
      st = ok_status();
    } else {
      retry = retryable_http(code);
      st = http_status(*r, what(*r));
    }
    if (retry && r->attempts < opt.max_attempts) {
      // Full jitter: a random wait up to min(cap, base * 2^attempt).
      const auto ceiling = std::min<int64_t>(
          opt.backoff_cap.count(), opt.backoff_base.count() << std::min<uint32_t>(r->attempts, 16));
      std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(1, ceiling));
      r->retry_at_ = Clock::now() + std::chrono::milliseconds(pick(rng));
      if (r->retry_at_ < r->deadline) {
        retrying.push_back(std::move(r));
        return;
      }
    }
    if (!st.ok() && r->attempts > 1) {
      st = st.with_context(fmt::format("after {} attempts", r->attempts));
    }
    finish(r, std::move(st));
  }

  void finish(const std::shared_ptr<Request>& r, Status st) {
    r->status = std::move(st);
    // Moved out first: a callback's captures (the batch that lists this request) must not
    // outlive the call, or they would keep each other alive.
    if (std::function<void(Request&)> done = std::move(r->on_done)) {
      r->on_done = nullptr;
      done(*r);
    }
    {
      MutexLock lock(mu);
      done_flags.erase(r.get());
    }
    done_cv.notify_all();
  }

  // Servers that write a response's head and body separately (radosgw does) hold the body
  // back under Nagle's algorithm until the head is acknowledged, and Linux delays that ACK by
  // up to 40 ms on a reused connection: every small response would take 40 ms. Asking for
  // immediate ACKs before each wait keeps responses at the network's speed. (TCP_QUICKACK is
  // not sticky, hence every iteration.)
  void quick_acks() {
    if (active.empty()) return;
    for (const auto& [fd, owned] : sockets) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
    }
  }

  // Connections' sockets, opened and closed for libcurl (which calls these on the loop thread,
  // or in curl_multi_cleanup). The client owns them (close-on-exec, closed by UniqueFd, and
  // by the client's destruction at the latest); libcurl borrows them.
  static curl_socket_t open_socket(void* ud, curlsocktype /*purpose*/, curl_sockaddr* addr) {
    auto* self = static_cast<Impl*>(ud);
    UniqueFd fd(::socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol));
    if (!fd.valid()) return CURL_SOCKET_BAD;
    const curl_socket_t raw = fd.get();
    self->sockets.emplace(raw, std::move(fd));
    return raw;
  }
  static int close_socket(void* ud, curl_socket_t fd) {
    auto* self = static_cast<Impl*>(ud);
    self->sockets.erase(fd);  // closes it
    return 0;
  }
  std::unordered_map<curl_socket_t, UniqueFd> sockets;  // loop thread (and the destructor)

  void run_loop() {
    for (;;) {
      {
        MutexLock lock(mu);
        while (!incoming.empty()) {
          pending.push_back(std::move(incoming.front()));
          incoming.pop_front();
        }
        if (stopping) break;
      }
      const auto now = Clock::now();
      // Retries whose time has come go back to the queue (or time out).
      for (size_t i = 0; i < retrying.size();) {
        if (retrying[i]->retry_at_ <= now || retrying[i]->cancel.load()) {
          pending.push_back(std::move(retrying[i]));
          retrying[i] = std::move(retrying.back());
          retrying.pop_back();
        } else {
          ++i;
        }
      }
      // Cancelled requests in flight stop now.
      std::vector<CURL*> cancelled;
      for (const auto& [easy, a] : active) {
        if (a->req->cancel.load()) cancelled.push_back(easy);
      }
      for (CURL* easy : cancelled) attempt_done(easy, CURLE_ABORTED_BY_CALLBACK);
      while (!pending.empty() && active.size() < opt.max_parallel) {
        std::shared_ptr<Request> r = std::move(pending.front());
        pending.pop_front();
        begin(std::move(r));
      }
      int running = 0;
      curl_multi_perform(multi, &running);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
        if (m->msg == CURLMSG_DONE) attempt_done(m->easy_handle, m->data.result);
      }
      int timeout_ms = 100;
      for (const auto& r : retrying) {
        const auto wait =
            std::chrono::duration_cast<std::chrono::milliseconds>(r->retry_at_ - Clock::now());
        timeout_ms = std::clamp<int>(static_cast<int>(wait.count()), 0, timeout_ms);
      }
      if (!pending.empty() && active.size() < opt.max_parallel) timeout_ms = 0;
      quick_acks();
      curl_multi_poll(multi, nullptr, 0, timeout_ms, nullptr);
    }
    // Stopping: everything not done ends as cancelled.
    std::vector<CURL*> all;
    for (const auto& [easy, a] : active) all.push_back(easy);
    for (CURL* easy : all) {
      auto it = active.find(easy);
      std::unique_ptr<Attempt> a = std::move(it->second);
      active.erase(it);
      curl_multi_remove_handle(multi, easy);
      curl_slist_free_all(a->headers);
      idle.push_back(easy);
      finish(a->req, cancelled_error(what(*a->req) + ": the S3 client is shutting down"));
    }
    for (auto& r : pending)
      finish(r, cancelled_error(what(*r) + ": the S3 client is shutting down"));
    for (auto& r : retrying) {
      finish(r, cancelled_error(what(*r) + ": the S3 client is shutting down"));
    }
    pending.clear();
    retrying.clear();
  }

  // Requests started but not finished, for run_all().
  std::unordered_map<const Request*, bool> done_flags KVTIER_GUARDED_BY(mu);
};

Result<std::unique_ptr<Client>> Client::create(ClientOptions options) {
  static std::once_flag global;
  std::call_once(global, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (options.max_parallel == 0) options.max_parallel = 1;
  if (options.max_attempts == 0) options.max_attempts = 1;
  options.loops = std::clamp<size_t>(options.loops, 1, options.max_parallel);
  std::vector<std::unique_ptr<Impl>> loops;
  for (size_t i = 0; i < options.loops; ++i) {
    ClientOptions mine = options;
    // max_parallel shared out: the first loops take the remainder.
    mine.max_parallel =
        options.max_parallel / options.loops + (i < options.max_parallel % options.loops ? 1 : 0);
    auto impl = std::make_unique<Impl>(std::move(mine));
    impl->sigv4 = "aws:amz:" + impl->opt.region + ":s3";
    impl->multi = curl_multi_init();
    if (impl->multi == nullptr) return internal_error("curl_multi_init failed");
    curl_multi_setopt(impl->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      static_cast<long>(impl->opt.max_parallel));
    curl_multi_setopt(impl->multi, CURLMOPT_MAXCONNECTS, static_cast<long>(impl->opt.max_parallel));
    Impl* raw = impl.get();
    impl->loop = std::thread([raw] { raw->run_loop(); });
    loops.push_back(std::move(impl));
  }
  return std::unique_ptr<Client>(new Client(std::move(options), std::move(loops)));
}

Client::Client(ClientOptions options, std::vector<std::unique_ptr<Impl>> loops)
    : options_(std::move(options)), loops_(std::move(loops)) {}

Client::~Client() = default;  // each loop stops in its destructor

Client::Impl& Client::next_loop() {
  return *loops_[turn_.fetch_add(1, std::memory_order_relaxed) % loops_.size()];
}

void Client::start(std::shared_ptr<Request> r) {
  next_loop().start(std::move(r));
}

void Client::run_all(std::span<const std::shared_ptr<Request>> requests) {
  std::vector<Impl*> given(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    given[i] = &next_loop();
    given[i]->start(requests[i]);
  }
  for (const std::unique_ptr<Impl>& loop : loops_) {
    MutexLock lock(loop->mu);
    lock.wait(loop->done_cv, [&]() KVTIER_REQUIRES(loop->mu) {
      for (size_t i = 0; i < requests.size(); ++i) {
        if (given[i] == loop.get() && loop->done_flags.count(requests[i].get()) != 0) return false;
      }
      return true;
    });
  }
}

Status Client::run(const std::shared_ptr<Request>& r) {
  run_all(std::span<const std::shared_ptr<Request>>(&r, 1));
  return r->status;
}

void Client::wake() {
  for (const std::unique_ptr<Impl>& loop : loops_) curl_multi_wakeup(loop->multi);
}

const ClientOptions& Client::options() const {
  return options_;
}

std::string Client::url_for(const Request& r) const {
  return object_url(options(), r);
}

}  // namespace kvtier::s3
