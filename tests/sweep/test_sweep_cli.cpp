// `cnnergy sweep` end to end against the fake NVML device: the simulated job slows down when the
// power limit pulls the clock down, so energy and time trade off as on a real GPU. Checks the
// stored trials, the optimum, resume, the dry run, bad input, and that a sweep killed with SIGKILL
// keeps its finished trials while `cnnergy restore` puts the power limit back.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "sim_sweep_env.hpp"
#include "tune/store.hpp"

namespace fs = std::filesystem;
using cnnergy::testing::run_cli;

namespace {

class SweepCli : public cnnergy::testing::SimulatedSweepTest {
 protected:
  SweepCli() : SimulatedSweepTest("cnnergy_sweep_", 0.25) {}
};

}  // namespace

TEST_F(SweepCli, PowerLimitSweepOnTheSimulatedDeviceFindsTheTradeOff) {
  const auto db = (dir_ / "r.db").string();
  const auto html = (dir_ / "r.html").string();
  const auto r = sweep("--power-limit 200:700:250 --warmup 0 --window-s 0.4 --min-iters 1 --reps 2 --db " + db +
                       " --report " + html + " -- " + job_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SIMULATED DEVICE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 ok"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(html));
  cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
  const auto sweeps = store.sweeps();
  ASSERT_EQ(sweeps.size(), 1u);
  const auto trials = store.trials(sweeps[0].id);
  ASSERT_EQ(trials.size(), 3u);
  // The fake GPU draws less power but runs longer at a low cap: time at 200 W > time at 700 W.
  EXPECT_NE(r.output.find("min energy per iteration"), std::string::npos);
  // The power limit is back at its default after the sweep.
  const auto devices = run_cli_env("devices --json");
  EXPECT_NE(devices.output.find("700"), std::string::npos) << devices.output;
  EXPECT_FALSE(fs::exists(dir_ / "journal.json"));

  // Resume: nothing left to run.
  const auto again = sweep("--power-limit 200:700:250 --warmup 0 --window-s 0.4 --min-iters 1 --reps 2 --db " + db +
                           " --resume -- " + job_);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("0 ok"), std::string::npos) << again.output;
}

