#include "bench_measure.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>

namespace kvtier::cli {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    return v[i];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.max = v.back();
  return p;
}

double process_cpu_s() {
  struct rusage ru;
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  auto s = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec * 1e-6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

double monotonic_s() {
  struct timespec ts;
  if (::clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double thread_cpu_s() {
  struct timespec ts;
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

nlohmann::json phase_json(const PhaseResult& r, uint64_t bytes, uint64_t pages) {
  const Percentiles p = percentiles(r.latency_ms);
  return {{"gbps", r.busy_s > 0 ? static_cast<double>(bytes) / r.busy_s / 1e9 : 0.0},
          {"pages_per_s", r.busy_s > 0 ? static_cast<double>(pages) / r.busy_s : 0.0},
          {"seconds", r.busy_s},
          {"cpu_s", r.cpu_s},
          {"cpu_s_per_gb", bytes > 0 ? r.cpu_s / (static_cast<double>(bytes) / 1e9) : 0.0},
          {"batch_latency_ms", {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}}},
          {"ok_pages", r.ok_pages},
          {"misses", r.misses},
          {"corrupt", r.corrupt},
          {"errors", r.errors},
          {"monotonic_began_s", r.began_s},
          {"monotonic_ended_s", r.ended_s}};
}

std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 20) == 0)
    return fmt::format("{:.2f} GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB", b / double(1ull << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

}  // namespace kvtier::cli
