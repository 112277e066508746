// Verdicts with significance: t-intervals of trial metrics, "not distinguishable" when intervals
// overlap, the per-sample basis whether or not energy was measured, and the reference found without
// energy.
#include <gtest/gtest.h>

#include <cmath>

#include "tune/metrics.hpp"
#include "tune/significance.hpp"

using namespace cnnergy::tune;

namespace {

// A trial whose windows took `ms` (per iteration, 10 iterations of 4 samples each) and, when given,
// used `mj` millijoules per iteration.
TrialSummary trial(const std::string& key, std::vector<double> ms, std::vector<double> mj = {}, bool reference = false) {
  TrialMeasurement m;
  m.samples_per_iteration = 4;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    Repetition r;
    r.iterations = 10;
    r.elapsed_ms = ms[i] * 10;
    if (!mj.empty()) r.energy_mj = {mj[i] * 10};
    m.repetitions.push_back(r);
  }
  TrialSummary s;
  s.key = key;
  s.knobs = {KnobSetting{Knob::kPowerLimit, KnobValue::of_text(key)}};
  s.reference = reference;
  s.metrics = compute_trial_metrics(m);
  return s;
}

const Optimum* optimum(const Analysis& a, const std::string& name) {
  for (const auto& o : a.optima)
    if (o.objective.name() == name) return &o;
  return nullptr;
}

}  // namespace

TEST(Significance, TQuantilesAndTheIntervalOfTheMean) {
  EXPECT_NEAR(t_quantile_975(1), 12.706, 1e-3);
  EXPECT_NEAR(t_quantile_975(2), 4.303, 1e-3);
  EXPECT_NEAR(t_quantile_975(30), 2.042, 1e-3);
  EXPECT_NEAR(t_quantile_975(60), 2.000, 2e-3);    // tables: 2.000
  EXPECT_NEAR(t_quantile_975(1000), 1.962, 2e-3);  // tends to the normal 1.960
  Stats s = compute_stats({10, 12, 14});
  const auto ci = mean_interval(s);
  ASSERT_TRUE(ci);
  // mean 12, sd 2, n 3: 12 -/+ 4.303 * 2 / sqrt(3)
  EXPECT_NEAR(ci->low, 12 - 4.303 * 2 / std::sqrt(3.0), 1e-3);
  EXPECT_NEAR(ci->high, 12 + 4.303 * 2 / std::sqrt(3.0), 1e-3);
  EXPECT_FALSE(mean_interval(compute_stats({5})));  // one repetition: no interval
  EXPECT_TRUE((Interval{1, 2}.overlaps(Interval{2, 3})));
  EXPECT_FALSE((Interval{1, 2}.overlaps(Interval{2.1, 3})));
}

TEST(Significance, AnOptimumInsideTheNoiseIsNotDistinguishableFromTheDefault) {
  // The "best" energy is 1 % below the default with 10 % noise: not distinguishable.
  const std::vector<TrialSummary> noisy = {
      trial("700", {10, 11, 9}, {100, 110, 90}, true),
      trial("450", {10, 11, 9}, {99, 109, 89}),
      trial("200", {20, 21, 19}, {150, 160, 140}),
  };
  const Analysis a = analyse(noisy, default_objectives());
  const Optimum* e = optimum(a, "energy_per_sample_j");
  ASSERT_TRUE(e);
  EXPECT_EQ(noisy[e->trial].key, "450");
  EXPECT_EQ(e->verdict, Verdict::kNotDistinguishableFromDefault);
  ASSERT_TRUE(e->interval_low && e->interval_high);
  EXPECT_LT(*e->interval_low, e->value);
  EXPECT_GT(*e->interval_high, e->value);

  // The same gap with 0.1 % noise is a real difference.
  const std::vector<TrialSummary> calm = {
      trial("700", {10, 10.01, 9.99}, {100, 100.1, 99.9}, true),
      trial("450", {10, 10.01, 9.99}, {90, 90.1, 89.9}),
      trial("200", {20, 20.01, 19.99}, {150, 150.1, 149.9}),
  };
  const Analysis b = analyse(calm, default_objectives());
  const Optimum* e2 = optimum(b, "energy_per_sample_j");
  ASSERT_TRUE(e2);
  EXPECT_EQ(calm[e2->trial].key, "450");
  EXPECT_EQ(e2->verdict, Verdict::kDistinct);
  ASSERT_TRUE(e2->runner_up);
  EXPECT_EQ(calm[*e2->runner_up].key, "700");
  // Time: 700 and 450 tie exactly; the optimum is the default itself, tied with the runner-up.
  const Optimum* t = optimum(b, "time_per_sample_ms");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->verdict, Verdict::kNotDistinguishableFromRunnerUp);
  // EDS(k=2) has an interval too (linear in E and t).
  const Optimum* eds2 = optimum(b, "eds_k2");
  ASSERT_TRUE(eds2);
  EXPECT_TRUE(eds2->interval_low.has_value());
}

TEST(Significance, WithoutEnergyTheBasisStaysPerSampleAndTheReferenceIsFound) {
  // A CPU sweep without RAPL: batch 16 is faster per iteration, batch 64 per sample.
  auto cpu_trial = [](const std::string& key, double batch, double ms_per_iter, bool ref) {
    TrialMeasurement m;
    m.samples_per_iteration = batch;
    for (double f : {1.0, 1.001, 0.999}) m.repetitions.push_back(Repetition{ms_per_iter * f * 10, 10, {}, {}, {}, "", {}, {}});
    TrialSummary s;
    s.key = key;
    s.knobs = {KnobSetting{Knob::kBatch, KnobValue::of_number(static_cast<std::int64_t>(batch))}};
    s.reference = ref;
    s.metrics = compute_trial_metrics(m);
    return s;
  };
  const std::vector<TrialSummary> trials = {cpu_trial("batch=16", 16, 4.03, true), cpu_trial("batch=64", 64, 14.0, false)};
  const Analysis a = analyse(trials, default_objectives());
  EXPECT_TRUE(a.per_sample);
  EXPECT_FALSE(a.energy_measured);
  ASSERT_TRUE(a.reference);  // "no reference trial finished" was printed wrongly before
  EXPECT_EQ(*a.reference, 0u);
  const Optimum* t = optimum(a, "time_per_sample_ms");
  ASSERT_TRUE(t);
  EXPECT_EQ(trials[t->trial].key, "batch=64");  // 0.219 ms/sample beats 0.252
  EXPECT_FALSE(optimum(a, "time_per_iteration_ms"));
  EXPECT_FALSE(optimum(a, "energy_per_sample_j"));  // not measured: no optimum, not a zero
  EXPECT_FALSE(t->energy.has_value());
  EXPECT_FALSE(t->avg_power_w.has_value());
  EXPECT_FALSE(t->energy_change_pct.has_value());
  ASSERT_TRUE(t->time_change_pct.has_value());
  EXPECT_NEAR(*t->time_change_pct, (14.0 / 64) / (4.03 / 16) * 100 - 100, 0.1);
}
