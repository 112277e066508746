// Metrics from raw measurements, statistics, EDS(k) against Krzywaniak et al. 2022's published optima, the optimum
// table and the Pareto front against brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "tune/metrics.hpp"
#include "tune/sim_device.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;

TEST(Metrics, StatsMatchTheirDefinitions) {
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  for (int round = 0; round < 50; ++round) {
    std::vector<double> v(1 + rng.next_u32() % 9);
    for (auto& x : v) x = rng.uniform(-5.f, 100.f);
    const Stats s = compute_stats(v);
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    double ss = 0;
    for (double x : v) ss += (x - mean) * (x - mean);
    EXPECT_EQ(s.n, v.size());
    EXPECT_DOUBLE_EQ(s.min, sorted.front());
    EXPECT_DOUBLE_EQ(s.max, sorted.back());
    EXPECT_NEAR(s.mean, mean, 1e-9);
    EXPECT_NEAR(s.stddev, v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0, 1e-9);
    // median: at least half the values on each side
    const auto le = std::count_if(v.begin(), v.end(), [&](double x) { return x <= s.median; });
    const auto ge = std::count_if(v.begin(), v.end(), [&](double x) { return x >= s.median; });
    EXPECT_GE(2 * le, static_cast<long>(v.size()));
    EXPECT_GE(2 * ge, static_cast<long>(v.size()));
  }
  EXPECT_DOUBLE_EQ(compute_stats({1, 3, 2, 10}).median, 2.5);
  EXPECT_NEAR(compute_stats({2, 2, 2}).cv(), 0.0, 1e-15);
  EXPECT_THROW(compute_stats({}), InvalidArgument);
}

TEST(Metrics, DerivedFromRawMeasurements) {
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  TrialMeasurement m;
  m.samples_per_iteration = 256;
  m.flops_per_iteration = 3.1e12;
  m.accuracy = 0.91;
  for (int r = 0; r < 5; ++r) {
    Repetition rep;
    rep.iterations = 20 + rng.next_u32() % 30;
    rep.elapsed_ms = rep.iterations * rng.uniform(90.f, 110.f);
    const double e = rep.elapsed_ms * rng.uniform(300.f, 700.f);  // mJ = ms * W
    rep.energy_mj = {0.6 * e, 0.4 * e};                           // two GPUs
    rep.peak_power_w = rng.uniform(700.f, 800.f);
    m.repetitions.push_back(rep);
  }
  const auto per_rep = repetition_metrics(m);
  for (std::size_t r = 0; r < m.repetitions.size(); ++r) {
    const auto& rep = m.repetitions[r];
    const double iters = static_cast<double>(rep.iterations);
    const double t_iter_ms = rep.elapsed_ms / iters;
    const double e_iter_j = (rep.energy_mj[0] + rep.energy_mj[1]) / 1000 / iters;
    EXPECT_NEAR(per_rep.at(Metric::kTimePerIteration)[r], t_iter_ms, 1e-9);
    EXPECT_NEAR(per_rep.at(Metric::kTimePerSample)[r], t_iter_ms / 256, 1e-12);
    EXPECT_NEAR(per_rep.at(Metric::kEnergyPerIteration)[r], e_iter_j, 1e-9);
    EXPECT_NEAR(per_rep.at(Metric::kEnergyPerSample)[r], e_iter_j / 256, 1e-12);
    EXPECT_NEAR(per_rep.at(Metric::kAvgPower)[r], e_iter_j / (t_iter_ms / 1000), 1e-6);
    EXPECT_NEAR(per_rep.at(Metric::kEdp)[r], (e_iter_j / 256) * (t_iter_ms / 256 / 1000), 1e-15);
    EXPECT_NEAR(per_rep.at(Metric::kEd2p)[r], (e_iter_j / 256) * std::pow(t_iter_ms / 256 / 1000, 2), 1e-18);
    EXPECT_NEAR(per_rep.at(Metric::kGflops)[r], 3.1e12 / (t_iter_ms / 1000) / 1e9, 1e-6);
    EXPECT_NEAR(per_rep.at(Metric::kGflopsPerWatt)[r], 3.1e12 / e_iter_j / 1e9, 1e-9);  // Castro et al. 2019, Table 11
    EXPECT_NEAR(per_rep.at(Metric::kSamplesPerJoule)[r], 256 / e_iter_j, 1e-9);
  }
  const auto stats = compute_trial_metrics(m);
  EXPECT_EQ(stats.at(Metric::kTimePerIteration).n, 5u);
  EXPECT_DOUBLE_EQ(stats.at(Metric::kAccuracy).median, 0.91);
  EXPECT_EQ(stats.count(Metric::kPeakPower), 1u);
}

