// The transfer agent: register memory once, open storage targets through owning handles,
// describe transfers as descriptor lists, run them as asynchronous requests.
//
//   Agent agent = *Agent::create(config);                  // picks a backend (or `auto`)
//   Registration reg = *agent.register_memory(pool, bytes);  // once, for the whole pool
//   Target t = *agent.open_target({path, TargetMode::kRead});
//   Transfer x = *agent.make_request(TransferOp::kRead, mem_descs, storage_descs);
//   x.post(); x.wait(); for (const Status& s : x.results()) ...
//
// Ownership, by construction:
// - Registration, Target and Transfer are move-only handles. Destroying one releases what it
//   owns: memory is deregistered, descriptors closed, unpublished objects discarded.
// - A Transfer keeps the targets and registrations it uses alive while it exists, so nothing
//   it touches can disappear under it. Destroying a Registration blocks until every posted
//   transfer using its memory has finished; after that no I/O touches the memory. A prepared
//   transfer whose registration is gone fails at post().
// - Destroying a Transfer in flight cancels it and waits for the backend to let go.
// - The Agent's backend lives until the last handle from the agent is gone, so handles may
//   outlive the Agent object itself.
// - The agent and its handles belong to the process that created it: in another one (a
//   forked child) every call is refused with kInvalidArgument, and destroying them releases
//   nothing, since the backend's threads, rings and registrations are the parent's
//   (core/process.h).
//
// Thread-safety: Agent is safe for concurrent use by multiple threads. A single Registration,
// Target or Transfer needs external synchronization, except Transfer::cancel(), state() and
// done(), which may be called from any thread while another waits.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/transfer/backend.h"

namespace kvtier {

namespace detail {
struct AgentCore;
struct RegionState;
struct TargetState;
struct TransferImpl;
}  // namespace detail

struct MemoryRegion {
  void* addr = nullptr;
  size_t length = 0;
};

struct AgentConfig {
  // A backend name from the registry, or "auto": the registry's backends of `storage_class`
  // in priority order, falling back to the next when one cannot start.
  std::string backend = "auto";
  StorageClass storage_class = StorageClass::kFile;
  BackendParams params;
  // Where backend names are looked up. Required.
  const BackendRegistry* registry = nullptr;
  // Applied to the selected backend (fault injection, metrics). Optional.
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> decorate;
};

// What `auto` (or an explicit name) chose, and why the others were passed over.
struct BackendSelection {
  std::string chosen;
  bool automatic = false;
  std::vector<std::string> rejected;  // "uring: io_uring_setup: Operation not permitted"
  std::string summary() const;        // "posix (auto; uring: ...)"
};

class Registration {
 public:
  Registration() noexcept;
  Registration(Registration&&) noexcept;
  Registration& operator=(Registration&&) noexcept;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  // Deregisters (see the file comment for what it waits for).
  ~Registration();

  bool valid() const noexcept { return !regions_.empty(); }
  size_t region_count() const noexcept { return regions_.size(); }
  void reset() noexcept;

 private:
  friend class Agent;
  std::shared_ptr<detail::AgentCore> core_;
  std::vector<std::shared_ptr<detail::RegionState>> regions_;
};

// An opened storage target (a file by path, an object by key).
class Target {
 public:
  Target() noexcept;
  Target(Target&&) noexcept;
  Target& operator=(Target&&) noexcept;
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;
  ~Target();

  bool valid() const noexcept { return state_ != nullptr; }
  // REQUIRES: valid().
  const std::string& path() const;
  TargetMode mode() const;
  uint64_t size() const;
  ObjectIdentity identity() const;

  // kCreate targets: make the written object visible at path(). kInvalidArgument while a
  // transfer writing it is in flight, or when already published.
  Status publish(const PublishOptions& options = {});
  // kAppend targets: makes every byte written through the target so far durable, with the
  // object's size (an fdatasync on FILE backends); returns once it is on stable storage.
  // kInvalidArgument for other modes and while a transfer writing it is in flight.
  // Appends stay visible to readers before it; sync() only adds durability.
  Status sync() const;
  // Releases the target now (an unpublished kCreate target leaves nothing behind).
  void reset() noexcept;

