// Searches over one knob: the full grid, and an adaptive search for one-dimensional knobs (power
// limit, SM clock) that finds the grid's optimum with a third of its trials. Both only see a callable
// `measure(value) -> metric` (lower is better), so the sweep, the tests and the simulated device share them.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace cnnergy::tune {

// Runs one trial at `value` and returns the metric to minimise (negate a metric to maximise). A
// non-finite result (a failed trial) counts as worse than every finite one.
using MeasureFn = std::function<double(double value)>;

struct SearchStep {
  std::size_t candidate_index = 0;  // index into the candidates as given
  double value = 0;
  double metric = 0;
};

struct SearchResult {
  std::string method;               // "grid" or "adaptive"
  std::size_t best_index = 0;       // index into the candidates as given
  double best_value = 0;
  double best_metric = 0;           // mean of the measurements taken at best_value
  std::vector<SearchStep> steps;    // every measure() call, in order
  std::size_t trials() const { return steps.size(); }
  std::size_t distinct_values() const;
};

// Measures every candidate once, in the order given; the best is the lowest metric.
SearchResult grid_search(const std::vector<double>& candidates, const MeasureFn& measure);

struct AdaptiveOptions {
  std::size_t max_trials = 0;   // budget of measure() calls; 0 means a third of the candidates
};

// Coarse pass over the sorted candidates, then golden-section refinement of the best bracket on the
// discrete grid, then re-measurement of the closest contenders so one noisy reading cannot decide.
// Candidates need not be sorted but must be distinct and finite. Needs a budget of at least 5
// trials (InvalidArgument otherwise: use grid_search for fewer than 15 candidates); a budget of
// the whole grid or more runs the grid. See docs/tuner.md for the reasoning and the measured accuracy.
SearchResult adaptive_search(const std::vector<double>& candidates, const MeasureFn& measure,
                             const AdaptiveOptions& options = {});

}  // namespace cnnergy::tune
