// What a `kvtier bench` phase measures and how it is reported: each batch's latency and its
// percentiles, the busiest thread's time and the process's CPU time inside store calls, the
// pages' outcomes, and the phase as JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvtier::cli {

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};
Percentiles percentiles(std::vector<double> v);

// CPU seconds this process has used (all threads, user and system).
double process_cpu_s();
// Seconds on CLOCK_MONOTONIC, the clock other processes on the machine read too (Python's
// time.monotonic()): where a phase began and ended, to line it up with what they sample.
double monotonic_s();
// CPU seconds the calling thread has used.
double thread_cpu_s();

struct PhaseResult {
  double busy_s = 0;  // the busiest thread's time inside store calls
  double cpu_s = 0;   // process CPU time inside store calls (the bench's own checks excluded)
  std::vector<double> latency_ms;
  uint64_t ok_pages = 0;
  uint64_t misses = 0;
  uint64_t corrupt = 0;
  uint64_t errors = 0;
  uint64_t wrong_bytes = 0;  // pages returned OK whose bytes differ (must stay 0)
  std::string first_error;
  double began_s = 0;  // monotonic_s() when the phase began and when its last call returned
  double ended_s = 0;
};

// The phase's figures for `bytes` in `pages` (kvtier bench --json).
nlohmann::json phase_json(const PhaseResult& r, uint64_t bytes, uint64_t pages);
// "1.50 GiB", "64.0 KiB".
std::string human_bytes(uint64_t b);

}  // namespace kvtier::cli
