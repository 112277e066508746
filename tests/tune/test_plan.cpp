// Sweep planning and bookkeeping: sweep identity, shards, resume, the dry-run listing, the failure
// policy and the trial loop with a fake trial runner (no engine needed).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "tune/adaptive_sweep.hpp"
#include "tune/plan.hpp"
#include "tune/sim_device.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;
using cnnergy::tune::testing::random_trial;
using cnnergy::tune::testing::TempDir;

namespace {

SweepDefinition sample_definition() {
  SweepDefinition d;
  d.workload = "model=lenet5";
  d.space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "64,128,256", {}));
  d.space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "200:700:100", {}));
  d.reference = d.space.default_reference({});
  d.settings = {{"repetitions", "3"}, {"warmup_s", "2"}};
  return d;
}

}  // namespace

TEST(Plan, ShardsParseAndPartitionTheTrials) {
  EXPECT_EQ(parse_shard("2/8").index, 2u);
  EXPECT_EQ(parse_shard("1/1").count, 1u);
  for (const char* bad : {"0/3", "4/3", "3", "a/b", "1/0", "-1/3", "1/3x", ""}) EXPECT_THROW(parse_shard(bad), InvalidArgument) << bad;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const auto trials = sample_definition().space.trials(sample_definition().reference);
  for (int round = 0; round < 10; ++round) {
    const std::size_t n = 1 + rng.next_u32() % 7;
    std::multiset<std::string> seen;
    for (std::size_t i = 1; i <= n; ++i) {
      const SweepPlan p = plan_sweep(trials, {ShardSpec{i, n}, false, true}, {});
      for (const auto& t : p.to_run) {
        seen.insert(t.key);
        EXPECT_EQ(t.index % n, i - 1);
      }
      EXPECT_EQ(p.to_run.size() + p.other_shards, trials.size());
    }
    EXPECT_EQ(seen.size(), trials.size());  // every trial in exactly one shard
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), trials.size());
  }
}

TEST(Plan, SweepKeyIgnoresShardAndResumeButNotTheKnobs) {
  const SweepDefinition a = sample_definition();
  SweepDefinition b = sample_definition();
  EXPECT_EQ(a.key(), b.key());
  EXPECT_EQ(a.key().size(), 19u);
  b.settings["repetitions"] = "5";
  EXPECT_NE(a.key(), b.key());
  SweepDefinition c = sample_definition();
  c.space = KnobSpace{};
  c.space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "64,128", {}));
  EXPECT_NE(a.key(), c.key());
}

TEST(Plan, ResumeSkipsFinishedTrialsAndRetriesFailedOnes) {
  const auto trials = sample_definition().space.trials(sample_definition().reference);
  std::map<std::string, TrialStatus> stored = {{trials[0].key, TrialStatus::kOk},
                                               {trials[1].key, TrialStatus::kFailed},
                                               {trials[2].key, TrialStatus::kDoesNotFit},
                                               {trials[3].key, TrialStatus::kSkipped}};
  auto lookup = [&](const std::string& k) -> std::optional<TrialStatus> {
    auto it = stored.find(k);
    return it == stored.end() ? std::nullopt : std::optional<TrialStatus>(it->second);
  };
  SweepPlan p = plan_sweep(trials, {ShardSpec{}, true, true}, lookup);
  EXPECT_EQ(p.already_done, 3u);
  EXPECT_EQ(p.retried, 1u);
  EXPECT_EQ(p.to_run.size(), trials.size() - 3);
  EXPECT_EQ(p.to_run[0].key, trials[1].key);
  p = plan_sweep(trials, {ShardSpec{}, true, false}, lookup);
  EXPECT_EQ(p.already_done, 4u);
  p = plan_sweep(trials, {ShardSpec{}, false, true}, lookup);  // no --resume: everything runs
  EXPECT_EQ(p.to_run.size(), trials.size());

  std::ostringstream os;
  const SweepDefinition d = sample_definition();
  const PlanOptions opts{parse_shard("1/2"), true, true};
  print_plan(os, plan_sweep(trials, opts, lookup), d, opts);
  const std::string text = os.str();
  EXPECT_NE(text.find(d.key()), std::string::npos);
  EXPECT_NE(text.find("other shard"), std::string::npos);
  EXPECT_NE(text.find("done (resume)"), std::string::npos);
  EXPECT_NE(text.find("[reference]"), std::string::npos);
  EXPECT_NE(text.find("18 trials in the sweep"), std::string::npos) << text;
}

