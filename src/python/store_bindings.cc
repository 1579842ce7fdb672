// kvtier.Store and kvtier.Ticket.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "batch_pages.h"
#include "errors.h"
#include "kvtier/store/namespace.h"
#include "kvtier/store/store.h"
#include "kvtier/store/uri.h"
#include "types.h"

namespace kvtier::python {
namespace {

using namespace pybind11::literals;

ParallelRank to_rank(const std::pair<uint32_t, uint32_t>& rank_size) {
  return ParallelRank{rank_size.first, rank_size.second};
}

// A result for `keys` pages of which the first `done` went to the store (`r`) and the rest did
// not (`rest`: what each of them is).
PyBatchResult joined(BatchResult r, size_t done, size_t keys, const Status& rest) {
  PyBatchResult out = to_python(std::move(r), done);
  out.pages.resize(keys, rest);
  return out;
}

// Bucket i: calls under 2^i microseconds (the last: slower ones).
py::dict histogram_dict(const LatencyHistogram& h) {
  py::list upper_us;
  for (size_t i = 0; i + 1 < h.buckets.size(); ++i) upper_us.append(uint64_t{1} << i);
  upper_us.append(py::none());
  return py::dict("count"_a = h.count, "sum_us"_a = h.sum_us,
                  "buckets"_a = std::vector<uint64_t>(h.buckets.begin(), h.buckets.end()),
                  "upper_us"_a = upper_us);
}

py::dict stats_dict(const StoreStats& s) {
  py::dict d;
  s.for_each([&](const StatInfo& info, const auto& value) {
    const py::str key(info.name.data(), info.name.size());
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, LatencyHistogram>) {
      d[key] = histogram_dict(value);
    } else {
      d[key] = value;
    }
  });
  return d;
}

py::dict namespace_dict(const NamespaceSpec& ns) {
  py::dict d;
  ns.for_each_field([&](std::string_view name, const auto& value) {
    const py::str key(name.data(), name.size());
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, ParallelRank>) {
      d[key] = py::make_tuple(value.rank, value.size);
    } else {
      d[key] = value;
    }
  });
  return d;
}

// A batch running in the background, and the Python memory it uses.
class PyTicket {
 public:
  PyTicket(BatchTicket ticket, BatchPages pages, size_t count)
      : ticket_(std::move(ticket)), pages_(std::move(pages)), count_(count) {}
  ~PyTicket() {
    if (ticket_.valid()) {
      py::gil_scoped_release unlocked;
      ticket_ = BatchTicket();  // waits for the batch: it uses pages_' memory
    }
  }

  bool done() const { return !ticket_.valid() || ticket_.done(); }

  bool wait(std::optional<double> timeout_s) {
    if (!ticket_.valid()) return true;
    py::gil_scoped_release unlocked;
    if (!timeout_s) {
      ticket_.wait();
      return true;
    }
    const auto timeout = std::chrono::nanoseconds(static_cast<int64_t>(*timeout_s * 1e9));
    return ticket_.wait(timeout).ok();
  }

  PyBatchResult result() {
    if (!result_) {
      if (!ticket_.valid()) raise_invalid("the ticket's result was already taken");
      {
        py::gil_scoped_release unlocked;
        ticket_.wait();
      }
      result_ = std::make_unique<PyBatchResult>(to_python(ticket_.take(), count_));
      ticket_ = BatchTicket();
      pages_ = BatchPages{};
    }
    return *result_;
  }

 private:
  BatchTicket ticket_;
  BatchPages pages_;
  size_t count_;
  std::unique_ptr<PyBatchResult> result_;
};

class PyStore {
 public:
  explicit PyStore(std::unique_ptr<Store> store) : store_(std::move(store)) {}
  ~PyStore() { close_store(); }

  std::shared_ptr<Store> get() const {
    std::lock_guard lock(mu_);
    if (!store_) raise_invalid("the store is closed");
    return store_;
  }

  // Waits for submitted batches and in-flight calls of other threads, then closes.
  void close_store() {
    std::shared_ptr<Store> store;
    {
      std::lock_guard lock(mu_);
      store = std::move(store_);
    }
    if (store) {
      py::gil_scoped_release unlocked;
      store.reset();
    }
  }

