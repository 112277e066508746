// `cnnergy monitor` as perf stat and nvidia-smi, against the fake driver: -r N repeats with mean and
// standard deviation, the command-less mode that samples until SIGINT, wall-clock ISO-8601 timestamps
// in JSON and CSV, the command's user and system CPU time, SI units (W, J) everywhere.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <regex>
#include <thread>

#include "core/json.hpp"
#include "telemetry_test_util.hpp"

using namespace cnnergy;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::string describe(const test::RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.term_signal) + "\nstdout:\n" + r.out +
         "\nstderr:\n" + r.err;
}
const std::regex kIso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");

}  // namespace

TEST(MonitorCli, RepeatsGiveMeanAndSpreadWithCpuTimeInSiUnits) {
  test::FakeNvmlEnv fake(1, 50, 1);
  test::ScopedEnv env;
  env.set("CNNERGY_FAKE_NVML_LOAD", "0.7");
  const std::string json = fake.dir.file("r.json");
  // The command burns some CPU in user space so its user time cannot be zero.
  auto r = test::run_cnnergy({"monitor", "-r", "3", "--json", json, "--", "sh", "-c",
                              "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.25"},
                             fake.dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "3 runs: mean ± sample standard deviation")) << r.err;
  EXPECT_TRUE(contains(r.err, "CPU time         user")) << r.err;
  EXPECT_TRUE(contains(r.err, " J ± ")) << r.err;
  const Json j = Json::parse(test::read_file(json));
  EXPECT_EQ(j.at("repeats").number(), 3);
  ASSERT_EQ(j.at("runs").items().size(), 3u);
  double user_sum = 0;
  for (const Json& run : j.at("runs").items()) {
    EXPECT_GE(run.at("elapsed_s").number(), 0.25);
    EXPECT_TRUE(std::regex_match(run.at("started_at").str(), kIso)) << run.at("started_at").str();
    EXPECT_GT(run.at("gpus").items().at(0).at("energy_j").number(), 0);
    EXPECT_EQ(run.at("gpus").items().at(0).find("energy_mj"), nullptr);  // SI only
    user_sum += run.at("user_cpu_s").number() + run.at("system_cpu_s").number();
  }
  EXPECT_GT(user_sum, 0);
  const Json& e = j.at("summary").at("gpus").items().at(0).at("energy_j");
  EXPECT_EQ(e.at("n").number(), 3);
  EXPECT_GE(e.at("mean").number(), e.at("min").number());
  EXPECT_LE(e.at("mean").number(), e.at("max").number());
  EXPECT_GE(e.at("stddev").number(), 0);
  // The mean is the mean of the runs.
  double sum = 0;
  for (const Json& run : j.at("runs").items()) sum += run.at("gpus").items().at(0).at("energy_j").number();
  EXPECT_NEAR(e.at("mean").number(), sum / 3, 1e-6 * sum);

  // A failing run stops the repeats and its exit code is passed through.
  r = test::run_cnnergy({"monitor", "-r", "5", "--format", "json", "--", "sh", "-c", "exit 4"}, fake.dir);
  EXPECT_EQ(r.exit_code, 4) << describe(r);
  const auto brace = r.err.find('{');
  ASSERT_NE(brace, std::string::npos) << r.err;
  EXPECT_EQ(Json::parse(r.err.substr(brace)).at("repeats").number(), 1);
}

TEST(MonitorCli, WithoutACommandSamplesUntilSigint) {
  test::FakeNvmlEnv fake(2, 50, 1);
  const std::string out = fake.dir.file("o.txt"), err = fake.dir.file("e.txt"), csv = fake.dir.file("s.csv"),
                    json = fake.dir.file("m.json");
  const pid_t pid = test::spawn(
      {test::cnnergy_binary(), "monitor", "--interval-ms", "100", "--csv", csv, "--json", json}, out, err);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  ::kill(pid, SIGINT);
  const auto r = test::wait_result(pid, out, err);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "stopped by signal 2")) << r.err;
  EXPECT_TRUE(contains(r.err, "GPU 1 energy")) << r.err;
  // One live line per interval on stdout, each starting with a UTC timestamp and showing watts.
  std::size_t live_lines = 0;
  for (std::size_t pos = 0; (pos = r.out.find('\n', pos)) != std::string::npos; ++pos)
    if (pos + 25 < r.out.size() && std::regex_match(r.out.substr(pos + 1, 24), kIso)) ++live_lines;
  EXPECT_GE(live_lines, 3u) << r.out;
  EXPECT_TRUE(contains(r.out, " W")) << r.out;
  const Json j = Json::parse(test::read_file(json));
  EXPECT_EQ(j.at("command").items().size(), 0u);
  const Json& run = j.at("runs").items().at(0);
  EXPECT_GT(run.at("elapsed_s").number(), 0);
  EXPECT_GT(run.at("gpu_energy_j").number(), 0);
  EXPECT_TRUE(run.at("user_cpu_s").is_null());  // no command, no command CPU time
  const std::string rows = test::read_file(csv);
  const auto second_line = rows.find('\n') + 1;
  EXPECT_TRUE(std::regex_match(rows.substr(second_line, 24), kIso)) << rows.substr(0, 200);
  EXPECT_TRUE(contains(rows.substr(0, rows.find('\n')), "gpu1_energy_counter_j")) << rows.substr(0, 200);
}

TEST(MonitorCli, OldSpellingsStillWorkWithANote) {
  test::FakeNvmlEnv fake(2, 50, 1);
  const std::string out = fake.dir.file("rep.txt");
  auto r = test::run_cnnergy({"monitor", "--gpus", "1", "--interval", "50", "--output", out, "--", "true"}, fake.dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* old : {"--gpus is deprecated", "--interval is deprecated", "--output is deprecated"})
    EXPECT_TRUE(contains(r.err, old)) << old << "\n" << r.err;
  const std::string report = test::read_file(out);
  EXPECT_TRUE(contains(report, "GPU 1 energy")) << report;
  EXPECT_FALSE(contains(report, "GPU 0 energy")) << report;  // --gpus 1 still means the GPU index here
  EXPECT_TRUE(contains(report, "every 50.0 ms")) << report;
}
