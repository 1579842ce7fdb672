#include "guard/guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <type_traits>

#include "guard/health.h"
#include "guard/jobs.h"
#include "kvtier/core/aligned_buffer.h"
#include "kvtier/core/checksum.h"
#include "kvtier/core/clock.h"
#include "kvtier/core/mutex.h"
#include "naming/routing.h"

namespace kvtier::guard {
namespace {

thread_local const std::atomic<bool>* t_abandoned = nullptr;

}  // namespace

bool call_abandoned() noexcept {
  return call_abandoned(t_abandoned);
}

const std::atomic<bool>* current_call() noexcept {
  return t_abandoned;
}

bool call_abandoned(const std::atomic<bool>* call) noexcept {
  return call != nullptr && call->load(std::memory_order_acquire);
}

void enter_call(const std::atomic<bool>* call) noexcept {
  t_abandoned = call;
}

// ---- Guard ----

Guard::Guard(GuardConfig config, Ops ops, std::weak_ptr<void> owner)
    : config_(std::move(config)), ops_(std::move(ops)), owner_(std::move(owner)) {
  const size_t bases = config_.isolation.size();
  for (size_t b = 0; b < bases + 2; ++b) {
    lanes_.push_back(std::make_shared<Lane>(std::max<size_t>(1, config_.threads_per_lane)));
  }
  for (size_t b = 0; b < bases; ++b) {
    auto h = std::make_shared<Health>();
    h->name = config_.base_names[b];
    h->probe_dir = config_.probe_dirs[b];
    h->deadline_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(config_.deadline).count());
    h->interval = config_.probe_interval;
    h->log = config_.on_health_change;
    health_.push_back(std::move(h));
  }
}

Guard::~Guard() {
  // Threads still busy end on their own; they hold their lane and what their job uses.
  close_health();
  for (const auto& lane : lanes_) {
    MutexLock lock(lane->mu);
    lane->stop = true;
    lane->cv.notify_all();
  }
}

void Guard::close_health() {
  for (const auto& h : health_) h->shut();
}

bool Guard::any_isolated() const {
  return std::any_of(config_.isolation.begin(), config_.isolation.end(),
                     [](const Isolation& i) { return i.on; });
}

bool Guard::healthy(size_t b) {
  if (!isolated(b)) return true;
  Health& h = *health_[b];
  const bool serving = h.serving();
  if (serving != h.reported_serving.load(std::memory_order_relaxed)) h.report();
  return serving;
}

void Guard::start_probe(size_t b) {
  const std::shared_ptr<Health>& h = health_[b];
  {
    MutexLock lock(h->mu);
    if (h->probing || h->stop) return;
    h->probing = true;
  }
  spawn([h] { Health::probe_loop(h); });
}

void Guard::mark_unhealthy(size_t b, std::string reason) {
  Health& h = *health_[b];
  {
    MutexLock lock(h.mu);
    h.reason = std::move(reason);
  }
  h.failed.store(true, std::memory_order_release);
  h.report();
  start_probe(b);
}

void Guard::submit(const std::shared_ptr<Lane>& lane, const std::shared_ptr<Job>& job) {
  MutexLock lock(lane->mu);
  lane->queue.push_back(job);
  // A thread more while the idle ones are fewer than the jobs waiting, up to the bound.
  const size_t idle = lane->threads - lane->running.size();
  if (idle < lane->queue.size() && lane->threads < lane->max_threads) {
    ++lane->threads;
    spawn([lane] { Lane::loop(lane); });
  }
  lane->cv.notify_one();
}

