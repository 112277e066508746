// Significance of a sweep's verdicts: the 95 % confidence interval of every metric of a trial (a
// Student t-interval of the mean over its repetitions) and the verdict on an optimum (distinct, or
// not distinguishable from the default or from the runner-up, when the intervals overlap). The rule
// that gives a noisy trial more repetitions (`--reps auto`) is measure/statistics.hpp's.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "tune/metrics.hpp"

namespace cnnergy::tune {

inline constexpr const char* kIntervalMethod = "95 % t-interval of the mean over the repetitions";

struct Interval {
  double low = 0, high = 0;
  bool overlaps(const Interval& o) const { return low <= o.high && o.low <= high; }
  double half_width() const { return 0.5 * (high - low); }
};

// Two-sided 95 % quantile of Student's t with `df` degrees of freedom (t(0.975, df)); df >= 1.
double t_quantile_975(std::size_t df);

// mean ± t(0.975, n-1) * stddev / sqrt(n); empty for fewer than two repetitions.
std::optional<Interval> mean_interval(const Stats& s);

// The interval of an objective on one trial. A metric's is its mean_interval; EDS(k) = a E + b t is
// linear in the trial's energy and time, so its half-width is bounded by a*hE + b*ht (the two
// intervals added, which stays valid however E and t are correlated); the reference's own spread is
// a common scale of every trial's EDS and is left out.
std::optional<Interval> objective_interval(const TrialSummary& trial, const Objective& objective,
                                           const TrialSummary* reference, bool per_sample);

// Text for people: "not distinguishable from the default", ... (empty for kDistinct).
std::string verdict_text(Verdict v);
// For machines (JSON): distinct, not_distinguishable_from_default, not_distinguishable_from_runner_up,
// no_interval.
std::string verdict_name(Verdict v);

}  // namespace cnnergy::tune
