// The telemetry commands end to end, run as a user would (the cnnergy binary against the fake
// driver): devices, monitor (energy report, exit codes, signals, CSV, knobs) and restore, including
// a real kill -9 in the middle of a power-limit change followed by `cnnergy restore`.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include "telemetry/journal.hpp"
#include "core/json.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;

namespace {
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
std::uint32_t limit_mw(unsigned gpu) {
  auto r = Nvml::open();
  if (!r.nvml) throw std::runtime_error("fake NVML did not open");
  return r.nvml->device(gpu).power_limits().current_mw.value();
}
std::string describe(const test::RunResult& r) {
  return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.term_signal) +
         "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}
}  // namespace

TEST(Cli, HelpListsTheTelemetryCommands) {
  test::TempDir dir;
  const auto r = test::run_cnnergy({"--help"}, dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* c : {"devices", "monitor", "restore"}) EXPECT_TRUE(contains(r.out, c)) << c;
}

TEST(Cli, DevicesTextJsonAndCount) {
  test::FakeNvmlEnv fake(2);
  auto r = test::run_cnnergy({"devices"}, fake.dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "GPU 1: NVIDIA H200")) << r.out;
  EXPECT_TRUE(contains(r.out, "energy counter")) << r.out;
  EXPECT_TRUE(contains(r.out, "power limit 200.0 W to 700.0 W")) << r.out;

  r = test::run_cnnergy({"devices", "--json"}, fake.dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Json j = Json::parse(r.out);
  EXPECT_TRUE(j.at("nvml_available").boolean());
  ASSERT_EQ(j.at("gpus").items().size(), 2u);
  const Json& g = j.at("gpus").items()[1];
  EXPECT_EQ(g.at("index").number(), 1);
  EXPECT_TRUE(g.at("can_measure").at("energy_counter").boolean());
  EXPECT_EQ(g.at("power_limit").at("max_mw").number(), 700000);
  EXPECT_EQ(g.at("clocks").at("supported_sm_mhz").items().size(), 110u);

  r = test::run_cnnergy({"devices", "--count-cuda"}, fake.dir);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "2\n");
}

TEST(Cli, DevicesWithoutDriverAndWithAPathThatIsNotNvml) {
  test::FakeNvmlEnv fake(2);
  test::ScopedEnv env;
  env.set("CNNERGY_FAKE_NVML_FAIL", "init:driver_not_loaded");
  auto r = test::run_cnnergy({"devices", "--count-cuda"}, fake.dir);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out, "0\n");
  r = test::run_cnnergy({"devices"}, fake.dir);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "no GPUs")) << r.out;

  env.set("CNNERGY_NVML_LIBRARY", "/bin/ls");
  r = test::run_cnnergy({"devices"}, fake.dir);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "/bin/ls")) << r.err;
}

TEST(Cli, MonitorReportsEnergyAndPassesTheExitCode) {
  test::FakeNvmlEnv fake(2, 50, 1);
  test::ScopedEnv env;
  env.set("CNNERGY_FAKE_NVML_LOAD", "0.8,0.3");
  const std::string report = fake.dir.file("report.json"), csv = fake.dir.file("samples.csv");
  auto r = test::run_cnnergy({"monitor", "--json", "--output", report, "--csv", csv, "--", "sh",
                              "-c", "sleep 0.6; echo from-the-command; exit 3"},
                             fake.dir);
  ASSERT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_EQ(r.out, "from-the-command\n");  // the command's stdout is untouched
  const Json j = Json::parse(test::read_file(report));
  EXPECT_EQ(j.at("exit_code").number(), 3);
  // (--json and --output are the old spellings: still accepted, with a deprecation note; SI units now.)
  EXPECT_TRUE(contains(r.err, "--output is deprecated")) << r.err;
  const Json& run = j.at("runs").items().at(0);
  EXPECT_GE(run.at("elapsed_s").number(), 0.59);
  ASSERT_EQ(run.at("gpus").items().size(), 2u);
  for (const Json& g : run.at("gpus").items()) {
    EXPECT_EQ(g.at("source").str(), "counter");
    const double avg_w = g.at("average_power_w").number();
    EXPECT_GT(avg_w, 75);
    EXPECT_LT(avg_w, 750);
  }
  EXPECT_GT(run.at("gpus").items()[0].at("energy_j").number(), run.at("gpus").items()[1].at("energy_j").number());
  const std::string rows = test::read_file(csv);
  EXPECT_TRUE(rows.rfind("time_utc,time_s,gpu0_power_w", 0) == 0) << rows.substr(0, 80);
  EXPECT_GE(std::count(rows.begin(), rows.end(), '\n'), 6);

  r = test::run_cnnergy({"monitor", "--", "true"}, fake.dir);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "GPU 0 energy")) << r.err;
  EXPECT_TRUE(contains(r.err, "shorter than one sensor update period")) << r.err;  // short run flagged
}

