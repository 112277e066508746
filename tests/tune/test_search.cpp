// The grid and adaptive searches against the simulated device (power caps with throttling, SM clocks),
// with measurement noise of 0.5 %: the adaptive search must find the grid's optimum within 1 % with at
// most a third of the grid's trials, over many seeds and several curve shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "tune/search.hpp"
#include "tune/sim_device.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;

TEST(Search, GridMeasuresEverythingOnce) {
  std::vector<double> calls;
  const std::vector<double> c = {5, 1, 3, 2, 4};
  const auto r = grid_search(c, [&](double v) {
    calls.push_back(v);
    return (v - 3.2) * (v - 3.2);
  });
  EXPECT_EQ(calls, c);
  EXPECT_EQ(r.best_value, 3);
  EXPECT_EQ(r.best_index, 2u);
  EXPECT_EQ(r.trials(), 5u);
  EXPECT_EQ(r.method, "grid");
}

TEST(Search, BadCandidatesAndBudgets) {
  auto f = [](double v) { return v; };
  EXPECT_THROW(grid_search({}, f), InvalidArgument);
  EXPECT_THROW(adaptive_search({1, 2, 2, 3}, f), InvalidArgument);
  EXPECT_THROW(adaptive_search({1, NAN}, f), InvalidArgument);
  std::vector<double> twelve(12);
  for (std::size_t i = 0; i < twelve.size(); ++i) twelve[i] = static_cast<double>(i);
  EXPECT_THROW(adaptive_search(twelve, f), InvalidArgument);  // a third of 12 is 4 < 5
  EXPECT_EQ(adaptive_search(twelve, f, {12}).method, "grid");  // a budget of the whole grid is the grid
}

TEST(Search, FailedTrialsCountAsWorst) {
  std::vector<double> c;
  for (int i = 0; i < 60; ++i) c.push_back(i);
  // the true minimum region (40-45) fails except at 44; failures must not be chosen
  const auto r = adaptive_search(c, [](double v) {
    if (v >= 40 && v <= 45 && v != 44) return std::nan("");
    return std::abs(v - 42.0) + 1.0;
  });
  EXPECT_TRUE(std::isfinite(r.best_metric));
  EXPECT_LE(r.trials(), 20u);
}

TEST(Search, UnsortedCandidatesAreSearchedInValueOrder) {
  std::vector<double> c;
  for (int i = 0; i < 45; ++i) c.push_back(static_cast<double>((i * 17) % 45));  // a permutation of 0..44
  const auto r = adaptive_search(c, [](double v) { return (v - 30) * (v - 30); });
  EXPECT_EQ(r.best_value, 30);
  EXPECT_EQ(c[r.best_index], 30);
}

namespace {

struct Case {
  const char* name;
  SimDeviceModel model;
  double lo, hi, step;  // the knob's grid
  bool clocks;          // an SM clock sweep instead of a power-cap sweep
};

std::vector<Case> cases() {
  std::vector<Case> out;
  SimDeviceModel m;
  m.dynamic_power_w = 700;  // throttled at every cap: interior energy minimum
  out.push_back({"h200 compute-bound, 5 W steps", m, 200, 700, 5, false});
  out.push_back({"h200 compute-bound, 15 W steps", m, 200, 700, 15, false});
  m = SimDeviceModel{};
  m.dynamic_power_w = 600;
  m.compute_fraction = 0.35;  // memory-bound: cheapest at the lowest cap (a boundary minimum)
  out.push_back({"h200 memory-bound", m, 200, 700, 10, false});
  m = SimDeviceModel{};
  m.dynamic_power_w = 380;  // draws less than the top caps: a flat plateau above ~470 W
  out.push_back({"h200 plateau", m, 200, 700, 10, false});
  m = SimDeviceModel{};
  m.static_power_w = 30;
  m.memory_power_w = 20;
  m.dynamic_power_w = 230;
  m.f_max_mhz = 1770;
  m.f_min_mhz = 300;
  out.push_back({"quadro-like 100-260 W", m, 100, 260, 5, false});  // Krzywaniak et al. 2022's Quadro RTX 6000 range
  m = SimDeviceModel{};
  m.static_power_w = 90;
  m.memory_power_w = 30;
  m.dynamic_power_w = 260;
  m.f_max_mhz = 1530;
  m.f_min_mhz = 135;
  out.push_back({"v100-like high static power", m, 150, 300, 5, false});  // Krzywaniak et al. 2022's V100 range
  m = SimDeviceModel{};
  out.push_back({"h200 SM clock sweep", m, 345, 1980, 30, true});
  return out;
}

}  // namespace

