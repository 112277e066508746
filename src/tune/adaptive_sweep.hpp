// The adaptive search run as a sweep: the trials of a one-knob sweep (power limit or SM clock) are
// measured where adaptive_search asks, each stored as it finishes; measuring a value again adds its
// repetitions to the stored trial, so the stored medians use every reading the search took.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tune/metrics.hpp"
#include "tune/plan.hpp"
#include "tune/search.hpp"
#include "tune/store.hpp"

namespace cnnergy::tune {

struct AdaptiveSweepResult {
  SearchResult search;        // candidate indices refer to the candidate list (numeric values of `knob`)
  std::string best_key;       // trial key of the chosen setting
  std::size_t trials_run = 0;  // runner calls, the reference included
};

// `trials` must vary `knob` only (a reference trial with another value of it, e.g. an unlocked clock,
// is allowed). The reference trial runs first: EDS(k) and the savings need it, and it counts against
// the budget (options.max_trials, default a third of the candidates). Failed trials are stored and
// count as the worst value, and so do trials `feasible` (when given) rejects, e.g. a p99 latency above
// `sweep --max-p99-ms` (they stay stored); PermissionDenied and NotSupported stop the sweep as in execute_sweep.
AdaptiveSweepResult execute_adaptive_sweep(ResultStore& store, std::int64_t sweep_id, const std::vector<TrialSpec>& trials,
                                           Knob knob, const Objective& objective, const TrialRunner& run,
                                           const AdaptiveOptions& options = {},
                                           const std::function<void(const SweepProgress&)>& on_progress = {},
                                           const std::function<bool(const TrialMeasurement&)>& feasible = {});

}  // namespace cnnergy::tune