TEST(Metrics, MissingQuantitiesLeaveMetricsOutAndBadOnesAreRejected) {
  TrialMeasurement m;  // external command: no samples, no FLOPs, no power sensor
  m.repetitions.push_back({1000.0, 1, {}, std::nullopt, std::nullopt, "", {}, {}});
  auto s = compute_trial_metrics(m);
  EXPECT_EQ(s.count(Metric::kTimePerIteration), 1u);
  EXPECT_EQ(s.count(Metric::kTimePerSample), 0u);
  EXPECT_EQ(s.count(Metric::kEnergyPerIteration), 0u);
  EXPECT_EQ(s.count(Metric::kGflops), 0u);
  m.repetitions.push_back({0.0, 1, {}, std::nullopt, std::nullopt, "", {}, {}});
  EXPECT_THROW(compute_trial_metrics(m), InvalidArgument);
  m.repetitions.back() = {10.0, 0, {}, std::nullopt, std::nullopt, "", {}, {}};
  EXPECT_THROW(compute_trial_metrics(m), InvalidArgument);
  m.repetitions.back() = {10.0, 1, {-5.0}, std::nullopt, std::nullopt, "", {}, {}};
  EXPECT_THROW(compute_trial_metrics(m), InvalidArgument);
}

TEST(Metrics, EdsIsOneAtTheReferenceAndLinear) {
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  for (int i = 0; i < 100; ++i) {
    const double er = rng.uniform(1.f, 100.f), tr = rng.uniform(1.f, 100.f), k = rng.uniform(1.01f, 4.f);
    EXPECT_NEAR(eds(er, tr, er, tr, k), 1.0, 1e-12);
    // (0 energy, k * t_ref) lies on the same line (Krzywaniak et al. 2022's construction of Eq. 4)
    EXPECT_NEAR(eds(0, k * tr, er, tr, k), 1.0, 1e-12);
    const double e = rng.uniform(0.f, 200.f), t = rng.uniform(0.f, 200.f);
    EXPECT_NEAR(eds(e, t, er, tr, k), (k - 1) / (k * er) * e + t / (k * tr), 1e-12);
  }
  EXPECT_THROW(eds(1, 1, 1, 1, 1.0), InvalidArgument);
}

namespace {

TrialSummary summary_of(const std::string& key, double energy_j, double time_ms, bool reference) {
  TrialSummary t;
  t.key = key;
  t.knobs = parse_trial_key(key);
  t.reference = reference;
  Stats e, tm, p;
  e.n = tm.n = p.n = 1;
  e.median = e.mean = e.min = e.max = energy_j;
  tm.median = tm.mean = tm.min = tm.max = time_ms;
  p.median = energy_j / (time_ms / 1000);
  t.metrics[Metric::kEnergyPerIteration] = e;
  t.metrics[Metric::kTimePerIteration] = tm;
  t.metrics[Metric::kAvgPower] = p;
  Stats edp = e;
  edp.median = energy_j * time_ms / 1000;
  t.metrics[Metric::kEdp] = edp;
  return t;
}

}  // namespace

