// Verdicts a user can trust, end to end through `cnnergy sweep`: the main job's simulated power-limit
// sweep (the fake NVML device, the simulated job) gives the same optimum, or "not distinguishable",
// five times running; the first window of a trial is not systematically different from the others;
// --reps auto adds windows to a noisy trial and warns; impossible cells are refused up front or
// dropped with --skip-invalid; a CPU sweep without energy keeps per-sample units, says "not
// measured", finds its reference and draws no empty chart; progress is one plain line per trial off
// a terminal; the plan check's memory estimate is within a factor of two of the executor's allocation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "sim_sweep_env.hpp"
#include "backend/ops.hpp"
#include "core/shape.hpp"
#include "net/zoo/zoo.hpp"
#include "report/sweep_data.hpp"
#include "train/fixed_batch.hpp"
#include "tune/run/runners.hpp"
#include "tune/significance.hpp"
#include "tune/store.hpp"

namespace fs = std::filesystem;
using cnnergy::testing::run_cli;
using namespace cnnergy::tune;

namespace {

class SweepVerdict : public cnnergy::testing::SimulatedSweepTest {
 protected:
  SweepVerdict() : SimulatedSweepTest("cnnergy_verdict_", 0.1) {}
};

cnnergy::report::SweepData load(const std::string& db) {
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  return cnnergy::report::load_sweep(store, store.sweeps().at(0).id);
}

}  // namespace

// The done-when of issue 15: the main job's simulated sweep (scripts/main_job.sh, with fewer and
// shorter windows) run 5 times names the same optimum each time, or says it is not distinguishable.
TEST_F(SweepVerdict, MainJobSimulatedSweepGivesTheSameVerdictFiveTimes) {
  std::map<std::string, std::vector<std::string>> verdicts;  // objective -> per run: trial key or "n.d."
  std::vector<std::string> dbs;
  for (int run = 0; run < 5; ++run) {
    const std::string db = (dir_ / ("run" + std::to_string(run) + ".db")).string();
    const auto r = sweep("--power-limit 200:700:250 --warmup 1 --window-s 0.3 --min-iters 1 --reps 3 --db " + db + " -- " + job_);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("95 % t-interval"), std::string::npos) << r.output;
    const auto d = load(db);
    ASSERT_EQ(d.trials.size(), 3u);
    for (const Optimum& o : d.analysis.optima)
      verdicts[o.objective.name()].push_back(o.verdict == Verdict::kDistinct ? d.summaries[o.trial].key : "n.d.");
    dbs.push_back(db);
  }
  std::size_t distinct_verdicts = 0;
  for (const auto& [objective, runs] : verdicts) {
    std::string line;
    for (const auto& v : runs) line += " " + v;
    std::cout << objective << ":" << line << "\n";  // the record of the five verdicts
    std::string named;
    for (const auto& v : runs) {
      if (v == "n.d.") continue;
      ++distinct_verdicts;
      if (named.empty()) named = v;
      EXPECT_EQ(v, named) << objective << ": a distinct optimum that changes from run to run";
    }
  }
  // Not vacuous: the simulated trade-off is large (200 W runs the job at a far lower clock), so
  // time and energy do find distinct optima.
  EXPECT_GT(distinct_verdicts, 0u);
  EXPECT_EQ(verdicts["time_per_iteration_ms"].size(), 5u);

  // The first window of a trial is not systematically different from the others (it was: a single
  // run at the idle clock, ~1.2 s whatever the power limit).
  int first_slowest = 0, trials = 0;
  std::vector<double> ratios;
  for (const auto& db : dbs) {
    ResultStore store(db, ResultStore::Mode::kReadOnly);
    for (const auto& t : store.trials(store.sweeps()[0].id)) {
      const auto rec = store.read_trial(t.id);
      const auto& reps = rec.measurement.repetitions;
      ASSERT_GE(reps.size(), 3u);
      std::vector<double> per_run;
      for (const auto& r : reps) per_run.push_back(r.elapsed_ms / static_cast<double>(r.iterations));
      const double rest = *std::max_element(per_run.begin() + 1, per_run.end());
      const double rest_min = *std::min_element(per_run.begin() + 1, per_run.end());
      ++trials;
      if (per_run[0] > rest) ++first_slowest;
      ratios.push_back(per_run[0] / (0.5 * (rest + rest_min)));
    }
  }
  std::sort(ratios.begin(), ratios.end());
  EXPECT_LT(first_slowest, trials) << "repetition 0 was the slowest window in every trial";
  EXPECT_LT(first_slowest, trials * 2 / 3 + 1) << first_slowest << " of " << trials;
  EXPECT_NEAR(ratios[ratios.size() / 2], 1.0, 0.2) << "median ratio of the first window to the others";
}