template <typename Buffer>
BatchResult Guard::run_pages(std::span<const std::string_view> keys, std::span<const Buffer> pieces,
                             size_t k) {
  constexpr bool kPut = std::is_same_v<Buffer, ConstBuffer>;
  const auto deadline = std::chrono::steady_clock::now() + config_.deadline;
  const size_t n = keys.size();
  BatchResult out;
  out.pages.resize(n);
  auto fail = [&](size_t i, Status st) {
    ops_.count_failure(kPut, st);
    out.pages[i] = std::move(st);
  };

  // Route the pages: caller errors are answered here, pages of unhealthy bases fail at
  // once, the rest go to their base's lane.
  std::vector<std::vector<size_t>> by_base(config_.isolation.size());
  std::vector<uint64_t> payload(n, 0);
  std::vector<ConstBuffer> view(k);
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < k; ++p) view[p] = {pieces[i * k + p].data, pieces[i * k + p].size};
    Status st = ops_.validate(keys[i], view, &payload[i]);
    if (!st.ok()) {
      out.pages[i] = std::move(st);  // counted by validate
      continue;
    }
    const size_t b = ops_.base_of(ops_.key_hash(keys[i]));
    if (!healthy(b)) {
      unhealthy_refusals_.fetch_add(1, std::memory_order_relaxed);
      fail(i, unavailable_error(fmt::format("location {} is not answering; page not {}",
                                            config_.base_names[b], kPut ? "stored" : "read")));
    } else {
      by_base[b].push_back(i);
    }
  }

  // Jobs of at most kJobPages pages and kJobBytes of staging (pages 4096-aligned in it), each
  // handed to its lane as soon as it is filled: a put's copy into staging overlaps the writes
  // of the jobs before it.
  auto call = std::make_shared<Call>();
  std::shared_ptr<void> owner = owner_.lock();
  std::vector<std::shared_ptr<Job>> jobs;
  for (size_t b = 0; b < by_base.size(); ++b) {
    const std::vector<size_t>& pages = by_base[b];
    for (size_t first = 0; first < pages.size();) {
      size_t last = first;
      uint64_t bytes = 0;
      while (last < pages.size() && last - first < kJobPages &&
             (last == first || bytes + align_up(payload[pages[last]], 4096) <= kJobBytes)) {
        bytes += align_up(payload[pages[last]], 4096);
        ++last;
      }
      std::byte* data = nullptr;
      std::shared_ptr<void> staging = ops_.staging(bytes, &data);
      if (!staging) {
        for (size_t j = first; j < last; ++j) {
          fail(pages[j], resource_exhausted_error(fmt::format(
                             "no staging memory for {} B (StoreConfig::staging_bytes); page not {}",
                             bytes, kPut ? "stored" : "read")));
        }
        first = last;
        continue;
      }
      auto job = std::make_shared<Job>();
      job->owner = owner;
      job->staging = std::move(staging);
      job->call = call;
      job->ops = &ops_;
      job->base = b;
      job->kind = kPut ? Job::Kind::kPut : Job::Kind::kGet;
      uint64_t at = 0;
      for (size_t j = first; j < last; ++j) {
        const size_t i = pages[j];
        job->pages.push_back(i);
        job->keys.emplace_back(keys[i]);
        uint64_t off = at;
        for (size_t p = 0; p < k; ++p) {
          const Buffer& mine = pieces[i * k + p];
          if constexpr (kPut) {
            job->from.push_back(mine);
            job->put_pieces.push_back({data + off, mine.size});
          } else {
            job->to.push_back(mine);
            job->get_pieces.push_back({data + off, mine.size});
          }
          off += mine.size;
        }
        at += align_up(payload[i], 4096);
      }
      job->views.assign(job->keys.begin(), job->keys.end());
      {
        MutexLock lock(call->mu);
        ++call->pending;
      }
      submit(lanes_[b], job);
      jobs.push_back(std::move(job));
      first = last;
    }
  }

  // Each job in turn until the deadline; jobs not done by then are abandoned: once
  // `abandoned` is set (with `live` held exclusively: no copy is running) no job copies to or
  // from the caller's memory or publishes a page.
  std::vector<std::shared_ptr<Job>> late;
  for (const auto& job : jobs) {
    {
      MutexLock lock(call->mu);
      if (late.empty()) {
        const auto left = deadline - std::chrono::steady_clock::now();
        lock.wait_for(call->cv, std::max(left, decltype(left)::zero()),
                      [&]() KVTIER_REQUIRES(call->mu) { return job->done; });
      }
      if (!job->done) {
        late.push_back(job);
        continue;
      }
    }
    const BatchResult& r = job->result;
    for (size_t j = 0; j < job->pages.size(); ++j) {
      out.pages[job->pages[j]] = !r.status.ok()       ? r.status
                                 : j < r.pages.size() ? r.pages[j]
                                                      : internal_error("page not run");
    }
    // Done with its staging: back to the pool now, for the next call (the job's thread may
    // still hold the job a moment).
    job->staging.reset();
  }
  if (!late.empty()) {
    WriterLock lock(call->live);
    call->abandoned.store(true, std::memory_order_release);
  }
  std::vector<bool> missed(config_.isolation.size(), false);
  for (const auto& job : late) {
    {
      // Not started: it never will be.
      Lane& lane = *lanes_[job->base];
      MutexLock lock(lane.mu);
      if (!job->started) std::erase(lane.queue, job);
    }
    missed[job->base] = true;
    deadline_misses_.fetch_add(job->pages.size(), std::memory_order_relaxed);
    for (size_t i : job->pages) {
      fail(i,
           deadline_exceeded_error(fmt::format(
               "location {} did not answer within the deadline of {} ms; page not {}",
               config_.base_names[job->base], config_.deadline.count(), kPut ? "stored" : "read")));
    }
  }
  for (size_t b = 0; b < missed.size(); ++b) {
    if (missed[b]) {
      mark_unhealthy(b,
                     fmt::format("a call missed its deadline of {} ms", config_.deadline.count()));
    }
  }
  return out;
}

