// Sweep order and repeatability: interleaved and random orders visit every trial once per pass and
// number the windows in time order; an interleaved sweep cut short continues on resume; the bootstrap
// says how often each setting wins; the reference's drift is flagged when it moved more than its
// interval allows; a schema-4 database gains the time-order columns on its first write.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <set>

#include "core/errors.hpp"
#include "tune/stability.hpp"
#include "tune/store.hpp"
#include "tune/store_sql.hpp"
#include "tune/store_sql_v2.hpp"
#include "tune/sweep_order.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;
using cnnergy::tune::testing::TempDir;

namespace {

SweepDefinition three_limits() {
  SweepDefinition d;
  d.workload = "command=./job";
  d.space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "300,400,500", {}));
  d.reference = d.space.default_reference({});  // the largest listed: 500 W
  return d;
}

// One window per call: `energy_j(trial, visit)` joules over 1 s and 10 iterations.
TrialRunner one_window(std::vector<std::string>& visits, const std::function<double(const TrialSpec&)>& energy_j) {
  return [&visits, energy_j](const TrialSpec& t) {
    visits.push_back(t.key);
    TrialMeasurement m;
    Repetition r;
    r.elapsed_ms = 1000;
    r.iterations = 10;
    r.energy_mj = {energy_j(t) * 1e3};
    m.repetitions.push_back(r);
    m.settle_s = 0.5;
    return m;
  };
}

}  // namespace