TEST(Plan, ExecuteRecordsEveryOutcomeAndSkipsLargerBatchesAfterOom) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  ResultStore store(dir.file("s.db"));
  const SweepDefinition d = sample_definition();
  const auto id = store.add_sweep(SweepRecord{0, d.key(), "", "cnnergy sweep", d.canonical(), host_environment(), ""});
  const SweepPlan plan = plan_sweep(d.space.trials(d.reference), {}, {});
  std::vector<std::string> ran;
  const TrialRunner runner = [&](const TrialSpec& t) -> TrialMeasurement {
    ran.push_back(t.key);
    if (t.find(Knob::kBatch)->number == 128 && t.find(Knob::kPowerLimit)->number == 200) throw OutOfMemory("needs 90 GiB");
    if (t.find(Knob::kPowerLimit)->number == 400) throw std::runtime_error("external command exited with code 3");
    return random_trial(rng, t).measurement;
  };
  FailurePolicy policy(0);
  std::size_t progress_calls = 0, starting_calls = 0;
  const SweepOutcome out = execute_sweep(store, id, plan, runner, policy, {}, [&](const SweepProgress& p) {
    if (p.starting) {  // the trial about to run is announced (the progress bar shows it while it runs)
      EXPECT_EQ(p.last, nullptr);
      EXPECT_EQ(p.done, progress_calls);
      ++starting_calls;
      return;
    }
    ++progress_calls;
    EXPECT_EQ(p.done, progress_calls);
    EXPECT_EQ(p.total, plan.to_run.size());
  });
  EXPECT_EQ(progress_calls, plan.to_run.size());
  EXPECT_EQ(out.does_not_fit, 1u);
  EXPECT_EQ(out.skipped, 1u);  // batch 256 at 200 W: batch 128 at 200 W did not fit
  EXPECT_EQ(out.failed, 3u);   // 400 W for each batch, minus none skipped
  EXPECT_EQ(out.ok + out.failed + out.does_not_fit + out.skipped, plan.to_run.size());
  EXPECT_EQ(ran.size(), plan.to_run.size() - 1);
  EXPECT_EQ(starting_calls, ran.size());  // every trial that ran, not the skipped one
  EXPECT_EQ(store.trial_status(id, "batch=256,power_limit_w=200"), TrialStatus::kSkipped);
  EXPECT_EQ(store.trial_status(id, "batch=128,power_limit_w=200"), TrialStatus::kDoesNotFit);
  for (const auto& t : store.trials(id))
    if (t.summary.status == TrialStatus::kFailed) {
      EXPECT_EQ(t.error_message, "external command exited with code 3");
    }
  EXPECT_EQ(store.trials(id).size(), plan.to_run.size());
}