// Krzywaniak et al. 2022, Table 2 (Quadro RTX 6000): for each network the power caps the paper reports as the optimum
// of E, EDP, EDS(k=2) and EDS(k=1.5), with total energy (kJ) and time (s). Given those rows as trials,
// our analysis must pick the same rows: this checks the direction and normalisation of Eq. 4.
TEST(Metrics, OptimaReproduceKrzywaniak2022Table2) {
  struct Row { int cap; double energy_kj, time_s; };
  struct Net { const char* name; Row def, e, edp, eds2, eds15; };
  const Net nets[] = {
      {"Alexnet", {260, 3.288, 28.2}, {120, 2.336, 32.5}, {140, 2.427, 30.5}, {140, 2.427, 30.5}, {140, 2.427, 30.5}},
      {"VGG-19", {260, 51.516, 220.5}, {135, 36.342, 286.4}, {165, 38.646, 251.2}, {175, 39.734, 244.5}, {205, 43.686, 231.8}},
      {"Inception3", {260, 41.382, 184.4}, {125, 28.157, 244.9}, {155, 29.720, 212.6}, {175, 31.668, 202.2}, {190, 33.346, 197.0}},
      {"Inception4", {260, 82.316, 348.9}, {125, 56.450, 474.0}, {160, 60.360, 402.6}, {165, 61.202, 397.3}, {215, 71.921, 362.4}},
      {"Resnet50", {260, 27.068, 125.4}, {130, 18.264, 159.1}, {155, 19.323, 143.7}, {160, 19.683, 141.2}, {200, 22.445, 132.1}},
      {"Resnet152", {260, 64.522, 280.2}, {130, 43.839, 362.0}, {170, 47.958, 309.2}, {180, 49.471, 302.4}, {205, 53.645, 292.7}},
  };
  for (const Net& n : nets) {
    SCOPED_TRACE(n.name);
    std::vector<TrialSummary> trials;
    std::vector<int> caps;
    for (const Row* r : {&n.def, &n.e, &n.edp, &n.eds2, &n.eds15}) {
      if (std::find(caps.begin(), caps.end(), r->cap) != caps.end()) continue;  // Alexnet repeats 140 W
      caps.push_back(r->cap);
      trials.push_back(summary_of("power_limit_w=" + std::to_string(r->cap), r->energy_kj * 1000, r->time_s * 1000, r == &n.def));
    }
    const Analysis a = analyse(trials, {parse_objective("energy"), parse_objective("edp"), parse_objective("eds:2"),
                                        parse_objective("eds(k=1.5)")});
    ASSERT_FALSE(a.per_sample);
    ASSERT_TRUE(a.reference.has_value());
    ASSERT_EQ(a.optima.size(), 4u);
    const int expected[] = {n.e.cap, n.edp.cap, n.eds2.cap, n.eds15.cap};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(trials[a.optima[static_cast<std::size_t>(i)].trial].knobs[0].value.number, expected[i]) << a.optima[static_cast<std::size_t>(i)].objective.label();
      // energy saved and time lost against the default, as in the Table 2 columns
      const auto& o = a.optima[static_cast<std::size_t>(i)];
      EXPECT_NEAR(*o.energy_change_pct, (*o.energy / (n.def.energy_kj * 1000) - 1) * 100, 1e-9);
      EXPECT_NEAR(*o.time_change_pct, (o.time / (n.def.time_s * 1000) - 1) * 100, 1e-9);
      EXPECT_LT(*o.energy_change_pct, 0);
      EXPECT_GT(*o.time_change_pct, 0);
    }
  }
}

TEST(Metrics, ParetoFrontMatchesBruteForce) {
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  for (int round = 0; round < 100; ++round) {
    std::vector<std::pair<double, double>> pts(1 + rng.next_u32() % 40);
    for (auto& p : pts) p = {std::round(rng.uniform(1.f, 20.f)), std::round(rng.uniform(1.f, 20.f))};  // ties happen
    const auto front = pareto_front(pts);
    std::vector<bool> on(pts.size(), false);
    for (std::size_t i : front) on[i] = true;
    for (std::size_t i = 0; i < pts.size(); ++i) {
      bool dominated = false, duplicate_before = false;
      for (std::size_t j = 0; j < pts.size(); ++j) {
        if (j == i) continue;
        if (pts[j].first <= pts[i].first && pts[j].second <= pts[i].second &&
            (pts[j].first < pts[i].first || pts[j].second < pts[i].second))
          dominated = true;
        if (pts[j] == pts[i] && j < i) duplicate_before = true;
      }
      EXPECT_EQ(on[i], !dominated && !duplicate_before) << "point " << i;
    }
    for (std::size_t k = 1; k < front.size(); ++k) EXPECT_LT(pts[front[k - 1]].first, pts[front[k]].first);
  }
}

