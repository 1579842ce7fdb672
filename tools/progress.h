// What long CLI commands show while they run, and how they stop on Ctrl-C.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace kvtier::cli {

// The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
inline constexpr int kExitInterrupted = 130;

// Catches the first SIGINT: the running command sees interrupted() and stops at its next
// step, cleans up (bench clears its pages) and prints what it did so far. A second SIGINT
// ends the process at once (the default action is restored after the first). Where SIGINT
// is ignored on entry it stays ignored.
void catch_interrupts();
bool interrupted();

// Whether progress should be drawn: stderr is a terminal and --quiet was not given.
bool progress_wanted(bool quiet);

// A progress bar on stderr: `label [####    ] done/total  pct  rate unit/s  ETA m:ss`, or a
// count and a rate while the total is unknown (0). Redrawn at most every 100 ms (and on the
// last step); erased by finish() and the destructor. Nothing is written when not enabled.
// update() and finish() are safe to call from several threads.
class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled, std::string unit = "pages");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set_total(uint64_t total);
  void update(uint64_t done);
  void finish();

 private:
  void draw(uint64_t done, uint64_t now);

  std::mutex mu_;
  const std::string label_;
  const std::string unit_;
  const bool enabled_;
  uint64_t total_;
  uint64_t start_ns_;
  uint64_t last_draw_ns_ = 0;
  size_t drawn_width_ = 0;
};

}  // namespace kvtier::cli