TEST(Plan, ConsecutiveFailuresAndCancellationStopTheSweep) {
  TempDir dir;
  ResultStore store(dir.file("s.db"));
  const SweepDefinition d = sample_definition();
  const auto id = store.add_sweep(SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  const SweepPlan plan = plan_sweep(d.space.trials(d.reference), {}, {});
  FailurePolicy policy(4);
  SweepOutcome out = execute_sweep(store, id, plan, [](const TrialSpec&) -> TrialMeasurement {
    throw std::runtime_error("cannot start ./train.sh: No such file or directory");
  }, policy);
  EXPECT_TRUE(out.stopped_early);
  EXPECT_EQ(out.failed, 4u);
  EXPECT_NE(out.stop_reason.find("4 trials failed in a row"), std::string::npos);
  EXPECT_EQ(store.trials(id).size(), 4u);

  Rng rng(default_seed());
  int calls = 0;
  FailurePolicy lenient(0);
  out = execute_sweep(store, id, plan, [&](const TrialSpec& t) { return random_trial(rng, t).measurement; }, lenient,
                      [&] { return ++calls > 2; });
  EXPECT_TRUE(out.stopped_early);
  EXPECT_EQ(out.ok, 2u);
  EXPECT_NE(out.stop_reason.find("--resume"), std::string::npos);
}

TEST(Plan, PermissionDeniedStopsTheSweepButIsRecorded) {
  TempDir dir;
  ResultStore store(dir.file("s.db"));
  const SweepDefinition d = sample_definition();
  const auto id = store.add_sweep(SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  const SweepPlan plan = plan_sweep(d.space.trials(d.reference), {}, {});
  FailurePolicy policy;
  EXPECT_THROW(execute_sweep(store, id, plan, [](const TrialSpec&) -> TrialMeasurement {
    throw PermissionDenied("setting the power limit needs root");
  }, policy), PermissionDenied);
  ASSERT_EQ(store.trials(id).size(), 1u);
  EXPECT_EQ(store.trials(id)[0].error_message, "setting the power limit needs root");
}

TEST(Plan, AnInvalidMeasurementFailsOnlyItsTrial) {
  TempDir dir;
  ResultStore store(dir.file("s.db"));
  const SweepDefinition d = sample_definition();
  const auto id = store.add_sweep(SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  const SweepPlan plan = plan_sweep(d.space.trials(d.reference), {}, {});
  FailurePolicy policy(0);
  const auto out = execute_sweep(store, id, plan, [](const TrialSpec&) {
    TrialMeasurement m;
    m.repetitions.push_back({0.0, 0, {}, std::nullopt, std::nullopt, "", {}, {}});
    return m;
  }, policy);
  EXPECT_EQ(out.failed, plan.to_run.size());
  EXPECT_NE(store.trials(id)[0].error_message.find("no time or no iterations"), std::string::npos);
}

TEST(Plan, AdaptiveSweepStoresEveryReadingAndFindsTheOptimum) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  ResultStore store(dir.file("a.db"));
  SimDeviceModel dev;
  dev.dynamic_power_w = 700;
  KnobSpace space;
  DeviceLimits limits;
  limits.power_limit_min_w = 200;
  limits.power_limit_max_w = 700;
  limits.power_limit_default_w = 700;
  space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "all", limits));  // 101 caps
  const auto trials = space.trials(space.default_reference(limits));
  const TrialRunner runner = [&](const TrialSpec& t) {
    const double cap = static_cast<double>(*t.knobs[0].value.number);
    TrialMeasurement m;
    m.samples_per_iteration = 128;
    for (int r = 0; r < 3; ++r)
      m.repetitions.push_back({dev.time_at_cap_ms(cap) * 20 * (1 + 0.003 * rng.normal(0.f, 1.f)), 20,
                               {dev.energy_at_cap_mj(cap) * 20 * (1 + 0.003 * rng.normal(0.f, 1.f))}, std::nullopt, std::nullopt, "sim", {}, {}});
    return m;
  };
  for (const char* objective : {"energy", "eds:2"}) {
    SCOPED_TRACE(objective);
    const auto id = store.add_sweep(SweepRecord{0, std::string("sw-") + objective, "", "x", "sim", {}, ""});
    std::size_t progress = 0;
    const auto r = execute_adaptive_sweep(store, id, trials, Knob::kPowerLimit, parse_objective(objective), runner, {},
                                          [&](const SweepProgress& p) { progress = p.done; });
    EXPECT_LE(r.trials_run, trials.size() / 3);  // the reference included
    EXPECT_EQ(progress, r.trials_run);
    // against the noise-free truth over the whole grid
    const double e_ref = dev.energy_at_cap_mj(700), t_ref = dev.time_at_cap_ms(700);
    auto truth = [&](double cap) {
      return std::string(objective) == "energy" ? dev.energy_at_cap_mj(cap) : eds(dev.energy_at_cap_mj(cap), dev.time_at_cap_ms(cap), e_ref, t_ref, 2);
    };
    double best = INFINITY;
    for (int cap = 200; cap <= 700; cap += 5) best = std::min(best, truth(cap));
    const double chosen = static_cast<double>(*parse_trial_key(r.best_key)[0].value.number);
    EXPECT_LE(truth(chosen), best * 1.01) << r.best_key;
    // every reading is stored: repetitions = 3 x the number of times each value was measured
    std::map<std::string, std::size_t> runs;
    for (const auto& s : r.search.steps) ++runs[trials[s.candidate_index].key];
    const auto stored = store.trials(id);
    std::size_t total_reps = 0;
    for (const auto& t : stored) {
      total_reps += t.repetitions;
      EXPECT_EQ(t.summary.status, TrialStatus::kOk);
      if (t.summary.reference) {
        EXPECT_EQ(t.summary.key, "power_limit_w=700");
      }
    }
    EXPECT_EQ(total_reps, 3 * r.trials_run);
    EXPECT_EQ(store.trial_status(id, "power_limit_w=700"), TrialStatus::kOk);
  }
}