TEST_F(SweepCli, DryRunListsThePlanAndChangesNothing) {
  const auto r = sweep("--power-limit all:100 --dry-run --db " + (dir_ / "d.db").string() + " -- " + job_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("power_limit_w=200"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dry run"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "journal.json"));
}

TEST_F(SweepCli, BadKnobValuesNameTheRangeOrTheNearestClock) {
  auto r = sweep("--power-limit 100:300:50 --db " + (dir_ / "b.db").string() + " -- " + job_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("200"), std::string::npos) << r.output;  // the allowed range starts at 200 W
  r = sweep("--sm-clock 1001 --db " + (dir_ / "b.db").string() + " -- " + job_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nearest"), std::string::npos) << r.output;
  r = sweep("--power-limit 700:200:50 --db " + (dir_ / "b.db").string() + " -- " + job_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = sweep("--batch 64 --db " + (dir_ / "b.db").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;  // no workload
  r = sweep("--cuda-graph maybe --db " + (dir_ / "b.db").string() + " -- " + job_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("choose on or off"), std::string::npos) << r.output;
  r = run_cli("sweep --model lenet5 --device cpu --cuda-graph off,on --db " + (dir_ / "b.db").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;  // the plan is refused as a whole before any trial
  EXPECT_NE(r.output.find("needs --device cuda"), std::string::npos) << r.output;
  std::ofstream(dir_ / "garbage.db") << "this is not a database";
  r = sweep("--power-limit 300,400 --db " + (dir_ / "garbage.db").string() + " -- " + job_);
  EXPECT_EQ(r.exit_code, 3) << r.output;
}

TEST_F(SweepCli, AFailingCommandIsRecordedAndTheSweepGoesOn) {
  const auto db = (dir_ / "f.db").string();
  const auto r = sweep("--batch 1,2 --warmup 0 --window-s 0 --min-iters 1 --reps 1 --db " + db + " -- false");
  ASSERT_EQ(r.exit_code, 3) << r.output;  // every trial failed: stored, but the sweep says so (docs/hardening.md)
  EXPECT_NE(r.output.find("2 failed"), std::string::npos) << r.output;
  cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
  EXPECT_EQ(store.trials(store.sweeps()[0].id).size(), 2u);
}

TEST_F(SweepCli, KilledSweepKeepsFinishedTrialsAndRestoreResetsThePowerLimit) {
  const auto db = (dir_ / "k.db").string();
  const std::string cmd = env_ + cnnergy::testing::cnnergy_binary() +
                          " sweep --power-limit 250,300,350,400,450,500 --warmup 0 --window-s 0.5 --min-iters 1 --reps 1 --db " +
                          db + " -- " + job_ + " > " + (dir_ / "log").string() + " 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec env " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until two trials are stored, then kill -9 the sweep in the middle of the next one.
  bool two_done = false;
  for (int i = 0; i < 300 && !two_done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(db)) continue;
    try {
      cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
      const auto sweeps = store.sweeps();
      two_done = !sweeps.empty() && store.trials(sweeps[0].id).size() >= 2;
    } catch (const std::exception&) {
    }
  }
  ASSERT_TRUE(two_done) << "the sweep did not store two trials in time";
  // Between trials the controller restores the old limit and sets the next one (the journal is gone
  // for that instant): wait until the next trial's change is journaled, so the kill lands mid-change.
  for (int i = 0; i < 500 && !fs::exists(dir_ / "journal.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(-pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // The journal holds the original limit; restore puts it back.
  ASSERT_TRUE(fs::exists(dir_ / "journal.json"));
  const auto restored = run_cli_env("restore");
  EXPECT_EQ(restored.exit_code, 0) << restored.output;
  EXPECT_FALSE(fs::exists(dir_ / "journal.json"));
  const auto devices = run_cli_env("devices");
  EXPECT_NE(devices.output.find("power limit   700.0 W"), std::string::npos) << devices.output;
  // Finished trials survived; --resume runs only the rest.
  cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
  const auto kept = store.trials(store.sweeps()[0].id).size();
  EXPECT_GE(kept, 2u);
  const auto resumed = sweep("--power-limit 250,300,350,400,450,500 --warmup 0 --window-s 0.5 --min-iters 1 --reps 1 --db " +
                             db + " --resume -- " + job_);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  cnnergy::tune::ResultStore after(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
  EXPECT_EQ(after.trials(after.sweeps()[0].id).size(), 7u);  // 6 values + the 700 W reference
}

// --gpus N > 1: the trial trains data-parallel over N replicas (CPU replicas here), global batch split.
TEST_F(SweepCli, GpuCountKnobRunsDataParallelTrials) {
  const auto db = (dir_ / "g.db").string();
  const auto r = run_cli("sweep --model lenet5 --device cpu --gpus 1,2 --batch 32 --window-s 0.2 --min-iters 2 "
                         "--reps 2 --warmup 1 --db " + db);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 ok"), std::string::npos) << r.output;
  cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
  const auto trials = store.trials(store.sweeps()[0].id);
  ASSERT_EQ(trials.size(), 2u);
  // A global batch that does not split over the replicas is a failed trial, and the sweep goes on.
  const auto odd = run_cli("sweep --model lenet5 --device cpu --gpus 2 --batch 33 --window-s 0.1 --min-iters 1 "
                           "--reps 1 --warmup 1 --db " + (dir_ / "odd.db").string());
  ASSERT_EQ(odd.exit_code, 3) << odd.output;  // its only trial failed: stored, and the exit code says so
  EXPECT_NE(odd.output.find("1 failed"), std::string::npos) << odd.output;
}
