// Sweep progress that tells the truth: the trial running now with its knobs and how long it has run,
// the elapsed time, and an ETA from the trials finished so far. On a terminal it is a bar redrawn in
// place every second, which log lines are printed above (core/log's status line); elsewhere (CI
// logs, `tee`) it is one plain line per finished trial.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace cnnergy::report {

class ProgressBar {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Mode { kBar, kLines, kOff };
  // kBar when `out` is a terminal or `force`; kLines (plain lines) for any other file; kOff for null.
  ProgressBar(std::size_t total, std::FILE* out = stderr, bool force = false, int width = 30);
  ~ProgressBar();  // ends the bar if anything was drawn
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // A step begins (e.g. the trial "power_limit_w=300"): the bar shows it with its running time.
  void start(const std::string& label);
  // Steps finished so far, and the one that just finished with its outcome ("power_limit_w=300: ok").
  void update(std::size_t done, const std::string& label = "");
  void finish();
  bool enabled() const { return mode_ == Mode::kBar; }
  Mode mode() const { return mode_; }

  // The bar at `elapsed` since construction, with `running` the label of the step under way for
  // `running_for` (no escape codes): for tests and logs.
  std::string render(std::size_t done, const std::string& running, Clock::duration elapsed,
                     Clock::duration running_for = {}) const;
  // The plain line for a finished step: "[4/10] power_limit_w=300: ok  elapsed 40s, ETA 1m00s".
  std::string plain_line(std::size_t done, const std::string& label, Clock::duration elapsed) const;

 private:
  std::string eta_text(std::size_t done, double elapsed_s, double running_s) const;
  void draw_locked();
  void ticker();

  std::size_t total_;
  std::FILE* out_;
  Mode mode_;
  int width_;
  Clock::time_point start_;
  std::mutex mutex_;
  std::size_t done_ = 0;
  std::string running_, last_line_;
  Clock::time_point running_since_;
  bool drawn_ = false, stop_ = false;
  std::condition_variable wake_;
  std::thread ticker_;  // redraws the bar every second while a step runs (kBar only)
};

// "1h02m", "3m05s", "42s"
std::string format_duration(double seconds);

}  // namespace cnnergy::report
