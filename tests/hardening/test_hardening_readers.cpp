// The second reliability audit through the command line: every reader of a structured file (train
// --resume-from, export-onnx and infer --checkpoint, restore --journal, dist-train --baseline,
// cnnergyd --policy) given /dev/zero or a 30 GB sparse file exits non-zero within 1 s and under
// 100 MB of memory, naming the limit (N3); an empty path is a usage error wherever a path is given
// (N4); `monitor` of a command that ignores INT and TERM ends it within --kill-grace-s + 1 s of the
// signal, at once on a second one, and leaves nothing running (F2).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/telemetry_test_util.hpp"

using namespace cnnergy::test;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string daemon_binary() {
  if (const char* bin = std::getenv("CNNERGY_BIN"); bin && *bin) return std::string(bin) + "/cnnergyd";
  return CNNERGY_TEST_DAEMON;
}

struct Measured {
  int exit_code = -1;  // 128 + signal when a signal ended it
  double wall_s = 0;
  double max_rss_mb = 0;
  std::string out;  // stdout and stderr
};

// Runs argv to completion (killed after 20 s), measuring its wall time and peak resident memory.
Measured measure(const std::vector<std::string>& argv, const TempDir& dir) {
  const std::string log = dir.file("measured.log");
  const auto t0 = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(126);
  }
  int status = 0;
  rusage ru{};
  for (;;) {
    const pid_t r = ::wait4(pid, &status, WNOHANG, &ru);
    if (r == pid) break;
    if (seconds_since(t0) > 20) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Measured m;
  m.wall_s = seconds_since(t0);
  m.max_rss_mb = ru.ru_maxrss / 1024.0;  // kB on Linux
  m.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.out = read_file(log);
  return m;
}

// Each reader's command line around the file it is given.
struct Reader {
  const char* name;
  std::vector<std::string> (*argv)(const std::string& file, const TempDir& dir);
};

const std::string kData = "synthetic:1x28x28:size=64:test_size=32";

const Reader kReaders[] = {
    {"train --resume-from",
     [](const std::string& f, const TempDir&) {
       return std::vector<std::string>{cnnergy_binary(), "train", "--model", "lenet5", "--data", kData, "--device", "cpu",
                                       "--max-iters", "1", "--no-energy", "--resume-from", f};
     }},
    {"export-onnx --checkpoint",
     [](const std::string& f, const TempDir& d) {
       return std::vector<std::string>{cnnergy_binary(), "export-onnx", "lenet5", d.file("out.onnx"), "--checkpoint", f};
     }},
    {"infer --checkpoint",
     [](const std::string& f, const TempDir&) {
       return std::vector<std::string>{cnnergy_binary(), "infer", "lenet5", "--device", "cpu", "--checkpoint", f};
     }},
    {"restore --journal",
     [](const std::string& f, const TempDir&) {
       return std::vector<std::string>{cnnergy_binary(), "restore", "--journal", f};
     }},
    {"dist-train --baseline",
     [](const std::string& f, const TempDir&) {
       return std::vector<std::string>{cnnergy_binary(), "dist-train", "--model", "lenet5", "--data", kData, "--device",
                                       "cpu", "--gpus", "1", "--global-batch", "8", "--max-iters", "1", "--baseline", f};
     }},
    {"cnnergyd --policy",
     [](const std::string& f, const TempDir&) {
       return std::vector<std::string>{daemon_binary(), "--policy", f, "--check"};
     }},
};

}  // namespace

TEST(BoundedReaders, DevZeroAndA30GbSparseFileAreRefusedAtOnceInLittleMemory) {
  FakeNvmlEnv fake(1);
  const std::string sparse = fake.dir.file("sparse-30g.bin");
  {
    const int fd = ::open(sparse.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 30LL << 30), 0) << "cannot make a 30 GB sparse file here";
    ::close(fd);
  }
  // What the binaries take just to start (a CUDA build maps its libraries): the memory bound is
  // 100 MB, or that footprint + 50 MB where the footprint alone comes near 100 MB.
  double footprint_mb[2];
  for (int i = 0; i < 2; ++i) {
    const Measured m = measure({i ? daemon_binary() : cnnergy_binary(), "--no-such-flag"}, fake.dir);
    footprint_mb[i] = m.max_rss_mb;
  }
  std::printf("[readers] start-up footprint: cnnergy %.1f MB, cnnergyd %.1f MB\n", footprint_mb[0], footprint_mb[1]);
  for (const Reader& reader : kReaders) {
    const bool daemon = std::string(reader.name).rfind("cnnergyd", 0) == 0;
    const double allowed_mb = std::max(100.0, footprint_mb[daemon] + 50.0);
    for (const std::string& file : {std::string("/dev/zero"), sparse}) {
      const Measured m = measure(reader.argv(file, fake.dir), fake.dir);
      std::printf("[readers] %-26s %-10s exit %d in %.3f s, peak RSS %.1f MB\n", reader.name,
                  file == sparse ? "30 GB" : "/dev/zero", m.exit_code, m.wall_s, m.max_rss_mb);
      EXPECT_NE(m.exit_code, 0) << reader.name << " " << file << ":\n" << m.out;
      EXPECT_LT(m.exit_code, 128) << reader.name << " " << file << " was killed:\n" << m.out;
      EXPECT_LT(m.wall_s, 1.0) << reader.name << " " << file << ":\n" << m.out;
      EXPECT_LT(m.max_rss_mb, allowed_mb) << reader.name << " " << file;
      if (file == sparse)
        EXPECT_TRUE(contains(m.out, "over the limit of")) << reader.name << ":\n" << m.out;
      else
        EXPECT_TRUE(contains(m.out, "character device")) << reader.name << ":\n" << m.out;
    }
  }
}

