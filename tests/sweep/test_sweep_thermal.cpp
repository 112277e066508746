// Steady starts and drift-cancelling order, end to end on the fake NVML device with its thermal model
// (temperature rising with power, leakage rising with temperature and counted against the power
// cap): a sequential power-limit sweep without settling measures its first setting on a cool GPU
// and names it the energy optimum, which it is not; the interleaved, settled sweep names the optimum
// of the model's steady state, which this test computes from the same equations. The fake device is
// deterministic (its noise is a hash of the sensor tick), so the test is seeded by construction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "report/sweep_data.hpp"
#include "sim_sweep_env.hpp"
#include "tune/store.hpp"

using namespace cnnergy::tune;

namespace {

// The fake device's default (H200-like) model and the simulated job, as in fake_nvml_model.hpp and
// tools/sim_gpu_job.cpp.
constexpr double kIdleW = 75, kDynW = 975, kMemW = 40, kFMin = 345, kFMax = 1980, kFStep = 15, kMemFraction = 0.2;
// The thermal model under test, exaggerated so that a minute of CI shows the effect unmistakably: a
// 2 s time constant (a real board: tens of seconds) and 6 W of leakage per degree (several times a
// real board's), on a 20 ms sensor period.
constexpr double kTauS = 2.0, kCPerW = 0.08, kLeakWPerC = 6.0;

double power_w(double f, double temp_c) {
  const double v = 0.70 + 0.30 * (f - kFMin) / (kFMax - kFMin);
  return kIdleW + kDynW * (f / kFMax) * v * v + kMemW + kLeakWPerC * std::max(0.0, temp_c - 30);
}
double clock_at_cap(double cap_w, double temp_c) {
  double f = kFMin;
  for (double g = kFMin; g <= kFMax + 1e-9; g += kFStep)
    if (power_w(g, temp_c) <= cap_w) f = g;
  return f;
}
// Energy of one job run in steady state (arbitrary unit: joules per cycle).
double steady_energy(double cap_w) {
  double t = 30;
  for (int i = 0; i < 500; ++i) t = 30 + kCPerW * power_w(clock_at_cap(cap_w, t), t);
  const double f = clock_at_cap(cap_w, t);
  const double cycles_per_s = 1e6 / ((1 - kMemFraction) / f + kMemFraction / kFMax);
  return power_w(f, t) / cycles_per_s;
}

class SweepThermal : public cnnergy::testing::SimulatedSweepTest {
 protected:
  SweepThermal() : SimulatedSweepTest("cnnergy_thermal_", 0.25) {}
  void SetUp() override {
    SimulatedSweepTest::SetUp();
    char th[64];
    std::snprintf(th, sizeof th, "%g,%g,%g", kTauS, kCPerW, kLeakWPerC);
    env_ += std::string("CNNERGY_FAKE_NVML_THERMAL=") + th + " CNNERGY_FAKE_NVML_UPDATE_MS=20 ";
  }
  // The energy optimum of the sweep in `db`: its trial key and verdict.
  static std::pair<std::string, Verdict> energy_optimum(const std::string& db) {
    ResultStore store(db, ResultStore::Mode::kReadOnly);
    const auto d = cnnergy::report::load_sweep(store, store.sweeps().at(0).id, {parse_objective("energy")});
    EXPECT_EQ(d.analysis.optima.size(), 1u);
    if (d.analysis.optima.empty()) return {"", Verdict::kNoInterval};
    return {d.summaries[d.analysis.optima[0].trial].key, d.analysis.optima[0].verdict};
  }
};

}  // namespace

TEST_F(SweepThermal, SequentialUnsettledPicksTheColdFirstSettingInterleavedSettledPicksTheSteadyOptimum) {
  const int truth = steady_energy(700) < steady_energy(450) ? 700 : 450;  // 700 W: the default, the reference
  ASSERT_EQ(truth, 700) << "the model's steady optimum must not be the first setting for this test to mean anything";
  ASSERT_GT(steady_energy(450) / steady_energy(700), 1.05);  // clearly worse in steady state

  const std::string common = "--power-limit 450,700 --warmup 1 --window-s 0.6 --min-iters 1 --windows 3 ";
  const std::string seq_db = (dir_ / "sequential.db").string(), int_db = (dir_ / "interleaved.db").string();
  const auto seq = sweep(common + "--order sequential --settle-s 0 --db " + seq_db + " -- " + job_);
  ASSERT_EQ(seq.exit_code, 0) << seq.output;
  EXPECT_EQ(energy_optimum(seq_db).first, "power_limit_w=450") << "sequential, unsettled: the cool first trial wins\n"
                                                               << seq.output;

  // This sweep starts on the GPU the first one left warm (the thermal state is shared through a file):
  // settling, not a cool start, is what makes it right.
  const auto ilv = sweep(common + "--order interleaved --settle-s 30 --stability 200 --db " + int_db + " -- " + job_);
  ASSERT_EQ(ilv.exit_code, 0) << ilv.output;
  const auto [key, verdict] = energy_optimum(int_db);
  EXPECT_EQ(key, "power_limit_w=" + std::to_string(truth)) << "interleaved, settled: the steady-state optimum\n"
                                                           << ilv.output;
  // 450 W is about 6 % worse in steady state; three 0.6 s windows on a busy 2-core machine can
  // spread as wide as that (seen once in the full suite at -j2): the claim is the optimum itself, and
  // that it wins every resample, so "not distinguishable from the runner-up" is allowed, a verdict
  // against the default or none is not.
  EXPECT_TRUE(verdict == Verdict::kDistinct || verdict == Verdict::kNotDistinguishableFromRunnerUp) << ilv.output;
  EXPECT_NE(ilv.output.find("settled in"), std::string::npos) << ilv.output;      // the progress line says the wait
  EXPECT_NE(ilv.output.find("steady starts:"), std::string::npos) << ilv.output;  // and the sweep's total
  EXPECT_NE(ilv.output.find("reference drift, energy:"), std::string::npos) << ilv.output;
  EXPECT_NE(ilv.output.find("optimum in 100 % of resamples"), std::string::npos) << ilv.output;

  // Stored: settle time per trial, windows in time order, three visits per trial one pass apart.
  ResultStore store(int_db, ResultStore::Mode::kReadOnly);
  for (const auto& t : store.trials(store.sweeps().at(0).id)) {
    const auto rec = store.read_trial(t.id);
    ASSERT_EQ(rec.measurement.repetitions.size(), 3u) << t.summary.key;
    ASSERT_TRUE(rec.measurement.settle_s) << t.summary.key;
    EXPECT_GT(*rec.measurement.settle_s, 0.0);
    for (std::size_t r = 1; r < 3; ++r) {
      ASSERT_TRUE(rec.measurement.repetitions[r].sequence && rec.measurement.repetitions[r - 1].sequence);
      EXPECT_EQ(*rec.measurement.repetitions[r].sequence - *rec.measurement.repetitions[r - 1].sequence, 2);
      EXPECT_TRUE(rec.measurement.repetitions[r].settle_s) << "every visit waited for a steady start";
    }
  }
}
