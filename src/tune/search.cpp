// Grid and adaptive searches over one knob. The adaptive search works on indices of the sorted
// candidates (a discrete grid), never between them: every value it proposes is one the grid has.
#include "tune/search.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "core/errors.hpp"

namespace cnnergy::tune {

std::size_t SearchResult::distinct_values() const {
  std::set<std::size_t> seen;
  for (const auto& s : steps) seen.insert(s.candidate_index);
  return seen.size();
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_candidates(const std::vector<double>& candidates) {
  if (candidates.empty()) throw InvalidArgument("a search needs at least one candidate value");
  for (double v : candidates)
    if (!std::isfinite(v)) throw InvalidArgument("search candidates must be finite numbers");
  std::vector<double> sorted = candidates;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw InvalidArgument("search candidates must be distinct (a value appears twice)");
}

// Measurements kept per sorted index, so repeated readings of one value are averaged.
class Evaluator {
 public:
  Evaluator(const std::vector<double>& candidates, const MeasureFn& measure, SearchResult& out)
      : candidates_(candidates), measure_(measure), out_(out), order_(candidates.size()),
        readings_(candidates.size()) {
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return candidates[a] < candidates[b]; });
  }

  std::size_t size() const { return order_.size(); }
  std::size_t used() const { return out_.steps.size(); }
  bool measured(std::size_t i) const { return !readings_[i].empty(); }
  std::size_t count(std::size_t i) const { return readings_[i].size(); }
  double mean(std::size_t i) const {
    if (readings_[i].empty()) return kInf;
    return std::accumulate(readings_[i].begin(), readings_[i].end(), 0.0) / static_cast<double>(readings_[i].size());
  }

  double measure(std::size_t i) {
    const std::size_t original = order_[i];
    double m = measure_(candidates_[original]);
    out_.steps.push_back({original, candidates_[original], m});
    if (!std::isfinite(m)) m = kInf;  // a failed trial: worse than every real one
    readings_[i].push_back(m);
    return mean(i);
  }

  // The measured sorted index with the lowest mean.
  std::size_t best() const {
    std::size_t b = size();
    for (std::size_t i = 0; i < size(); ++i)
      if (measured(i) && (b == size() || mean(i) < mean(b))) b = i;
    return b;
  }

  // Pooled standard deviation of repeated readings (0 when no value was read twice): the noise level
  // the final choice compares differences against.
  double noise_sd() const {
    double sum_sq = 0;
    std::size_t dof = 0;
    for (std::size_t i = 0; i < size(); ++i) {
      const double mu = mean(i);
      if (count(i) < 2 || !std::isfinite(mu)) continue;
      for (double r : readings_[i]) sum_sq += (r - mu) * (r - mu);
      dof += count(i) - 1;
    }
    return dof ? std::sqrt(sum_sq / static_cast<double>(dof)) : 0.0;
  }

  std::size_t smoothed_best() const;

  void finish(const std::string& method) const {
    const std::size_t b = smoothed_best();
    out_.method = method;
    out_.best_index = order_[b];
    out_.best_value = candidates_[order_[b]];
    out_.best_metric = mean(b);
  }

 private:
  const std::vector<double>& candidates_;
  const MeasureFn& measure_;
  SearchResult& out_;
  std::vector<std::size_t> order_;  // sorted position -> original index
  std::vector<std::vector<double>> readings_;
};

// Solves the 3x3 normal equations of a least-squares parabola; false when they are singular.
bool solve3(double a[3][4], double coef[3]) {
  for (int c = 0; c < 3; ++c) {
    int p = c;
    for (int r = c + 1; r < 3; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    for (int k = 0; k < 4; ++k) std::swap(a[c][k], a[p][k]);
    if (std::fabs(a[c][c]) < 1e-12) return false;
    for (int r = 0; r < 3; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int k = 0; k < 4; ++k) a[r][k] -= f * a[c][k];
    }
  }
  for (int c = 0; c < 3; ++c) coef[c] = a[c][3] / a[c][c];
  return true;
}

// The final choice. The lowest mean alone is at the mercy of one lucky reading when neighbours differ
// by less than the noise, so: fit a parabola (least squares over every reading) to the six measured
// points nearest the lowest mean and, among the points statistically tied with it (within two
// standard errors), take the one the fit ranks lowest. Where the parabola does not describe the data
// (residuals well above the noise: a kink, a sharp V on a coarse grid) the lowest mean stands.
std::size_t Evaluator::smoothed_best() const {
  constexpr std::size_t kFitPoints = 6;
  constexpr double kFitGuard = 1.5;  // residual RMS allowed, in units of the measured noise
  constexpr double kTieSigmas = 2.0;
  const std::size_t raw = best();
  const double sd = noise_sd();
  if (sd <= 0) return raw;
  std::vector<std::size_t> near;
  for (std::size_t i = 0; i < size(); ++i)
    if (measured(i) && std::isfinite(mean(i))) near.push_back(i);
  if (near.size() < 4) return raw;
  auto dist = [raw](std::size_t i) { return i > raw ? i - raw : raw - i; };
  std::stable_sort(near.begin(), near.end(), [&](std::size_t a, std::size_t b) { return dist(a) < dist(b); });
  near.resize(std::min(near.size(), kFitPoints));

  double s[5] = {0, 0, 0, 0, 0}, t[3] = {0, 0, 0};
  std::size_t n_readings = 0;
  for (std::size_t i : near)
    for (double r : readings_[i]) {
      const double x = static_cast<double>(i) - static_cast<double>(raw);
      double p = 1;
      for (int k = 0; k < 5; ++k, p *= x) {
        s[k] += p;
        if (k < 3) t[k] += p * r;
      }
      ++n_readings;
    }
  double a[3][4] = {{s[0], s[1], s[2], t[0]}, {s[1], s[2], s[3], t[1]}, {s[2], s[3], s[4], t[2]}};
  double coef[3];
  if (n_readings <= 3 || !solve3(a, coef)) return raw;
  auto fit = [&](std::size_t i) {
    const double x = static_cast<double>(i) - static_cast<double>(raw);
    return coef[0] + coef[1] * x + coef[2] * x * x;
  };
  double rss = 0;
  for (std::size_t i : near)
    for (double r : readings_[i]) rss += (r - fit(i)) * (r - fit(i));
  if (std::sqrt(rss / static_cast<double>(n_readings - 3)) > kFitGuard * sd) return raw;
  std::size_t pick = raw;
  for (std::size_t i : near) {
    const double tie = kTieSigmas * sd * std::sqrt(1.0 / static_cast<double>(count(i)) + 1.0 / static_cast<double>(count(raw)));
    if (mean(i) - mean(raw) <= tie && fit(i) < fit(pick)) pick = i;
  }
  return pick;
}

}  // namespace

