// Bootstrap stability of a sweep's optima and the reference setting's drift over time.
#include "tune/stability.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "core/errors.hpp"
#include "tune/significance.hpp"

namespace cnnergy::tune {

std::vector<Stability> bootstrap_stability(const std::vector<ResampleInput>& trials,
                                           const std::vector<Objective>& objectives, std::size_t resamples,
                                           std::uint64_t seed) {
  if (resamples == 0) throw InvalidArgument("the stability check needs at least one resample");
  std::mt19937_64 rng(seed);
  std::vector<TrialSummary> drawn;
  for (const auto& t : trials) drawn.push_back(t.summary);
  // objective name -> counts per trial
  std::map<std::string, std::vector<std::size_t>> counts;
  std::map<std::string, Objective> resolved;
  for (std::size_t b = 0; b < resamples; ++b) {
    for (std::size_t i = 0; i < trials.size(); ++i) {
      const auto& in = trials[i];
      if (in.summary.status != TrialStatus::kOk || in.per_repetition.empty()) continue;
      std::size_t n = 0;
      for (const auto& [m, v] : in.per_repetition) n = std::max(n, v.size());
      if (n == 0) continue;
      std::uniform_int_distribution<std::size_t> pick(0, n - 1);
      std::vector<std::size_t> idx(n);
      for (auto& k : idx) k = pick(rng);
      for (const auto& [metric, values] : in.per_repetition) {
        if (values.size() != n) continue;  // a metric some windows lack keeps its full-sample statistics
        std::vector<double> v;
        v.reserve(n);
        for (std::size_t k : idx) v.push_back(values[k]);
        try {
          drawn[i].metrics[metric] = compute_stats(v);
        } catch (const InvalidArgument&) {  // no finite value drawn: keep the original
        }
      }
    }
    const Analysis a = analyse(drawn, objectives);
    for (const auto& o : a.optima) {
      auto& c = counts[o.objective.name()];
      if (c.empty()) c.assign(trials.size(), 0);
      resolved.emplace(o.objective.name(), o.objective);
      ++c[o.trial];
    }
  }
  std::vector<Stability> out;
  for (const auto& [name, c] : counts) {
    Stability s;
    s.objective = resolved.at(name);
    s.resamples = resamples;
    for (std::size_t i = 0; i < c.size(); ++i)
      if (c[i] > 0) s.shares.push_back({i, static_cast<double>(c[i]) / static_cast<double>(resamples)});
    std::stable_sort(s.shares.begin(), s.shares.end(),
                     [](const StabilityShare& a, const StabilityShare& b) { return a.fraction > b.fraction; });
    out.push_back(std::move(s));
  }
  // The objectives' own order, not the names'.
  std::vector<Stability> ordered;
  for (const auto& obj : objectives)
    for (auto& s : out)
      if (s.resamples && (s.objective.name() == obj.name() || s.objective.label() == obj.label())) {
        ordered.push_back(std::move(s));
        s.resamples = 0;
      }
  for (auto& s : out)
    if (s.resamples) ordered.push_back(std::move(s));
  return ordered;
}

std::string stability_text(const Stability& s, const std::vector<std::string>& names) {
  auto pct = [](double f) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.0f %%", 100 * f);
    return std::string(buf);
  };
  if (s.shares.empty()) return "no optimum in any resample";
  if (s.stable()) return "optimum in " + pct(s.top_fraction()) + " of resamples";
  std::string out = "unstable:";
  for (std::size_t i = 0; i < s.shares.size() && i < 3; ++i) {
    const auto& sh = s.shares[i];
    out += (i ? ", " : " ") + (sh.trial < names.size() ? names[sh.trial] : "#" + std::to_string(sh.trial)) + " " +
           pct(sh.fraction);
  }
  return out;
}

std::optional<Drift> reference_drift(const std::vector<double>& values, const std::vector<std::int64_t>& sequence) {
  if (values.size() < 3 || sequence.size() != values.size()) return std::nullopt;
  const double n = static_cast<double>(values.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < values.size(); ++i) mx += static_cast<double>(sequence[i]), my += values[i];
  mx /= n, my /= n;
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double dx = static_cast<double>(sequence[i]) - mx;
    sxx += dx * dx, sxy += dx * (values[i] - my);
  }
  const double slope = sxx > 0 ? sxy / sxx : 0;
  Drift d;
  d.windows = values.size();
  d.first = my + slope * (static_cast<double>(sequence.front()) - mx);
  d.last = my + slope * (static_cast<double>(sequence.back()) - mx);
  d.change = d.last - d.first;
  d.change_pct = my != 0 ? 100 * d.change / my : 0;
  const auto ci = mean_interval(compute_stats(values));
  d.interval_width = ci ? ci->high - ci->low : 0;
  d.flagged = std::abs(d.change) > d.interval_width;
  return d;
}

}  // namespace cnnergy::tune