TEST(BoundedReaders, EmptyPathsAreUsageErrorsEverywhere) {
  FakeNvmlEnv fake(1);
  const std::vector<std::vector<std::string>> cases = {
      {"train", "--model", "lenet5", "--data", kData, "--device", "cpu", "--max-iters", "1", "--no-energy",
       "--resume-from", ""},
      {"train", "--model", "lenet5", "--data", kData, "--device", "cpu", "--max-iters", "1", "--no-energy", "--save",
       ""},
      {"restore", "--journal", ""},
      {"monitor", "--journal", "", "--power-limit", "300", "--", "true"},
      {"export-onnx", "lenet5", fake.dir.file("o.onnx"), "--checkpoint", ""},
      {"dist-train", "--model", "lenet5", "--data", kData, "--device", "cpu", "--gpus", "1", "--global-batch", "8",
       "--max-iters", "1", "--baseline", ""},
      {"monitor", "--csv", " ", "--", "true"},
      {"monitor", "--jsonl", std::string(300, 'x'), "--", "true"},
  };
  for (const auto& args : cases) {
    std::vector<std::string> argv = {cnnergy_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    const Measured m = measure(argv, fake.dir);
    std::string line;
    for (const auto& a : args) line += (a.empty() ? "''" : a.size() > 40 ? a.substr(0, 8) + "..." : a) + " ";
    EXPECT_EQ(m.exit_code, 2) << line << "\n" << m.out;
    EXPECT_TRUE(contains(m.out, "is empty: give a path") || contains(m.out, "no file or folder name can be longer"))
        << line << "\n" << m.out;
    EXPECT_FALSE(contains(m.out, "epoch")) << "it trained anyway: " << line;
  }
}

namespace {

// `cnnergy monitor --kill-grace-s G -- sh -c 'trap "" INT TERM; sleep 1013 & echo $! > P; wait'`, started
// in the background; returns the monitor's pid and (through `sleeper`) the sleep's.
pid_t start_trap_ignoring_monitor(const TempDir& dir, double grace_s, pid_t& sleeper) {
  const std::string pidfile = dir.file("sleeper.pid");
  std::remove(pidfile.c_str());
  const pid_t pid = spawn({cnnergy_binary(), "monitor", "--kill-grace-s", std::to_string(grace_s), "--", "sh", "-c",
                           "trap '' INT TERM; sleep 1013 & echo $! > " + pidfile + "; wait"},
                          dir.file("monitor.out"), dir.file("monitor.err"));
  sleeper = -1;
  wait_until(
      [&] {
        const std::string text = read_file(pidfile);
        if (text.empty() || text.back() != '\n') return false;
        sleeper = static_cast<pid_t>(std::stol(text));
        return true;
      },
      std::chrono::seconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the trap is set before sleep starts
  return pid;
}

bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Waits for the monitor (our child) to exit; its exit status, and the seconds it took.
std::pair<int, double> wait_exit(pid_t pid, Clock::time_point t0, double limit_s) {
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (seconds_since(t0) > limit_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return {-1, seconds_since(t0)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), seconds_since(t0)};
}

}  // namespace

TEST(MonitorSignals, ACommandIgnoringIntAndTermIsKilledAfterTheGraceAndNothingIsLeft) {
  FakeNvmlEnv fake(1);
  const double grace_s = 1.0;
  pid_t sleeper = -1;
  const pid_t monitor = start_trap_ignoring_monitor(fake.dir, grace_s, sleeper);
  ASSERT_GT(sleeper, 0) << read_file(fake.dir.file("monitor.err"));
  const auto t0 = Clock::now();
  ::kill(monitor, SIGINT);
  const auto [code, took_s] = wait_exit(monitor, t0, 30);
  std::printf("[monitor] trap-ignoring command, --kill-grace-s %.1f: monitor ended %.3f s after SIGINT (exit %d)\n",
              grace_s, took_s, code);
  EXPECT_NE(code, -1) << "monitor was still running 30 s after SIGINT";
  EXPECT_NE(code, 0);
  EXPECT_GE(took_s, grace_s - 0.05) << "killed before the grace";
  EXPECT_LE(took_s, grace_s + 1.0);
  EXPECT_TRUE(wait_until([&] { return !alive(sleeper); }, std::chrono::milliseconds(500)))
      << "the command's child outlived monitor";
  EXPECT_TRUE(contains(read_file(fake.dir.file("monitor.err")), "forwarded")) << read_file(fake.dir.file("monitor.err"));
}

TEST(MonitorSignals, ASecondSignalKillsTheCommandAtOnce) {
  FakeNvmlEnv fake(1);
  pid_t sleeper = -1;
  const pid_t monitor = start_trap_ignoring_monitor(fake.dir, 60.0, sleeper);
  ASSERT_GT(sleeper, 0) << read_file(fake.dir.file("monitor.err"));
  ::kill(monitor, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = Clock::now();
  ::kill(monitor, SIGTERM);
  const auto [code, took_s] = wait_exit(monitor, t0, 30);
  std::printf("[monitor] second signal: monitor ended %.3f s after it (exit %d)\n", took_s, code);
  EXPECT_NE(code, -1);
  EXPECT_NE(code, 0);
  EXPECT_LT(took_s, 1.0);
  EXPECT_TRUE(wait_until([&] { return !alive(sleeper); }, std::chrono::milliseconds(500)));
}
