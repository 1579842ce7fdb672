// The public Store methods once a store is open (opening it is store_open.cc). The facade's
// other parts live beside this file (see store_impl.h for the map); where pages lie is the
// layout's (layout/layout.h).
#include "kvtier/store/store.h"

#include <fmt/format.h>

#include <algorithm>

#include "store_impl.h"

namespace kvtier {

std::string_view direct_io_name(DirectIo mode) {
  switch (mode) {
    case DirectIo::kOff:
      return "off";
    case DirectIo::kAuto:
      return "auto";
    case DirectIo::kOn:
      return "on";
  }
  return "?";
}

Result<DirectIo> parse_direct_io(std::string_view text) {
  if (text == "off") return DirectIo::kOff;
  if (text == "auto") return DirectIo::kAuto;
  if (text == "on") return DirectIo::kOn;
  return invalid_argument_error(fmt::format("direct I/O mode '{}' (use off, auto or on)", text));
}

size_t BatchResult::ok_count() const {
  size_t n = 0;
  for (const Status& s : pages) n += s.ok() ? 1 : 0;
  return n;
}

size_t BatchResult::ok_prefix() const {
  size_t n = 0;
  while (n < pages.size() && pages[n].ok()) ++n;
  return n;
}

Store::Store(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() {
  if (!impl_) return;
  if (!impl_->owner.here()) {
    abandon(impl_);  // a forked child's copy: the threads to wait for are not here
    return;
  }
  if (!impl_->guard) {
    impl_->close();
    return;
  }
  // Submitted batches end here (each by its deadline: their callbacks are the caller's), and
  // no health line is written after the return. The rest (the guard's threads given the
  // deadline to end, the store's state released) runs on a thread that the caller waits for
  // until the deadline: on a location that hangs it finishes alone, holding the state.
  impl_->wait_for_submitted();
  impl_->guard->close_health();
  const std::chrono::milliseconds deadline = impl_->guard_deadline;
  std::function<bool()> rest = [impl = std::move(impl_)]() mutable {
    impl->close();
    impl.reset();
    return true;
  };
  (void)guard::run_alone(deadline, std::move(rest));
}

namespace {

// How a refusal in a forked child names the store (OwningProcess::check).
constexpr std::string_view kStoreName = "this kvtier Store";

}  // namespace

Result<Registration> Store::register_memory(void* addr, size_t length) {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  return impl_->agent.register_memory(addr, length);
}

Status Store::put(std::string_view key, std::span<const ConstBuffer> pieces) {
  BatchResult r = batch_put(std::span<const std::string_view>(&key, 1), pieces);
  if (!r.status.ok()) return r.status;
  return r.pages.front();
}

Status Store::put(std::string_view key, const void* data, size_t size) {
  const ConstBuffer piece{data, size};
  return put(key, std::span<const ConstBuffer>(&piece, 1));
}

Status Store::get(std::string_view key, std::span<const MutableBuffer> pieces) {
  BatchResult r = batch_get(std::span<const std::string_view>(&key, 1), pieces);
  if (!r.status.ok()) return r.status;
  return r.pages.front();
}

Status Store::get(std::string_view key, void* data, size_t size) {
  const MutableBuffer piece{data, size};
  return get(key, std::span<const MutableBuffer>(&piece, 1));
}

BatchResult Store::batch_put(std::span<const std::string_view> keys,
                             std::span<const ConstBuffer> pieces) {
  if (Status st = impl_->owner.check(kStoreName); !st.ok()) return BatchResult{std::move(st), {}};
  return impl_->put(keys, pieces);
}

BatchResult Store::batch_get(std::span<const std::string_view> keys,
                             std::span<const MutableBuffer> pieces) {
  if (Status st = impl_->owner.check(kStoreName); !st.ok()) return BatchResult{std::move(st), {}};
  return impl_->get(keys, pieces);
}

Result<bool> Store::exists(std::string_view key, ExistsCall call) {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  if (call == ExistsCall::kLookup) impl_->note_lookup(std::span<const std::string_view>(&key, 1));
  if (impl_->guard) return impl_->guard->exists(key);
  return impl_->exists_here(key);
}

size_t Store::batch_exists(std::span<const std::string_view> keys, ExistsCall call) {
  if (!impl_->owner.here()) return 0;
  BatchTimer timer(impl_->counters, impl_->counters.exists_latency);
  if (call == ExistsCall::kLookup) impl_->note_lookup(keys);
  return impl_->guard ? impl_->guard->batch_exists(keys) : impl_->batch_exists_here(keys);
}

std::vector<bool> Store::indexed(std::span<const std::string_view> keys, ExistsCall call) const {
  if (!impl_->owner.here()) return std::vector<bool>(keys.size(), false);
  if (call == ExistsCall::kLookup) impl_->note_lookup(keys);
  std::vector<bool> out(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!routing::validate_key(keys[i]).ok()) continue;
    for (size_t n = 0; n < impl_->names_of() && !out[i]; ++n) {
      out[i] = impl_->index.contains(impl_->route(keys[i], n).key_hash);
    }
  }
  return out;
}

void Store::watch_evictions(size_t max_pending) {
  if (!impl_->owner.here()) return;
  impl_->capacity.evictions().watch(max_pending);
}

Store::Evicted Store::take_evicted() {
  if (!impl_->owner.here()) return {};
  EvictionJournal::Taken taken = impl_->capacity.evictions().take();
  return Evicted{std::move(taken.keys), taken.dropped};
}

Result<bool> Store::Impl::exists_here(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  bump(counters.exists_queries);
  observe_generation();
  layout->catch_up();
  return stored_under_any_name(key);
}

Result<bool> Store::Impl::stored_under_any_name(std::string_view key) {
  for (size_t n = 0; n < names_of(); ++n) {
    const routing::Route r = route(key, n);
    if (index.contains(r.key_hash)) return true;
    KVTIER_ASSIGN_OR_RETURN(const bool found, layout->look_up(r));
    if (found) return true;
  }
  return false;
}

size_t Store::Impl::batch_exists_here(std::span<const std::string_view> keys) {
  observe_generation();
  layout->catch_up();
  size_t n = 0;
  for (;;) {
    // Indexed keys cost no system call; from the first one that is not, ask the layout.
    for (; n < keys.size(); ++n) {
      if (!routing::validate_key(keys[n]).ok()) {
        bump(counters.exists_queries, n + 1);
        return n;  // a bad key ends the prefix
      }
      if (!index.contains(router.key_hash(keys[n]))) break;  // the route's key_hash
    }
    n = layout->look_up_from(keys, n);
    // A sealed store's page may have an earlier key's name (a rotation since it was sealed).
    if (n == keys.size() || names_of() == 1 || !routing::validate_key(keys[n]).ok()) return n;
    Result<bool> earlier = stored_under_any_name(keys[n]);
    if (!earlier.ok() || !*earlier) return n;
    ++n;
  }
}

Status Store::remove(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  if (!impl_->guard) return impl_->remove_here(key);
  // The bases its names lie on: they must answer, and a late removal holds them.
  std::vector<size_t> bases;
  for (size_t n = 0; n < impl_->names_of(); ++n) {
    const size_t b = impl_->route(key, n).base;
    if (std::find(bases.begin(), bases.end(), b) == bases.end()) bases.push_back(b);
  }
  return impl_->maintain(std::move(bases), "a remove",
                         [impl = impl_, key = std::string(key)] { return impl->remove_here(key); });
}

Status Store::Impl::remove_here(std::string_view key) {
  // Under every name it may have (a sealed store's earlier keys' too): OK when it was under
  // any, else the first fault, else kNotFound.
  Status failed;
  bool removed = false;
  for (size_t n = 0; n < names_of(); ++n) {
    Status st = layout->remove(route(key, n));
    if (st.ok()) {
      removed = true;
      bump(counters.removes);
    } else if (failed.ok() ||
               (failed.code() == StatusCode::kNotFound && st.code() != StatusCode::kNotFound)) {
      failed = std::move(st);  // the first fault, else the first kNotFound
    }
  }
  return removed ? ok_status() : failed;
}

Status Store::clear() {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  if (!impl_->guard) return impl_->clear_here();
  std::vector<size_t> bases(impl_->router.base_count());
  for (size_t b = 0; b < bases.size(); ++b) bases[b] = b;
  return impl_->maintain(std::move(bases), "a clear",
                         [impl = impl_] { return impl->clear_here(); });
}

Status Store::Impl::clear_here() {
  Status result = layout->clear();
  // Every other store of the namespace drops its index on its next exists call.
  Status published = generation.publish();
  if (result.ok()) result = published;
  return result;
}

Status Store::Impl::maintain(std::vector<size_t> bases, std::string_view what,
                             std::function<Status()> body) {
  for (size_t b : bases) {
    if (!guard->healthy(b)) {
      return unavailable_error(
          fmt::format("location {} is not answering; {} not started", guard->base_name(b), what));
    }
  }
  auto result = std::make_shared<Status>();
  auto task = [result, body = std::move(body)] { *result = body(); };
  switch (guard->run_task(std::move(task), std::move(bases), what)) {
    case guard::Guard::TaskEnd::kDone:
      return *result;
    case guard::Guard::TaskEnd::kLate:
      return deadline_exceeded_error(fmt::format(
          "{} did not end within the deadline of {} ms: it goes on and ends once the location "
          "answers, and the store serves again after it",
          what, guard->deadline().count()));
    case guard::Guard::TaskEnd::kNotRun:
      break;
  }
  return deadline_exceeded_error(
      fmt::format("{} did not start within the deadline of {} ms (the store's threads for it are "
                  "held by a location that does not answer); nothing was done",
                  what, guard->deadline().count()));
}

Result<uint64_t> Store::Impl::ledger_used() {
  if (!guard) return capacity.used();
  auto used = std::make_shared<Result<uint64_t>>(uint64_t{0});
  auto task = [self = shared_from_this(), used] { *used = self->capacity.used(); };
  if (guard->run_task(std::move(task), {}, "a read of the capacity ledger") ==
      guard::Guard::TaskEnd::kDone) {
    return std::move(*used);
  }
  // The ledger lives on base 0.
  guard->mark_unhealthy(0, fmt::format("a read of its capacity ledger missed the deadline of {} ms",
                                       guard->deadline().count()));
  return deadline_exceeded_error(
      fmt::format("used_bytes unknown: the capacity ledger on {} did not answer within the "
                  "deadline of {} ms",
                  guard->base_name(0), guard->deadline().count()));
}

bool Store::wait_health(bool answering, std::chrono::nanoseconds timeout) {
  if (!impl_->owner.here()) return false;
  if (!impl_->guard) return answering;
  return impl_->guard->wait_health(answering, timeout);
}

const NamespaceSpec& Store::namespace_spec() const {
  return impl_->config.ns;
}
Hash128 Store::namespace_id() const {
  return impl_->ns_id;
}
StoreLayout Store::layout() const {
  return impl_->layout->kind();
}
const BackendSelection& Store::backend_selection() const {
  return impl_->agent.selection();
}

std::string Store::backend_description() const {
  return impl_->agent.backend_description();
}

std::vector<std::string> Store::namespace_dirs() const {
  std::vector<std::string> out;
  for (size_t b = 0; b < impl_->router.base_count(); ++b) {
    out.push_back(impl_->router.namespace_dir(b));
  }
  return out;
}

}  // namespace kvtier