BatchResult Guard::put(std::span<const std::string_view> keys, std::span<const ConstBuffer> pieces,
                       size_t per_page) {
  return run_pages(keys, pieces, per_page);
}

BatchResult Guard::get(std::span<const std::string_view> keys,
                       std::span<const MutableBuffer> pieces, size_t per_page) {
  return run_pages(keys, pieces, per_page);
}

size_t Guard::batch_exists(std::span<const std::string_view> keys) {
  // The prefix ends at a key of a base that is not answering.
  size_t m = 0;
  for (; m < keys.size(); ++m) {
    if (!routing::validate_key(keys[m]).ok()) break;
    const size_t b = ops_.base_of(ops_.key_hash(keys[m]));
    if (!healthy(b)) {
      unhealthy_refusals_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  const auto prefix = keys.first(m);
  auto job = exists_job(prefix);
  if (run_exists(job)) return job->exists_found;
  // What the index knows, without storage.
  size_t n = 0;
  while (n < m && ops_.indexed(ops_.key_hash(prefix[n]))) ++n;
  return n;
}

Result<bool> Guard::exists(std::string_view key) {
  const size_t b = ops_.base_of(ops_.key_hash(key));
  if (!healthy(b)) {
    unhealthy_refusals_.fetch_add(1, std::memory_order_relaxed);
    return unavailable_error(fmt::format(
        "location {} is not answering; its pages' presence is unknown", config_.base_names[b]));
  }
  auto job = exists_job({&key, 1});
  job->exists_one.emplace(false);
  if (run_exists(job)) return std::move(*job->exists_one);
  if (ops_.indexed(ops_.key_hash(key))) return true;
  return deadline_exceeded_error(
      fmt::format("location {} did not answer within the deadline of {} ms", config_.base_names[b],
                  config_.deadline.count()));
}

std::shared_ptr<Guard::Job> Guard::exists_job(std::span<const std::string_view> keys) {
  auto job = std::make_shared<Job>();
  job->owner = owner_.lock();
  job->call = std::make_shared<Call>();
  job->ops = &ops_;
  job->base = exists_lane();
  job->kind = Job::Kind::kExists;
  job->keys.assign(keys.begin(), keys.end());
  job->views.assign(job->keys.begin(), job->keys.end());
  return job;
}

bool Guard::run_one(const std::shared_ptr<Job>& job, size_t lane) {
  Call& call = *job->call;
  {
    MutexLock lock(call.mu);
    call.pending = 1;
  }
  submit(lanes_[lane], job);
  MutexLock lock(call.mu);
  return lock.wait_for(call.cv, config_.deadline,
                       [&]() KVTIER_REQUIRES(call.mu) { return call.pending == 0; });
}

bool Guard::unqueue(const std::shared_ptr<Job>& job, size_t lane) {
  Lane& l = *lanes_[lane];
  MutexLock lock(l.mu);
  if (job->started) return false;
  std::erase(l.queue, job);
  return true;
}

bool Guard::run_exists(const std::shared_ptr<Job>& job) {
  if (run_one(job, exists_lane())) return true;
  job->call->abandoned.store(true, std::memory_order_release);
  (void)unqueue(job, exists_lane());
  deadline_misses_.fetch_add(1, std::memory_order_relaxed);
  // Which base held it up is unknown: each isolated base is probed, and one whose probe does
  // not answer within the deadline stops serving.
  for (size_t b = 0; b < config_.isolation.size(); ++b) {
    if (isolated(b)) start_probe(b);
  }
  return false;
}

Guard::TaskEnd Guard::run_task(std::function<void()> task, std::vector<size_t> owes,
                               std::string_view why) {
  auto job = std::make_shared<Job>();
  job->owner = owner_.lock();
  job->call = std::make_shared<Call>();
  job->ops = &ops_;
  job->base = task_lane();
  job->kind = Job::Kind::kTask;
  job->task = std::move(task);
  Call& call = *job->call;
  if (run_one(job, task_lane())) return TaskEnd::kDone;
  if (unqueue(job, task_lane())) {
    call.abandoned.store(true, std::memory_order_release);
    deadline_misses_.fetch_add(1, std::memory_order_relaxed);
    return TaskEnd::kNotRun;
  }
  std::vector<std::shared_ptr<Health>> owing;
  {
    MutexLock lock(call.mu);
    call.abandoned.store(true, std::memory_order_release);
    if (call.pending == 0) return TaskEnd::kDone;  // it ended just now
    for (size_t b : owes) {
      if (!isolated(b)) continue;
      health_[b]->owed.fetch_add(1, std::memory_order_acq_rel);
      owing.push_back(health_[b]);
    }
    job->owing = owing;
  }
  deadline_misses_.fetch_add(1, std::memory_order_relaxed);
  const std::string reason = fmt::format(
      "{} missed its deadline of {} ms and finishes once the "
      "location answers",
      why, config_.deadline.count());
  for (const auto& h : owing) {
    {
      MutexLock lock(h->mu);
      if (!h->failed.load()) h->reason = reason;
    }
    h->report();
  }
  return TaskEnd::kLate;
}

size_t Guard::shut_down(std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  close_health();
  size_t left = 0;
  for (const auto& lane : lanes_) {
    MutexLock lock(lane->mu);
    lane->stop = true;
    lane->cv.notify_all();
    const auto rest = until - std::chrono::steady_clock::now();
    lock.wait_for(lane->exited, std::max(rest, decltype(rest)::zero()),
                  [&]() KVTIER_REQUIRES(lane->mu) { return lane->threads == 0; });
    left += lane->threads;
  }
  return left;
}

bool Guard::wait_health(bool answering, std::chrono::nanoseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(signal().mu);
  for (;;) {
    // Looked at without reporting (a report takes signal().mu).
    size_t unhealthy = 0;
    auto wake = until;
    for (size_t b = 0; b < health_.size(); ++b) {
      const Health& h = *health_[b];
      if (!isolated(b)) continue;
      if (!h.serving()) ++unhealthy;
      // A probe in the kernel stops serving once it has outlasted the deadline: a change no
      // one signals, so the wait ends by then to look again.
      if (const uint64_t since = h.probe_since_ns.load(); since != 0 && h.serving()) {
        const auto left =
            static_cast<int64_t>(since + h.deadline_ns) - static_cast<int64_t>(now_ns());
        wake = std::min(wake, std::chrono::steady_clock::now() +
                                  std::chrono::nanoseconds(std::max<int64_t>(left, 0) + 1));
      }
    }
    if (answering ? unhealthy == 0 && threads_stuck() == 0 : unhealthy > 0) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return false;
    lock.wait_for(signal().cv, wake - now);
  }
}

size_t Guard::threads_stuck() {
  size_t n = 0;
  for (const auto& lane : lanes_) {
    MutexLock lock(lane->mu);
    for (const Job* job : lane->running) {
      if (job->call->abandoned.load(std::memory_order_relaxed)) ++n;
    }
  }
  return n;
}

Guard::Snapshot Guard::snapshot() {
  Snapshot s;
  s.deadline_misses = deadline_misses_.load(std::memory_order_relaxed);
  s.unhealthy_refusals = unhealthy_refusals_.load(std::memory_order_relaxed);
  s.threads_stuck = threads_stuck();
  std::string health;
  for (size_t b = 0; b < config_.isolation.size(); ++b) {
    if (!isolated(b) || healthy(b)) continue;
    ++s.locations_unhealthy;
    Health& h = *health_[b];
    MutexLock lock(h.mu);
    health += fmt::format("{}{}: not answering for {} ({})", health.empty() ? "" : "; ", h.name,
                          seconds(now_ns() - h.since_ns), h.reason);
  }
  s.health = health.empty() ? "answering" : std::move(health);
  return s;
}

}  // namespace kvtier::guard
