// The convolution algorithm search's accounting and progress line, one per CUDA context: wall time
// spent searching, problems searched, decisions served by the persistent cache, and a line on
// stderr ("problem i of N, elapsed, the layer") once the search has taken more than a second, so a
// long search never looks like a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>

#include "backend/ops.hpp"

namespace cnnergy::cuda {

class ConvSearchClock {
 public:
  using Clock = std::chrono::steady_clock;

  // The executor names the layer it resolves next (index of count, from 1); count 0 ends the
  // sequence (the progress line is finished with the total).
  void set_layer(std::size_t index, std::size_t count, const std::string& name);

  // A search of one problem, timed while alive; `what` names it when no layer was named. Scopes
  // nest: only the outermost one counts.
  class Scope {
   public:
    Scope(ConvSearchClock& clock, const std::string& what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ConvSearchClock& clock_;
    Clock::time_point start_;
  };

  void count_cached();  // a decision taken from the persistent cache

  // With CNNERGY_SEARCH_TRACE=1 in the environment: one stderr line per search stage ("trace:
  // <stage> <problem> <ms> <detail>"), so a slow first step can be taken apart on a lent GPU.
  static bool tracing();
  static void trace(const std::string& stage, const std::string& problem, Clock::time_point since,
                    const std::string& detail = {});
  AlgoSearchStats stats() const;
  void set_cache_path(std::string path) { cache_path_ = std::move(path); }

 private:
  void progress();  // prints the line where due; mutex_ held

  mutable std::mutex mutex_;
  double search_ms_ = 0;
  std::size_t searched_ = 0, cached_ = 0;
  std::string cache_path_;
  std::size_t layer_index_ = 0, layer_count_ = 0;
  std::string layer_name_, what_;
  int depth_ = 0;  // nested scopes count once (auto's search runs find's and graph_find's)
  bool started_ = false, printed_ = false;
  Clock::time_point sequence_start_, last_print_;
};

}  // namespace cnnergy::cuda
