// The reliability audit's findings through the command line, on the simulated GPU (fake NVML): sweep and
// monitor with --timeout-s on hanging commands (knobs restored, trials stored as timed out), SIGINT of a
// sweep whose command hangs (the partial table still printed), SIGKILL of monitor (the command's group
// ended by the watchdog), a sweep whose trials all fail, --db '' and --report DIR refused up front,
// train --resume-from DIRECTORY and checkpoints with NaN weights or impossible iterations.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "../sweep/sim_sweep_env.hpp"
#include "tune/store.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

class HardeningCli : public cnnergy::testing::SimulatedSweepTest {
 protected:
  HardeningCli() : SimulatedSweepTest("cnnergy_harden_") {}
  std::string power_limit() {
    const auto r = run_cli_env("devices");
    const auto at = r.output.find("power limit");
    return at == std::string::npos ? r.output : r.output.substr(at, 24);
  }
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool running(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = read("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

pid_t wait_for_pid(const fs::path& file, double seconds) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < seconds) {
    std::ifstream in(file);
    long v = 0;
    if (in >> v && v > 0) return static_cast<pid_t>(v);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

// Starts `cnnergy ARGS` with output to `log`; returns its pid.
pid_t start_cli(const std::string& env, const std::string& args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd = "exec env " + env + cnnergy::testing::cnnergy_binary() + " " + args + " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

}  // namespace

TEST_F(HardeningCli, SweepTimeoutEndsHangingTrialsRestoresKnobsAndFails) {
  const auto db = (dir_ / "t.db").string();
  const auto t0 = Clock::now();
  const auto r = sweep("--power-limit 250,300 --warmup 0 --window-s 0.1 --min-iters 1 --windows 1 --timeout-s 0.5 "
                       "--kill-grace-s 0.5 --db " + db + " -- sh -c 'trap \"\" TERM; sleep 30'");
  EXPECT_LT(seconds_since(t0), 20.0) << r.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;  // every trial failed
  EXPECT_NE(r.output.find("every trial"), std::string::npos) << r.output;
  cnnergy::tune::ResultStore store(db, cnnergy::tune::ResultStore::Mode::kReadOnly);
  const auto trials = store.trials(store.sweeps().at(0).id);
  ASSERT_EQ(trials.size(), 3u);  // 250 W, 300 W and the 700 W reference
  for (const auto& t : trials) {
    EXPECT_EQ(t.summary.status, cnnergy::tune::TrialStatus::kFailed);
    EXPECT_NE(t.error_message.find("timed out"), std::string::npos) << t.error_message;
  }
  EXPECT_FALSE(fs::exists(dir_ / "journal.json"));
  EXPECT_NE(power_limit().find("700.0 W"), std::string::npos) << power_limit();
}

TEST_F(HardeningCli, SigintOfASweepWithAHangingCommandPrintsThePartialTable) {
  const auto db = (dir_ / "i.db").string(), log = (dir_ / "log").string();
  const fs::path marker = dir_ / "second";
  // The first trial finishes; the second one hangs until the sweep is interrupted.
  const std::string job = "sh -c 'if [ \"$CNNERGY_POWER_LIMIT_W\" = 300 ]; then echo $$ > " + marker.string() +
                          "; sleep 60; fi'";
  const pid_t pid = start_cli(env_, "sweep --power-limit 250,300 --warmup 0 --window-s 0.1 --min-iters 1 --windows 1 "
                                    "--kill-grace-s 1 --db " + db + " -- " + job, log);
  ASSERT_GT(wait_for_pid(marker, 30), 0) << read(log);
  const auto t0 = Clock::now();
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string out = read(log);
  EXPECT_LT(seconds_since(t0), 10.0) << out;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << out;
  EXPECT_NE(out.find("min energy per iteration"), std::string::npos) << out;  // the optimum table of what finished
  EXPECT_NE(out.find("--resume"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir_ / "journal.json"));
}

TEST_F(HardeningCli, MonitorTimeoutAndSigkillOfMonitorEndTheCommandGroup) {
  const auto t0 = Clock::now();
  const auto r = run_cli_env("monitor --timeout-s 0.3 --kill-grace-s 0.5 -- sleep 30");
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_NE(r.output.find("timed out"), std::string::npos) << r.output;

  const auto pidfile = dir_ / "pid", log = dir_ / "log";
  const pid_t monitor = start_cli(env_, "monitor -- sh -c 'sleep 60 & echo $! > " + pidfile.string() + "; wait'",
                                  log.string());
  const pid_t sleeper = wait_for_pid(pidfile, 20);
  ASSERT_GT(sleeper, 0) << read(log);
  ::kill(monitor, SIGKILL);
  ::waitpid(monitor, nullptr, 0);
  const auto t1 = Clock::now();
  while (running(sleeper) && seconds_since(t1) < 10) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(running(sleeper)) << "the command outlived a SIGKILLed monitor";
}

TEST_F(HardeningCli, SweepOutputsAreCheckedBeforeAnyTrialRuns) {
  const auto db = (dir_ / "r.db").string();
  auto r = sweep("--power-limit 250 --warmup 0 --window-s 0.1 --min-iters 1 --windows 1 --db '' -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  fs::create_directories(dir_ / "reports");
  r = sweep("--power-limit 250 --warmup 0 --window-s 0.1 --min-iters 1 --windows 1 --db " + db + " --report " +
            (dir_ / "reports").string() + " -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("directory"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(db)) << "the sweep ran before refusing --report";
}

TEST_F(HardeningCli, TrainResumeFromADirectoryIsADataError) {
  const auto r = cnnergy::testing::run_cli("train --model lenet5 --data synthetic --max-iters 1 --resume-from " +
                                           dir_.string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("directory"), std::string::npos) << r.output;
}

namespace {

std::uint64_t fnv1a64(const std::vector<char>& b, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<std::uint8_t>(b[i])) * 0x100000001b3ull;
  return h;
}

// Rewrites the checksum (the last 8 bytes) after an edit, as a buggy or malicious writer would.
void reseal(std::vector<char>& b) {
  const std::uint64_t h = fnv1a64(b, b.size() - 8);
  std::memcpy(b.data() + b.size() - 8, &h, 8);
}

}  // namespace

TEST_F(HardeningCli, CheckpointWithNanWeightsOrAnAbsurdIterationIsRefused) {
  const auto ck = (dir_ / "ck.bin").string();
  auto r = cnnergy::testing::run_cli("train --model lenet5 --data synthetic --dataset-size 64 --batch 32 --max-iters 1 "
                                     "--no-energy --save " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<char> good;
  {
    std::ifstream in(ck, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(good.size(), 100u);
  auto write = [&](const std::vector<char>& b) { std::ofstream(ck, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size())); };
  const std::string resume = "train --model lenet5 --data synthetic --dataset-size 64 --batch 32 --max-iters 1 "
                             "--no-energy --resume-from " + ck;

  std::vector<char> nan = good;  // the last value of the last tensor
  const float q = std::nanf("");
  std::memcpy(nan.data() + nan.size() - 8 - 4, &q, 4);
  reseal(nan);
  write(nan);
  r = cnnergy::testing::run_cli(resume);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("non-finite"), std::string::npos) << r.output;

  std::vector<char> name = good;  // a model name of control bytes: printed escaped, not raw
  for (std::size_t i = 0; i < 3; ++i) name[16 + i] = static_cast<char>(0x01 + i);
  reseal(name);
  write(name);
  r = cnnergy::testing::run_cli(resume);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("\\x01\\x02\\x03"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\x01'), std::string::npos) << "a raw control byte was printed";

  std::vector<char> iter = good;  // magic (8), version (4), model name (4 + n), then the iteration
  std::uint32_t name_len = 0;
  std::memcpy(&name_len, iter.data() + 12, 4);
  const std::int64_t absurd = std::int64_t{1} << 62;
  std::memcpy(iter.data() + 16 + name_len, &absurd, 8);
  reseal(iter);
  write(iter);
  r = cnnergy::testing::run_cli(resume);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("iteration"), std::string::npos) << r.output;
}