TEST(Search, AdaptiveFindsTheGridOptimumWithAThirdOfTheTrials) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  std::normal_distribution<double> noise(0.0, 0.005);  // 0.5 % measurement noise on every trial
  const char* objectives[] = {"energy", "edp", "eds(k=2)", "eds(k=1.5)"};
  constexpr int kSeedsPerCase = 50;

  std::size_t runs = 0, within_1pct_of_grid = 0, within_1pct_of_true = 0, grid_within_1pct_of_true = 0;
  double worst_vs_grid = 0;
  for (const Case& c : cases()) {
    std::vector<double> grid;
    for (double v = c.lo; v <= c.hi + 1e-9; v += c.step) grid.push_back(v);
    for (int obj = 0; obj < 4; ++obj) {
      for (int s = 0; s < kSeedsPerCase; ++s) {
        SimDeviceModel dev = c.model;  // every run a slightly different device and workload
        dev.static_power_w *= jitter(rng);
        dev.dynamic_power_w *= jitter(rng);
        dev.compute_fraction = std::min(0.97, dev.compute_fraction * jitter(rng));
        dev.v_slope *= jitter(rng);
        auto time = [&](double v) { return c.clocks ? dev.time_at_clock_ms(v) : dev.time_at_cap_ms(v); };
        auto energy = [&](double v) { return c.clocks ? dev.energy_at_clock_mj(v) : dev.energy_at_cap_mj(v); };
        // reference: the default setting (highest cap / unlocked = highest clock)
        const double t_ref = time(c.hi), e_ref = energy(c.hi);
        auto truth = [&](double v) {
          const double t = time(v) / t_ref, e = energy(v) / e_ref;
          switch (obj) {
            case 0: return e;
            case 1: return e * t;
            case 2: return 0.5 * e + 0.5 * t;          // EDS(k=2), Krzywaniak et al. 2022, Eq. 4, normalised
            default: return e / 3.0 + t * 2.0 / 3.0;   // EDS(k=1.5)
          }
        };
        const MeasureFn measure = [&](double v) { return truth(v) * (1.0 + noise(rng)); };
        double true_min = INFINITY;
        for (double v : grid) true_min = std::min(true_min, truth(v));

        const SearchResult g = grid_search(grid, measure);
        const SearchResult a = adaptive_search(grid, measure);
        ++runs;
        ASSERT_LE(a.trials(), grid.size() / 3) << c.name;  // the budget is a hard limit
        ASSERT_EQ(g.trials(), grid.size());
        const double ta = truth(a.best_value), tg = truth(g.best_value);
        worst_vs_grid = std::max(worst_vs_grid, ta / tg - 1.0);
        within_1pct_of_grid += ta <= tg * 1.01;
        within_1pct_of_true += ta <= true_min * 1.01;
        grid_within_1pct_of_true += tg <= true_min * 1.01;
        // never far off, whatever the noise did
        EXPECT_LE(ta, tg * 1.03) << c.name << " " << objectives[obj] << ": adaptive chose " << a.best_value
                                 << ", grid chose " << g.best_value;
      }
    }
  }
  // With 0.5 % noise a single reading cannot separate values 1 % apart with certainty, so the
  // guarantee is statistical: measured failure rate about 0.1 % of runs (docs/tuner.md); we allow 1 %.
  std::printf("adaptive vs grid over %zu noisy runs: %zu within 1 %% of the grid's optimum, %zu within 1 %% of the "
              "true optimum (grid itself: %zu); worst %.2f %%\n",
              runs, within_1pct_of_grid, within_1pct_of_true, grid_within_1pct_of_true, worst_vs_grid * 100);
  EXPECT_GE(static_cast<double>(within_1pct_of_grid), 0.99 * static_cast<double>(runs));
  EXPECT_GE(within_1pct_of_true + runs / 100, grid_within_1pct_of_true);  // as good as the grid against the truth
}

TEST(Search, AdaptiveIsExactWithoutNoise) {
  // Noise-free, the adaptive search must land on the grid's optimum or within 1 % of it for every case.
  for (const Case& c : cases()) {
    std::vector<double> grid;
    for (double v = c.lo; v <= c.hi + 1e-9; v += c.step) grid.push_back(v);
    const SimDeviceModel dev = c.model;
    const MeasureFn energy = [&](double v) { return c.clocks ? dev.energy_at_clock_mj(v) : dev.energy_at_cap_mj(v); };
    const auto g = grid_search(grid, energy);
    const auto a = adaptive_search(grid, energy);
    EXPECT_LE(energy(a.best_value), g.best_metric * 1.01) << c.name;
    EXPECT_LE(a.trials(), grid.size() / 3) << c.name;
  }
}
