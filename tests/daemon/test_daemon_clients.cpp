// cnnergyd with real client processes: a `cnnergy sweep` through the daemon killed with SIGKILL
// mid-sweep (its settings restored within 1 s), users outside and inside the socket's group run as
// an unprivileged uid with setpriv, and 100 clients connecting at once.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <chrono>
#include <thread>

#include "core/errors.hpp"
#include "daemon_test_util.hpp"
#include "telemetry/knob_client.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
constexpr const char* kNobody = "65534";
constexpr const char* kGroup = "4242";  // a gid no account needs to exist for

RunResult setpriv_run(const std::vector<std::string>& argv, const TempDir& dir) {
  return wait_result(spawn(argv, dir.file("sp.out"), dir.file("sp.err")), dir.file("sp.out"), dir.file("sp.err"));
}

// A client binary uid 65534 can run: the built one, or (when the build folder is not readable by
// others, e.g. under /root) a copy in the test's folder together with the fake NVML library, which
// CNNERGY_NVML_LIBRARY is then pointed at. Empty, with the reason in `why`, when setpriv cannot.
std::string unprivileged_client(const TempDir& dir, ScopedEnv& env, std::string& why) {
  if (::geteuid() != 0) {
    why = "the tests do not run as root, so they cannot switch to another uid";
    return "";
  }
  auto works = [&](const std::string& bin) {
    const RunResult r = setpriv_run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "--help"}, dir);
    if (r.exit_code == 126 || r.exit_code == 127) why = "setpriv is not installed (util-linux) or cannot run " + bin;
    else if (r.exit_code != 0) why = "setpriv cannot run " + bin + " as uid 65534 (exit " + std::to_string(r.exit_code) + "): " + r.err;
    return r.exit_code == 0;
  };
  if (works(cnnergy_binary())) return cnnergy_binary();
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string bin = dir.file("cnnergy"), lib = dir.file("libnvidia-ml-fake.so");
  fs::copy_file(cnnergy_binary(), bin, fs::copy_options::overwrite_existing, ec);
  fs::copy_file(fake_nvml_path(), lib, fs::copy_options::overwrite_existing, ec);
  ::chmod(bin.c_str(), 0755);
  ::chmod(lib.c_str(), 0755);
  if (!works(bin)) return "";
  env.set("CNNERGY_NVML_LIBRARY", lib);
  return bin;
}

RunResult run_as(const std::string& bin, const std::vector<std::string>& setpriv_args,
                 const std::vector<std::string>& args, const TempDir& dir) {
  std::vector<std::string> argv = {"setpriv", std::string("--reuid=") + kNobody,
                                   std::string("--regid=") + kNobody};
  argv.insert(argv.end(), setpriv_args.begin(), setpriv_args.end());
  argv.push_back(bin);
  argv.insert(argv.end(), args.begin(), args.end());
  return wait_result(spawn(argv, dir.file("as.out"), dir.file("as.err")), dir.file("as.out"),
                     dir.file("as.err"));
}
}  // namespace

TEST(DaemonClients, SweepKilledWithSigkillHasItsSettingsRestoredWithinOneSecond) {
  FakeNvmlEnv fake(1);
  DaemonProcess d(fake);
  ASSERT_TRUE(d.start()) << d.log();
  ScopedEnv env;
  env.set("CNNERGY_DAEMON_SOCKET", d.socket());
  const std::vector<std::string> argv = {
      cnnergy_binary(), "sweep", "--knobs", "daemon", "--power-limit", "300,350", "--reference",
      "power_limit_w=300", "--db", fake.dir.file("r.db"), "--warmup", "0", "--window-s", "2",
      "--min-iters", "1", "--reps", "3", "--", "sleep", "0.2"};
  const pid_t pid = spawn(argv, fake.dir.file("sweep.out"), fake.dir.file("sweep.err"));
  const bool changed = wait_until(
      [&] { return fake_setting(d.state_file(), 0, "power_limit_mw") != "700000"; }, std::chrono::seconds(60));
  ASSERT_TRUE(changed) << read_file(fake.dir.file("sweep.err")) << d.log();
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(pid, SIGKILL);
  const bool restored = wait_until(
      [&] { return fake_setting(d.state_file(), 0, "power_limit_mw") == "700000"; }, std::chrono::seconds(10));
  const auto restore_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed_at).count();
  const RunResult r = wait_result(pid, fake.dir.file("sweep.out"), fake.dir.file("sweep.err"));
  EXPECT_EQ(r.term_signal, SIGKILL);
  EXPECT_TRUE(contains(r.err, "knobs: daemon")) << r.err;  // it said which path it took
  ASSERT_TRUE(restored) << d.log();
  RecordProperty("restore_after_sigkill_ms", static_cast<int>(restore_ms));
  EXPECT_LT(restore_ms, 1000) << "the daemon restores on the connection's EOF";
  telemetry::KnobClient c(d.socket());  // and the GPU is free again
  EXPECT_TRUE(c.state()["gpus"].items()[0]["held_by_uid"].is_null());
}

