#include "progress.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "kvtier/core/clock.h"

namespace kvtier::cli {
namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void on_sigint(int) {
  g_interrupted.store(true, std::memory_order_relaxed);
}

std::string clock_text(double seconds) {
  const auto s = static_cast<uint64_t>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string rate_text(double per_s) {
  if (per_s >= 1e6) return fmt::format("{:.1f}M", per_s / 1e6);
  if (per_s >= 1e4) return fmt::format("{:.1f}k", per_s / 1e3);
  return fmt::format("{:.1f}", per_s);
}

constexpr uint64_t kRedrawNs = 100'000'000;

}  // namespace

void catch_interrupts() {
  // A SIGINT ignored on entry (a background job of a shell without job control) stays so.
  struct sigaction current = {};
  if (::sigaction(SIGINT, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) return;
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
}

bool interrupted() {
  return g_interrupted.load(std::memory_order_relaxed);
}

bool progress_wanted(bool quiet) {
  return !quiet && ::isatty(STDERR_FILENO) == 1;
}

Progress::Progress(std::string label, uint64_t total, bool enabled, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      enabled_(enabled),
      total_(total),
      start_ns_(now_ns()) {}

Progress::~Progress() {
  finish();
}

void Progress::set_total(uint64_t total) {
  std::lock_guard lock(mu_);
  total_ = total;
}

void Progress::update(uint64_t done) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  const uint64_t now = now_ns();
  const bool last = total_ != 0 && done >= total_;
  if (!last && last_draw_ns_ != 0 && now - last_draw_ns_ < kRedrawNs) return;
  last_draw_ns_ = now;
  draw(done, now);
}

void Progress::draw(uint64_t done, uint64_t now) {
  const double elapsed = static_cast<double>(now - start_ns_) * 1e-9;
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  std::string line;
  if (total_ != 0) {
    constexpr uint64_t kWidth = 30;
    const uint64_t shown = std::min(done, total_);
    const uint64_t filled = shown * kWidth / total_;
    const std::string eta =
        rate > 0 ? clock_text(static_cast<double>(total_ - shown) / rate) : std::string("-:--");
    line = fmt::format("{} [{}{}] {}/{} {:3}%  {} {}/s  ETA {}", label_, std::string(filled, '#'),
                       std::string(kWidth - filled, ' '), shown, total_, shown * 100 / total_,
                       rate_text(rate), unit_, eta);
  } else {
    line = fmt::format("{} {} {}  {} {}/s  {}", label_, done, unit_, rate_text(rate), unit_,
                       clock_text(elapsed));
  }
  // Pad over what the previous line left.
  const size_t width = line.size();
  if (width < drawn_width_) line.append(drawn_width_ - width, ' ');
  fmt::print(stderr, "\r{}", line);
  std::fflush(stderr);
  drawn_width_ = std::max(drawn_width_, width);
}

void Progress::finish() {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  if (drawn_width_ == 0) return;
  fmt::print(stderr, "\r{}\r", std::string(drawn_width_, ' '));
  std::fflush(stderr);
  drawn_width_ = 0;
  last_draw_ns_ = 0;
}

}  // namespace kvtier::cli