SearchResult grid_search(const std::vector<double>& candidates, const MeasureFn& measure) {
  check_candidates(candidates);
  SearchResult out;
  out.method = "grid";
  double best = kInf;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    double m = measure(candidates[i]);
    out.steps.push_back({i, candidates[i], m});
    if (!std::isfinite(m)) m = kInf;
    if (i == 0 || m < best) {
      best = m;
      out.best_index = i;
    }
  }
  out.best_value = candidates[out.best_index];
  out.best_metric = best;
  return out;
}

SearchResult adaptive_search(const std::vector<double>& candidates, const MeasureFn& measure,
                             const AdaptiveOptions& options) {
  check_candidates(candidates);
  const std::size_t n = candidates.size();
  const std::size_t budget = options.max_trials ? options.max_trials : n / 3;
  if (budget >= n) return grid_search(candidates, measure);
  if (budget < 5)
    throw InvalidArgument("the adaptive search needs a budget of at least 5 trials (got " + std::to_string(budget) +
                          " for " + std::to_string(n) + " candidates); use the grid for fewer than 15 candidates");

  SearchResult out;
  Evaluator ev(candidates, measure, out);

  // Stage 1, coarse pass: evenly spaced points, both ends included, so a minimum at either end of the
  // range (memory-bound work is cheapest at the lowest cap) is seen directly.
  const std::size_t reserve = std::max<std::size_t>(1, budget / 5);  // kept for stage 3
  const std::size_t coarse = std::clamp<std::size_t>((budget * 3 + 5) / 10, 3, n);
  for (std::size_t j = 0; j < coarse; ++j) {
    const std::size_t i = static_cast<std::size_t>(std::lround(static_cast<double>(j) * static_cast<double>(n - 1) /
                                                                static_cast<double>(coarse - 1)));
    if (!ev.measured(i)) ev.measure(i);
  }

  // Stage 2, golden-section refinement of the bracket [lo, hi] around the best point b: probe the
  // larger side at 0.382 of its length from b, keep the better point, shrink the bracket.
  std::size_t b = ev.best();
  std::size_t lo = b, hi = b;
  while (lo > 0 && !ev.measured(lo - 1)) --lo;
  if (lo > 0) --lo;
  while (hi + 1 < n && !ev.measured(hi + 1)) ++hi;
  if (hi + 1 < n) ++hi;
  while (ev.used() + reserve < budget) {
    const std::size_t left = b - lo, right = hi - b;
    if (left <= 1 && right <= 1) break;
    const bool go_right = right > left || (right == left && ev.mean(hi) < ev.mean(lo));
    const std::size_t side = go_right ? right : left;
    const std::size_t step = std::max<std::size_t>(1, static_cast<std::size_t>(std::lround(0.382 * static_cast<double>(side))));
    const std::size_t x = go_right ? b + step : b - step;
    if (ev.measured(x)) break;  // cannot happen with a consistent bracket; stop rather than loop
    if (ev.measure(x) < ev.mean(b)) {
      (go_right ? lo : hi) = b;
      b = x;
    } else {
      (go_right ? hi : lo) = x;
    }
  }

  // Stage 3, until the budget is spent: if the best point has an unmeasured neighbour (a flat or noisy
  // stretch can fool the last golden step by one grid point, and re-measuring can move the best), look
  // there; otherwise re-measure the closest contenders (fewest readings first), so the
  // final choice rests on averages rather than on one lucky reading.
  while (ev.used() < budget) {
    const std::size_t cb = ev.best();
    if (cb > 0 && !ev.measured(cb - 1)) {
      ev.measure(cb - 1);
      continue;
    }
    if (cb + 1 < n && !ev.measured(cb + 1)) {
      ev.measure(cb + 1);
      continue;
    }
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < n; ++i)
      if (ev.measured(i)) idx.push_back(i);
    std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t c) { return ev.mean(a) < ev.mean(c); });
    idx.resize(std::min<std::size_t>(idx.size(), 3));
    std::size_t pick = idx.front();
    for (std::size_t i : idx)
      if (ev.count(i) < ev.count(pick)) pick = i;
    ev.measure(pick);
  }
  ev.finish("adaptive");
  return out;
}

}  // namespace cnnergy::tune
