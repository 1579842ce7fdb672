// The public Store methods once a store is open (opening it is store_open.cc). The store's
// parts live beside this file (see store_impl.h for the map): the write path, the read path,
// the namespace on storage, submitted batches and metrics.
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

std::string_view store_layout_name(StoreLayout layout) {
  return layout == StoreLayout::kSegments ? "segments" : "files";
}

Result<StoreLayout> parse_store_layout(std::string_view text) {
  if (text == "files") return StoreLayout::kFiles;
  if (text == "segments") return StoreLayout::kSegments;
  return invalid_argument_error(fmt::format("layout '{}' (use files or segments)", text));
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
    out[i] = routing::validate_key(keys[i]).ok() && impl_->index.contains(hash128(keys[i]));
  }
  return out;
}

void Store::Impl::EvictionJournal::add(std::span<const Hash128> evicted) {
  MutexLock lock(mu);
  if (max_pending == 0 || evicted.empty()) return;
  for (const Hash128& h : evicted) keys.push_back(h);
  while (keys.size() > max_pending) {
    keys.pop_front();
    ++dropped;
  }
}

void Store::watch_evictions(size_t max_pending) {
  if (!impl_->owner.here()) return;
  Impl::EvictionJournal& j = impl_->evictions;
  MutexLock lock(j.mu);
  j.max_pending = max_pending;
  while (j.keys.size() > max_pending) {
    j.keys.pop_front();
    ++j.dropped;
  }
}

Store::Evicted Store::take_evicted() {
  if (!impl_->owner.here()) return {};
  Impl::EvictionJournal& j = impl_->evictions;
  Evicted out;
  MutexLock lock(j.mu);
  out.keys.assign(j.keys.begin(), j.keys.end());
  out.dropped = j.dropped;
  j.keys.clear();
  j.dropped = 0;
  return out;
}

void Store::Impl::forget_gone() {
  if (gone) {
    // Not its own: those left the index as they were chosen, and one put again since is back.
    for (const Hash128& hash : gone->drain(KeyRing::Whose::kOthers)) index.erase(hash);
  }
}

Result<bool> Store::Impl::exists_here(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  bump(counters.exists_queries);
  observe_generation();
  forget_gone();
  const routing::Route r = router.route(key);
  if (index.contains(r.key_hash)) return true;
  if (layout == StoreLayout::kSegments) {
    // Not indexed: perhaps another writer appended it since this store looked.
    bump(counters.index_stats);
    std::vector<bool> base(router.base_count(), false);
    base[r.base] = true;
    segments_refresh(base, lookup_max_age_ns());
    return index.contains(r.key_hash);
  }
  // Not indexed: perhaps another process wrote it since this one looked.
  bump(counters.index_stats);
  Result<ObjectInfo> info = agent.stat(r.path);
  if (info.ok()) {
    if (info->is_dir || info->size <= kHeaderBytes) return false;
    index.put_cold({r.key_hash, static_cast<uint32_t>(r.base), info->size});
    return true;
  }
  if (info.status().code() == StatusCode::kNotFound) return false;
  return info.status();
}

