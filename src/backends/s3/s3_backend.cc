#include "kvtier/backends/s3/s3_backend.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <pugixml.hpp>
#include <unordered_map>

#include "kvtier/core/checksum.h"
#include "kvtier/core/mutex.h"
#include "s3_client.h"

namespace kvtier {
namespace {

using s3::Client;
using s3::Clock;
using s3::Request;

constexpr uint64_t kMinPartBytes = uint64_t{5} << 20;  // S3's smallest part (but the last)
constexpr size_t kMaxDeleteKeys = 1000;                // per multi-object delete

// "/prefix//kvtier/x" -> "prefix/kvtier/x".
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

// A request body: the document without declaration or indentation, its text escaped by pugixml.
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

// "2026-11-30T07:10:11.123Z" -> nanoseconds since the epoch (0 when unparsable).
uint64_t iso8601_ns(const char* text) {
  std::tm tm{};
  const char* rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) return 0;
  const time_t t = timegm(&tm);
  return t < 0 ? 0 : static_cast<uint64_t>(t) * 1'000'000'000;
}

class S3Target final : public BackendTarget {
 public:
  S3Target(std::string path, TargetMode mode, uint64_t size, std::string etag)
      : BackendTarget(std::move(path), mode, size, identity_of(etag)),
        key_(key_of(this->path())),
        etag_(std::move(etag)) {}

  const std::string& key() const { return key_; }
  const std::string& etag() const { return etag_; }

  // kCreate: the upload's outcome.
  Mutex mu;
  bool uploading = false;
  bool uploaded = false;
  bool published = false;

 private:
  std::string key_;
  std::string etag_;
};

// The requests of one submitted batch, for cancel() and for knowing the last one.
struct BatchWork {
  Mutex mu;
  std::vector<std::shared_ptr<Request>> requests KVTIER_GUARDED_BY(mu);
  std::atomic<size_t> jobs_left{0};
  std::atomic<bool> cancelled{false};

  void add(const std::shared_ptr<Request>& r) {
    MutexLock lock(mu);
    requests.push_back(r);
    if (cancelled.load()) r->cancel.store(true);
  }
};

struct Options {
  s3::ClientOptions client;
  std::chrono::milliseconds deadline{10000};
  uint64_t multipart_bytes = uint64_t{64} << 20;
  uint64_t part_bytes = uint64_t{16} << 20;
};

class S3Backend final : public Backend {
 public:
  S3Backend(Options options, std::unique_ptr<Client> client)
      : options_(std::move(options)), client_(std::move(client)) {}

  std::string_view name() const override { return "s3"; }
  StorageClass storage_class() const override { return StorageClass::kObject; }

  std::string describe() const override {
    const auto& c = options_.client;
    return fmt::format("s3: {} bucket '{}' ({}, region {}), {} parallel requests, deadline {} ms",
                       c.endpoint, c.bucket, c.virtual_host ? "virtual-host" : "path-style",
                       c.region, c.max_parallel, options_.deadline.count());
  }

