// Summary statistics over repeated measurements: median and spread are what every report shows.
#pragma once

#include <cstddef>
#include <span>

namespace cnnergy {

struct Summary {
  std::size_t n = 0;
  double median = 0, mean = 0, stddev = 0, min = 0, max = 0;
  double cv() const { return mean != 0 ? stddev / mean : 0; }  // coefficient of variation
};

// Sample standard deviation (n-1); an empty span gives n = 0 and zeros.
Summary summarize(std::span<const double> values);

// How many measurement windows: a fixed count, or (`--reps auto`, like `perf stat -r` with its ±)
// more windows while the coefficient of variation stays above a threshold, up to a bound.
struct RepetitionPolicy {
  int min_repetitions = 3;
  int max_repetitions = 3;     // == min_repetitions: a fixed count
  double cv_threshold = 0.05;  // fraction (0.05 = 5 %)
  bool adaptive() const { return max_repetitions > min_repetitions; }
};

// True when the windows measured so far (one value per window, e.g. ms per iteration; every series
// given must be calm) call for another: fewer than min_repetitions, or a CV above the threshold and
// fewer than max_repetitions.
bool wants_another_window(std::span<const double> per_window, const RepetitionPolicy& policy);
// True when the series ended noisy: its CV is above the threshold (to warn about).
bool still_noisy(std::span<const double> per_window, const RepetitionPolicy& policy);

}  // namespace cnnergy
