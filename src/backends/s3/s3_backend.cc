#include "kvtier/backends/s3/s3_backend.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <map>
#include <pugixml.hpp>
#include <thread>

#include "kvtier/core/checksum.h"
#include "s3_backend_impl.h"

namespace kvtier {
namespace s3 {

std::string key_of(std::string_view path) {
  std::string key;
  key.reserve(path.size());
  for (char c : path) {
    if (c == '/' && (key.empty() || key.back() == '/')) continue;
    key += c;
  }
  while (!key.empty() && key.back() == '/') key.pop_back();
  return key;
}

std::string xml_body(const pugi::xml_document& doc) {
  struct Writer : pugi::xml_writer {
    std::string out;
    void write(const void* data, size_t size) override {
      out.append(static_cast<const char*>(data), size);
    }
  } w;
  doc.save(w, "", pugi::format_raw | pugi::format_no_declaration, pugi::encoding_utf8);
  return std::move(w.out);
}

ObjectIdentity identity_of(std::string_view etag) {
  if (etag.empty()) return {};
  const Hash128 h = hash128(etag);
  return ObjectIdentity{h.high, h.low | 1};
}

uint64_t iso8601_ns(const char* text) {
  std::tm tm{};
  const char* rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return 0;
  const time_t t = timegm(&tm);
  return t < 0 ? 0 : static_cast<uint64_t>(t) * 1'000'000'000;
}

std::string S3Backend::describe() const {
  const auto& c = options_.client;
  return fmt::format(
      "s3: {} bucket '{}' ({}, region {}), {} parallel requests on {} loop(s), deadline {} ms",
      c.endpoint, c.bucket, c.virtual_host ? "virtual-host" : "path-style", c.region,
      c.max_parallel, client_->loops(), options_.deadline.count());
}

Status S3Backend::check_bucket() {
  auto r = std::make_shared<Request>();
  r->method = "HEAD";
  r->deadline = deadline();
  Status st = client_->run(r);
  const auto& c = options_.client;
  if (st.ok()) return st;
  if (r->http_code == 404) {
    return not_found_error(fmt::format("bucket '{}' does not exist at {}", c.bucket, c.endpoint));
  }
  if (r->http_code == 403) {
    return permission_denied_error(
        fmt::format("access to bucket '{}' at {} denied: check the credentials and the region ({})",
                    c.bucket, c.endpoint, c.region));
  }
  if (r->http_code == 0) {
    return unavailable_error(
        fmt::format("cannot reach the S3 endpoint {}: {}", c.endpoint, st.message()));
  }
  return st;
}

Result<std::unique_ptr<BackendTarget>> S3Backend::open(const TargetSpec& spec) {
  auto out = open_batch(std::span<const TargetSpec>(&spec, 1));
  return std::move(out.front());
}

std::vector<Result<std::unique_ptr<BackendTarget>>> S3Backend::open_batch(
    std::span<const TargetSpec> specs) {
  std::vector<Result<std::unique_ptr<BackendTarget>>> out;
  out.reserve(specs.size());
  std::vector<std::shared_ptr<Request>> heads;
  std::vector<size_t> head_of(specs.size(), SIZE_MAX);
  const auto until = deadline();
  for (size_t i = 0; i < specs.size(); ++i) {
    const TargetSpec& spec = specs[i];
    if (key_of(spec.path).empty()) {
      out.emplace_back(invalid_argument_error(fmt::format("'{}' names no object", spec.path)));
    } else if (spec.direct) {
      out.emplace_back(unsupported_error("the s3 backend has no direct I/O"));
    } else if (spec.mode == TargetMode::kAppend) {
      out.emplace_back(unsupported_error(fmt::format(
          "'{}': objects in S3 are written whole; the s3 backend does not append", spec.path)));
    } else if (spec.mode == TargetMode::kCreate) {
      out.emplace_back(std::unique_ptr<BackendTarget>(
          new S3Target(spec.path, TargetMode::kCreate, spec.size_hint, {})));
    } else if (spec.expected_size != 0) {
      // The caller knows the size: no HEAD; each GET's answer is checked instead.
      out.emplace_back(std::unique_ptr<BackendTarget>(
          new S3Target(spec.path, TargetMode::kRead, spec.expected_size, {}, true)));
    } else {
      out.emplace_back(internal_error("pending"));
      auto r = std::make_shared<Request>();
      r->method = "HEAD";
      r->key = key_of(spec.path);
      r->deadline = until;
      head_of[i] = heads.size();
      heads.push_back(std::move(r));
    }
  }
  client_->run_all(heads);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (head_of[i] == SIZE_MAX) continue;
    const Request& r = *heads[head_of[i]];
    if (r.status.ok()) {
      out[i] = std::unique_ptr<BackendTarget>(
          new S3Target(specs[i].path, TargetMode::kRead, r.content_length, r.etag));
    } else if (r.status.code() == StatusCode::kNotFound) {
      out[i] = not_found_error(fmt::format("no object '{}'", specs[i].path));
    } else {
      out[i] = r.status;
    }
  }
  return out;
}

Status S3Backend::publish(BackendTarget& base, const PublishOptions& /*options*/) {
  auto& t = static_cast<S3Target&>(base);
  if (t.mode() != TargetMode::kCreate) {
    return invalid_argument_error(fmt::format("'{}' was opened for reading", t.path()));
  }
  MutexLock lock(t.mu);
  if (t.published)
    return invalid_argument_error(fmt::format("'{}' is already published", t.path()));
  if (!t.uploaded) {
    return invalid_argument_error(fmt::format(
        "'{}' has nothing to publish: an object is uploaded whole by a write transfer", t.path()));
  }
  t.published = true;  // a PUT is visible (and durable) once it succeeded
  return ok_status();
}

Result<ObjectInfo> S3Backend::stat(std::string_view path) {
  auto r = std::make_shared<Request>();
  r->method = "HEAD";
  r->key = key_of(path);
  r->deadline = deadline();
  Status st = r->key.empty() ? not_found_error("bucket root") : client_->run(r);
  if (st.ok()) {
    const uint64_t mtime =
        r->last_modified_s > 0 ? static_cast<uint64_t>(r->last_modified_s) * 1'000'000'000 : 0;
    return ObjectInfo{std::string(path), false, r->content_length, mtime, identity_of(r->etag)};
  }
  if (st.code() != StatusCode::kNotFound) return st;
  // Not an object: a "directory" when some key lies under it.
  bool any = false;
  Status ls = list_page(
      r->key.empty() ? std::string() : r->key + "/", "", 1,
      [&](const ObjectInfo&) {
        any = true;
        return ok_status();
      },
      nullptr);
  if (!ls.ok()) return ls;
  if (any) return ObjectInfo{std::string(path), true, 0, 0, {}};
  return not_found_error(fmt::format("no object '{}'", path));
}

std::vector<Result<ObjectInfo>> S3Backend::stat_many(std::span<const std::string> paths,
                                                     bool /*until_missing*/) {
  // All at once: a round trip per key in sequence would cost a batch 128 round trips.
  std::vector<std::shared_ptr<Request>> heads;
  const auto until = deadline();
  for (const std::string& p : paths) {
    auto r = std::make_shared<Request>();
    r->method = "HEAD";
    r->key = key_of(p);
    r->deadline = until;
    heads.push_back(std::move(r));
  }
  client_->run_all(heads);
  std::vector<Result<ObjectInfo>> out;
  out.reserve(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    const Request& r = *heads[i];
    if (!r.status.ok()) {
      out.emplace_back(r.status);
      continue;
    }
    const uint64_t mtime =
        r.last_modified_s > 0 ? static_cast<uint64_t>(r.last_modified_s) * 1'000'000'000 : 0;
    out.emplace_back(ObjectInfo{paths[i], false, r.content_length, mtime, identity_of(r.etag)});
  }
  return out;
}

Status S3Backend::remove(std::string_view path, const ObjectIdentity* if_identity) {
  // S3 deletes absent keys without complaint: a HEAD first tells a miss (and the identity).
  auto head = std::make_shared<Request>();
  head->method = "HEAD";
  head->key = key_of(path);
  head->deadline = deadline();
  Status st = client_->run(head);
  if (st.code() == StatusCode::kNotFound)
    return not_found_error(fmt::format("no object '{}'", path));
  KVTIER_RETURN_IF_ERROR(st);
  if (if_identity != nullptr && identity_of(head->etag) != *if_identity) {
    return not_found_error(fmt::format("'{}' was replaced; not removed", path));
  }
  auto del = std::make_shared<Request>();
  del->method = "DELETE";
  del->key = head->key;
  del->deadline = deadline();
  return client_->run(del);
}

std::vector<Status> S3Backend::remove_many(std::span<const std::string> paths) {
  std::vector<Status> out(paths.size());
  std::vector<std::shared_ptr<Request>> requests;
  std::vector<std::vector<size_t>> members;
  for (size_t begin = 0; begin < paths.size(); begin += kMaxDeleteKeys) {
    const size_t end = std::min(paths.size(), begin + kMaxDeleteKeys);
    pugi::xml_document doc;
    pugi::xml_node del = doc.append_child("Delete");
    del.append_child("Quiet").text().set("true");
    std::vector<size_t> idx;
    for (size_t i = begin; i < end; ++i) {
      del.append_child("Object").append_child("Key").text().set(key_of(paths[i]).c_str());
      idx.push_back(i);
    }
    std::string xml = xml_body(doc);
    auto r = std::make_shared<Request>();
    r->method = "POST";
    r->query = {{"delete", ""}};
    r->headers = {"Content-Type: application/xml", "Content-MD5: " + content_md5(xml)};
    r->body = std::move(xml);
    r->deadline = deadline();
    requests.push_back(std::move(r));
    members.push_back(std::move(idx));
  }
  client_->run_all(requests);
  for (size_t j = 0; j < requests.size(); ++j) {
    const Request& r = *requests[j];
    for (size_t i : members[j]) out[i] = r.status;
    if (!r.status.ok()) continue;
    // Quiet mode lists only the keys that failed.
    pugi::xml_document doc;
    if (!doc.load_buffer(r.response.data(), r.response.size())) continue;
    std::map<std::string, std::string> failed;
    for (pugi::xml_node e : doc.child("DeleteResult").children("Error")) {
      failed[e.child_value("Key")] =
          std::string(e.child_value("Code")) + ": " + e.child_value("Message");
    }
    for (size_t i : members[j]) {
      auto it = failed.find(key_of(paths[i]));
      if (it != failed.end()) {
        out[i] = unavailable_error(fmt::format("delete '{}': {}", paths[i], it->second));
      }
    }
  }
  return out;
}

Status S3Backend::list(std::string_view dir, const ListOptions& /*options*/,
                       const std::function<Status(const ObjectInfo&)>& fn) {
  const std::string key = key_of(dir);
  const std::string prefix = key.empty() ? std::string() : key + "/";
  std::vector<ObjectInfo> entries;  // collected first: fn may call into the backend
  std::string token;
  do {
    std::string next;
    KVTIER_RETURN_IF_ERROR(list_page(
        prefix, token, 1000,
        [&](const ObjectInfo& e) {
          entries.push_back(e);
          return ok_status();
        },
        &next));
    token = std::move(next);
  } while (!token.empty());
  if (entries.empty()) return not_found_error(fmt::format("no directory '{}'", dir));
  for (const ObjectInfo& e : entries) KVTIER_RETURN_IF_ERROR(fn(e));
  return ok_status();
}

void S3Backend::cancel(IoBatch& batch) noexcept {
  std::shared_ptr<BatchWork> work;
  {
    MutexLock lock(batches_mu_);
    auto it = batches_.find(&batch);
    if (it == batches_.end()) return;
    work = it->second;
  }
  work->cancelled.store(true);
  {
    MutexLock lock(work->mu);
    for (const auto& r : work->requests) r->cancel.store(true);
  }
  client_->wake();
}

Status S3Backend::list_page(const std::string& prefix, const std::string& token, int max_keys,
                            const std::function<Status(const ObjectInfo&)>& fn, std::string* next) {
  auto r = std::make_shared<Request>();
  r->method = "GET";
  r->query = {{"list-type", "2"}, {"delimiter", "/"}, {"max-keys", std::to_string(max_keys)}};
  if (!prefix.empty()) r->query.emplace_back("prefix", prefix);
  if (!token.empty()) r->query.emplace_back("continuation-token", token);
  r->deadline = deadline();
  KVTIER_RETURN_IF_ERROR(client_->run(r));
  pugi::xml_document doc;
  if (!doc.load_buffer(r->response.data(), r->response.size())) {
    return internal_error(fmt::format("S3 list of '{}': unreadable response", prefix));
  }
  pugi::xml_node root = doc.child("ListBucketResult");
  auto relative = [&](const char* key) {
    std::string_view k(key);
    return k.starts_with(prefix) ? std::string(k.substr(prefix.size())) : std::string();
  };
  for (pugi::xml_node p : root.children("CommonPrefixes")) {
    std::string name = relative(p.child_value("Prefix"));
    while (!name.empty() && name.back() == '/') name.pop_back();
    if (!name.empty()) KVTIER_RETURN_IF_ERROR(fn(ObjectInfo{name, true, 0, 0, {}}));
  }
  for (pugi::xml_node c : root.children("Contents")) {
    std::string name = relative(c.child_value("Key"));
    if (name.empty()) continue;
    std::string etag = c.child_value("ETag");
    if (etag.size() >= 2 && etag.front() == '"') etag = etag.substr(1, etag.size() - 2);
    KVTIER_RETURN_IF_ERROR(
        fn(ObjectInfo{name, false, std::strtoull(c.child_value("Size"), nullptr, 10),
                      iso8601_ns(c.child_value("LastModified")), identity_of(etag)}));
  }
  if (next != nullptr) {
    next->clear();
    if (std::string_view(root.child_value("IsTruncated")) == "true") {
      *next = root.child_value("NextContinuationToken");
    }
  }
  return ok_status();
}

std::string S3Backend::content_md5(std::string_view body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(body.data(), body.size(), digest, &n, EVP_md5(), nullptr);
  unsigned char b64[64];
  const int len = EVP_EncodeBlock(b64, digest, static_cast<int>(n));
  return std::string(reinterpret_cast<const char*>(b64), static_cast<size_t>(len));
}

}  // namespace s3

