// summarize(): median via sorting a copy; Welford-free two-pass mean/stddev (n is small).
#include "measure/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cnnergy {

Summary summarize(std::span<const double> values) {
  Summary s;
  s.n = values.size();
  if (s.n == 0) return s;
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = s.n % 2 ? v[s.n / 2] : 0.5 * (v[s.n / 2 - 1] + v[s.n / 2]);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(s.n);
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.stddev = s.n > 1 ? std::sqrt(ss / static_cast<double>(s.n - 1)) : 0.0;
  return s;
}

bool still_noisy(std::span<const double> per_window, const RepetitionPolicy& policy) {
  return per_window.size() >= 2 && summarize(per_window).cv() > policy.cv_threshold;
}

bool wants_another_window(std::span<const double> per_window, const RepetitionPolicy& policy) {
  const auto n = static_cast<int>(per_window.size());
  if (n < policy.min_repetitions) return true;
  return n < policy.max_repetitions && still_noisy(per_window, policy);
}

}  // namespace cnnergy
