// Progress bar drawing.
#include "report/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace cnnergy::report {

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
    : total_(total), out_(out), enabled_(force || (out && isatty(fileno(out)))), width_(std::max(width, 5)),
      start_(Clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

std::string ProgressBar::render(std::size_t done, const std::string& label, Clock::duration elapsed) const {
  const std::size_t d = std::min(done, total_);
  const double frac = total_ ? static_cast<double>(d) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(std::floor(frac * width_));
  std::string bar = "[" + std::string(static_cast<std::size_t>(filled), '#') + std::string(static_cast<std::size_t>(width_ - filled), '.') + "]";
  const double secs = std::chrono::duration<double>(elapsed).count();
  std::string eta = "ETA ?";
  if (d == total_) eta = "done in " + format_duration(secs);
  else if (d > 0) eta = "ETA " + format_duration(secs / static_cast<double>(d) * static_cast<double>(total_ - d));
  char head[96];
  std::snprintf(head, sizeof head, " %zu/%zu %3.0f%% ", d, total_, frac * 100);
  std::string line = bar + head + eta;
  if (!label.empty()) line += "  " + (label.size() > 48 ? label.substr(0, 45) + "..." : label);
  return line;
}

void ProgressBar::update(std::size_t done, const std::string& label) {
  if (!enabled_) return;
  // \r and clear-to-end-of-line: redraw in place
  std::fprintf(out_, "\r%s\x1b[K", render(done, label, Clock::now() - start_).c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    drawn_ = false;
  }
}

}  // namespace cnnergy::report