TEST_F(SweepVerdict, RepsAutoAddsWindowsToANoisyTrialAndWarns) {
  // A command that alternates between a slow and a fast run: one run per window, CV far above 5 %.
  const fs::path counter = dir_ / "count";
  const std::string noisy = "sh -c 'n=$(cat " + counter.string() + " 2>/dev/null || echo 0); echo $((n+1)) > " +
                            counter.string() + "; if [ $((n % 2)) = 0 ]; then sleep 0.06; else sleep 0.005; fi'";
  const std::string db = (dir_ / "auto.db").string();
  const auto r = cnnergy::testing::run_cli("sweep --batch 1 --warmup 0 --window-s 0 --min-iters 1 --reps auto --max-reps 6 "
                                           "--cv-threshold 5 --db " + db + " -- " + noisy);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stayed noisy after 6 windows"), std::string::npos) << r.output;
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  const auto trials = store.trials(store.sweeps()[0].id);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].repetitions, 6u);  // 3, then one at a time up to the bound

  // A calm trial (threshold far above its spread) stops at 3.
  const auto calm = cnnergy::testing::run_cli("sweep --batch 1 --warmup 0 --window-s 0 --min-iters 1 --reps auto --max-reps 6 "
                                              "--cv-threshold 900 --db " + (dir_ / "calm.db").string() + " -- true");
  ASSERT_EQ(calm.exit_code, 0) << calm.output;
  ResultStore calm_store((dir_ / "calm.db").string(), ResultStore::Mode::kReadOnly);
  EXPECT_EQ(calm_store.trials(calm_store.sweeps()[0].id)[0].repetitions, 3u);
  EXPECT_EQ(calm.output.find("stayed noisy"), std::string::npos) << calm.output;

  // The data-parallel trials (--gpus 2: two CPU replicas) follow the same rule.
  const std::string dp_db = (dir_ / "dp.db").string();
  const auto dp = run_cli("sweep --model lenet5 --device cpu --gpus 2 --batch 16 --window-s 0.05 --min-iters 1 --warmup 1 "
                          "--reps auto --max-reps 4 --cv-threshold 0.01 --db " + dp_db);
  ASSERT_EQ(dp.exit_code, 0) << dp.output;
  ResultStore dp_store(dp_db, ResultStore::Mode::kReadOnly);
  EXPECT_EQ(dp_store.trials(dp_store.sweeps()[0].id)[0].repetitions, 4u);  // no step time is that steady
  EXPECT_NE(dp.output.find("stayed noisy after 4 windows"), std::string::npos) << dp.output;

  const auto bad = cnnergy::testing::run_cli("sweep --batch 1 --reps often --db " + (dir_ / "bad.db").string() + " -- true");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