  Status check_bucket() {
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
      return permission_denied_error(fmt::format(
          "access to bucket '{}' at {} denied: check the credentials and the region ({})", c.bucket,
          c.endpoint, c.region));
    }
    if (r->http_code == 0) {
      return unavailable_error(
          fmt::format("cannot reach the S3 endpoint {}: {}", c.endpoint, st.message()));
    }
    return st;
  }

  Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) override {
    auto out = open_batch(std::span<const TargetSpec>(&spec, 1));
    return std::move(out.front());
  }

  std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs) override {
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

  Status publish(BackendTarget& base, const PublishOptions& /*options*/) override {
    auto& t = static_cast<S3Target&>(base);
    if (t.mode() != TargetMode::kCreate) {
      return invalid_argument_error(fmt::format("'{}' was opened for reading", t.path()));
    }
    MutexLock lock(t.mu);
    if (t.published)
      return invalid_argument_error(fmt::format("'{}' is already published", t.path()));
    if (!t.uploaded) {
      return invalid_argument_error(fmt::format(
          "'{}' has nothing to publish: an object is uploaded whole by a write transfer",
          t.path()));
    }
    t.published = true;  // a PUT is visible (and durable) once it succeeded
    return ok_status();
  }

  Status make_dirs(std::string_view /*path*/) override { return ok_status(); }

  Result<ObjectInfo> stat(std::string_view path) override {
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

  std::vector<Result<ObjectInfo>> stat_many(std::span<const std::string> paths,
                                            bool /*until_missing*/) override {
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

  Status remove(std::string_view path, const ObjectIdentity* if_identity) override {
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

  std::vector<Status> remove_many(std::span<const std::string> paths) override {
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

  Status list(std::string_view dir, const ListOptions& /*options*/,
              const std::function<Status(const ObjectInfo&)>& fn) override {
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

  void submit(IoBatch& batch) override;

  void cancel(IoBatch& batch) noexcept override {
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

 private:
  Clock::time_point deadline() const { return Clock::now() + options_.deadline; }

  static std::string content_md5(std::string_view body);

  // One ListObjectsV2 page of direct children of `prefix`.
  Status list_page(const std::string& prefix, const std::string& token, int max_keys,
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

  // The descriptors of one object (a write) or one contiguous run of an object (a read).
  struct Job {
    std::vector<size_t> descs;   // indexes in the batch
    Status immediate;            // not OK: the job fails without I/O
    S3Target* upload = nullptr;  // writes: the target being uploaded
    std::string key;
    std::vector<std::span<const std::byte>> body;  // writes, in object order
    std::shared_ptr<Request> read;                 // reads: the ranged GET
    uint64_t bytes = 0;
  };
  struct Multipart;

  void start_put(IoBatch& batch, const std::shared_ptr<BatchWork>& work,
                 const std::shared_ptr<Job>& job, Clock::time_point until);
  void start_multipart(IoBatch& batch, const std::shared_ptr<BatchWork>& work,
                       const std::shared_ptr<Job>& job, Clock::time_point until);
  void finish_job(IoBatch& batch, const std::shared_ptr<BatchWork>& work, Job& job, Status st);

  Options options_;
  std::unique_ptr<Client> client_;
  Mutex batches_mu_;
  std::unordered_map<IoBatch*, std::shared_ptr<BatchWork>> batches_;
};

std::string S3Backend::content_md5(std::string_view body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(body.data(), body.size(), digest, &n, EVP_md5(), nullptr);
  unsigned char b64[64];
  const int len = EVP_EncodeBlock(b64, digest, static_cast<int>(n));
  return std::string(reinterpret_cast<const char*>(b64), static_cast<size_t>(len));
}

void S3Backend::submit(IoBatch& batch) {
  const TransferOp op = batch.op();
  // Everything needed is copied first: once the last descriptor completes, `batch` is gone.
  const std::vector<IoDesc> descs(batch.descs().begin(), batch.descs().end());
  if (descs.empty()) return;
  const bool cancelled = batch.cancel_requested();
  const auto until = deadline();

  std::vector<BackendTarget*> order;
  std::unordered_map<BackendTarget*, std::vector<size_t>> groups;
  for (size_t i = 0; i < descs.size(); ++i) {
    auto [it, fresh] = groups.try_emplace(descs[i].target);
    if (fresh) order.push_back(descs[i].target);
    it->second.push_back(i);
  }
  std::vector<std::shared_ptr<Job>> jobs;
  for (BackendTarget* base : order) {
    auto* t = static_cast<S3Target*>(base);
    std::vector<size_t> idx = std::move(groups[base]);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return descs[a].offset < descs[b].offset; });
    if (cancelled) {
      auto job = std::make_shared<Job>();
      job->descs = std::move(idx);
      job->immediate = cancelled_error(fmt::format("transfer of '{}' cancelled", t->path()));
      jobs.push_back(std::move(job));
      continue;
    }
    if (op == TransferOp::kWrite) {
      auto job = std::make_shared<Job>();
      job->key = t->key();
      uint64_t expect = 0;
      for (size_t i : idx) {
        if (descs[i].offset != expect) {
          job->immediate = invalid_argument_error(fmt::format(
              "'{}': an object is uploaded whole: one transfer must write every byte from "
              "offset 0 (a gap or overlap at {})",
              t->path(), expect));
        }
        expect = descs[i].offset + descs[i].length;
        job->body.emplace_back(descs[i].mem, descs[i].length);
      }
      job->bytes = expect;
      job->descs = std::move(idx);
      if (job->immediate.ok()) {
        MutexLock lock(t->mu);
        if (t->uploading || t->uploaded) {
          job->immediate = invalid_argument_error(
              fmt::format("'{}' is already written: objects are uploaded once", t->path()));
        } else {
          t->uploading = true;
          job->upload = t;
        }
      }
      jobs.push_back(std::move(job));
      continue;
    }
    // Reads: one ranged GET per contiguous run.
    for (size_t k = 0; k < idx.size();) {
      auto job = std::make_shared<Job>();
      job->key = t->key();
      uint64_t end = descs[idx[k]].offset;
      const uint64_t start = end;
      while (k < idx.size() && descs[idx[k]].offset == end) {
        job->descs.push_back(idx[k]);
        end += descs[idx[k]].length;
        ++k;
      }
      job->bytes = end - start;
      auto r = std::make_shared<Request>();
      r->method = "GET";
      r->key = t->key();
      r->headers.push_back(fmt::format("Range: bytes={}-{}", start, end - 1));
      if (!t->etag().empty()) r->headers.push_back(fmt::format("If-Match: \"{}\"", t->etag()));
      for (size_t i : job->descs) r->sink.emplace_back(descs[i].mem, descs[i].length);
      r->deadline = until;
      job->read = std::move(r);
      jobs.push_back(std::move(job));
    }
  }

  auto work = std::make_shared<BatchWork>();
  work->jobs_left.store(jobs.size());
  {
    MutexLock lock(batches_mu_);
    batches_[&batch] = work;
  }
  std::vector<std::shared_ptr<Job>> failed_now;
  for (const auto& job : jobs) {
    if (!job->immediate.ok()) {
      failed_now.push_back(job);
    } else if (op == TransferOp::kWrite) {
      if (job->bytes > options_.multipart_bytes) {
        start_multipart(batch, work, job, until);
      } else {
        start_put(batch, work, job, until);
      }
    } else {
      std::shared_ptr<Request> r = std::move(job->read);
      const uint64_t bytes = job->bytes;
      r->on_done = [this, &batch, work, job, bytes](Request& done) {
        Status st = done.status;
        if (st.ok() && done.received != bytes) {
          st = corrupt_error(
              fmt::format("'{}': {} of {} bytes arrived", done.key, done.received, bytes));
        }
        finish_job(batch, work, *job, std::move(st));
      };
      work->add(r);
      client_->start(std::move(r));
    }
  }
  for (const auto& job : failed_now) finish_job(batch, work, *job, job->immediate);
}

void S3Backend::start_put(IoBatch& batch, const std::shared_ptr<BatchWork>& work,
                          const std::shared_ptr<Job>& job, Clock::time_point until) {
  auto r = std::make_shared<Request>();
  r->method = "PUT";
  r->key = job->key;
  r->body_pieces = job->body;
  r->deadline = until;
  r->on_done = [this, &batch, work, job](Request& done) {
    finish_job(batch, work, *job, done.status);
  };
  work->add(r);
  client_->start(std::move(r));
}

// A multipart upload in flight: initiate, every part in parallel, complete (or abort).
struct S3Backend::Multipart {
  std::shared_ptr<Job> job;
  std::string upload_id;
  Mutex mu;
  std::vector<std::string> etags KVTIER_GUARDED_BY(mu);
  Status error KVTIER_GUARDED_BY(mu);  // the first part failure
  std::atomic<size_t> parts_left{0};
};

void S3Backend::start_multipart(IoBatch& batch, const std::shared_ptr<BatchWork>& work,
                                const std::shared_ptr<Job>& job, Clock::time_point until) {
  auto mp = std::make_shared<Multipart>();
  mp->job = job;
  auto abort_upload = [this, mp, until] {
    auto r = std::make_shared<Request>();
    r->method = "DELETE";
    r->key = mp->job->key;
    r->query = {{"uploadId", mp->upload_id}};
    r->deadline = until + std::chrono::seconds(5);
    client_->start(std::move(r));  // best effort: a failed abort leaves parts the bucket's
                                   // lifecycle rules remove
  };
  auto complete = [this, &batch, work, mp, until, abort_upload] {
    // Every part is done (parts_left reached zero), so the lock is uncontended; it is taken
    // so that each access to etags is checked the same way.
    pugi::xml_document doc;
    pugi::xml_node done = doc.append_child("CompleteMultipartUpload");
    {
      MutexLock lock(mp->mu);
      for (size_t i = 0; i < mp->etags.size(); ++i) {
        pugi::xml_node part = done.append_child("Part");
        part.append_child("PartNumber").text().set(static_cast<unsigned long long>(i + 1));
        part.append_child("ETag").text().set(fmt::format("\"{}\"", mp->etags[i]).c_str());
      }
    }
    std::string xml = xml_body(doc);
    auto r = std::make_shared<Request>();
    r->method = "POST";
    r->key = mp->job->key;
    r->query = {{"uploadId", mp->upload_id}};
    r->headers = {"Content-Type: application/xml"};
    r->body = std::move(xml);
    r->deadline = until;
    r->on_done = [this, &batch, work, mp, abort_upload](Request& done) {
      Status st = done.status;
      // CompleteMultipartUpload can fail with 200 and an error document.
      pugi::xml_document doc;
      if (st.ok() && doc.load_buffer(done.response.data(), done.response.size()) &&
          doc.child("Error")) {
        st = unavailable_error(fmt::format("completing the upload of '{}': {}", done.key,
                                           doc.child("Error").child_value("Code")));
      }
      if (!st.ok()) abort_upload();
      finish_job(batch, work, *mp->job, std::move(st));
    };
    work->add(r);
    client_->start(std::move(r));
  };
  auto start_parts = [this, &batch, work, mp, until, complete, abort_upload] {
    // Cut the body into parts of part_bytes (pieces may straddle parts).
    std::vector<std::vector<std::span<const std::byte>>> parts(1);
    uint64_t in_part = 0;
    for (std::span<const std::byte> piece : mp->job->body) {
      while (!piece.empty()) {
        const uint64_t take = std::min<uint64_t>(piece.size(), options_.part_bytes - in_part);
        parts.back().push_back(piece.first(take));
        piece = piece.subspan(take);
        in_part += take;
        if (in_part == options_.part_bytes) {
          parts.emplace_back();
          in_part = 0;
        }
      }
    }
    if (parts.back().empty()) parts.pop_back();
    {
      MutexLock lock(mp->mu);  // no part has started yet: uncontended
      mp->etags.resize(parts.size());
    }
    mp->parts_left.store(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      auto r = std::make_shared<Request>();
      r->method = "PUT";
      r->key = mp->job->key;
      r->query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", mp->upload_id}};
      r->body_pieces = std::move(parts[i]);
      r->deadline = until;
      r->on_done = [this, &batch, work, mp, i, complete, abort_upload](Request& done) {
        {
          MutexLock lock(mp->mu);
          if (done.status.ok() && done.etag.empty()) {
            mp->error = internal_error(
                fmt::format("part {} of '{}' came back without an ETag", i + 1, done.key));
          } else if (!done.status.ok() && mp->error.ok()) {
            mp->error = done.status;
          }
          mp->etags[i] = done.etag;
        }
        if (mp->parts_left.fetch_sub(1) != 1) return;
        Status error;
        {
          MutexLock lock(mp->mu);
          error = mp->error;
        }
        if (!error.ok() || work->cancelled.load()) {
          abort_upload();
          finish_job(batch, work, *mp->job,
                     error.ok() ? cancelled_error("multipart upload cancelled") : error);
          return;
        }
        complete();
      };
      work->add(r);
      client_->start(std::move(r));
    }
  };
  auto r = std::make_shared<Request>();
  r->method = "POST";
  r->key = job->key;
  r->query = {{"uploads", ""}};
  r->deadline = until;
  r->on_done = [this, &batch, work, mp, start_parts](Request& done) {
    Status st = done.status;
    if (st.ok()) {
      pugi::xml_document doc;
      if (doc.load_buffer(done.response.data(), done.response.size())) {
        mp->upload_id = doc.child("InitiateMultipartUploadResult").child_value("UploadId");
      }
      if (mp->upload_id.empty()) {
        st = internal_error(fmt::format("starting the upload of '{}': no UploadId", done.key));
      }
    }
    if (!st.ok()) return finish_job(batch, work, *mp->job, std::move(st));
    start_parts();
  };
  work->add(r);
  client_->start(std::move(r));
}

void S3Backend::finish_job(IoBatch& batch, const std::shared_ptr<BatchWork>& work, Job& job,
                           Status st) {
  if (job.upload != nullptr) {
    MutexLock lock(job.upload->mu);
    job.upload->uploading = false;
    job.upload->uploaded = st.ok();
  }
  if (work->jobs_left.fetch_sub(1) == 1) {
    MutexLock lock(batches_mu_);
    batches_.erase(&batch);
  }
  for (size_t i : job.descs) batch.complete(i, st);
}

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
          {"max_attempts", ParamType::kUnsigned},
          {"deadline_ms", ParamType::kUnsigned},
          {"connect_timeout_ms", ParamType::kUnsigned},
          {"multipart_bytes", ParamType::kUnsigned},
          {"part_bytes", ParamType::kUnsigned}};
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
  KVTIER_ASSIGN_OR_RETURN(uint64_t attempts, param_u64(params, "max_attempts", 4));
  KVTIER_ASSIGN_OR_RETURN(uint64_t deadline_ms, param_u64(params, "deadline_ms", 10000));
  KVTIER_ASSIGN_OR_RETURN(uint64_t connect_ms, param_u64(params, "connect_timeout_ms", 2000));
  KVTIER_ASSIGN_OR_RETURN(o.multipart_bytes,
                          param_u64(params, "multipart_bytes", uint64_t{64} << 20));
  KVTIER_ASSIGN_OR_RETURN(o.part_bytes, param_u64(params, "part_bytes", uint64_t{16} << 20));
  if (parallel == 0 || attempts == 0 || deadline_ms == 0) {
    return invalid_argument_error("s3: max_parallel, max_attempts and deadline_ms must be > 0");
  }
  if (o.part_bytes < kMinPartBytes) {
    return invalid_argument_error(
        fmt::format("s3: part_bytes {} is below S3's minimum of {}", o.part_bytes, kMinPartBytes));
  }
  c.max_parallel = parallel;
  c.max_attempts = static_cast<uint32_t>(attempts);
  c.connect_timeout = std::chrono::milliseconds(connect_ms);
  o.deadline = std::chrono::milliseconds(deadline_ms);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::create(c));
  auto backend = std::make_unique<S3Backend>(std::move(o), std::move(client));
  KVTIER_RETURN_IF_ERROR(backend->check_bucket());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace kvtier