TEST(SweepOrder, InterleavedVisitsEveryTrialOncePerPassAndNumbersTheWindows) {
  TempDir dir;
  ResultStore store(dir.file("s.db"));
  const SweepDefinition d = three_limits();
  const auto id = store.add_sweep(SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  const SweepPlan plan = plan_sweep(d.space.trials(d.reference), {}, {});
  std::vector<std::string> visits;
  FailurePolicy policy;
  OrderOptions o;
  o.order = SweepOrder::kInterleaved;
  o.passes = 3;
  std::size_t last_total = 0;
  const auto out = execute_sweep_in_order(store, id, plan, one_window(visits, [](const TrialSpec&) { return 100.0; }),
                                          policy, o, {}, [&](const SweepProgress& p) { last_total = p.total; });
  EXPECT_EQ(out.ok, 3u);
  EXPECT_EQ(last_total, 9u);
  ASSERT_EQ(visits.size(), 9u);
  for (std::size_t i = 0; i < 9; ++i) EXPECT_EQ(visits[i], visits[i % 3]) << "visit " << i;  // A B C A B C A B C
  std::set<std::int64_t> seen;
  for (const auto& t : store.trials(id)) {
    EXPECT_EQ(t.repetitions, 3u);
    const TrialRecord rec = store.read_trial(t.id);
    ASSERT_EQ(rec.measurement.repetitions.size(), 3u);
    std::int64_t prev = 0;
    for (const auto& r : rec.measurement.repetitions) {
      ASSERT_TRUE(r.sequence);
      EXPECT_GT(*r.sequence, prev);                // stored in time order
      if (prev) {
        EXPECT_EQ(*r.sequence - prev, 3);  // one pass (three visits) apart
      }
      prev = *r.sequence;
      seen.insert(*r.sequence);
    }
    ASSERT_TRUE(rec.measurement.settle_s);
    EXPECT_DOUBLE_EQ(*rec.measurement.settle_s, 1.5);  // three visits of 0.5 s
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_EQ(store.max_sequence(id), 9);
}

TEST(SweepOrder, RandomOrderShufflesEachPassReproduciblyAndSequentialKeepsTheOldOrder) {
  const SweepDefinition d = three_limits();
  auto visits_for = [&](SweepOrder order, std::uint64_t seed) {
    TempDir dir;
    ResultStore store(dir.file("s.db"));
    const auto id = store.add_sweep(SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
    const SweepPlan plan = plan_sweep(d.space.trials(d.reference), {}, {});
    std::vector<std::string> visits;
    FailurePolicy policy;
    OrderOptions o{order, 4, 0, 0.05, seed};
    TrialRunner run = one_window(visits, [](const TrialSpec&) { return 100.0; });
    if (order == SweepOrder::kSequential) {  // the runner measures all windows of a trial at once
      run = [&visits](const TrialSpec& t) {
        visits.push_back(t.key);
        TrialMeasurement m;
        for (int k = 0; k < 4; ++k) m.repetitions.push_back({1000, 10, {1e5}, std::nullopt, std::nullopt, "", {}, {}});
        return m;
      };
    }
    execute_sweep_in_order(store, id, plan, run, policy, o);
    for (const auto& t : store.trials(id)) {
      const auto rec = store.read_trial(t.id);
      EXPECT_EQ(rec.measurement.repetitions.size(), 4u);
      for (const auto& r : rec.measurement.repetitions) EXPECT_TRUE(r.sequence);
    }
    return visits;
  };
  const auto a = visits_for(SweepOrder::kRandom, 7), b = visits_for(SweepOrder::kRandom, 7);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 12u);
  for (std::size_t pass = 0; pass < 4; ++pass)  // each pass visits every trial once
    EXPECT_EQ(std::set<std::string>(a.begin() + 3 * pass, a.begin() + 3 * pass + 3).size(), 3u);
  bool differs = false;
  for (std::uint64_t seed = 8; seed < 40 && !differs; ++seed) differs = visits_for(SweepOrder::kRandom, seed) != a;
  EXPECT_TRUE(differs) << "the seed changes the order";
  EXPECT_EQ(visits_for(SweepOrder::kSequential, 0).size(), 3u);
}

TEST(SweepOrder, AnInterleavedSweepCutShortKeepsItsWindowsAndResumeAddsTheRest) {
  TempDir dir;
  ResultStore store(dir.file("s.db"));
  const SweepDefinition d = three_limits();
  const auto id = store.add_sweep(SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  const auto trials = d.space.trials(d.reference);
  std::vector<std::string> visits;
  FailurePolicy policy;
  OrderOptions o{SweepOrder::kInterleaved, 3, 0, 0.05, 0};
  int calls = 0;
  const auto out = execute_sweep_in_order(store, id, plan_sweep(trials, {}, {}),
                                          one_window(visits, [](const TrialSpec&) { return 100.0; }), policy, o,
                                          [&] { return ++calls > 4; });
  EXPECT_TRUE(out.stopped_early);
  EXPECT_NE(out.stop_reason.find("--resume"), std::string::npos);
  std::size_t windows = 0;
  for (const auto& t : store.trials(id)) windows += t.repetitions;
  EXPECT_EQ(windows, 4u);  // every finished window is stored

  // --resume: trials with fewer windows than asked are planned again and continued (not restarted).
  PlanOptions po;
  po.resume = true;
  const auto plan = plan_sweep(trials, po, [&](const std::string& key) -> std::optional<TrialStatus> {
    for (const auto& t : store.trials(id))
      if (t.summary.key == key && t.repetitions >= 3) return t.summary.status;
    return std::nullopt;
  });
  EXPECT_EQ(plan.to_run.size(), 3u);
  visits.clear();
  FailurePolicy again;
  execute_sweep_in_order(store, id, plan, one_window(visits, [](const TrialSpec&) { return 100.0; }), again, o);
  EXPECT_EQ(visits.size(), 5u);  // 9 windows in all
  std::set<std::int64_t> seq;
  for (const auto& t : store.trials(id)) {
    EXPECT_EQ(t.repetitions, 3u) << t.summary.key;
    for (const auto& r : store.read_trial(t.id).measurement.repetitions) seq.insert(r.sequence.value_or(-1));
  }
  EXPECT_EQ(seq.size(), 9u);
  EXPECT_EQ(*seq.begin(), 1);
  EXPECT_EQ(*seq.rbegin(), 9);
}

TEST(Stability, BootstrapNamesAClearOptimumAndCallsATieUnstable) {
  auto trial = [](const std::string& key, std::vector<double> energy_j) {
    ResampleInput in;
    in.summary.key = key;
    in.summary.knobs = parse_trial_key(key);
    TrialMeasurement m;
    for (double e : energy_j) m.repetitions.push_back({1000, 10, {e * 1e3}, std::nullopt, std::nullopt, "", {}, {}});
    in.summary.metrics = compute_trial_metrics(m);
    in.per_repetition = repetition_metrics(m);
    return in;
  };
  const std::vector<Objective> energy = {parse_objective("energy")};
  const std::vector<std::string> names = {"300 W", "400 W", "500 W"};
  // Clearly apart: 300 W always wins.
  auto s = bootstrap_stability({trial("power_limit_w=300", {80, 81, 79, 80}), trial("power_limit_w=400", {90, 91, 89, 90}),
                                trial("power_limit_w=500", {100, 101, 99, 100})},
                               energy, 500);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_TRUE(s[0].stable());
  EXPECT_EQ(s[0].shares[0].trial, 0u);
  EXPECT_EQ(stability_text(s[0], names), "optimum in 100 % of resamples");
  // Overlapping: 300 W and 400 W trade places.
  s = bootstrap_stability({trial("power_limit_w=300", {80, 95, 85, 90}), trial("power_limit_w=400", {82, 94, 86, 88}),
                           trial("power_limit_w=500", {100, 101, 99, 100})},
                          energy, 500);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FALSE(s[0].stable());
  ASSERT_GE(s[0].shares.size(), 2u);
  const std::string text = stability_text(s[0], names);
  EXPECT_EQ(text.rfind("unstable: ", 0), 0u) << text;
  EXPECT_NE(text.find("300 W"), std::string::npos);
  EXPECT_NE(text.find("400 W"), std::string::npos);
  EXPECT_EQ(text.find("500 W"), std::string::npos) << "500 W never wins";
  EXPECT_THROW(bootstrap_stability({}, energy, 0), InvalidArgument);
}

TEST(Stability, ReferenceDriftIsFlaggedOnlyWhenItExceedsTheInterval) {
  // Flat with noise: the fitted change is smaller than the interval.
  const auto flat = reference_drift({100, 101, 99, 100.5, 99.5, 100}, {1, 4, 7, 10, 13, 16});
  ASSERT_TRUE(flat);
  EXPECT_FALSE(flat->flagged);
  // A GPU heating under the sweep: +1 % per pass, 6 passes.
  const auto hot = reference_drift({100, 101, 102, 103, 104, 105}, {1, 4, 7, 10, 13, 16});
  ASSERT_TRUE(hot);
  EXPECT_TRUE(hot->flagged);
  EXPECT_NEAR(hot->change, 5.0, 1e-9);
  EXPECT_NEAR(hot->change_pct, 100 * 5.0 / 102.5, 1e-9);
  EXPECT_FALSE(reference_drift({1, 2}, {1, 2}));
}

TEST(StoreV5, SchemaFourDatabaseGainsTimeOrderColumnsOnItsFirstWrite) {
  TempDir dir;
  const std::string path = dir.file("v4.db");
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  std::vector<std::string> ddl = sql_v2::schema();
  for (int v : {2, 3})
    for (const auto& s : sql::upgrade_from(v)) ddl.push_back(s);
  for (const auto& stmt : ddl) ASSERT_EQ(sqlite3_exec(raw, stmt.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << stmt;
  EXPECT_EQ(cnnergy::tune::testing::sqlite_scalar(raw, "SELECT value FROM schema_info WHERE key='schema_version'"), "4");
  sqlite3_close(raw);
  const SweepDefinition d = three_limits();
  {
    ResultStore reader(path, ResultStore::Mode::kReadOnly);  // read as it is
    EXPECT_TRUE(reader.sweeps().empty());
  }
  ResultStore store(path);
  const auto id = store.add_sweep(SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  EXPECT_EQ(store.max_sequence(id), 0);
  TrialRecord rec;
  rec.spec = d.space.trials(d.reference).front();
  rec.measurement.repetitions.push_back({1000, 10, {1e5}, std::nullopt, std::nullopt, "", 5, 2.5});
  rec.measurement.repetitions.push_back({1000, 10, {1e5}, std::nullopt, std::nullopt, "", 8, std::nullopt});
  rec.measurement.settle_s = 2.5;
  store.write_trial(id, rec);
  const auto back = store.read_trial(store.trials(id).at(0).id);
  ASSERT_EQ(back.measurement.repetitions.size(), 2u);
  EXPECT_EQ(back.measurement.repetitions[0].sequence, 5);
  EXPECT_EQ(back.measurement.repetitions[0].settle_s, 2.5);
  EXPECT_EQ(back.measurement.repetitions[1].sequence, 8);
  EXPECT_FALSE(back.measurement.repetitions[1].settle_s);
  EXPECT_EQ(back.measurement.settle_s, 2.5);
  EXPECT_EQ(store.max_sequence(id), 8);
  sqlite3_open(path.c_str(), &raw);
  EXPECT_EQ(cnnergy::tune::testing::sqlite_scalar(raw, "SELECT value FROM schema_info WHERE key='schema_version'"), "6");  // 4 -> 5 -> 6
  sqlite3_close(raw);
}
