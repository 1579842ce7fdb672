#include "kvtier/backends/dram/dram_backend.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "kvtier/core/clock.h"
#include "kvtier/core/mutex.h"

namespace kvtier {
namespace {

struct DramObject {
  std::vector<std::byte> data;
  uint64_t mtime_ns = 0;
};

ObjectIdentity identity_of(const DramObject* o) {
  return ObjectIdentity{reinterpret_cast<uintptr_t>(o), 1};
}

std::string normalize_dir(std::string_view dir) {
  std::string d(dir);
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

// The object map, shared by the backends of one instance name.
struct DramStorage {
  mutable SharedMutex mu;
  std::map<std::string, std::shared_ptr<const DramObject>, std::less<>> objects
      KVTIER_GUARDED_BY(mu);
};

std::shared_ptr<DramStorage> storage_for(const std::string& instance) {
  if (instance.empty()) return std::make_shared<DramStorage>();
  static Mutex mu;
  static std::unordered_map<std::string, std::weak_ptr<DramStorage>> instances;
  MutexLock lock(mu);
  std::weak_ptr<DramStorage>& slot = instances[instance];
  std::shared_ptr<DramStorage> s = slot.lock();
  if (!s) {
    s = std::make_shared<DramStorage>();
    slot = s;
  }
  return s;
}

class DramTarget final : public BackendTarget {
 public:
  // Read target: a snapshot of a published object.
  DramTarget(std::string path, std::shared_ptr<const DramObject> obj)
      : BackendTarget(std::move(path), TargetMode::kRead, obj->data.size(), identity_of(obj.get())),
        snapshot_(std::move(obj)) {}
  // Create target: a private object, published by moving it into the map.
  DramTarget(std::string path, uint64_t size_hint)
      : BackendTarget(std::move(path), TargetMode::kCreate, size_hint, {}),
        building_(std::make_shared<DramObject>()) {
    building_->data.reserve(size_hint);
  }

  Mutex& write_mu() { return write_mu_; }
  // REQUIRES: write_mu() held for kCreate targets.
  const DramObject& contents() const { return building_ ? *building_ : *snapshot_; }
  DramObject* building() { return building_.get(); }
  // Hands the written object over for publishing; null when already published.
  std::shared_ptr<const DramObject> take_building() {
    MutexLock lock(write_mu_);
    if (!building_) return nullptr;
    building_->mtime_ns = wall_ns();
    snapshot_ = std::move(building_);
    return snapshot_;
  }

 private:
  std::shared_ptr<const DramObject> snapshot_;
  Mutex write_mu_;
  std::shared_ptr<DramObject> building_;
};

class DramBackend final : public Backend {
 public:
  explicit DramBackend(std::shared_ptr<DramStorage> storage) : storage_(std::move(storage)) {}

  std::string_view name() const override { return "dram"; }
  StorageClass storage_class() const override { return StorageClass::kMemory; }

  Result<std::unique_ptr<BackendTarget>> open(const TargetSpec& spec) override {
    if (spec.path.empty()) return invalid_argument_error("open: empty path");
    if (spec.mode == TargetMode::kAppend) {
      return unsupported_error(
          fmt::format("'{}': the dram backend does not append to objects", spec.path));
    }
    if (spec.mode == TargetMode::kCreate) {
      if (spec.size_hint > (uint64_t{1} << 40)) {
        return resource_exhausted_error(fmt::format(
            "object '{}' of {} bytes is too large for memory", spec.path, spec.size_hint));
      }
      return std::unique_ptr<BackendTarget>(new DramTarget(spec.path, spec.size_hint));
    }
    ReaderLock lock(storage_->mu);
    auto it = storage_->objects.find(spec.path);
    if (it == storage_->objects.end()) {
      return not_found_error(fmt::format("no object '{}'", spec.path));
    }
    return std::unique_ptr<BackendTarget>(new DramTarget(spec.path, it->second));
  }

  Status publish(BackendTarget& base, const PublishOptions& /*options*/) override {
    auto& t = static_cast<DramTarget&>(base);
    std::shared_ptr<const DramObject> obj = t.take_building();
    if (!obj) return invalid_argument_error(fmt::format("'{}' is already published", t.path()));
    WriterLock lock(storage_->mu);
    storage_->objects[t.path()] = std::move(obj);
    return ok_status();
  }

  Status make_dirs(std::string_view /*path*/) override { return ok_status(); }

  Result<ObjectInfo> stat(std::string_view path) override {
    ReaderLock lock(storage_->mu);
    auto it = storage_->objects.find(path);
    if (it != storage_->objects.end()) {
      return ObjectInfo{std::string(path), false, it->second->data.size(), it->second->mtime_ns,
                        identity_of(it->second.get())};
    }
    const std::string prefix = normalize_dir(path) + "/";
    auto child = storage_->objects.lower_bound(prefix);
    if (child != storage_->objects.end() && child->first.starts_with(prefix)) {
      return ObjectInfo{std::string(path), true, 0, 0, {}};
    }
    return not_found_error(fmt::format("no object '{}'", path));
  }

  Status remove(std::string_view path, const ObjectIdentity* if_identity) override {
    WriterLock lock(storage_->mu);
    auto it = storage_->objects.find(path);
    if (it == storage_->objects.end()) {
      return not_found_error(fmt::format("no object '{}'", path));
    }
    if (if_identity != nullptr && identity_of(it->second.get()) != *if_identity) {
      return not_found_error(fmt::format("'{}' was replaced; not removed", path));
    }
    storage_->objects.erase(it);
    return ok_status();
  }

  Status list(std::string_view dir, const ListOptions& /*options*/,
              const std::function<Status(const ObjectInfo&)>& fn) override {
    // Collect under the lock, call back without it (fn may call into the backend).
    std::vector<ObjectInfo> entries;
    {
      ReaderLock lock(storage_->mu);
      const std::string prefix = normalize_dir(dir) + "/";
      std::string last_dir;
      for (auto it = storage_->objects.lower_bound(prefix);
           it != storage_->objects.end() && it->first.starts_with(prefix); ++it) {
        std::string_view rest = std::string_view(it->first).substr(prefix.size());
        const size_t slash = rest.find('/');
        if (slash == std::string_view::npos) {
          entries.push_back(ObjectInfo{std::string(rest), false, it->second->data.size(),
                                       it->second->mtime_ns, identity_of(it->second.get())});
        } else if (rest.substr(0, slash) != last_dir) {
          last_dir = std::string(rest.substr(0, slash));
          entries.push_back(ObjectInfo{last_dir, true, 0, 0, {}});
        }
      }
      if (entries.empty()) return not_found_error(fmt::format("no directory '{}'", dir));
    }
    for (const ObjectInfo& e : entries) KVTIER_RETURN_IF_ERROR(fn(e));
    return ok_status();
  }

  void submit(IoBatch& batch) override {
    const TransferOp op = batch.op();
    const size_t n = batch.descs().size();
    for (size_t i = 0; i < n; ++i) {
      // Read the descriptor before completing: the last completion may free the batch.
      const IoDesc d = batch.descs()[i];
      Status st;
      if (batch.cancel_requested()) {
        st = cancelled_error(
            fmt::format("{} of '{}' cancelled", transfer_op_name(op), d.target->path()));
      } else {
        st = op == TransferOp::kRead ? read(d) : write(d);
      }
      batch.complete(i, std::move(st));
    }
  }

 private:
  static Status read(const IoDesc& d) {
    auto* t = static_cast<DramTarget*>(d.target);
    std::unique_lock<Mutex> lock;
    if (t->mode() == TargetMode::kCreate) lock = std::unique_lock(t->write_mu());
    const auto& data = t->contents().data;
    if (d.offset > data.size() || d.length > data.size() - d.offset) {
      return corrupt_error(
          fmt::format("'{}' ends before offset {}", t->path(), d.offset + d.length));
    }
    std::memcpy(d.mem, data.data() + d.offset, d.length);
    return ok_status();
  }

  static Status write(const IoDesc& d) {
    auto* t = static_cast<DramTarget*>(d.target);
    MutexLock lock(t->write_mu());
    if (t->building() == nullptr) {
      return invalid_argument_error(fmt::format("'{}' is already published", t->path()));
    }
    auto& data = t->building()->data;
    if (data.size() < d.offset + d.length) data.resize(d.offset + d.length);
    std::memcpy(data.data() + d.offset, d.mem, d.length);
    return ok_status();
  }

  std::shared_ptr<DramStorage> storage_;
};

}  // namespace

std::unique_ptr<Backend> make_dram_backend(const DramBackendOptions& options) {
  return std::make_unique<DramBackend>(storage_for(options.instance));
}

std::vector<ParamSpec> dram_backend_params() {
  return {{"instance", ParamType::kText}};
}

Result<std::unique_ptr<Backend>> create_dram_backend(const BackendParams& params) {
  DramBackendOptions o;
  if (auto it = params.find("instance"); it != params.end()) o.instance = it->second;
  return make_dram_backend(o);
}

}  // namespace kvtier