TEST(Cli, MonitorBadInput) {
  test::FakeNvmlEnv fake(1);
  auto r = test::run_cnnergy({"monitor", "--", "/no/such/command-xyz"}, fake.dir);
  EXPECT_EQ(r.exit_code, 8) << describe(r);
  EXPECT_TRUE(contains(r.err, "command not found")) << r.err;
  for (const char* bad : {"0", "-5", "abc"}) {
    r = test::run_cnnergy({"monitor", "--interval", bad, "--", "true"}, fake.dir);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << describe(r);
    EXPECT_TRUE(contains(r.err, "--interval")) << r.err;
  }
  r = test::run_cnnergy({"monitor", "-r", "3"}, fake.dir);  // repeats need a command
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  r = test::run_cnnergy({"monitor", "--power-limit", "9000", "--", "true"}, fake.dir);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "200 W to 700 W")) << r.err;
  r = test::run_cnnergy({"monitor", "--sm-clock", "1001", "--", "true"}, fake.dir);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "1005 MHz")) << r.err;
}

TEST(Cli, MonitorReportsADeathBySignalAndForwardsSigterm) {
  test::FakeNvmlEnv fake(1);
  auto r = test::run_cnnergy({"monitor", "--", "sh", "-c", "kill -KILL $$"}, fake.dir);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << describe(r);

  const std::string out = fake.dir.file("o.txt"), err = fake.dir.file("e.txt");
  const pid_t pid = test::spawn({test::cnnergy_binary(), "monitor", "--", "sleep", "30"}, out, err);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // sampler started, child running
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  r = test::wait_result(pid, out, err);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << describe(r);  // the child got it, the report was printed
  EXPECT_TRUE(contains(r.err, "killed by signal")) << r.err;
}

TEST(Cli, MonitorAppliesAPowerLimitForTheCommandOnly) {
  test::FakeNvmlEnv fake(2);
  const std::string seen = fake.dir.file("seen.json");
  auto r = test::run_cnnergy({"monitor", "--gpus", "1", "--power-limit", "333", "--", "sh", "-c",
                              test::cnnergy_binary() + " devices --json > " + seen},
                             fake.dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const Json j = Json::parse(test::read_file(seen));
  EXPECT_EQ(j.at("gpus").items()[1].at("power_limit").at("current_mw").number(), 333000);
  EXPECT_EQ(j.at("gpus").items()[0].at("power_limit").at("current_mw").number(), 700000);
  EXPECT_EQ(limit_mw(1), 700000u);
  EXPECT_FALSE(Journal(fake.journal()).exists());

  r = test::run_cnnergy({"monitor", "--dry-run", "--power-limit", "333", "--", "true"}, fake.dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "dry run: would set GPU 0")) << r.err;
  EXPECT_FALSE(Journal(fake.journal()).exists());
}

TEST(Cli, KillNineMidChangeThenRestore) {
  test::FakeNvmlEnv fake(2);
  const std::string out = fake.dir.file("o.txt"), err = fake.dir.file("e.txt");
  const pid_t pid =
      test::spawn({test::cnnergy_binary(), "monitor", "--power-limit", "250", "--", "sleep", "30"},
                  out, err, /*new_group=*/true);
  const bool capped = test::wait_until(
      [] { return limit_mw(0) == 250000 && limit_mw(1) == 250000; }, std::chrono::seconds(20));
  ::kill(-pid, SIGKILL);  // cnnergy and its command, no chance to clean up
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(capped) << test::read_file(err);
  ASSERT_TRUE(Journal(fake.journal()).exists());
  EXPECT_EQ(limit_mw(0), 250000u);  // left capped by the killed run

  auto r = test::run_cnnergy({"restore", "--dry-run"}, fake.dir);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "would GPU 0")) << r.out;
  EXPECT_EQ(limit_mw(0), 250000u);

  r = test::run_cnnergy({"restore"}, fake.dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(limit_mw(0), 700000u);
  EXPECT_EQ(limit_mw(1), 700000u);
  EXPECT_FALSE(Journal(fake.journal()).exists());
  r = test::run_cnnergy({"restore"}, fake.dir);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "nothing to restore")) << r.out;
}

TEST(Cli, RestoreBadJournals) {
  test::FakeNvmlEnv fake(1);
  test::write_file(fake.journal(), "{ this is not a journal");
  auto r = test::run_cnnergy({"restore"}, fake.dir);
  EXPECT_EQ(r.exit_code, 3) << describe(r);
  EXPECT_TRUE(contains(r.err, "corrupt")) << r.err;
  EXPECT_TRUE(Journal(fake.journal()).exists());  // kept for inspection
  r = test::run_cnnergy({"restore", "--forget"}, fake.dir);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_FALSE(Journal(fake.journal()).exists());

  JournalData d = Journal::for_this_process();
  d.pid = test::dead_pid();
  d.entries.push_back(
      {"GPU-00000000-gone-gone-gone-000000000000", 5, "", KnobKind::kPowerLimit, 650000, 0, 0});
  Journal(fake.journal()).write(d);
  r = test::run_cnnergy({"restore"}, fake.dir);
  EXPECT_EQ(r.exit_code, 7) << describe(r);
  EXPECT_TRUE(contains(r.err, "no GPU with this UUID")) << r.err;
  ASSERT_TRUE(Journal(fake.journal()).exists());
  EXPECT_EQ(Journal(fake.journal()).read().entries.size(), 1u);

  d.pid = static_cast<long>(::getpid());  // written by a process that is still running
  Journal(fake.journal()).write(d);
  r = test::run_cnnergy({"restore"}, fake.dir);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "still running")) << r.err;
}
