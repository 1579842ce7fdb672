// A store's counters and latency histograms (the source of Store::stats() and its Prometheus
// text, store_metrics.cc): atomics, counted relaxed, by every call of every thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvtier/core/clock.h"
#include "kvtier/store/store.h"

namespace kvtier {
namespace detail {

// Why a page that was read is refused rather than given (StoreStats::pages_rejected names
// each one).
enum class Reject : uint8_t {
  kNone,
  kHeader,
  kSealing,
  kNamespace,
  kPlace,
  kLayout,
  kTorn,
  kChecksum,
  kTag,
  kKeyId,
};
inline constexpr std::array<std::string_view, 10> kRejectNames = {
    "", "header", "sealing", "namespace", "place", "layout", "torn", "checksum", "tag", "key_id"};

struct Counters {
#define KVTIER_STAT_COUNTER(name, help) std::atomic<uint64_t> name{0};
  KVTIER_STORE_COUNTERS(KVTIER_STAT_COUNTER)
#undef KVTIER_STAT_COUNTER
  std::atomic<uint64_t> batches_in_flight{0};                         // the source of the gauge
  std::array<std::atomic<uint64_t>, 16> errors_by_code{};             // indexed by StatusCode
  std::array<std::atomic<uint64_t>, kRejectNames.size()> rejected{};  // indexed by Reject

  struct Histogram {
    std::array<std::atomic<uint64_t>, LatencyHistogram::kBuckets> buckets{};
    std::atomic<uint64_t> count{0}, sum_us{0};
    void add(uint64_t us) {
      size_t b = 0;
      while (b + 1 < buckets.size() && us >= (uint64_t{1} << b)) ++b;
      buckets[b].fetch_add(1, std::memory_order_relaxed);
      count.fetch_add(1, std::memory_order_relaxed);
      sum_us.fetch_add(us, std::memory_order_relaxed);
    }
    LatencyHistogram snapshot() const {
      LatencyHistogram h;
      for (size_t i = 0; i < buckets.size(); ++i) h.buckets[i] = buckets[i].load();
      h.count = count.load();
      h.sum_us = sum_us.load();
      return h;
    }
  };
#define KVTIER_STAT_HISTOGRAM(name, metric, help) Histogram name;
  KVTIER_STORE_HISTOGRAMS(KVTIER_STAT_HISTOGRAM)
#undef KVTIER_STAT_HISTOGRAM
};

// Times a batch call into a histogram and counts it in flight while it runs.
class BatchTimer {
 public:
  BatchTimer(Counters& c, Counters::Histogram& h) : c_(c), h_(h), start_(now_ns()) {
    c_.batches_in_flight.fetch_add(1, std::memory_order_relaxed);
  }
  ~BatchTimer() {
    c_.batches_in_flight.fetch_sub(1, std::memory_order_relaxed);
    h_.add((now_ns() - start_) / 1000);
  }
  BatchTimer(const BatchTimer&) = delete;
  BatchTimer& operator=(const BatchTimer&) = delete;

 private:
  Counters& c_;
  Counters::Histogram& h_;
  uint64_t start_;
};

inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace kvtier