namespace {

using s3::Client;
using s3::Options;

std::string param(const BackendParams& p, std::string_view key, std::string fallback = {}) {
  auto it = p.find(key);
  return it == p.end() ? std::move(fallback) : it->second;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

std::vector<ParamSpec> s3_backend_params() {
  return {{"bucket", ParamType::kText},
          {"region", ParamType::kText},
          {"endpoint", ParamType::kText},
          {"addressing", ParamType::kText},
          {"ca_bundle", ParamType::kText},
          {"access_key", ParamType::kText},
          {"secret_key", ParamType::kText},
          {"session_token", ParamType::kText},
          {"max_parallel", ParamType::kUnsigned},
          {"loops", ParamType::kUnsigned},
          {"max_attempts", ParamType::kUnsigned},
          {"deadline_ms", ParamType::kUnsigned},
          {"connect_timeout_ms", ParamType::kUnsigned},
          {"multipart_bytes", ParamType::kUnsigned},
          {"part_bytes", ParamType::kUnsigned},
          {"get_bytes", ParamType::kUnsigned}};
}

Result<std::unique_ptr<Backend>> create_s3_backend(const BackendParams& params) {
  Options o;
  auto& c = o.client;
  c.bucket = param(params, "bucket");
  if (c.bucket.empty()) return invalid_argument_error("s3: no bucket (s3://bucket/prefix)");
  c.region = param(params, "region", "us-east-1");
  c.endpoint = param(params, "endpoint");
  const std::string addressing =
      param(params, "addressing", c.endpoint.empty() ? "virtual" : "path");
  if (addressing != "path" && addressing != "virtual") {
    return invalid_argument_error(
        fmt::format("s3: addressing '{}': expected 'path' or 'virtual'", addressing));
  }
  c.virtual_host = addressing == "virtual";
  if (c.endpoint.empty()) c.endpoint = fmt::format("https://s3.{}.amazonaws.com", c.region);
  while (c.endpoint.ends_with('/')) c.endpoint.pop_back();
  if (!c.endpoint.starts_with("http://") && !c.endpoint.starts_with("https://")) {
    return invalid_argument_error(
        fmt::format("s3: endpoint '{}' must start with http:// or https://", c.endpoint));
  }
  c.ca_bundle = param(params, "ca_bundle");
  c.access_key = param(params, "access_key", env("AWS_ACCESS_KEY_ID"));
  c.secret_key = param(params, "secret_key", env("AWS_SECRET_ACCESS_KEY"));
  c.session_token = param(params, "session_token", env("AWS_SESSION_TOKEN"));
  if (c.access_key.empty() || c.secret_key.empty()) {
    return invalid_argument_error(
        "s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the "
        "access_key and secret_key parameters)");
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t parallel, param_u64(params, "max_parallel", 32));
  // Event-loop threads: by default one per core, up to 8 (each moves its requests' bytes and
  // runs their completions: the copy into registered memory and the checksum).
  const uint64_t cores = std::max(1U, std::thread::hardware_concurrency());
  KVTIER_ASSIGN_OR_RETURN(uint64_t loops, param_u64(params, "loops", std::min<uint64_t>(cores, 8)));
  KVTIER_ASSIGN_OR_RETURN(uint64_t attempts, param_u64(params, "max_attempts", 4));
  KVTIER_ASSIGN_OR_RETURN(uint64_t deadline_ms, param_u64(params, "deadline_ms", 10000));
  KVTIER_ASSIGN_OR_RETURN(uint64_t connect_ms, param_u64(params, "connect_timeout_ms", 2000));
  KVTIER_ASSIGN_OR_RETURN(o.multipart_bytes,
                          param_u64(params, "multipart_bytes", uint64_t{64} << 20));
  KVTIER_ASSIGN_OR_RETURN(o.part_bytes, param_u64(params, "part_bytes", uint64_t{16} << 20));
  KVTIER_ASSIGN_OR_RETURN(o.get_bytes, param_u64(params, "get_bytes", uint64_t{1} << 20));
  if (parallel == 0 || loops == 0 || attempts == 0 || deadline_ms == 0 || o.get_bytes == 0) {
    return invalid_argument_error(
        "s3: max_parallel, loops, max_attempts, deadline_ms and get_bytes must be > 0");
  }
  if (o.part_bytes < s3::kMinPartBytes) {
    return invalid_argument_error(fmt::format("s3: part_bytes {} is below S3's minimum of {}",
                                              o.part_bytes, s3::kMinPartBytes));
  }
  c.max_parallel = parallel;
  c.loops = loops;  // the client keeps it to max_parallel
  c.max_attempts = static_cast<uint32_t>(attempts);
  c.connect_timeout = std::chrono::milliseconds(connect_ms);
  o.deadline = std::chrono::milliseconds(deadline_ms);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::create(c));
  auto backend = std::make_unique<s3::S3Backend>(std::move(o), std::move(client));
  KVTIER_RETURN_IF_ERROR(backend->check_bucket());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace kvtier
