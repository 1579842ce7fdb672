// The backend plugin interface of the transfer layer, and the registry that selects backends.
//
// A backend moves bytes between registered memory and storage objects, and manages objects
// (open, publish, stat, list, remove). It knows nothing of pages, checksums or namespaces:
// that policy lives in the store, once, above every backend.
//
// Users of kvtier do not call backends directly; they go through `Agent` (agent.h), which
// validates descriptors against live registrations and owns every handle. Decorators
// (fault injection, metrics) derive from `BackendWrapper` and wrap any backend.
//
// Thread-safety: every Backend method may be called concurrently from several threads.
// Lifetime: the Agent destroys a backend only after every target and transfer it produced is
// gone, so a backend never sees a call on a destroyed object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/status.h"

namespace kvtier {

// kRead moves storage -> memory; kWrite moves memory -> storage.
enum class TransferOp : uint8_t { kRead, kWrite };
std::string_view transfer_op_name(TransferOp op);

// What kind of storage a backend serves; `auto` selection picks among one class.
enum class StorageClass : uint8_t { kFile, kMemory, kObject };
std::string_view storage_class_name(StorageClass c);

// Identifies one stored object (not its path): (st_dev, st_ino) for files, an object address
// for memory, an ETag hash for object stores. Used to remove "this object, if it is still
// the one at that path".
struct ObjectIdentity {
  uint64_t a = 0;
  uint64_t b = 0;
  bool valid() const { return a != 0 || b != 0; }
  friend bool operator==(const ObjectIdentity&, const ObjectIdentity&) = default;
};

struct ObjectInfo {
  std::string name;  // stat(): the path asked for; list(): the entry name
  bool is_dir = false;
  uint64_t size = 0;
  uint64_t mtime_ns = 0;  // wall clock, nanoseconds since the epoch
  ObjectIdentity identity;
};

struct ListOptions {
  // Fill size/mtime/identity of every entry (costs a stat per entry on FILE backends).
  bool with_details = false;
};

enum class TargetMode : uint8_t {
  kRead,    // an existing object; kNotFound when absent
  kCreate,  // a new object, invisible until published at `path` (replacing any object there)
  // An existing object opened to add bytes after its end (the segment layout's appends);
  // kNotFound when absent. Writes go only at or past the size the object had when it was
  // opened, so bytes already there are never changed through it; reads stay below that size.
  // Nothing to publish: the bytes are in the object as soon as they are written, and
  // sync() makes them durable. Backends that cannot (object stores, memory) refuse it with
  // kUnsupported.
  kAppend,
};

struct TargetSpec {
  std::string path;
  TargetMode mode = TargetMode::kRead;
  // kCreate: the final size when known (advisory).
  uint64_t size_hint = 0;
  // kCreate: where an unpublished object may live while it is written (FILE backends: a
  // directory on the same filesystem as `path`, created when missing). Empty: the directory
  // of `path`.
  std::string temp_dir;
  // Bypass the page cache (O_DIRECT). Every transfer on the target must then be aligned as
  // probe_direct_io() said; the agent rejects one that is not.
  bool direct = false;
  // kRead: the size the caller expects the object to have (0: unknown). A backend that would
  // ask storage for the size at open (s3: a HEAD, one round trip) opens without asking and
  // checks the object as it is read instead: a read fails kCorrupt when the object is another
  // size or was replaced between two reads of the target, kNotFound when it is absent. The
  // target's identity is then unknown (invalid). Backends that learn the size for free
  // ignore it.
  uint64_t expected_size = 0;
};

// What direct I/O needs: memory addresses aligned to `memory`, file offsets and lengths to
// `offset` bytes.
struct DirectIoAlignment {
  uint32_t memory = 0;
  uint32_t offset = 0;
};

struct PublishOptions {
  bool durable = false;  // data and directory entry on stable storage before returning
  // Create the path's directory if it is missing (one level: its parent must exist).
  bool create_parents = true;
};

// A storage object opened by a backend. Owns whatever the backend opened for it (a descriptor,
// an unpublished temporary, a buffer); destroying it releases all of that, and an unpublished
// kCreate target leaves nothing behind.
class BackendTarget {
 public:
  virtual ~BackendTarget() = default;
  BackendTarget(const BackendTarget&) = delete;
  BackendTarget& operator=(const BackendTarget&) = delete;

  const std::string& path() const { return path_; }
  TargetMode mode() const { return mode_; }
  // Set for direct targets: what each transfer on it must be aligned to.
  const std::optional<DirectIoAlignment>& direct() const { return direct_; }
  // kRead and kAppend: the object's size when it was opened. kCreate: the size hint.
  uint64_t size() const { return size_; }
  ObjectIdentity identity() const { return identity_; }

 protected:
  BackendTarget(std::string path, TargetMode mode, uint64_t size, ObjectIdentity identity)
      : path_(std::move(path)), mode_(mode), size_(size), identity_(identity) {}
  void set_identity(ObjectIdentity id) { identity_ = id; }
  void set_direct(DirectIoAlignment a) { direct_ = a; }