size_t Store::Impl::batch_exists_here(std::span<const std::string_view> keys) {
  Impl& impl = *this;
  impl.observe_generation();
  impl.forget_gone();
  size_t n = 0;
  // Indexed keys cost no system call; from the first one that is not, ask storage.
  for (; n < keys.size(); ++n) {
    if (!routing::validate_key(keys[n]).ok()) {
      bump(impl.counters.exists_queries, n + 1);
      return n;  // a bad key ends the prefix
    }
    if (!impl.index.contains(hash128(keys[n]))) break;  // the route's key_hash
  }
  if (impl.layout == StoreLayout::kSegments) {
    if (n == keys.size()) {
      bump(impl.counters.exists_queries, n);
      return n;
    }
    // One look at what other writers appended, then the index answers the rest.
    impl.segments_refresh({}, impl.lookup_max_age_ns());
    bump(impl.counters.index_stats);
    for (; n < keys.size(); ++n) {
      if (!routing::validate_key(keys[n]).ok()) break;
      if (!impl.index.contains(hash128(keys[n]))) break;  // the route's key_hash
    }
    bump(impl.counters.exists_queries, std::min(n + 1, keys.size()));
    return n;
  }
  std::vector<routing::Route> rest;
  std::vector<std::string> paths;
  for (size_t i = n; i < keys.size(); ++i) {
    if (!routing::validate_key(keys[i]).ok()) break;
    rest.push_back(impl.router.route(keys[i]));
    paths.push_back(rest.back().path);
  }
  bump(impl.counters.exists_queries, n + paths.size());
  if (paths.empty()) return n;
  // One call for the rest: object stores ask in parallel, files stop at the first absent page.
  std::vector<Result<ObjectInfo>> infos = impl.agent.stat_many(paths, /*until_missing=*/true);
  size_t found = 0;
  for (; found < infos.size(); ++found) {
    const Result<ObjectInfo>& info = infos[found];
    if (!info.ok() || info->is_dir || info->size <= kHeaderBytes) break;
    impl.index.put_cold(
        {rest[found].key_hash, static_cast<uint32_t>(rest[found].base), info->size});
  }
  // The keys the index could not answer, up to and including the one that ended the prefix.
  bump(impl.counters.index_stats, found + (found < infos.size() ? 1 : 0));
  return n + found;
}

Status Store::remove(std::string_view key) {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  KVTIER_RETURN_IF_ERROR(routing::validate_key(key));
  const routing::Route r = impl_->router.route(key);
  if (impl_->layout == StoreLayout::kSegments) {
    if (!impl_->index.contains(r.key_hash)) {
      std::vector<bool> base(impl_->router.base_count(), false);
      base[r.base] = true;
      impl_->segments_refresh(base, impl_->lookup_max_age_ns());
    }
    if (!impl_->index.erase(r.key_hash)) {
      return not_found_error(fmt::format("no page {} to remove", r.key_hash.hex()));
    }
    KVTIER_RETURN_IF_ERROR(impl_->segments_forget(r.key_hash, r.base));
    bump(impl_->counters.removes);
    return ok_status();
  }
  uint64_t bytes = 0;
  if (impl_->ledger) {
    Result<ObjectInfo> info = impl_->agent.stat(r.path);
    if (info.ok()) bytes = info->size;
  }
  Status st = impl_->agent.remove(r.path);
  impl_->index.erase(r.key_hash);
  KVTIER_RETURN_IF_ERROR(st);
  if (impl_->gone) impl_->gone->append({&r.key_hash, 1});
  if (impl_->ledger) impl_->ledger->release(bytes).ignore_error();
  bump(impl_->counters.removes);
  return ok_status();
}

Status Store::clear() {
  KVTIER_RETURN_IF_ERROR(impl_->owner.check(kStoreName));
  Impl& impl = *impl_;
  const bool ledger = impl.ledger != nullptr;
  uint64_t freed = 0;
  Status result;
  if (impl.layout == StoreLayout::kSegments) {
    uint64_t pages = 0;
    result = impl.segments_clear(&pages);
    bump(impl.counters.cleared, pages);
  }
  for (size_t b = 0;
       b < impl.router.base_count() && result.ok() && impl.layout == StoreLayout::kFiles; ++b) {
    result = impl.for_each_fanout(
        b, /*with_details=*/ledger,
        [&](const std::string& dir, const std::vector<ObjectInfo>& pages) {
          std::vector<std::string> paths;
          paths.reserve(pages.size());
          for (const ObjectInfo& e : pages) paths.push_back(dir + "/" + e.name);
          std::vector<Status> removed = impl.agent.remove_many(paths);
          Status first;
          for (size_t i = 0; i < removed.size(); ++i) {
            if (removed[i].ok()) {
              bump(impl.counters.cleared);
              freed += pages[i].size;
            } else if (removed[i].code() != StatusCode::kNotFound && first.ok()) {
              first = removed[i];
            }
          }
          return first;
        });
  }
  impl.index.clear();
  if (ledger) impl.ledger->release(freed).ignore_error();
  // Every other store of the namespace drops its index on its next exists call.
  Status published = impl.publish_generation();
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
  return impl_->layout;
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
