// The page store's counters as a StoreStats snapshot, and the Prometheus text writer.
#include <fmt/format.h>

#include "store_impl.h"

namespace kvtier {

StoreStats Store::stats() const {
  if (Status st = impl_->owner.check("this kvtier Store"); !st.ok()) {
    StoreStats refused;  // a forked child's copy: nothing of it is counted here
    refused.health = st.message();
    return refused;
  }
  const Counters& c = impl_->counters;
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  StoreStats s;
#define KVTIER_STAT_COPY(name, help) s.name = v(c.name);
  KVTIER_STORE_COUNTERS(KVTIER_STAT_COPY)
#undef KVTIER_STAT_COPY
#define KVTIER_STAT_COPY(name, metric, help) s.name = c.name.snapshot();
  KVTIER_STORE_HISTOGRAMS(KVTIER_STAT_COPY)
#undef KVTIER_STAT_COPY
  // The gauges, each from where it lives.
  s.pages = impl_->index.pages();
  s.bytes = impl_->index.bytes();
  s.capacity_bytes = impl_->config.capacity_bytes;
  s.metadata_bytes = impl_->capacity.metadata_bytes();
  s.min_free_bytes = impl_->config.min_free_bytes;
  Status unknown;                                        // what could not be learnt by the deadline
  if (impl_->capacity.bounded() && impl_->serving(0)) {  // the ledger lives on base 0
    Result<uint64_t> used = impl_->ledger_used();
    if (used.ok()) s.used_bytes = *used;
    if (used.status().code() == StatusCode::kDeadlineExceeded) unknown = used.status();
  }
  s.batches_in_flight = v(c.batches_in_flight);
  s.objects_open = impl_->budget.in_use();
  s.direct_io = impl_->dio_summary;
  s.layout = impl_->layout_summary;
  s.isolation = impl_->isolation_summary;
  s.admission = impl_->capacity.describe_admission();
  s.sealing = impl_->sealing ? impl_->sealing->describe() : "off";
  s.chunk_hash = impl_->sealing
                     ? std::string("none: sealed pages are checked by their seals")
                     : fmt::format("{} ({})", chunk_hash_name(impl_->chunk_hash),
                                   impl_->config.chunk_hash == "auto"
                                       ? "auto: the faster on this CPU"
                                       : fmt::format("chunk_hash={}", impl_->config.chunk_hash));
  s.health = "answering";
  if (impl_->guard) {
    guard::Guard::Snapshot g = impl_->guard->snapshot();
    s.deadline_misses = g.deadline_misses;
    s.unhealthy_refusals = g.unhealthy_refusals;
    s.locations_unhealthy = g.locations_unhealthy;
    s.threads_stuck = g.threads_stuck;
    s.health = std::move(g.health);
  }
  if (!unknown.ok()) s.health += fmt::format("; {}", unknown.message());
  for (size_t code = 1; code < c.errors_by_code.size(); ++code) {
    if (const uint64_t n = v(c.errors_by_code[code]); n != 0) {
      s.errors_by_code[std::string(status_code_name(static_cast<StatusCode>(code)))] = n;
    }
  }
  for (size_t r = 1; r < c.rejected.size(); ++r) {
    if (const uint64_t n = v(c.rejected[r]); n != 0) {
      s.pages_rejected[std::string(detail::kRejectNames[r])] = n;
    }
  }
  return s;
}

namespace {

// Escapes for the text format: `\` and line feeds always, `"` in label values.
std::string escape(std::string_view v, bool quote) {
  std::string out;
  out.reserve(v.size());
  for (char ch : v) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '"' && quote) {
      out += "\\\"";
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

PrometheusWriter::PrometheusWriter(std::string common_labels)
    : common_labels_(std::move(common_labels)) {}

std::string PrometheusWriter::render_labels(const MetricLabels& labels) {
  std::string out;
  for (const auto& [name, value] : labels) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}=\"{}\"", name, escape(value, /*quote=*/true));
  }
  return out;
}

void PrometheusWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += fmt::format("# HELP kvtier_{0} {1}\n# TYPE kvtier_{0} {2}\n", name,
                      escape(help, /*quote=*/false), type);
}

void PrometheusWriter::start_sample(std::string_view name, const MetricLabels& labels) {
  out_ += "kvtier_";
  out_ += name;
  const std::string extra = render_labels(labels);
  if (common_labels_.empty() && extra.empty()) return;
  out_ += '{';
  out_ += common_labels_;
  if (!common_labels_.empty() && !extra.empty()) out_ += ',';
  out_ += extra;
  out_ += '}';
}

void PrometheusWriter::sample(std::string_view name, uint64_t value, const MetricLabels& labels) {
  start_sample(name, labels);
  out_ += fmt::format(" {}\n", value);
}

void PrometheusWriter::sample(std::string_view name, double value, const MetricLabels& labels) {
  start_sample(name, labels);
  out_ += fmt::format(" {:g}\n", value);
}

void PrometheusWriter::histogram(std::string_view name, const LatencyHistogram& h) {
  uint64_t cumulative = 0;
  const std::string bucket = fmt::format("{}_bucket", name);
  for (size_t i = 0; i + 1 < h.buckets.size(); ++i) {
    cumulative += h.buckets[i];
    sample(bucket, cumulative,
           {{"le", fmt::format("{:g}", static_cast<double>(uint64_t{1} << i) / 1e6)}});
  }
  sample(bucket, h.count, {{"le", "+Inf"}});
  sample(fmt::format("{}_sum", name), static_cast<double>(h.sum_us) / 1e6);
  sample(fmt::format("{}_count", name), h.count);
}

std::string to_prometheus(const StoreStats& stats, std::string_view rendered_labels) {
  PrometheusWriter w{std::string(rendered_labels)};
  stats.for_each([&](const StatInfo& info, const auto& value) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, uint64_t>) {
      w.family(info.metric, info.kind == StatKind::kCounter ? "counter" : "gauge", info.help);
      w.sample(info.metric, value);
    } else if constexpr (std::is_same_v<T, LatencyHistogram>) {
      w.family(info.metric, "histogram", info.help);
      w.histogram(info.metric, value);
    } else if constexpr (std::is_same_v<T, std::map<std::string, uint64_t>>) {
      w.family(info.metric, "counter", info.help);
      const char* label = info.kind == StatKind::kByReason ? "reason" : "code";
      for (const auto& [name, n] : value) w.sample(info.metric, n, {{label, name}});
    }
    // kText (direct_io) is not a number: not exported.
  });
  return w.text();
}

std::string to_prometheus(const StoreStats& stats, const MetricLabels& labels) {
  return to_prometheus(stats, PrometheusWriter::render_labels(labels));
}

}  // namespace kvtier