TEST(Metrics, AnalysisOfASimulatedPowerSweep) {
  // A power-cap sweep on the simulated device: the analysis's optima must equal brute force on the
  // same numbers, and the reference trial must be the default (highest) cap.
  SimDeviceModel dev;
  dev.dynamic_power_w = 700;
  std::vector<TrialSummary> trials;
  for (int cap = 200; cap <= 700; cap += 25) {
    TrialMeasurement m;
    m.samples_per_iteration = 128;
    m.flops_per_iteration = 1e12;
    for (int r = 0; r < 3; ++r)
      m.repetitions.push_back({dev.time_at_cap_ms(cap) * 10, 10, {dev.energy_at_cap_mj(cap) * 10}, std::nullopt, std::nullopt, "counter", {}, {}});
    TrialSummary t;
    t.key = "power_limit_w=" + std::to_string(cap);
    t.knobs = parse_trial_key(t.key);
    t.reference = cap == 700;
    t.metrics = compute_trial_metrics(m);
    trials.push_back(t);
  }
  trials[3].status = TrialStatus::kFailed;  // failed trials take no part
  trials[3].metrics.clear();
  const Analysis a = analyse(trials, default_objectives());
  ASSERT_TRUE(a.per_sample);
  ASSERT_EQ(a.reference, trials.size() - 1);
  for (const Optimum& o : a.optima) {
    std::optional<double> best;
    for (const auto& t : trials) {
      auto v = objective_value(t, o.objective, &trials.back(), true);
      if (v && (!best || (o.objective.maximise() ? *v > *best : *v < *best))) best = v;
    }
    ASSERT_TRUE(best) << o.objective.name();
    EXPECT_DOUBLE_EQ(o.value, *best) << o.objective.name();
  }
  // minimum energy below the default cap and saving energy; EDS(2) of the reference is exactly 1
  const auto eds2 = objective_value(trials.back(), parse_objective("eds:2"), &trials.back(), true);
  EXPECT_NEAR(*eds2, 1.0, 1e-12);
  EXPECT_FALSE(a.pareto.empty());
  EXPECT_EQ(std::count(a.pareto.begin(), a.pareto.end(), std::size_t{3}), 0);
}

TEST(Metrics, ObjectivesParse) {
  EXPECT_EQ(parse_objective("eds").eds_k, 2.0);
  EXPECT_EQ(parse_objective("eds:1.5").name(), "eds_k1.5");
  EXPECT_EQ(parse_objective("EDS(k=3)").label(), "EDS(k=3)");
  EXPECT_EQ(parse_objective("eds_k1.25").eds_k, 1.25);
  EXPECT_EQ(parse_objective("edp").metric, Metric::kEdp);
  EXPECT_EQ(parse_objective("gflops/w").metric, Metric::kGflopsPerWatt);
  EXPECT_TRUE(parse_objective("gflops_per_w").maximise());
  EXPECT_FALSE(parse_objective("energy").maximise());
  EXPECT_EQ(parse_objective("time_per_iteration_ms").metric, Metric::kTimePerIteration);
  EXPECT_EQ(resolve_objective(parse_objective("energy"), false).metric, Metric::kEnergyPerIteration);
  EXPECT_THROW(parse_objective("eds:1"), InvalidArgument);
  EXPECT_THROW(parse_objective("eds:x"), InvalidArgument);
  EXPECT_THROW(parse_objective("speed"), InvalidArgument);
  EXPECT_EQ(parse_trial_status("does_not_fit"), TrialStatus::kDoesNotFit);
  EXPECT_THROW(parse_trial_status("meh"), DataError);
}
