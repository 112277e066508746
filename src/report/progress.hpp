// A progress bar with ETA for sweeps, drawn on stderr only when stderr is a terminal (or when forced),
// so logs and pipes stay clean. The ETA is the mean duration of the finished steps times the steps left.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace cnnergy::report {

class ProgressBar {
 public:
  using Clock = std::chrono::steady_clock;
  // `force`: draw even when `out` is not a terminal (tests, `--progress`); `width`: bar characters.
  ProgressBar(std::size_t total, std::FILE* out = stderr, bool force = false, int width = 30);
  ~ProgressBar();  // ends the line if anything was drawn
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Steps done so far and a short label of the current step (e.g. the trial key).
  void update(std::size_t done, const std::string& label = "");
  void finish();
  bool enabled() const { return enabled_; }

  // The line update() draws at `elapsed` since construction (no escape codes): for tests and logs.
  std::string render(std::size_t done, const std::string& label, Clock::duration elapsed) const;

 private:
  std::size_t total_;
  std::FILE* out_;
  bool enabled_;
  int width_;
  bool drawn_ = false;
  Clock::time_point start_;
};

// "1h02m", "3m05s", "42s"
std::string format_duration(double seconds);

}  // namespace cnnergy::report
