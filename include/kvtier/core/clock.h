// Monotonic time for latencies and deadlines.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvtier {

using Clock = std::chrono::steady_clock;

inline uint64_t now_ns() noexcept {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

// Wall-clock nanoseconds since the Unix epoch (written into page headers, not for intervals).
inline uint64_t wall_ns() noexcept {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

class Stopwatch {
 public:
  Stopwatch() noexcept : start_(now_ns()) {}
  uint64_t elapsed_ns() const noexcept { return now_ns() - start_; }
  double elapsed_s() const noexcept { return static_cast<double>(elapsed_ns()) * 1e-9; }
  void restart() noexcept { start_ = now_ns(); }

 private:
  uint64_t start_;
};

}  // namespace kvtier