  bool closed() const {
    std::lock_guard lock(mu_);
    return store_ == nullptr;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Store> store_;
};

// Runs fn(store) without the GIL, dropping this call's reference to the store before the GIL
// is taken back (closing waits for calls in flight, never under the GIL).
template <typename Fn>
auto unlocked_call(const PyStore& self, Fn&& fn) {
  std::shared_ptr<Store> store = self.get();
  py::gil_scoped_release unlocked;
  auto result = fn(*store);
  store.reset();
  return result;
}

std::unique_ptr<PyStore> open_store(
    const std::string& uri, const std::string& model, const std::string& dtype,
    const std::string& layout, uint32_t page_tokens, uint64_t piece_bytes, uint32_t pieces_per_page,
    std::pair<uint32_t, uint32_t> tp, std::pair<uint32_t, uint32_t> pp,
    std::pair<uint32_t, uint32_t> cp, std::pair<uint32_t, uint32_t> dp, bool mla,
    const std::string& salt, const std::string& backend, bool fsync, const std::string& direct_io,
    bool verify_payload, bool drop_corrupt, size_t max_open_objects, size_t async_threads,
    uint64_t staging_bytes, uint64_t capacity_bytes, uint64_t min_free_bytes,
    const std::string& file_layout, uint64_t segment_bytes, uint64_t page_bytes,
    const std::string& key_file, const std::string& tenant) {
  StoreConfig cfg;
  Result<StoreLocation> location = parse_store_uri(uri);
  if (!location.ok()) raise_status(location.status());
  cfg.location = std::move(location).value();
  cfg.ns.model = model;
  cfg.ns.dtype = dtype;
  cfg.ns.layout = layout;
  cfg.ns.page_tokens = page_tokens;
  cfg.ns.piece_bytes = piece_bytes;
  cfg.ns.pieces_per_page = pieces_per_page;
  cfg.ns.tp = to_rank(tp);
  cfg.ns.pp = to_rank(pp);
  cfg.ns.cp = to_rank(cp);
  cfg.ns.dp = to_rank(dp);
  cfg.ns.mla = mla;
  cfg.ns.salt = salt;
  cfg.backend = backend;
  cfg.fsync = fsync;
  Result<DirectIo> dio = parse_direct_io(direct_io);
  if (!dio.ok()) raise_status(dio.status());
  cfg.direct_io = *dio;
  cfg.verify_payload = verify_payload;
  cfg.drop_corrupt = drop_corrupt;
  cfg.max_open_objects = max_open_objects;
  cfg.async_threads = async_threads;
  cfg.staging_bytes = staging_bytes;
  cfg.capacity_bytes = capacity_bytes;
  cfg.min_free_bytes = min_free_bytes;
  cfg.layout = file_layout;
  cfg.page_bytes = page_bytes;
  if (segment_bytes != 0) cfg.segment_bytes = segment_bytes;
  cfg.key_file = key_file;
  cfg.tenant = tenant;
  Result<std::unique_ptr<Store>> store = [&] {
    py::gil_scoped_release unlocked;
    return Store::open(cfg);
  }();
  if (!store.ok()) raise_status(store.status());
  return std::make_unique<PyStore>(std::move(store).value());
}

}  // namespace

