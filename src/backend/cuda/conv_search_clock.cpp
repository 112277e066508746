// The convolution search's accounting and stderr progress line (conv_search_clock.hpp).
#include "backend/cuda/conv_search_clock.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cnnergy::cuda {

namespace {
constexpr double kQuietSeconds = 1.0;  // no line for a search shorter than this
// A terminal gets its line redrawn at most this often; a log file gets a new line this often.
constexpr double kTtyRefreshSeconds = 0.25, kLogRefreshSeconds = 5.0;

double seconds(ConvSearchClock::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

void ConvSearchClock::set_layer(std::size_t index, std::size_t count, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (count == 0) {
    if (printed_)
      std::fprintf(stderr,
                   "%sconvolution algorithm search: done, %.1f s (%zu searched, %zu cached)\n",
                   isatty(STDERR_FILENO) ? "\r\033[K" : "", seconds(Clock::now() - sequence_start_),
                   searched_, cached_);
    started_ = printed_ = false;
    layer_index_ = layer_count_ = 0;
    layer_name_.clear();
    return;
  }
  if (!started_) {
    started_ = true;
    sequence_start_ = Clock::now();
  }
  layer_index_ = index;
  layer_count_ = count;
  layer_name_ = name;
}

void ConvSearchClock::progress() {
  const auto now = Clock::now();
  if (!started_) {
    started_ = true;
    sequence_start_ = now;
  }
  const double elapsed = seconds(now - sequence_start_);
  if (elapsed < kQuietSeconds) return;
  const bool tty = isatty(STDERR_FILENO);
  if (printed_ && seconds(now - last_print_) < (tty ? kTtyRefreshSeconds : kLogRefreshSeconds))
    return;
  std::string where = layer_count_
                          ? "problem " + std::to_string(layer_index_) + " of " +
                                std::to_string(layer_count_) + " (" + layer_name_ + ")"
                          : "problem " + std::to_string(searched_ + 1) + " (" + what_ + ")";
  std::fprintf(stderr, "%sconvolution algorithm search: %s, %.1f s%s", tty ? "\r\033[K" : "",
               where.c_str(), elapsed, tty ? "" : "\n");
  std::fflush(stderr);
  printed_ = true;
  last_print_ = now;
}

ConvSearchClock::Scope::Scope(ConvSearchClock& clock, const std::string& what)
    : clock_(clock), start_(Clock::now()) {
  std::lock_guard<std::mutex> lock(clock_.mutex_);
  if (clock_.depth_++ > 0) return;  // inside another search (auto runs find and graph_find)
  clock_.what_ = what;
  clock_.progress();
}

ConvSearchClock::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(clock_.mutex_);
  if (--clock_.depth_ > 0) return;
  clock_.search_ms_ += 1e3 * seconds(Clock::now() - start_);
  ++clock_.searched_;
  clock_.progress();
}

void ConvSearchClock::count_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++cached_;
}

bool ConvSearchClock::tracing() {
  static const bool on = [] {
    const char* v = std::getenv("CNNERGY_SEARCH_TRACE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void ConvSearchClock::trace(const std::string& stage, const std::string& problem,
                            Clock::time_point since, const std::string& detail) {
  if (!tracing()) return;
  std::fprintf(stderr, "search trace: %-16s %-48s %9.2f ms %s\n", stage.c_str(), problem.c_str(),
               1e3 * seconds(Clock::now() - since), detail.c_str());
}

AlgoSearchStats ConvSearchClock::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AlgoSearchStats s;
  s.search_ms = search_ms_;
  s.searched = searched_;
  s.cached = cached_;
  s.cache_path = cache_path_;
  return s;
}

}  // namespace cnnergy::cuda