 private:
  friend class Agent;
  std::shared_ptr<detail::AgentCore> core_;
  std::shared_ptr<detail::TargetState> state_;
};

// Memory side of a descriptor: must lie inside one live registration.
struct MemDesc {
  void* addr = nullptr;
  uint64_t length = 0;
};

// Storage side of a descriptor.
struct StorageDesc {
  const Target* target = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
};

enum class TransferState : uint8_t { kPrepared, kInFlight, kDone };

// Notifications of a posted transfer. They run on the thread that completed the work (a
// backend thread, or the poster's own when a backend completes inline), so they must be
// quick, must not block on other transfers, and must not post, wait on, cancel or destroy the
// transfer that calls them.
struct TransferCallbacks {
  // After descriptor `index` completed with `status` (also in results() afterwards). Calls
  // for different descriptors may run concurrently on different threads.
  std::function<void(size_t index, const Status& status)> on_descriptor;
  // Once, after the last descriptor's on_descriptor and before the transfer reports done:
  // wait() returns only after it has returned.
  std::function<void()> on_done;
};

class Transfer {
 public:
  Transfer() noexcept;
  Transfer(Transfer&&) noexcept;
  Transfer& operator=(Transfer&&) noexcept;
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  // Cancels and waits when in flight.
  ~Transfer();

  bool valid() const noexcept { return impl_ != nullptr; }

  // Starts the transfer. Allowed when prepared or done (a done transfer runs again with fresh
  // results). kInvalidArgument when in flight or when a registration it uses was released.
  Status post(TransferCallbacks callbacks = {});
  // Non-blocking.
  TransferState state() const;
  bool done() const { return state() == TransferState::kDone; }
  // Blocks (no polling) until done or `timeout` passes: OK when done, kDeadlineExceeded otherwise.
  Status wait(std::chrono::nanoseconds timeout);
  void wait();
  // Descriptors not yet started complete with kCancelled; returns at once (wait() for the
  // end). Harmless when not in flight.
  void cancel() noexcept;

  // Per-descriptor outcomes, in descriptor order. REQUIRES: done().
  std::span<const Status> results() const;
  // The first non-OK result, or OK. REQUIRES: done().
  Status first_error() const;
  size_t size() const;

 private:
  friend class Agent;
  // Cancels and waits for a transfer in flight (in a forked child: abandons it).
  void release() noexcept;
  std::unique_ptr<detail::TransferImpl> impl_;
};

class Agent {
 public:
  static Result<Agent> create(const AgentConfig& config);

  Agent(Agent&&) noexcept;
  Agent& operator=(Agent&&) noexcept;
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  ~Agent();

  const BackendSelection& selection() const;
  std::string_view backend_name() const;
  // The backend and its configuration ("posix: 4 threads").
  std::string backend_description() const;
  StorageClass storage_class() const;

  // Registers regions that must not overlap each other or any live registration of this
  // agent. kInvalidArgument for null/empty/overlapping regions.
  Result<Registration> register_memory(std::span<const MemoryRegion> regions);
  Result<Registration> register_memory(void* addr, size_t length);
  // OK when [addr, addr+length) lies inside one live registration; otherwise
  // kInvalidArgument naming the range.
  Status check_registered(const void* addr, size_t length) const;
  size_t registered_region_count() const;

  Result<Target> open_target(const TargetSpec& spec);
  // One result per spec, in order (the backend may open them in parallel).
  std::vector<Result<Target>> open_targets(std::span<const TargetSpec> specs);

  // Builds a request. Validates every descriptor: equal list lengths, non-zero lengths that
  // match pairwise, memory inside live registrations, targets valid, reads within the
  // object, writes only to kCreate targets and to kAppend targets at or past their size at
  // open (never over bytes that were already there), direct targets aligned. kInvalidArgument names
  // the first bad descriptor.
  Result<Transfer> make_request(TransferOp op, std::span<const MemDesc> mem,
                                std::span<const StorageDesc> storage);

  // Object management, forwarded to the backend.
  Status make_dirs(std::string_view path);
  Status make_dir(std::string_view path);  // one level: the parent must exist
  Result<ObjectInfo> stat(std::string_view path);
  std::vector<Result<ObjectInfo>> stat_many(std::span<const std::string> paths, bool until_missing);
  Status remove(std::string_view path, const ObjectIdentity* if_identity = nullptr);
  // One status per path (object stores delete in bulk).
  std::vector<Status> remove_many(std::span<const std::string> paths);
  Status list(std::string_view dir, const ListOptions& options,
              const std::function<Status(const ObjectInfo&)>& fn);
  Result<size_t> sweep_temporaries(std::string_view temp_dir, uint64_t min_age_s);
  Result<size_t> count_temporaries(std::string_view temp_dir);
  Result<DirectIoAlignment> probe_direct_io(std::string_view dir);

 private:
  explicit Agent(std::shared_ptr<detail::AgentCore> core);
  std::shared_ptr<detail::AgentCore> core_;
};

}  // namespace kvtier
