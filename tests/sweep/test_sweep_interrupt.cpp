// Interrupted and repeated sweeps on the simulated GPU (fake NVML): SIGINT stops the sweep after the
// trial in progress, the tables and the HTML report of what finished are written, the exact --resume
// command is printed (and works), the power limit is back; the same sweep run again without --resume
// is refused with both choices named, and --new stores a second sweep on purpose.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "sim_sweep_env.hpp"
#include "tune/store.hpp"

namespace fs = std::filesystem;

namespace {

class SweepInterrupt : public cnnergy::testing::SimulatedSweepTest {
 protected:
  cnnergy::testing::CliResult cli(const std::string& args) { return run_cli_env(args); }
  std::size_t stored_trials(const std::string& db) {
    try {
      cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
      const auto sweeps = store.sweeps();
      return sweeps.empty() ? 0 : store.trials(sweeps[0].id).size();
    } catch (const std::exception&) {
      return 0;
    }
  }
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_F(SweepInterrupt, SigintWritesTheReportOfWhatFinishedAndTheResumeCommand) {
  const auto db = (dir_ / "i.db").string(), html = (dir_ / "i.html").string(), log = (dir_ / "log").string();
  const std::string args = "--power-limit 250,300,350,400,450,500 --warmup 0 --window-s 0.3 --min-iters 1 --windows 1 "
                           "--db " + db + " --report " + html;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "exec env " + env_ + cnnergy::testing::cnnergy_binary() + " sweep " + args + " -- " + job_ +
                            " > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  bool two_done = false;
  for (int i = 0; i < 600 && !two_done; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    two_done = fs::exists(db) && stored_trials(db) >= 2;
  }
  ASSERT_TRUE(two_done) << "the sweep did not store two trials in time\n" << read(log);
  ::kill(pid, SIGINT);  // sent to the sweep alone, as `kill -INT` would
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string out = read(log);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << out;
  const std::size_t kept = stored_trials(db);
  EXPECT_GE(kept, 2u);
  EXPECT_LT(kept, 7u) << out;  // it stopped before the end
  EXPECT_NE(out.find("interrupted"), std::string::npos) << out;
  EXPECT_NE(out.find("min energy per iteration"), std::string::npos) << out;  // the optimum table of what finished
  EXPECT_TRUE(fs::exists(html)) << out;
  const std::string resume = "cnnergy sweep " + args + " --resume -- " + job_;
  EXPECT_NE(out.find(resume), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_ / "journal.json"));  // the power limit was restored on the way out
  const auto devices = cli("devices");
  EXPECT_NE(devices.output.find("power limit   700.0 W"), std::string::npos) << devices.output;

  // The printed command continues the same sweep and runs only what is missing.
  const auto resumed = cli("sweep " + args + " --resume -- " + job_);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
  ASSERT_EQ(store.sweeps().size(), 1u);
  EXPECT_EQ(store.trials(store.sweeps()[0].id).size(), 7u);  // 6 values + the 700 W reference
}

TEST_F(SweepInterrupt, ARepeatedSweepAsksForResumeOrNew) {
  const auto db = (dir_ / "d.db").string();
  const std::string args = "--power-limit 300,400 --warmup 0 --window-s 0 --min-iters 1 --windows 1 --db " + db;
  auto r = cli("sweep " + args + " -- " + job_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto json = dir_ / "refused.json";
  r = cli("sweep " + args + " --json " + json.string() + " -- " + job_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(json));  // a refused sweep leaves no empty result file
  EXPECT_NE(r.output.find("already holds this sweep"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--resume"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--new"), std::string::npos) << r.output;
  {
    cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
    EXPECT_EQ(store.sweeps().size(), 1u);  // nothing stored by the refused run
  }
  // The old spelling --reps is the same sweep (same key), so it is refused too.
  r = cli("sweep --power-limit 300,400 --warmup 0 --window-s 0 --min-iters 1 --reps 1 --db " + db + " -- " + job_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--reps is deprecated"), std::string::npos) << r.output;
  // A dry run only notes it.
  r = cli("sweep " + args + " --dry-run -- " + job_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("needs --resume or --new"), std::string::npos) << r.output;
  r = cli("sweep " + args + " --resume --new -- " + job_);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = cli("sweep " + args + " --new -- " + job_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
  EXPECT_EQ(store.sweeps().size(), 2u);
}
