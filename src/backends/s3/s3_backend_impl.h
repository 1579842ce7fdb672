// The s3 backend's private parts, shared by its two source files: s3_backend.cc (targets,
// object management, the factory) and s3_backend_io.cc (the data path: ranged GETs, PUTs and
// multipart uploads for submitted batches).
//
// Not installed; include/kvtier/backends/s3/s3_backend.h is the public face (the factory).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <pugixml.hpp>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/core/mutex.h"
#include "kvtier/core/status.h"
#include "kvtier/transfer/backend.h"
#include "s3_client.h"

namespace kvtier::s3 {

inline constexpr uint64_t kMinPartBytes = uint64_t{5} << 20;  // S3's smallest part (but the last)
inline constexpr size_t kMaxDeleteKeys = 1000;                // per multi-object delete

// "/prefix//kvtier/x" -> "prefix/kvtier/x".
std::string key_of(std::string_view path);

// A request body: the document without declaration or indentation, its text escaped by pugixml.
std::string xml_body(const pugi::xml_document& doc);

// An object's identity from its ETag (empty: none).
ObjectIdentity identity_of(std::string_view etag);

// "2026-11-30T07:10:11.123Z" -> nanoseconds since the epoch (0 when unparsable).
uint64_t iso8601_ns(const char* text);

class S3Target final : public BackendTarget {
 public:
  S3Target(std::string path, TargetMode mode, uint64_t size, std::string etag,
           bool unchecked = false)
      : BackendTarget(std::move(path), mode, size, identity_of(etag)),
        key_(key_of(this->path())),
        etag_(std::move(etag)),
        unchecked_(unchecked) {}

  const std::string& key() const { return key_; }
  const std::string& etag() const { return etag_; }
  // kRead, opened without a HEAD (TargetSpec::expected_size): size() is what the caller
  // expects, checked against each GET's answer, and every GET must find the same object.
  bool unchecked() const { return unchecked_; }
  // An unchecked target's GET came back whole: OK, or why its bytes are not this target's.
  Status check_read(const Request& done);

  // kCreate: the upload's outcome.
  Mutex mu;
  bool uploading = false;
  bool uploaded = false;
  bool published = false;

 private:
  std::string key_;
  std::string etag_;
  const bool unchecked_;
  std::string seen_etag_ KVTIER_GUARDED_BY(mu);  // unchecked: the object the first GET found
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
  // Adjacent descriptors of a read go out as ranged GETs of about this many bytes (cut at a
  // descriptor's edge), side by side: one GET per packed record would pay a round trip per
  // small page, one GET for a whole segment would move it on one connection.
  uint64_t get_bytes = uint64_t{1} << 20;
};

// The backend. Management calls (open, stat, list, remove) run their requests on the client and
// wait; submit() starts a batch's requests and returns, each completing its descriptors from
// the client's event-loop thread.
class S3Backend final : public Backend {
 public:
  S3Backend(Options options, std::unique_ptr<Client> client)
      : options_(std::move(options)), client_(std::move(client)) {}

  std::string_view name() const override { return "s3"; }
  StorageClass storage_class() const override { return StorageClass::kObject; }
  std::string describe() const override;

  // HEAD of the bucket: says whether the endpoint, credentials and bucket work, and which not.
  Status check_bucket();

  Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) override;
  std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs) override;
  Status publish(BackendTarget& base, const PublishOptions& options) override;
  Status make_dirs(std::string_view /*path*/) override { return ok_status(); }
  Result<ObjectInfo> stat(std::string_view path) override;
  std::vector<Result<ObjectInfo>> stat_many(std::span<const std::string> paths,
                                            bool until_missing) override;
  Status remove(std::string_view path, const ObjectIdentity* if_identity) override;
  std::vector<Status> remove_many(std::span<const std::string> paths) override;
  Status list(std::string_view dir, const ListOptions& options,
              const std::function<Status(const ObjectInfo&)>& fn) override;

  void submit(IoBatch& batch) override;  // s3_backend_io.cc
  void cancel(IoBatch& batch) noexcept override;

 private:
  Clock::time_point deadline() const { return Clock::now() + options_.deadline; }

  static std::string content_md5(std::string_view body);

  // One ListObjectsV2 page of direct children of `prefix`.
  Status list_page(const std::string& prefix, const std::string& token, int max_keys,
                   const std::function<Status(const ObjectInfo&)>& fn, std::string* next);

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
  std::unordered_map<IoBatch*, std::shared_ptr<BatchWork>> batches_ KVTIER_GUARDED_BY(batches_mu_);
};

}  // namespace kvtier::s3