 private:
  std::string path_;
  TargetMode mode_;
  uint64_t size_;
  ObjectIdentity identity_;
  std::optional<DirectIoAlignment> direct_;
};

// One registered memory region as backends see it. The agent owns it; it stays valid (and its
// memory registered) until every transfer using it has completed.
struct MemoryRecord {
  const std::byte* base = nullptr;
  size_t length = 0;
  uint64_t id = 0;
  // Free for the backend's own use between register_memory() and deregister_memory()
  // (e.g. an io_uring fixed-buffer index).
  uint64_t backend_cookie = 0;
};

// One descriptor of a batch: `length` bytes between `mem` and `target` at `offset`.
struct IoDesc {
  std::byte* mem = nullptr;
  uint64_t length = 0;
  BackendTarget* target = nullptr;
  uint64_t offset = 0;
  const MemoryRecord* region = nullptr;  // the registration `mem` lies in
};

// A batch of descriptors handed to Backend::submit(). Implemented by the agent (and by
// decorators that forward part of a batch).
class IoBatch {
 public:
  virtual TransferOp op() const = 0;
  virtual std::span<const IoDesc> descs() const = 0;
  virtual bool cancel_requested() const = 0;
  // Reports the outcome of descs()[index]: OK only when every byte moved. Must be called
  // exactly once per descriptor, from any thread. After the last call the batch may be
  // destroyed at once: the backend must not touch it again.
  virtual void complete(size_t index, Status status) = 0;

 protected:
  ~IoBatch() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  virtual StorageClass storage_class() const = 0;
  // The backend and its configuration, for logs and stats ("uring: 2 rings x 64, ...").
  virtual std::string describe() const { return std::string(name()); }

  // Memory registration. The default accepts any region and does nothing.
  virtual Status register_memory(MemoryRecord& region);
  virtual void deregister_memory(MemoryRecord& region) noexcept;

  // Opens one target. kRead on a missing object returns kNotFound.
  virtual Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) = 0;
  // Opens many; the result has one entry per spec, in order. The default loops over open().
  virtual std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs);
  // Makes a kCreate target visible at its path in one step (atomically replacing any object
  // there). A reader never sees a partially written object. At most once per target.
  virtual Status publish(BackendTarget& target, const PublishOptions& options) = 0;
  // Makes the bytes written to a kAppend target so far durable, with the object's size
  // (FILE backends: fdatasync). The writes must have completed. A new object's directory
  // entry is not part of it: that is published (durably) when the object is created. The
  // default, for backends without kAppend targets, is kUnsupported.
  virtual Status sync(BackendTarget& target);

  virtual Status make_dirs(std::string_view path) = 0;
  // One directory, in a parent that must exist (kNotFound when it does not): what lies above
  // is never made. The default, for backends without directories, is make_dirs().
  virtual Status make_dir(std::string_view path) { return make_dirs(path); }
  virtual Result<ObjectInfo> stat(std::string_view path) = 0;
  // stat() of many paths, one result per path. With `until_missing`, paths after the first
  // one that is not an object may be left unchecked (kNotFound, "not checked"). The default
  // loops over stat(); object stores ask in parallel.
  virtual std::vector<Result<ObjectInfo>> stat_many(std::span<const std::string> paths,
                                                    bool until_missing);
  // Removes the object at `path`; with `if_identity`, only if it is still that object
  // (kNotFound otherwise). Directories are removed only when empty.
  virtual Status remove(std::string_view path, const ObjectIdentity* if_identity) = 0;
  // Removes many objects (no identity check); one status per path, in order. An absent object
  // may report OK (object stores do not tell). The default loops over remove().
  virtual std::vector<Status> remove_many(std::span<const std::string> paths);
  // Calls `fn` for each direct child of `dir` (kNotFound when `dir` does not exist); stops at
  // and returns the first non-OK status from `fn`.
  virtual Status list(std::string_view dir, const ListOptions& options,
                      const std::function<Status(const ObjectInfo&)>& fn) = 0;
  // Removes temporaries that unpublished kCreate targets left in `temp_dir` (a crashed
  // process), never those of a live process; returns how many were removed. Temporaries of
  // other hosts (a shared filesystem) are removed once older than `min_age_s`.
  virtual Result<size_t> sweep_temporaries(std::string_view temp_dir, uint64_t min_age_s);
  // Counts the temporaries in `temp_dir` (live or stale).
  virtual Result<size_t> count_temporaries(std::string_view temp_dir);
  // Whether objects created in `dir` can use direct I/O, and its alignment; kUnsupported with
  // the reason otherwise (the default: no direct I/O).
  virtual Result<DirectIoAlignment> probe_direct_io(std::string_view dir);

  // Starts every descriptor of `batch`; returns at once or after completing them inline.
  // Each descriptor is completed exactly once (see IoBatch::complete).
  virtual void submit(IoBatch& batch) = 0;
  // Asks in-flight work of `batch` to stop early; descriptors not yet started complete with
  // kCancelled. Optional: the default does nothing beyond what cancel_requested() achieves.
  virtual void cancel(IoBatch& batch) noexcept;
};

