// Deadlines on FILE locations that can hang (docs/architecture.md, "Locations that hang").
//
// A system call on a network or FUSE filesystem can block for as long as its server is gone,
// and no signal ends it (ceph-fuse, NFS `hard`, Lustre). The guard keeps such a call from
// holding the caller:
//
// - A batch's pages on an isolated base run on that base's own threads, through staging the
//   store owns: a put's pages are copied in before the call is handed over, a get's pages are
//   copied out by the caller, and only for jobs that finished in time. The caller waits until
//   its deadline; pages not done by then are DEADLINE_EXCEEDED. Nothing a late thread does
//   afterwards touches the caller's memory, and a late put publishes nothing: the publish step
//   checks that its call is still live (call_abandoned()) and abandons the temporary (files)
//   or leaves the record without a summary entry (segments).
// - A base whose call missed a deadline is unhealthy: its pages fail at once (UNAVAILABLE)
//   and exists calls stop at its keys, while one probe thread creates and removes a file in
//   its temporaries directory every probe interval; the base serves again once a probe
//   answers. A probe that itself stays in the kernel longer than the deadline keeps the base
//   unhealthy. Each change of state is reported once (StoreConfig::on_health_change).
// - exists/batch_exists run on a store-wide lane with the same deadline; when one misses it,
//   every isolated base is probed, and those whose probe does not answer become unhealthy.
// - The store's other calls that touch storage (clear, remove, the ledger's read in stats())
//   run as tasks on a store-wide maintenance lane with the same deadline (run_task). A task
//   that misses it runs on alone to its end, and the bases it names do not serve until then:
//   a clear or remove is finished, never left half done, before the store serves again.
// - Opening and closing a store, when a location may hang, run on a thread of their own that
//   the caller waits for until the deadline (run_alone).
//
// Bounds: at most StoreConfig::guard_threads threads per isolated base and for the exists
// lane, plus one probe thread per base; threads are started on demand and never more. A thread
// blocked in the kernel holds its job's staging (at most kJobBytes) and the store's state until
// it returns; closing the store waits for busy threads at most the deadline, then leaves them
// to finish alone (they hold what they use).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "guard/isolation.h"
#include "guard/threads.h"
#include "kvtier/core/mutex.h"
#include "kvtier/core/status.h"
#include "kvtier/store/store.h"

namespace kvtier::guard {

// The most staging bytes and pages one job holds: larger partitions run as several jobs, side
// by side on the base's threads.
inline constexpr uint64_t kJobBytes = uint64_t{16} << 20;
inline constexpr size_t kJobPages = 128;

// True on a guard thread whose call's caller has returned (its deadline passed): the publish
// steps check it last, so a late write is never published.
bool call_abandoned() noexcept;
// The calling thread's guarded call (null outside one), for the threads it hands work to
// while it waits for them: call_abandoned(call) there answers as call_abandoned() does here.
const std::atomic<bool>* current_call() noexcept;
bool call_abandoned(const std::atomic<bool>* call) noexcept;

// Marks the calling thread as running `call` (null: none), as call_abandoned() answers.
void enter_call(const std::atomic<bool>* call) noexcept;

// Runs `body` on a guard thread of its own and waits for it at most `deadline`: what it
// returned when it ended by then. Otherwise (nullopt) the caller goes on and `body` runs on
// alone, owning what it captured (nothing of the caller's), call_abandoned() true on its
// thread; what it returns then is destroyed there.
template <typename T>
std::optional<T> run_alone(std::chrono::milliseconds deadline, std::function<T()> body) {
  struct Alone {
    Mutex mu;
    std::condition_variable cv;
    std::optional<T> out KVTIER_GUARDED_BY(mu);
    std::atomic<bool> abandoned{false};
  };
  auto state = std::make_shared<Alone>();
  spawn([state, body = std::move(body)]() mutable {
    enter_call(&state->abandoned);
    std::optional<T> out(body());
    body = nullptr;
    enter_call(nullptr);
    {
      MutexLock lock(state->mu);
      // Handed over only while the caller waits; else it goes here, on this thread.
      if (!state->abandoned.load(std::memory_order_relaxed)) std::swap(state->out, out);
    }
    state->cv.notify_all();
  });
  MutexLock lock(state->mu);
  if (!lock.wait_for(state->cv, deadline,
                     [&]() KVTIER_REQUIRES(state->mu) { return state->out.has_value(); })) {
    state->abandoned.store(true, std::memory_order_release);
    return std::nullopt;
  }
  return std::move(state->out);
}

// Called with a page's index in its batch as the page checks out (the read path's hook).
using PageDone = std::function<void(size_t)>;

struct GuardConfig {
  std::chrono::milliseconds deadline{10000};
  std::chrono::milliseconds probe_interval{1000};
  size_t threads_per_lane = 4;
  std::vector<Isolation> isolation;     // per base
  std::vector<std::string> probe_dirs;  // per base: where the probe creates its file
  std::vector<std::string> base_names;  // per base, for messages
  std::function<void(std::string_view)> on_health_change;
};

struct Health;  // health.h

class Guard {
 public:
  // What the guard runs on its threads: the store's own calls, on the calling thread.
  struct Ops {
    std::function<BatchResult(std::span<const std::string_view>, std::span<const ConstBuffer>)> put;
    std::function<BatchResult(std::span<const std::string_view>, std::span<const MutableBuffer>,
                              const PageDone*)>
        get;
    std::function<size_t(std::span<const std::string_view>)> batch_exists;
    std::function<Result<bool>(std::string_view)> exists;
    // Checks a page's key and memory (the caller's, before any staging): OK with its payload.
    std::function<Status(std::string_view, std::span<const ConstBuffer>, uint64_t*)> validate;
    // A key's hash (routing::Router::key_hash), whether the index holds it, and its base.
    std::function<Hash128(std::string_view)> key_hash;
    std::function<bool(const Hash128&)> indexed;
    std::function<size_t(const Hash128&)> base_of;
    // Registered staging of at least `bytes` (4096-aligned), or empty.
    std::function<std::shared_ptr<void>(uint64_t bytes, std::byte** data)> staging;
    // Counts pages the guard failed itself (deadline, unhealthy, no staging).
    std::function<void(bool put, const Status&)> count_failure;
  };

