// Would the same sweep, run again, name the same optimum? Two answers from the stored windows:
// a bootstrap over each trial's repetitions (how often each setting comes out as the optimum of an
// objective), and the drift of the reference setting across the sweep's time order (did the GPU
// change under the sweep more than the intervals allow?).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tune/metrics.hpp"

namespace cnnergy::tune {

// One trial's windows for the bootstrap: its summary and each window's metrics (repetition_metrics()).
struct ResampleInput {
  TrialSummary summary;
  std::map<Metric, std::vector<double>> per_repetition;
};

struct StabilityShare {
  std::size_t trial = 0;  // index into the inputs
  double fraction = 0;    // of resamples in which it was the optimum
};

struct Stability {
  Objective objective;
  std::size_t resamples = 0;
  std::vector<StabilityShare> shares;  // most frequent first; only trials that were ever the optimum
  double top_fraction() const { return shares.empty() ? 0 : shares.front().fraction; }
  // An optimum named in at least this share of resamples is "stable".
  static constexpr double kStableFraction = 0.95;
  bool stable() const { return top_fraction() >= kStableFraction; }
};

// Resamples every ok trial's windows with replacement `resamples` times (windows kept whole: all of
// a window's metrics move together), recomputes the medians and the optimum of each objective
// (analyse()), and counts. Deterministic for a given seed. Trials with one window keep it.
std::vector<Stability> bootstrap_stability(const std::vector<ResampleInput>& trials,
                                           const std::vector<Objective>& objectives, std::size_t resamples,
                                           std::uint64_t seed = 0x5eed);

// "optimum in 97 % of resamples" / "unstable: power_limit_w=400 41 %, power_limit_w=350 38 %"
// (`names[i]`: how to call trial i; at most three listed).
std::string stability_text(const Stability& s, const std::vector<std::string>& names);

// The reference's drift across the sweep: a least-squares line through its windows' values in time
// order (value against sequence number); `change` is the line's rise from the first window to the
// last, `interval_width` the full width of the 95 % t-interval of the reference's mean. Flagged when
// the GPU moved more than the interval allows: |change| > interval_width.
struct Drift {
  std::size_t windows = 0;
  double first = 0, last = 0;  // the fitted line at the first and last window
  double change = 0, change_pct = 0;
  double interval_width = 0;
  bool flagged = false;
};
// `values_in_time_order`: one value per window, ordered by sequence; `sequence`: their numbers.
// Empty with fewer than 3 windows.
std::optional<Drift> reference_drift(const std::vector<double>& values_in_time_order,
                                     const std::vector<std::int64_t>& sequence);

}  // namespace cnnergy::tune
