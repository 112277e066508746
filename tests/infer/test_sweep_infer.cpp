// `sweep --mode infer` on the CPU: latency percentiles stored with every trial, the cheapest setting
// under --max-p99-ms in grid and adaptive search, a bound no setting meets (best p99 named, exit 2,
// every trial kept), bad flags; the latency-bounded choice as a function; and `cnnergy infer`'s bad
// input the issue lists (a batch that does not fit, dropout in eval semantics).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.hpp"
#include "data/npy.hpp"
#include "../sweep/sim_sweep_env.hpp"
#include "train/cli_run.hpp"
#include "tune/run/infer_trial.hpp"
#include "tune/store.hpp"

using cnnergy::testing::run_cli;
namespace fs = std::filesystem;

namespace cnnergy {
namespace {

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("cnnergy_sweep_infer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const std::string kQuick = "--model lenet5 --device cpu --mode infer --warmup 1 --window-s 0.05 --min-iters 2 "
                           "--windows 2 --requests 20 --objective time ";

// Every ok trial of the database's only sweep, with its stored latency.
std::vector<std::pair<tune::StoredTrial, tune::InferLatency>> stored_latencies(const std::string& db) {
  tune::ResultStore store(db, tune::ResultStore::Mode::kReadOnly);
  std::vector<std::pair<tune::StoredTrial, tune::InferLatency>> out;
  const auto sweeps = store.sweeps();
  EXPECT_EQ(sweeps.size(), 1u);
  if (sweeps.empty()) return out;
  for (const auto& t : store.trials(sweeps[0].id)) {
    const auto l = tune::infer_latency_of(store.trial_telemetry_json(t.id));
    EXPECT_TRUE(l.has_value()) << t.summary.key;
    if (l) out.emplace_back(t, *l);
  }
  return out;
}

TEST(SweepInfer, StoresLatencyPercentilesAndChoosesUnderTheBound) {
  const auto dir = temp_dir("grid");
  const auto db = (dir / "r.db").string();
  const auto r = run_cli("sweep " + kQuick + "--batch 1,4 --max-p99-ms 100000 --db " + db + " --json " +
                         (dir / "r.json").string() + " --report " + (dir / "r.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("inference latency per trial"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("with p99 <= 100000.000 ms"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 of 2 measured settings meet the bound"), std::string::npos) << r.output;
  const auto trials = stored_latencies(db);
  ASSERT_EQ(trials.size(), 2u);
  for (const auto& [t, l] : trials) {
    EXPECT_EQ(l.count, 20u);
    EXPECT_GT(l.p50_ms, 0);
    EXPECT_LE(l.p50_ms, l.p90_ms);
    EXPECT_LE(l.p90_ms, l.p99_ms);
    EXPECT_LE(l.p99_ms, l.max_ms);
    EXPECT_EQ(static_cast<double>(l.batch), t.samples_per_iteration);  // per-image metrics use the batch
  }
  // The JSON export carries the latency with each trial's telemetry.
  std::ifstream f(dir / "r.json");
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("p99_ms"), std::string::npos);
  std::ifstream h(dir / "r.html");
  std::stringstream hs;
  hs << h.rdbuf();
  EXPECT_NE(hs.str().find("Request latency against throughput"), std::string::npos);
  fs::remove_all(dir);
}

TEST(SweepInfer, ABoundNoSettingMeetsNamesTheBestP99AndKeepsEveryTrial) {
  const auto dir = temp_dir("unmet");
  const auto db = (dir / "u.db").string();
  const auto r = run_cli("sweep " + kQuick + "--batch 1,2 --max-p99-ms 0.000001 --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no setting meets p99 <= 0.000 ms: the best p99 seen is"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all measured trials are kept in " + db), std::string::npos) << r.output;
  EXPECT_EQ(stored_latencies(db).size(), 2u);
  fs::remove_all(dir);
}

// The adaptive search works on one hardware knob: the simulated GPU's power limit (fake NVML), while
// the inference itself runs on the CPU (its latency does not follow the limit; the bound's handling does not care).
class SweepInferSim : public cnnergy::testing::SimulatedSweepTest {
 protected:
  SweepInferSim() : SimulatedSweepTest("cnnergy_sweep_infer_sim_", 0.25) {}
};

TEST_F(SweepInferSim, AdaptiveSearchHonoursTheBound) {
  const auto r = sweep(kQuick + "--power-limit 200:700:25 --search adaptive --budget 6 --max-p99-ms 100000 --db " +
                       (dir_ / "a.db").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("adaptive search: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("with p99 <= 100000.000 ms"), std::string::npos) << r.output;
  const auto unmet = sweep(kQuick + "--power-limit 200:700:25 --search adaptive --budget 6 --max-p99-ms 0.000001 "
                           "--db " + (dir_ / "b.db").string());
  EXPECT_EQ(unmet.exit_code, 2) << unmet.output;
  EXPECT_NE(unmet.output.find("the best p99 seen is"), std::string::npos) << unmet.output;
  EXPECT_FALSE(fs::exists(dir_ / "journal.json"));  // the power limit is back
}

TEST(SweepInfer, BadFlagsAreRefusedBeforeAnythingRuns) {
  const auto dir = temp_dir("bad");
  const auto db = (dir / "x.db").string();
  auto r = run_cli("sweep --model lenet5 --device cpu --batch 1 --max-p99-ms 5 --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("add --mode infer"), std::string::npos) << r.output;
  r = run_cli("sweep --model lenet5 --device cpu --mode infer --batch 1 --max-p99-ms 0 --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_cli("sweep --mode infer --db " + db + " -- /bin/true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_cli("sweep --model lenet5 --device cpu --mode infer --requests 0 --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(db));  // nothing opened
  fs::remove_all(dir);
}

tune::TrialSummary summary(const std::string& key, double ms_per_image, double j_per_image) {
  tune::TrialSummary s;
  s.key = key;
  s.metrics[tune::Metric::kTimePerSample].median = ms_per_image;
  s.metrics[tune::Metric::kEnergyPerSample].median = j_per_image;
  return s;
}

TEST(LatencyBound, TheCheapestSettingMeetingTheBoundWins) {
  std::vector<tune::TrialSummary> trials = {summary("a", 1.0, 0.50), summary("b", 0.5, 0.20), summary("c", 0.2, 0.10),
                                            summary("d", 0.1, 0.05)};
  trials[3].status = tune::TrialStatus::kFailed;  // never chosen, whatever it measured
  const std::vector<double> p99 = {2.0, 8.0, 30.0, 1.0};
  auto lat = [&](std::size_t i) {
    tune::InferLatency l;
    l.p99_ms = p99[i];
    return std::optional<tune::InferLatency>(l);
  };
  const auto energy = tune::parse_objective("energy");
  auto c = tune::choose_under_latency_bound(trials, lat, energy, 10.0);
  ASSERT_TRUE(c.chosen);
  EXPECT_EQ(*c.chosen, 1u);  // c is cheaper but misses 10 ms; a meets it but costs more
  EXPECT_DOUBLE_EQ(*c.chosen_value, 0.20);
  EXPECT_EQ(c.measured, 3u);
  EXPECT_EQ(c.meeting, 2u);
  c = tune::choose_under_latency_bound(trials, lat, energy, 100.0);
  EXPECT_EQ(*c.chosen, 2u);
  c = tune::choose_under_latency_bound(trials, lat, energy, 1.5);
  EXPECT_FALSE(c.chosen);
  ASSERT_TRUE(c.best_p99_index);
  EXPECT_EQ(*c.best_p99_index, 0u);
  EXPECT_DOUBLE_EQ(c.best_p99_ms, 2.0);
}

TEST(LatencyBound, LatencyRoundTripsThroughTheTelemetryJson) {
  const std::string j = tune::with_infer_latency(R"({"power_w":{"mean":3}})", {4, 10, 1.5, 1.0, 2.0, 3.0, 4.0});
  const auto l = tune::infer_latency_of(j);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->batch, 4);
  EXPECT_EQ(l->count, 10u);
  EXPECT_DOUBLE_EQ(l->p99_ms, 3.0);
  EXPECT_NE(j.find("power_w"), std::string::npos);  // the telemetry statistics stay
  EXPECT_FALSE(tune::infer_latency_of(R"({"power_w":{}})"));
  EXPECT_FALSE(tune::infer_latency_of(""));
}

TEST(InferBadInput, ABatchThatDoesNotFitSaysWhatItNeededAndKeepsTheOthers) {
  const auto dir = temp_dir("fit");
  // lenet5 on 112x112 images: about 1 MB of activations per image, a terabyte at batch 2^20.
  const std::string common = "infer lenet5 --device cpu --input 1x112x112 --requests 5 --windows 1 --window-s 0.05 --idle-s 0 ";
  auto r = run_cli(common + "--batch 2,1048576 --json " + (dir / "f.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch 1048576: does not fit"), std::string::npos) << r.output;
  std::ifstream f(dir / "f.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const Json j = Json::parse(ss.str());
  ASSERT_EQ(j.at("results").items().size(), 2u);
  EXPECT_GT(j.at("results").items()[0].at("images_per_s").as_number(), 0);  // the batch that fit is kept
  EXPECT_NE(j.at("results").items()[1].at("status").as_string().find("bytes"), std::string::npos);
  r = run_cli(common + "--batch 1048576");
  EXPECT_EQ(r.exit_code, 5) << r.output;  // nothing could run
  EXPECT_NE(r.output.find("no batch size fits"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(InferBadInput, DropoutRunsWithEvalSemanticsAndSaysSo) {
  const auto dir = temp_dir("dropout");
  // The gait 2D-CNN (Castro et al. 2019) has two dropout layers: in eval semantics they pass their
  // input through, so the same images give the same logits whatever the batching.
  Tensor in = Tensor::host(Shape{3, 50, 60, 60});
  for (std::size_t i = 0; i < in.f32().size(); ++i) in.f32()[i] = static_cast<float>((i * 29) % 97) / 48.0f - 1.0f;
  data::write_npy(dir / "in.npy", in);
  for (const char* b : {"1", "3"}) {
    const auto r = run_cli(std::string("infer gait_2dcnn --device cpu --batch ") + b + " --inputs " +
                           (dir / "in.npy").string() + " --outputs " + (dir / (std::string("o") + b + ".npy")).string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("eval semantics: 2 dropout layer(s) pass their input through"), std::string::npos) << r.output;
  }
  const Tensor a = data::read_npy(dir / "o1.npy"), c = data::read_npy(dir / "o3.npy");
  ASSERT_EQ(a.shape(), c.shape());
  for (std::size_t i = 0; i < a.f32().size(); ++i) EXPECT_NEAR(a.f32()[i], c.f32()[i], 1e-4) << i;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cnnergy