  // `owner` (the store's state) is held by every job while it runs.
  Guard(GuardConfig config, Ops ops, std::weak_ptr<void> owner);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  bool isolated(size_t base) const { return config_.isolation[base].on; }
  bool any_isolated() const;
  // Whether base `b` serves now (always for bases that are not isolated); reports a change.
  bool healthy(size_t b);

  BatchResult put(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces,
                  size_t per_page);
  BatchResult get(std::span<const std::string_view> keys, std::span<const MutableBuffer> pieces,
                  size_t per_page);
  size_t batch_exists(std::span<const std::string_view> keys);
  // One key, with the reason when it cannot say: UNAVAILABLE (its base is not answering) or
  // DEADLINE_EXCEEDED (not answered in time and not in the index).
  Result<bool> exists(std::string_view key);

  // How a task of run_task() ended.
  enum class TaskEnd : uint8_t {
    kDone,    // by the deadline
    kLate,    // not by the deadline: it runs on alone, and the bases it owes do not serve
              // until it ends (reported as not answering, with `why`)
    kNotRun,  // not started by the deadline (the lane's threads are stuck): it never will be
  };
  // Runs `task` on the maintenance lane and waits for it until the deadline. A late task owes
  // `owes` (bases); `why` says what it is ("a clear"), for the health line.
  TaskEnd run_task(std::function<void()> task, std::vector<size_t> owes, std::string_view why);
  // Marks base `b` as not answering for `reason` and probes it until it answers.
  void mark_unhealthy(size_t b, std::string reason);
  // Stops every probe and health line: none is reported after it returns (closing).
  void close_health();
  std::chrono::milliseconds deadline() const { return config_.deadline; }
  const std::string& base_name(size_t b) const { return config_.base_names[b]; }
  size_t bases() const { return config_.isolation.size(); }

  // Waits (no polling) until every isolated base answers and no thread is busy for a call
  // that gave up (`answering`), or until a base does not answer (!answering); false when
  // `timeout` passed first.
  bool wait_health(bool answering, std::chrono::nanoseconds timeout);

  // Stops taking work and waits for busy threads at most `bound`; those still in the kernel
  // then finish alone. No health change is reported after it returns. Returns how many
  // threads were left.
  size_t shut_down(std::chrono::milliseconds bound);

  struct Snapshot {
    uint64_t deadline_misses = 0;
    uint64_t unhealthy_refusals = 0;
    uint64_t locations_unhealthy = 0;
    uint64_t threads_stuck = 0;
    std::string health;
  };
  Snapshot snapshot();

 private:
  struct Lane;
  struct Job;
  struct Call;

  template <typename Buffer>
  BatchResult run_pages(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                        size_t per_page);
  void submit(const std::shared_ptr<Lane>& lane, const std::shared_ptr<Job>& job);
  // `job`, its call's one job, on `lane`, waited for until the deadline: true when it ended
  // by then. unqueue(): takes it off the lane's queue if no thread started it (true then).
  bool run_one(const std::shared_ptr<Job>& job, size_t lane);
  bool unqueue(const std::shared_ptr<Job>& job, size_t lane);
  // An exists job for `keys` on the exists lane, and running it: true when it ended by the
  // deadline; false when it did not (abandoned, counted, every isolated base probed).
  std::shared_ptr<Job> exists_job(std::span<const std::string_view> keys);
  bool run_exists(const std::shared_ptr<Job>& job);
  void start_probe(size_t b);
  // Threads busy for a call that gave up.
  size_t threads_stuck();

  GuardConfig config_;
  Ops ops_;
  std::weak_ptr<void> owner_;
  // Per base, then the exists lane, then the maintenance lane.
  std::vector<std::shared_ptr<Lane>> lanes_;
  size_t exists_lane() const { return config_.isolation.size(); }
  size_t task_lane() const { return config_.isolation.size() + 1; }
  std::vector<std::shared_ptr<Health>> health_;
  std::atomic<uint64_t> deadline_misses_{0};
  std::atomic<uint64_t> unhealthy_refusals_{0};
};

}  // namespace kvtier::guard
