// Confidence intervals (Student t, 95 %) of trial metrics and objectives, and verdict texts.
#include "tune/significance.hpp"

#include <array>
#include <cmath>
#include <limits>

namespace cnnergy::tune {

double t_quantile_975(std::size_t df) {
  // Exact table for the small counts a sweep uses (3-30 repetitions), then the Cornish-Fisher
  // expansion around the normal quantile, accurate to 1e-3 beyond 30 degrees of freedom.
  static constexpr std::array<double, 30> kTable = {
      12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
      2.120,  2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df == 0) return std::numeric_limits<double>::infinity();
  if (df <= kTable.size()) return kTable[df - 1];
  const double z = 1.959964, n = static_cast<double>(df);
  return z + (z * z * z + z) / (4 * n) + (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * n * n);
}

std::optional<Interval> mean_interval(const Stats& s) {
  if (s.n < 2 || !std::isfinite(s.mean) || !std::isfinite(s.stddev)) return std::nullopt;
  const double h = t_quantile_975(s.n - 1) * s.stddev / std::sqrt(static_cast<double>(s.n));
  return Interval{s.mean - h, s.mean + h};
}

std::optional<Interval> objective_interval(const TrialSummary& trial, const Objective& objective,
                                           const TrialSummary* reference, bool per_sample) {
  if (trial.status != TrialStatus::kOk) return std::nullopt;
  const Objective o = resolve_objective(objective, per_sample);
  if (o.kind == Objective::Kind::kMetric) {
    const Stats* s = trial.find(o.metric);
    return s ? mean_interval(*s) : std::nullopt;
  }
  const auto in = eds_inputs(trial, reference, per_sample);
  if (!in) return std::nullopt;
  const auto ti = mean_interval(*in->t), ei = mean_interval(*in->e);
  if (!ti || !ei) return std::nullopt;
  const double k = o.eds_k;
  const double a = (k - 1) / (k * in->e_ref->median), b = 1 / (k * in->t_ref->median);  // EDS = a E + b t (Eq. 4)
  const double centre = a * in->e->mean + b * in->t->mean;
  const double h = std::fabs(a) * ei->half_width() + b * ti->half_width();
  return Interval{centre - h, centre + h};
}

std::string verdict_text(Verdict v) {
  switch (v) {
    case Verdict::kDistinct: return "";
    case Verdict::kNotDistinguishableFromDefault: return "not distinguishable from the default";
    case Verdict::kNotDistinguishableFromRunnerUp: return "not distinguishable from the runner-up";
    case Verdict::kNoInterval: return "one repetition: no interval";
  }
  return "";
}

std::string verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kDistinct: return "distinct";
    case Verdict::kNotDistinguishableFromDefault: return "not_distinguishable_from_default";
    case Verdict::kNotDistinguishableFromRunnerUp: return "not_distinguishable_from_runner_up";
    case Verdict::kNoInterval: return "no_interval";
  }
  return "no_interval";
}

}  // namespace cnnergy::tune
