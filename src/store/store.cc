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
  impl_->close();
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
  // Under every name it may have (a sealed store's earlier keys' too): OK when it was under
  // any, else the first fault, else kNotFound.
  Status failed;
  bool removed = false;
  for (size_t n = 0; n < impl_->names_of(); ++n) {
    Status st = impl_->layout->remove(impl_->route(key, n));
    if (st.ok()) {
      removed = true;
      bump(impl_->counters.removes);
    } else if (failed.ok() ||
               (failed.code() == StatusCode::kNotFound && st.code() != StatusCode::kNotFound)) {
      failed = std::move(st);  // the first fault, else the first kNotFound
    }
  }
  return removed ? ok_status() : failed;
}

Status Store::clear() {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  Status result = impl_->layout->clear();
  // Every other store of the namespace drops its index on its next exists call.
  Status published = impl_->generation.publish();
  if (result.ok()) result = published;
  return result;
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