TEST(DaemonClients, ASweepThroughTheDaemonRunsEveryTrialAndLeavesTheGpuAsItWas) {
  FakeNvmlEnv fake(1);
  DaemonProcess d(fake);
  ASSERT_TRUE(d.start()) << d.log();
  ScopedEnv env;
  env.set("CNNERGY_DAEMON_SOCKET", d.socket());
  const RunResult r = run_cnnergy({"sweep", "--knobs", "daemon", "--power-limit", "300,450", "--reference",
                                   "power_limit_w=300", "--db", fake.dir.file("r.db"), "--warmup", "0",
                                   "--window-s", "0.05", "--min-iters", "1", "--reps", "1", "--", "true"},
                                  fake.dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "trials: 2 ok, 0 failed")) << r.out;
  EXPECT_TRUE(contains(r.err, "knobs: daemon")) << r.err;
  EXPECT_TRUE(contains(d.log(), "power limit 700 W -> 300 W")) << d.log();
  EXPECT_TRUE(contains(d.log(), "power limit 700 W -> 450 W")) << d.log();
  EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "700000");
}

TEST(DaemonClients, UnprivilegedUsersOutsideTheGroupCannotConnectAndInsideItStayWithinThePolicy) {
  FakeNvmlEnv fake(1);
  ScopedEnv env;
  std::string why;
  const std::string bin = unprivileged_client(fake.dir, env, why);
  if (bin.empty()) GTEST_SKIP() << "unprivileged-client part skipped: " << why;
  DaemonPolicy pol;
  pol.socket_group = kGroup;
  pol.extra += std::string(R"(, "groups": [")") + kGroup + R"("], "power_limit_w": {"min": 250, "max": 600})";
  DaemonProcess d(fake, pol);
  ASSERT_TRUE(d.start()) << d.log();
  env.set("CNNERGY_DAEMON_SOCKET", d.socket());
  env.set("CNNERGY_JOURNAL", std::nullopt);  // nobody's own journal would be unwritable; unused here

  const RunResult outside = run_as(bin, {"--clear-groups"}, {"daemon-state"}, fake.dir);
  EXPECT_EQ(outside.exit_code, static_cast<int>(ExitCode::kPermission)) << outside.err;
  EXPECT_TRUE(contains(outside.err, "is not in group 4242")) << outside.err;

  const std::string in_group = std::string("--groups=") + kGroup;
  const RunResult state = run_as(bin, {in_group}, {"daemon-state"}, fake.dir);
  EXPECT_EQ(state.exit_code, 0) << state.err;
  EXPECT_TRUE(contains(state.out, "you (uid 65534) may change")) << state.out;

  // Past the policy: refused, nothing changes (auto mode: not root, so the daemon is used).
  const RunResult over = run_as(bin, {in_group}, {"monitor", "--power-limit", "200", "--gpus", "0", "--", "true"}, fake.dir);
  EXPECT_EQ(over.exit_code, static_cast<int>(ExitCode::kUsage)) << over.err;
  EXPECT_TRUE(contains(over.err, "knobs: daemon")) << over.err;
  EXPECT_TRUE(contains(over.err, "250 to 600 W")) << over.err;
  EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "700000");

  // Within it: changed for the command's duration, restored afterwards.
  const RunResult within = run_as(
      bin, {in_group}, {"monitor", "--power-limit", "300", "--gpus", "0", "--", "cat", d.state_file()}, fake.dir);
  EXPECT_EQ(within.exit_code, 0) << within.err;
  EXPECT_TRUE(contains(within.out, "power_limit_mw=300000")) << within.out;
  EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "700000");
  EXPECT_TRUE(contains(d.log(), "uid 65534")) << d.log();

  // Not root and no daemon: a clear message how to get one, nothing changed.
  env.set("CNNERGY_DAEMON_SOCKET", fake.dir.file("no-daemon.sock"));
  const RunResult none = run_as(bin, {in_group}, {"monitor", "--power-limit", "300", "--", "true"}, fake.dir);
  EXPECT_EQ(none.exit_code, static_cast<int>(ExitCode::kPermission)) << none.err;
  EXPECT_TRUE(contains(none.err, "needs root, or the cnnergyd daemon")) << none.err;
  EXPECT_TRUE(contains(none.err, "cnnergyd.service")) << none.err;
}

TEST(DaemonClients, HundredClientsAtOnceAreAllAnswered) {
  FakeNvmlEnv fake(2);
  DaemonProcess d(fake);
  ASSERT_TRUE(d.start()) << d.log();
  constexpr int kClients = 100;
  std::atomic<int> ready{0}, answered{0}, changed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      const int fd = connect_unix(d.socket());
      ++ready;
      while (ready.load() < kClients) std::this_thread::yield();  // all connected, then all ask
      if (fd < 0) return;
      const Json st = roundtrip(fd, request("state"));
      Json set = request("set_power_limit");
      set["gpu"] = i % 2;
      set["watts"] = 300 + i;
      const Json r = roundtrip(fd, set);  // one client per GPU wins the lease, the rest are refused
      if (st.is_object() && st["ok"].as_bool() && r.is_object() && r.find("ok")) ++answered;
      if (r.is_object() && r.find("ok") && r["ok"].as_bool()) ++changed;
      ::close(fd);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered.load(), kClients) << d.log();
  EXPECT_GE(changed.load(), 2);
  EXPECT_FALSE(d.exited());
  EXPECT_TRUE(wait_until([&] {
    return fake_setting(d.state_file(), 0, "power_limit_mw") == "700000" &&
           fake_setting(d.state_file(), 1, "power_limit_mw") == "700000";
  }, std::chrono::seconds(10)));
}
