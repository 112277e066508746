// Progress bar drawing, the once-a-second redraw while a step runs, and the plain-line mode.
#include "report/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "core/log.hpp"

namespace cnnergy::report {

namespace {
double seconds(ProgressBar::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

ProgressBar::ProgressBar(std::size_t total, std::FILE* out, bool force, int width)
    : total_(total), out_(out),
      mode_(!out ? Mode::kOff : (force || isatty(fileno(out))) ? Mode::kBar : Mode::kLines),
      width_(std::max(width, 5)), start_(Clock::now()) {
  if (mode_ == Mode::kBar) ticker_ = std::thread([this] { ticker(); });
}

ProgressBar::~ProgressBar() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  finish();
}

std::string ProgressBar::eta_text(std::size_t done, double elapsed_s, double running_s) const {
  if (done >= total_) return "done in " + format_duration(elapsed_s);
  if (done == 0) return "ETA ?";  // nothing finished yet: no honest estimate
  // Mean duration of the finished steps times the steps left, less what the running one has done.
  const double mean = (elapsed_s - running_s) / static_cast<double>(done);
  return "ETA " + format_duration(std::max(0.0, mean * static_cast<double>(total_ - done) - std::min(running_s, mean)));
}

std::string ProgressBar::render(std::size_t done, const std::string& running, Clock::duration elapsed,
                                Clock::duration running_for) const {
  const std::size_t d = std::min(done, total_);
  const double frac = total_ ? static_cast<double>(d) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(std::floor(frac * width_));
  std::string bar = "[" + std::string(static_cast<std::size_t>(filled), '#') +
                    std::string(static_cast<std::size_t>(width_ - filled), '.') + "]";
  const double secs = seconds(elapsed), run_s = running.empty() ? 0.0 : seconds(running_for);
  char head[96];
  std::snprintf(head, sizeof head, " %zu/%zu %3.0f%% ", d, total_, frac * 100);
  std::string line = bar + head + "elapsed " + format_duration(secs) + ", " + eta_text(d, secs, run_s);
  if (!running.empty() && d < total_)
    line += "  now: " + (running.size() > 60 ? running.substr(0, 57) + "..." : running) + " (" + format_duration(run_s) + ")";
  return line;
}

std::string ProgressBar::plain_line(std::size_t done, const std::string& label, Clock::duration elapsed) const {
  const double secs = seconds(elapsed);
  return "[" + std::to_string(std::min(done, total_)) + "/" + std::to_string(total_) + "] " + label + "  elapsed " +
         format_duration(secs) + ", " + eta_text(std::min(done, total_), secs, 0.0);
}

void ProgressBar::draw_locked() {
  const auto now = Clock::now();
  const std::string line = render(done_, running_, now - start_, now - running_since_);
  last_line_ = line;
  if (out_ == stderr) {
    set_status_line(line);  // log lines go above it
  } else {
    std::fprintf(out_, "\r%s\x1b[K", line.c_str());
    std::fflush(out_);
  }
  drawn_ = true;
}

void ProgressBar::ticker() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::seconds(1));
    if (!stop_ && !running_.empty()) draw_locked();
  }
}

void ProgressBar::start(const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = label;
  running_since_ = Clock::now();
  if (mode_ == Mode::kBar) draw_locked();
}

void ProgressBar::update(std::size_t done, const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = done;
  running_.clear();
  if (mode_ == Mode::kBar) {
    draw_locked();
  } else if (mode_ == Mode::kLines) {
    std::fprintf(out_, "%s\n", plain_line(done, label, Clock::now() - start_).c_str());
    std::fflush(out_);
  }
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!drawn_) return;
  if (out_ == stderr) {
    set_status_line("");  // the last bar stays on screen as an ordinary line
    std::fprintf(stderr, "%s\n", last_line_.c_str());
    std::fflush(stderr);
  } else {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  drawn_ = false;
}

}  // namespace cnnergy::report
