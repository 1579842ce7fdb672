// The page store's counters as a StoreStats snapshot, and its Prometheus text rendering.
#include <fmt/format.h>

#include "store_impl.h"

namespace kvtier {

StoreStats Store::stats() const {
  const Counters& c = impl_->counters;
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  StoreStats s;
  s.put_pages = v(c.put_pages);
  s.put_bytes = v(c.put_bytes);
  s.put_failures = v(c.put_failures);
  s.get_hits = v(c.get_hits);
  s.get_bytes = v(c.get_bytes);
  s.get_misses = v(c.get_misses);
  s.get_corrupt = v(c.get_corrupt);
  s.get_failures = v(c.get_failures);
  s.corrupt_dropped = v(c.corrupt_dropped);
  s.exists_queries = v(c.exists_queries);
  s.removes = v(c.removes);
  s.cleared = v(c.cleared);
  s.invalid_requests = v(c.invalid_requests);
  s.temps_swept = v(c.temps_swept);
  s.direct_io = impl_->dio_summary;
  s.direct_pages = v(c.direct_pages);
  s.staged_pages = v(c.staged_pages);
  s.direct_fallback_pages = v(c.direct_fallback_pages);
  s.pages = impl_->index.pages();
  s.bytes = impl_->index.bytes();
  s.capacity_bytes = impl_->config.capacity_bytes;
  s.min_free_bytes = impl_->config.min_free_bytes;
  if (impl_->ledger) {
    Result<uint64_t> used = impl_->ledger->used();
    if (used.ok()) s.used_bytes = *used;
  }
  s.evicted_pages = v(c.evicted_pages);
  s.evicted_bytes = v(c.evicted_bytes);
  s.capacity_refusals = v(c.capacity_refusals);
  s.index_stats = v(c.index_stats);
  s.put_latency = c.put_latency.snapshot();
  s.get_latency = c.get_latency.snapshot();
  s.exists_latency = c.exists_latency.snapshot();
  s.batches_in_flight = v(c.batches_in_flight);
  s.objects_open = impl_->budget.in_use();
  for (size_t code = 1; code < c.errors_by_code.size(); ++code) {
    if (const uint64_t n = v(c.errors_by_code[code]); n != 0) {
      s.errors_by_code[std::string(status_code_name(static_cast<StatusCode>(code)))] = n;
    }
  }
  return s;
}

std::string to_prometheus(const StoreStats& s, std::string_view labels) {
  std::string out;
  const std::string l = labels.empty() ? std::string() : "{" + std::string(labels) + "}";
  auto with = [&](std::string_view extra) {
    if (labels.empty()) return "{" + std::string(extra) + "}";
    return "{" + std::string(labels) + "," + std::string(extra) + "}";
  };
  auto metric = [&](std::string_view name, std::string_view type, std::string_view help,
                    uint64_t value) {
    out += fmt::format("# HELP kvtier_{0} {1}\n# TYPE kvtier_{0} {2}\nkvtier_{0}{3} {4}\n", name,
                       help, type, l, value);
  };
  metric("put_pages_total", "counter", "Pages written and published.", s.put_pages);
  metric("put_bytes_total", "counter", "Payload bytes of published pages.", s.put_bytes);
  metric("put_failures_total", "counter", "Pages that failed to be written.", s.put_failures);
  metric("get_hits_total", "counter", "Pages read and verified.", s.get_hits);
  metric("get_bytes_total", "counter", "Payload bytes of pages read.", s.get_bytes);
  metric("get_misses_total", "counter", "Pages not present.", s.get_misses);
  metric("get_corrupt_total", "counter", "Pages that failed verification (misses).", s.get_corrupt);
  metric("get_failures_total", "counter", "Reads that failed (faults, caller errors).",
         s.get_failures);
  metric("exists_queries_total", "counter", "Keys asked about by exists calls.", s.exists_queries);
  metric("evicted_pages_total", "counter", "Pages evicted to stay within capacity.",
         s.evicted_pages);
  metric("evicted_bytes_total", "counter", "Object bytes evicted.", s.evicted_bytes);
  metric("capacity_refusals_total", "counter", "Pages refused: no room even after evicting.",
         s.capacity_refusals);
  metric("pages", "gauge", "Pages in this process's index.", s.pages);
  metric("bytes", "gauge", "Object bytes in this process's index.", s.bytes);
  metric("used_bytes", "gauge", "Bytes used against the capacity (all processes).", s.used_bytes);
  metric("capacity_bytes", "gauge", "The capacity (0: none).", s.capacity_bytes);
  metric("batches_in_flight", "gauge", "Batch calls running now.", s.batches_in_flight);
  metric("objects_open", "gauge", "Objects (descriptors) held open now.", s.objects_open);
  out +=
      "# HELP kvtier_errors_total Failed pages by status code (misses excluded).\n"
      "# TYPE kvtier_errors_total counter\n";
  for (const auto& [code, n] : s.errors_by_code) {
    out += fmt::format("kvtier_errors_total{} {}\n", with(fmt::format("code=\"{}\"", code)), n);
  }
  auto histogram = [&](std::string_view name, std::string_view help, const LatencyHistogram& h) {
    out += fmt::format("# HELP kvtier_{0}_seconds {1}\n# TYPE kvtier_{0}_seconds histogram\n", name,
                       help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i + 1 < h.buckets.size(); ++i) {
      cumulative += h.buckets[i];
      out +=
          fmt::format("kvtier_{}_seconds_bucket{} {}\n", name,
                      with(fmt::format("le=\"{:g}\"", static_cast<double>(uint64_t{1} << i) / 1e6)),
                      cumulative);
    }
    out += fmt::format("kvtier_{}_seconds_bucket{} {}\n", name, with("le=\"+Inf\""), h.count);
    out += fmt::format("kvtier_{}_seconds_sum{} {:g}\n", name, l, h.sum_us / 1e6);
    out += fmt::format("kvtier_{}_seconds_count{} {}\n", name, l, h.count);
  };
  histogram("put_batch", "Latency of put and batch_put calls.", s.put_latency);
  histogram("get_batch", "Latency of get and batch_get calls.", s.get_latency);
  histogram("exists_batch", "Latency of batch_exists calls.", s.exists_latency);
  return out;
}

}  // namespace kvtier