void bind_store(py::module_& m) {
  m.def("capacity_page_bytes", &capacity_page_bytes, "object_bytes"_a,
        "What a page file of `object_bytes` is charged against a capacity_bytes (its 4 KiB "
        "blocks and its directory entry).");
  m.def(
      "capacity_holding",
      [](uint64_t page_bytes, const std::string& layout, size_t bases) {
        Result<StoreLayout> l = parse_store_layout(layout);
        if (!l.ok()) raise_status(l.status());
        return capacity_holding(page_bytes, *l, bases);
      },
      "page_bytes"_a, "layout"_a = "files", "bases"_a = 1,
      "The smallest capacity_bytes whose pages may take `page_bytes` (as charged: "
      "capacity_page_bytes) beside what a store of `layout` on `bases` base directories keeps "
      "(stats()['metadata_bytes']), on 4 KiB blocks.");
  py::class_<PyTicket>(m, "Ticket",
                       "A batch running in the background (Store.submit_put/submit_get). The "
                       "page memory it uses is kept alive until it is done.")
      .def("done", &PyTicket::done)
      .def("wait", &PyTicket::wait, "timeout"_a = py::none(),
           "Blocks (without the GIL) until done or `timeout` seconds pass; True when done.")
      .def("result", &PyTicket::result, "Waits, then returns the BatchResult.");

  py::class_<PyStore>(m, "Store", R"(KV-cache pages by key, in one namespace, on any backend.

Store(uri, *, model, dtype, layout, page_tokens, piece_bytes, pieces_per_page, tp, pp, cp, dp,
      mla, salt, backend, fsync, direct_io, verify_payload, drop_corrupt, max_open_objects,
      async_threads, staging_bytes, capacity_bytes, min_free_bytes, file_layout, segment_bytes,
      page_bytes, key_file, tenant)

`uri` is a directory, file:///a[,/b][?backend=posix&layout=segments&...], or mem://name.
`file_layout` ("files", "segments" or "auto"; default: the URI's, else auto) is how a FILE
store lays pages out: a file per page, or records appended to large segment files
(`segment_bytes` each, default 256 MiB); auto keeps what the namespace holds, else picks
segments for pages below 4 MiB (`page_bytes` gives the page size where pieces differ in size)
and says why in stats()["layout"]. `key_file` (default: $KVTIER_KEY_FILE when set) seals
every page with AES-256-GCM under `tenant`'s keys (docs/security.md); stats()["sealing"]
says how, never the key. The namespace fields
decide which pages are shared: stores with equal fields share pages, any difference isolates
them. Page memory must lie inside memory registered with register_memory(). Pages are a
buffer (numpy array, bytearray), a tensor, an (address, nbytes) tuple, or a list of those
pieces. Data calls raise only for caller errors; misses and storage faults come back as
Status values (falsy).)")
      .def(py::init(&open_store), "uri"_a, py::kw_only(), "model"_a = "", "dtype"_a = "",
           "layout"_a = "", "page_tokens"_a = 0, "piece_bytes"_a = 0, "pieces_per_page"_a = 1,
           "tp"_a = std::pair<uint32_t, uint32_t>{0, 1},
           "pp"_a = std::pair<uint32_t, uint32_t>{0, 1},
           "cp"_a = std::pair<uint32_t, uint32_t>{0, 1},
           "dp"_a = std::pair<uint32_t, uint32_t>{0, 1}, "mla"_a = false, "salt"_a = "",
           "backend"_a = "", "fsync"_a = false, "direct_io"_a = "off", "verify_payload"_a = true,
           "drop_corrupt"_a = true, "max_open_objects"_a = 0, "async_threads"_a = 4,
           "staging_bytes"_a = uint64_t{256} << 20, "capacity_bytes"_a = 0, "min_free_bytes"_a = 0,
           "file_layout"_a = "", "segment_bytes"_a = 0, "page_bytes"_a = 0, "key_file"_a = "",
           "tenant"_a = "")
      .def(
          "register_memory",
          [](PyStore& self, const py::object& obj, const py::object& nbytes) {
            HeldRegion region = hold_region(obj, nbytes);
            Result<Registration> reg = unlocked_call(
                self, [&](Store& s) { return s.register_memory(region.data, region.size); });
            if (!reg.ok()) raise_status(reg.status());
            return std::make_unique<PyRegistration>(std::move(reg).value(), std::move(region));
          },
          "memory"_a, "nbytes"_a = py::none(),
          "Registers memory once for zero-copy pages: a buffer or tensor (pinned while "
          "registered), or an integer address with nbytes.")
      .def(
          "put",
          [](PyStore& self, const std::string& key, const py::object& page) {
            BatchPages p = gather_pages(py::make_tuple(page), 1, /*writable=*/false);
            Status st = unlocked_call(self, [&](Store& s) { return s.put(key, p.const_pieces); });
            raise_if_caller_error(st);
            return st;
          },
          "key"_a, "page"_a)
      .def(
          "get",
          [](PyStore& self, const std::string& key, const py::object& page) {
            BatchPages p = gather_pages(py::make_tuple(page), 1, /*writable=*/true);
            Status st = unlocked_call(self, [&](Store& s) { return s.get(key, p.mutable_pieces); });
            raise_if_caller_error(st);
            return st;
          },
          "key"_a, "page"_a)
      .def(
          "batch_put",
          [](PyStore& self, std::vector<std::string> keys, const py::sequence& pages) {
            Keys k(std::move(keys));
            BatchPages p = gather_pages(pages, k.views.size(), false);
            BatchResult r =
                unlocked_call(self, [&](Store& s) { return s.batch_put(k.views, p.const_pieces); });
            return to_python(std::move(r), k.views.size());
          },
          "keys"_a, "pages"_a)
      .def(
          "batch_get",
          [](PyStore& self, std::vector<std::string> keys, const py::sequence& pages) {
            Keys k(std::move(keys));
            BatchPages p = gather_pages(pages, k.views.size(), true);
            BatchResult r = unlocked_call(
                self, [&](Store& s) { return s.batch_get(k.views, p.mutable_pieces); });
            return to_python(std::move(r), k.views.size());
          },
          "keys"_a, "pages"_a)
      .def(
          "batch_put_pieces",
          [](PyStore& self, std::vector<std::string> keys, const py::object& ptrs,
             const py::object& sizes) {
            Keys k(std::move(keys));
            BatchPages p = flat_pages(k.views.size(), ptrs, sizes);
            BatchResult r =
                unlocked_call(self, [&](Store& s) { return s.batch_put(k.views, p.const_pieces); });
            return to_python(std::move(r), k.views.size());
          },
          "keys"_a, "ptrs"_a, "sizes"_a,
          "batch_put with pages given as flat address and size lists, len(ptrs) / len(keys) "
          "pieces per page (the form of a host pool's get_page_buffer_meta()).")
      .def(
          "batch_get_pieces",
          [](PyStore& self, std::vector<std::string> keys, const py::object& ptrs,
             const py::object& sizes) {
            Keys k(std::move(keys));
            BatchPages p = flat_pages(k.views.size(), ptrs, sizes);
            BatchResult r = unlocked_call(
                self, [&](Store& s) { return s.batch_get(k.views, p.mutable_pieces); });
            return to_python(std::move(r), k.views.size());
          },
          "keys"_a, "ptrs"_a, "sizes"_a, "batch_get with flat address and size lists.")
      .def(
          "batch_put_rows",
          [](PyStore& self, std::vector<std::string> keys, const py::object& tokens,
             uint64_t page_size, const py::object& first, const py::object& stride,
             const py::object& sizes, uint64_t rows, bool skip_present) {
            Keys k(std::move(keys));
            BatchPages p = row_pages(k.views.size(), tokens, page_size, first, stride, sizes, rows);
            const size_t n = k.views.size();
            const size_t per = n == 0 ? 0 : p.const_pieces.size() / n;
            auto [present, r] = unlocked_call(self, [&](Store& s) {
              const size_t present =
                  skip_present ? s.batch_exists(k.views, Store::ExistsCall::kCheck) : 0;
              std::span<const std::string_view> rest(k.views);
              BatchResult r =
                  present == n
                      ? BatchResult{}
                      : s.batch_put(
                            rest.subspan(present),
                            std::span<const ConstBuffer>(p.const_pieces).subspan(present * per));
              return std::pair{present, std::move(r)};
            });
            PyBatchResult out = joined(std::move(r), n - present, n - present, ok_status());
            out.pages.insert(out.pages.begin(), present, ok_status());
            return py::make_tuple(present, std::move(out));
          },
          "keys"_a, "tokens"_a, "page_size"_a, "first"_a, "stride"_a, "sizes"_a, "rows"_a,
          "skip_present"_a = false,
          "batch_put of pages that are rows of a host pool (see batch_get_rows). With "
          "skip_present, the leading run of keys already stored is not written again. Returns "
          "(pages skipped as present, BatchResult of every page).")
      .def(
          "batch_get_rows",
          [](PyStore& self, std::vector<std::string> keys, const py::object& tokens,
             uint64_t page_size, const py::object& first, const py::object& stride,
             const py::object& sizes, uint64_t rows, bool leading) {
            Keys k(std::move(keys));
            BatchPages p = row_pages(k.views.size(), tokens, page_size, first, stride, sizes, rows);
            const size_t n = k.views.size();
            const size_t per = n == 0 ? 0 : p.mutable_pieces.size() / n;
            auto [found, r] = unlocked_call(self, [&](Store& s) {
              const size_t found = leading ? s.batch_exists(k.views, Store::ExistsCall::kCheck) : n;
              std::span<const std::string_view> all(k.views);
              BatchResult r =
                  found == 0
                      ? BatchResult{}
                      : s.batch_get(
                            all.first(found),
                            std::span<const MutableBuffer>(p.mutable_pieces).first(found * per));
              return std::pair{found, std::move(r)};
            });
            return py::make_tuple(
                found, joined(std::move(r), found, n,
                              not_found_error("not read: an earlier page of the batch is absent")));
          },
          "keys"_a, "tokens"_a, "page_size"_a, "first"_a, "stride"_a, "sizes"_a, "rows"_a,
          "leading"_a = false,
          "batch_get of pages that are rows of a host pool: page i is row "
          "tokens[i * page_size] // page_size, its piece j at first[j] + row * stride[j] "
          "(sizes[j] bytes); tokens as SGLang's host indices (a sequence or an int64 array). "
          "With leading, only the leading run of stored keys is read (one look at the index, "
          "in the same call); the pages after it are NOT_FOUND without I/O. Returns (pages "
          "looked for, BatchResult of every page).")
      .def(
          "submit_put_pieces",
          [](PyStore& self, std::vector<std::string> keys, const py::object& ptrs,
             const py::object& sizes) {
            Keys k(std::move(keys));
            BatchPages p = flat_pages(k.views.size(), ptrs, sizes);
            BatchTicket t = unlocked_call(
                self, [&](Store& s) { return s.submit_put(k.views, p.const_pieces); });
            return std::make_unique<PyTicket>(std::move(t), std::move(p), k.views.size());
          },
          "keys"_a, "ptrs"_a, "sizes"_a,
          "batch_put_pieces without waiting: returns a Ticket. The memory must stay valid "
          "until the ticket is done.")
      .def(
          "submit_get_pieces",
          [](PyStore& self, std::vector<std::string> keys, const py::object& ptrs,
             const py::object& sizes) {
            Keys k(std::move(keys));
            BatchPages p = flat_pages(k.views.size(), ptrs, sizes);
            BatchTicket t = unlocked_call(
                self, [&](Store& s) { return s.submit_get(k.views, p.mutable_pieces); });
            return std::make_unique<PyTicket>(std::move(t), std::move(p), k.views.size());
          },
          "keys"_a, "ptrs"_a, "sizes"_a,
          "batch_get_pieces without waiting: returns a Ticket. The memory must stay valid "
          "until the ticket is done.")
      .def(
          "submit_put",
          [](PyStore& self, std::vector<std::string> keys, const py::sequence& pages) {
            Keys k(std::move(keys));
            BatchPages p = gather_pages(pages, k.views.size(), false);
            BatchTicket t = unlocked_call(
                self, [&](Store& s) { return s.submit_put(k.views, p.const_pieces); });
            return std::make_unique<PyTicket>(std::move(t), std::move(p), k.views.size());
          },
          "keys"_a, "pages"_a, "batch_put without waiting: returns a Ticket.")
      .def(
          "submit_get",
          [](PyStore& self, std::vector<std::string> keys, const py::sequence& pages) {
            Keys k(std::move(keys));
            BatchPages p = gather_pages(pages, k.views.size(), true);
            BatchTicket t = unlocked_call(
                self, [&](Store& s) { return s.submit_get(k.views, p.mutable_pieces); });
            return std::make_unique<PyTicket>(std::move(t), std::move(p), k.views.size());
          },
          "keys"_a, "pages"_a, "batch_get without waiting: returns a Ticket.")
      .def(
          "exists",
          [](PyStore& self, const std::string& key, bool lookup) {
            const auto call = lookup ? Store::ExistsCall::kLookup : Store::ExistsCall::kCheck;
            Result<bool> r = unlocked_call(self, [&](Store& s) { return s.exists(key, call); });
            if (!r.ok()) {
              raise_if_caller_error(r.status());
              return false;  // a storage fault: not known to be there
            }
            return *r;
          },
          "key"_a, "lookup"_a = true,
          "Whether the page is stored (False also when the store cannot tell). lookup=False: "
          "not an engine's lookup (see batch_exists).")
      .def(
          "indexed",
          [](PyStore& self, std::vector<std::string> keys, bool lookup) {
            Keys k(std::move(keys));
            const auto call = lookup ? Store::ExistsCall::kLookup : Store::ExistsCall::kCheck;
            return self.get()->indexed(k.views, call);
          },
          "keys"_a, "lookup"_a = false,
          "Whether each key is in this process's index, without I/O (never blocks): False "
          "means only 'not known here' (batch_exists may still find it). lookup=True: an "
          "engine's lookup answered from here (the admission policy learns from lookups).")
      .def(
          "watch_evictions",
          [](PyStore& self, size_t max_pending) { self.get()->watch_evictions(max_pending); },
          "max_pending"_a,
          "Keeps the key hashes of pages evicted for capacity (by this store, or in segments "
          "another process reclaimed) until take_evicted(), at most max_pending (0: off).")
      .def(
          "take_evicted",
          [](PyStore& self) {
            Store::Evicted e = self.get()->take_evicted();
            std::vector<std::string> hashes;
            hashes.reserve(e.keys.size());
            for (const Hash128& h : e.keys) hashes.push_back(h.hex());
            return py::make_tuple(std::move(hashes), e.dropped);
          },
          "(hashes, dropped): the key hashes (Store.key_hashes) of pages evicted since the "
          "last call, oldest first, and how many were dropped beyond max_pending.")
      .def_static(
          "key_hashes",
          [](std::vector<std::string> keys) {
            std::vector<std::string> out;
            out.reserve(keys.size());
            for (const std::string& k : keys) out.push_back(hash128(k).hex());
            return out;
          },
          "keys"_a, "The hash naming each key's page (its file name; take_evicted's names).")
      .def(
          "batch_exists",
          [](PyStore& self, std::vector<std::string> keys, bool lookup) {
            Keys k(std::move(keys));
            const auto call = lookup ? Store::ExistsCall::kLookup : Store::ExistsCall::kCheck;
            return unlocked_call(self, [&](Store& s) { return s.batch_exists(k.views, call); });
          },
          "keys"_a, "lookup"_a = true,
          "Number of leading keys that are stored. lookup=False: the caller's own check "
          "before writing or reading pages it was already asked for (the admission policy "
          "learns the workload from lookups only).")
      .def(
          "remove",
          [](PyStore& self, const std::string& key) {
            Status st = unlocked_call(self, [&](Store& s) { return s.remove(key); });
            raise_if_caller_error(st);
            return st;
          },
          "key"_a)
      .def(
          "clear",
          [](PyStore& self) { return unlocked_call(self, [](Store& s) { return s.clear(); }); },
          "Removes every page of this store's namespace (and no other).")
      .def("stats", [](PyStore& self) { return stats_dict(self.get()->stats()); })
      .def(
          "wait_health",
          [](PyStore& self, bool answering, double timeout_s) {
            return unlocked_call(self, [&](Store& s) {
              return s.wait_health(answering, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                  std::chrono::duration<double>(timeout_s)));
            });
          },
          "answering"_a = true, "timeout_s"_a = 120.0,
          "Waits (GIL released, no polling) until every location answers and no late I/O is "
          "left (answering=True), or until one does not; True when it did in time.")
      .def(
          "prometheus",
          [](PyStore& self, const std::variant<std::string, MetricLabels>& labels) {
            if (const auto* rendered = std::get_if<std::string>(&labels)) {
              return to_prometheus(self.get()->stats(), std::string_view(*rendered));
            }
            return to_prometheus(self.get()->stats(), std::get<MetricLabels>(labels));
          },
          "labels"_a = "",
          "The stats as Prometheus text. `labels` go on every sample: a list of (name, value) "
          "pairs, whose values are escaped, or text already rendered (name=\"value\",...).")
      .def_property_readonly(
          "namespace", [](PyStore& self) { return namespace_dict(self.get()->namespace_spec()); })
      .def_property_readonly("namespace_id",
                             [](PyStore& self) { return self.get()->namespace_id().hex(); })
      .def_property_readonly(
          "file_layout",
          [](PyStore& self) { return std::string(store_layout_name(self.get()->layout())); })
      .def_property_readonly("backend",
                             [](PyStore& self) { return self.get()->backend_description(); })
      .def_property_readonly(
          "backend_selection",
          [](PyStore& self) { return self.get()->backend_selection().summary(); })
      .def_property_readonly("namespace_dirs",
                             [](PyStore& self) { return self.get()->namespace_dirs(); })
      .def_property_readonly("closed", &PyStore::closed)
      .def("close", &PyStore::close_store,
           "Waits for submitted batches and calls in flight, then closes. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyStore& self, const py::args&) { self.close_store(); });
}

}  // namespace kvtier::python