// Forwards every call to an inner backend: the base of decorators (fault injection, metrics).
class BackendWrapper : public Backend {
 public:
  explicit BackendWrapper(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  std::string_view name() const override { return inner_->name(); }
  StorageClass storage_class() const override { return inner_->storage_class(); }
  std::string describe() const override { return inner_->describe(); }
  Status register_memory(MemoryRecord& region) override { return inner_->register_memory(region); }
  void deregister_memory(MemoryRecord& region) noexcept override {
    inner_->deregister_memory(region);
  }
  Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) override {
    return inner_->open(spec);
  }
  std::vector<Result<std::unique_ptr<BackendTarget>>> open_batch(
      std::span<const TargetSpec> specs) override {
    return inner_->open_batch(specs);
  }
  Status publish(BackendTarget& target, const PublishOptions& options) override {
    return inner_->publish(target, options);
  }
  Status sync(BackendTarget& target) override { return inner_->sync(target); }
  Status make_dirs(std::string_view path) override { return inner_->make_dirs(path); }
  Status make_dir(std::string_view path) override { return inner_->make_dir(path); }
  Result<ObjectInfo> stat(std::string_view path) override { return inner_->stat(path); }
  std::vector<Result<ObjectInfo>> stat_many(std::span<const std::string> paths,
                                            bool until_missing) override {
    return inner_->stat_many(paths, until_missing);
  }
  Status remove(std::string_view path, const ObjectIdentity* if_identity) override {
    return inner_->remove(path, if_identity);
  }
  std::vector<Status> remove_many(std::span<const std::string> paths) override {
    return inner_->remove_many(paths);
  }
  Status list(std::string_view dir, const ListOptions& options,
              const std::function<Status(const ObjectInfo&)>& fn) override {
    return inner_->list(dir, options, fn);
  }
  Result<size_t> sweep_temporaries(std::string_view temp_dir, uint64_t min_age_s) override {
    return inner_->sweep_temporaries(temp_dir, min_age_s);
  }
  Result<size_t> count_temporaries(std::string_view temp_dir) override {
    return inner_->count_temporaries(temp_dir);
  }
  Result<DirectIoAlignment> probe_direct_io(std::string_view dir) override {
    return inner_->probe_direct_io(dir);
  }
  void submit(IoBatch& batch) override { inner_->submit(batch); }
  void cancel(IoBatch& batch) noexcept override { inner_->cancel(batch); }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

// Backend parameters, as strings (from a URI query, a config file or Python kwargs).
using BackendParams = std::map<std::string, std::string, std::less<>>;

using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(const BackendParams&)>;

// One parameter a backend understands, and what its value must parse as.
enum class ParamType : uint8_t { kText, kUnsigned, kBool };
struct ParamSpec {
  std::string name;
  ParamType type = ParamType::kText;
};

// Named backend factories, each with the parameters it understands. `auto` selection tries
// the backends of one storage class in descending priority and takes the first whose factory
// succeeds; a kInvalidArgument from a factory (a bad parameter) stops it instead of falling
// back. Before any factory runs, every parameter must be known to the chosen backend (to one
// of the candidates under `auto`) and its value must parse (for every candidate that knows
// it): otherwise kInvalidArgument naming the parameter.
// Thread-safety: add() needs external synchronization; lookups are const and concurrent.
class BackendRegistry {
 public:
  struct Entry {
    std::string name;
    StorageClass storage_class;
    int priority;  // higher is tried first by `auto`
    BackendFactory factory;
    std::vector<ParamSpec> params;
  };

  // kAlreadyExists when `name` is taken. `params`: every parameter the factory reads.
  Status add(std::string name, StorageClass storage_class, int priority, BackendFactory factory,
             std::vector<ParamSpec> params = {});
  const Entry* find(std::string_view name) const;
  // Entries of `storage_class`, highest priority first.
  std::vector<const Entry*> candidates(StorageClass storage_class) const;
  std::vector<std::string> names() const;

 private:
  std::vector<Entry> entries_;
};

// kInvalidArgument naming the first parameter none of `backends` knows, or whose value does
// not parse as a backend that knows it expects.
Status check_params(const BackendParams& params,
                    std::span<const BackendRegistry::Entry* const> backends);

// Parses an unsigned integer parameter; `fallback` when absent, kInvalidArgument when malformed.
Result<uint64_t> param_u64(const BackendParams& params, std::string_view key, uint64_t fallback);
Result<bool> param_bool(const BackendParams& params, std::string_view key, bool fallback);

}  // namespace kvtier
