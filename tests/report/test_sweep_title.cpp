// The sweep heading people read ("ResNet-34 on NVIDIA H100 80GB HBM3: batch x precision, 6 trials")
// in the terminal table and the HTML report, with the raw definition kept in the environment table.
#include <gtest/gtest.h>

#include <sstream>

#include "report/html_report.hpp"
#include "report/report_fixture.hpp"
#include "report/sweep_title.hpp"
#include "report/table.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::report;
using namespace cnnergy::tune;
using cnnergy::tune::testing::TempDir;

namespace {

// Stores a sweep the way `cnnergy sweep` does (description = prefix + canonical definition) and runs
// every trial on the simulated device; returns its id.
std::int64_t store_sweep(ResultStore& store, const SweepDefinition& def, const std::vector<std::string>& gpus,
                         const std::string& prefix = "") {
  Rng rng(7);
  SimDeviceModel dev;
  Environment env = host_environment();
  env.gpu_names = gpus;
  const auto id = store.add_sweep(SweepRecord{0, def.key(), "", "cnnergy sweep", prefix + def.canonical(), env, ""});
  for (const auto& t : def.space.trials(def.reference))
    store.write_trial(id, TrialRecord{t, TrialStatus::kOk, "", report::testing::simulated(rng, dev, 700, 64, false), "", ""});
  return id;
}

SweepDefinition batch_precision(const std::string& workload) {
  SweepDefinition def;
  def.workload = workload;
  def.space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "64,128,256", {}));
  def.space.set(Knob::kPrecision, parse_knob_values(Knob::kPrecision, "fp32,bf16", {}));
  def.reference = def.space.default_reference({});
  def.settings["reps"] = "3";
  return def;
}

}  // namespace

TEST(SweepTitle, ModelOnGpuWithVaryingKnobsAndTrialCount) {
  TempDir dir;
  ResultStore store(dir.file("r.db"));
  const auto id = store_sweep(store, batch_precision("model=resnet34 device=cuda:0 input=3x224x224"),
                              {"NVIDIA H100 80GB HBM3"});
  const SweepData d = load_sweep(store, id);
  const std::string title = "ResNet-34 on NVIDIA H100 80GB HBM3: batch x precision, 6 trials";
  EXPECT_EQ(sweep_title(d), title);

  std::ostringstream terminal;
  print_trials_table(terminal, d);
  EXPECT_NE(terminal.str().find("sweep " + std::to_string(id) + ": " + title + " (" + d.sweep.sweep_key + ")"),
            std::string::npos)
      << terminal.str();
  EXPECT_EQ(terminal.str().find("workload="), std::string::npos) << "the key dump stays out of the heading";

  const std::string html = render_html_report(store);
  EXPECT_NE(html.find("<h2>Sweep " + std::to_string(id) + ": " + title + "</h2>"), std::string::npos);
  // The raw definition moved to the environment table, whole.
  const auto env_row = html.find("<th class=\"l\">definition</th>");
  ASSERT_NE(env_row, std::string::npos);
  EXPECT_NE(html.find("workload=model=resnet34 device=cuda:0 input=3x224x224\nknobs=batch=64|128|256;precision=fp32|bf16",
                      env_row),
            std::string::npos);
  EXPECT_EQ(html.find("<h2>Sweep " + std::to_string(id) + ": workload="), std::string::npos);
}

TEST(SweepTitle, CommandsCpuSimulatedAndUnknownNames) {
  TempDir dir;
  ResultStore store(dir.file("r.db"));
  SweepDefinition cap;
  cap.workload = "command=./train.sh --epochs 1";
  cap.space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "300:700:200", {}));
  cap.reference = cap.space.default_reference({});
  const auto a = store_sweep(store, cap, {"NVIDIA H200", "NVIDIA H200"});
  EXPECT_EQ(sweep_title(load_sweep(store, a)), "command `./train.sh --epochs 1` on NVIDIA H200: power limit, 3 trials");

  const auto b = store_sweep(store, batch_precision("model=lenet5 device=cpu"), {}, "[SIMULATED DEVICE] ");
  EXPECT_EQ(sweep_title(load_sweep(store, b)), "LeNet-5 on the CPU (simulated device): batch x precision, 6 trials");

  SweepDefinition one;
  one.workload = "model=my_net device=cuda:1";
  one.space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "32", {}));
  one.reference = one.space.default_reference({});
  const auto c = store_sweep(store, one, {});
  EXPECT_EQ(sweep_title(load_sweep(store, c)), "my_net on cuda:1: one setting, 1 trial");

  EXPECT_EQ(model_display_name("resnet50"), "ResNet-50");
  EXPECT_EQ(model_display_name("inception_v4"), "Inception-v4");
  EXPECT_EQ(model_display_name("custom"), "custom");
}