TEST_F(SweepVerdict, ImpossibleCellsAreRefusedUpFrontOrDroppedWithTheirReason) {
  const std::string db = (dir_ / "cpu.db").string();
  const std::string common = "sweep --model lenet5 --device cpu --batch 8 --warmup 0 --window-s 0 --min-iters 1 --reps 2 ";
  const auto refused = run_cli(common + "--precision fp32,bf16 --db " + db);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("precision=bf16"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("needs a GPU"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--skip-invalid"), std::string::npos) << refused.output;
  EXPECT_EQ(refused.output.find("trials:"), std::string::npos) << "no trial may run: " << refused.output;
  EXPECT_FALSE(fs::exists(db)) << "a refused plan leaves no database";

  const auto dropped = run_cli(common + "--precision fp32,bf16 --skip-invalid --db " + db);
  ASSERT_EQ(dropped.exit_code, 0) << dropped.output;
  EXPECT_NE(dropped.output.find("dropping 1 trial"), std::string::npos) << dropped.output;
  EXPECT_NE(dropped.output.find("1 ok"), std::string::npos) << dropped.output;
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  const auto trials = store.trials(store.sweeps()[0].id);
  ASSERT_EQ(trials.size(), 2u);
  for (const auto& t : trials) {
    if (t.summary.key.find("bf16") != std::string::npos) {
      EXPECT_EQ(t.summary.status, TrialStatus::kSkipped);
      EXPECT_NE(t.error_message.find("needs a GPU"), std::string::npos) << t.error_message;
    } else {
      EXPECT_EQ(t.summary.status, TrialStatus::kOk);
    }
  }
  // The memory-fit estimate: a batch no device holds is refused before anything runs.
  const auto huge = run_cli(common.substr(0, common.find("--batch")) + "--batch 8,50000000 --warmup 0 --db " +
                            (dir_ / "m.db").string());
  EXPECT_EQ(huge.exit_code, 2) << huge.output;
  EXPECT_NE(huge.output.find("batch=50000000"), std::string::npos) << huge.output;
  EXPECT_NE(huge.output.find("by estimate"), std::string::npos) << huge.output;
  EXPECT_FALSE(fs::exists(dir_ / "m.db"));
}

TEST_F(SweepVerdict, CpuSweepWithoutEnergyKeepsItsUnitsAndItsReference) {
  const std::string db = (dir_ / "u.db").string(), html = (dir_ / "u.html").string();
  const auto r = run_cli("sweep --model lenet5 --device cpu --batch 8,32 --warmup 1 --window-s 0.1 --min-iters 2 --reps 3 "
                         "--db " + db + " --report " + html);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("min time per sample"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("time per iteration"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not measured"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" 0 W"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" 0 J"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("no reference trial finished"), std::string::npos) << r.output;
  // Progress off a terminal: one plain line per visit (interleaved order: 2 trials x 3 windows).
  EXPECT_NE(r.output.find("[1/6] batch=8: ok  elapsed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[2/6] batch=32: ok  elapsed"), std::string::npos) << r.output;
  std::ifstream in(html);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string page = ss.str();
  EXPECT_EQ(page.find("No reference (default) trial finished"), std::string::npos);
  EXPECT_EQ(page.find("energy per sample vs"), std::string::npos) << "no chart of a metric that was not measured";
  EXPECT_EQ(page.find("average power vs"), std::string::npos);
  EXPECT_NE(page.find("time per sample vs"), std::string::npos);
  EXPECT_NE(page.find("not measured"), std::string::npos);
}

// The plan check's memory figure against what the executor really allocates for a training step on
// the CPU: the same order (it is an estimate, meant to refuse only batches far beyond the device).
TEST(PlanCheckMemory, TheEstimateIsCloseToTheExecutorsAllocation) {
  for (const auto& [model, input] : {std::pair<std::string, std::string>{"lenet5", ""}, {"resnet34", "3x64x64"}}) {
    SCOPED_TRACE(model);
    const std::optional<cnnergy::Shape> shape = input.empty() ? std::nullopt : std::optional(cnnergy::parse_shape(input));
    auto graph = cnnergy::build_model(model, shape, std::nullopt);
    auto backend = cnnergy::create_backend(cnnergy::BackendOptions{});
    cnnergy::FixedBatchWorkload work(*graph, *backend, 8);
    const auto& m = work.executor().memory();
    const double actual = static_cast<double>(m.live_peak_bytes + m.parameter_bytes + m.layer_state_bytes);
    const double estimate = cnnergy::tune::estimate_training_bytes(*graph, 8, cnnergy::DType::kF32);
    std::cout << model << ": estimate " << estimate / 1e6 << " MB, executor " << actual / 1e6 << " MB\n";
    EXPECT_GT(estimate, 0.5 * actual);
    EXPECT_LT(estimate, 2.0 * actual);
  }
}
