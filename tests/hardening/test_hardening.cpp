// Regression tests of the reliability audit (docs/hardening.md): commands that hang, ignore SIGTERM, fork
// or flood stdout; the watchdog when cnnergy itself is SIGKILLed; PID reuse in the knob journal; gzip IDX
// inflation bounded by the header; overflow-checked shapes and IDX sizes. The results database's
// concurrency, permission and full-disk tests are in test_hardening_db.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "core/shape.hpp"
#include "core/subprocess.hpp"
#include "data/data_test_util.hpp"
#include "data/idx.hpp"
#include "telemetry/journal.hpp"
#include "tune/tune_test_util.hpp"
#include "hardening/hardening_util.hpp"

namespace cnnergy {
namespace {

namespace fs = std::filesystem;
using tune::testing::TempDir;
using namespace hardening_testing;

// ---- hung and misbehaving commands (finding 2) -------------------------------------------------

TEST(HungCommand, TimeoutEndsTheCommand) {
  ChildOptions o;
  o.timeout_s = 0.3;
  o.kill_grace_s = 2;
  const auto t0 = Clock::now();
  const ChildStatus st = run_command({"sleep", "30"}, {}, o);
  EXPECT_TRUE(st.timed_out);
  EXPECT_FALSE(st.ok());
  EXPECT_LT(seconds_since(t0), 2.5);
  EXPECT_NE(st.describe().find("timed out"), std::string::npos);
}

TEST(HungCommand, IgnoringSigtermEscalatesToSigkill) {
  TempDir dir;
  const std::string pidfile = dir.file("pid");
  ChildOptions o;
  o.timeout_s = 0.3;
  o.kill_grace_s = 0.5;
  const auto t0 = Clock::now();
  const ChildStatus st =
      run_command({"sh", "-c", "trap '' TERM; sleep 30 & echo $! > " + pidfile + "; while :; do wait; done"}, {}, o);
  EXPECT_TRUE(st.timed_out);
  EXPECT_EQ(st.exit_code, 128 + SIGKILL);
  EXPECT_LT(seconds_since(t0), 3.0);
  const pid_t sleeper = read_pid(pidfile);
  ASSERT_GT(sleeper, 0);
  EXPECT_TRUE(wait_gone(sleeper, 2)) << "the command's child survived";
}

TEST(HungCommand, ForkedChildrenAreEndedWithTheGroup) {
  TempDir dir;
  const std::string pidfile = dir.file("pid");
  ChildOptions o;
  o.timeout_s = 0.3;
  o.kill_grace_s = 1;
  const ChildStatus st = run_command({"sh", "-c", "sleep 30 & echo $! > " + pidfile + "; sleep 30 & wait"}, {}, o);
  EXPECT_TRUE(st.timed_out);
  const pid_t grandchild = read_pid(pidfile);
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(wait_gone(grandchild, 2));
}

TEST(HungCommand, ChildrenLeftBehindByAFinishedCommandAreEnded) {
  TempDir dir;
  const std::string pidfile = dir.file("pid");
  const ChildStatus st = run_command({"sh", "-c", "sleep 30 & echo $! > " + pidfile + "; exit 0"}, {}, {});
  EXPECT_TRUE(st.ok());
  const pid_t left = read_pid(pidfile);
  ASSERT_GT(left, 0);
  EXPECT_TRUE(wait_gone(left, 2));
}

TEST(HungCommand, CommandBlockedOnAFullStdoutPipeIsEnded) {
  // stdout is a pipe nobody reads: `yes` fills it and blocks; the timeout still ends it.
  const int rc = in_child([] {
    int fds[2];
    if (::pipe(fds) != 0) return 2;
    ::dup2(fds[1], STDOUT_FILENO);
    ChildOptions o;
    o.timeout_s = 0.5;
    o.kill_grace_s = 0.5;
    const auto t0 = Clock::now();
    const ChildStatus st = run_command({"yes", "flood"}, {}, o);
    return st.timed_out && seconds_since(t0) < 3 ? 0 : 3;
  });
  EXPECT_EQ(rc, 0);
}

TEST(HungCommand, StopRequestEndsTheCommand) {
  std::atomic<bool> stop{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  ChildOptions o;
  o.stop = [&] { return stop.load(); };
  o.kill_grace_s = 1;
  const auto t0 = Clock::now();
  const ChildStatus st = run_command({"sleep", "30"}, {}, o);
  t.join();
  EXPECT_TRUE(st.stopped);
  EXPECT_LT(seconds_since(t0), 2.5);
}

TEST(HungCommand, WatchdogEndsTheGroupWhenCnnergyIsKilled) {
  TempDir dir;
  const std::string pidfile = dir.file("pid");
  const pid_t parent = ::fork();
  if (parent == 0) {  // plays cnnergy: starts a command and waits on it forever
    try {
      ChildProcess c({"sh", "-c", "sleep 60 & echo $! > " + pidfile + "; wait"}, {});
      c.wait({});
    } catch (...) {
    }
    ::_exit(0);
  }
  const pid_t grandchild = read_pid(pidfile);
  ASSERT_GT(grandchild, 0);
  ::kill(parent, SIGKILL);
  ::waitpid(parent, nullptr, 0);
  EXPECT_TRUE(wait_gone(grandchild, 8)) << "the command outlived a SIGKILLed cnnergy";
}

TEST(HungCommand, MissingCommandIsATypedError) {
  try {
    run_command({"/nonexistent/cnnergy-no-such-command"}, {}, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kChildFailed);
  }
}

// ---- the knob journal (finding 4) --------------------------------------------------------------

TEST(Journal, ReusedPidIsNotTheWriter) {
  auto d = telemetry::Journal::for_this_process();
  ASSERT_GT(d.pid_start_ticks, 0u);
  EXPECT_TRUE(telemetry::Journal::writer_alive(d));
  d.pid_start_ticks += 12345;  // same PID, another process
  EXPECT_FALSE(telemetry::Journal::writer_alive(d));
  d.pid = 1L << 40;
  EXPECT_FALSE(telemetry::Journal::writer_alive(d));
}

TEST(Journal, StartTimeRoundTripsAndNumbersAreRangeChecked) {
  TempDir dir;
  const telemetry::Journal j(dir.file("j.json"));
  const auto d = telemetry::Journal::for_this_process();
  j.write(d);
  EXPECT_EQ(j.read().pid_start_ticks, d.pid_start_ticks);
  for (const char* bad : {R"("pid":1e20)", R"("pid":-5)", R"("pid":1.5)", R"("created_unix_s":1e300)",
                          R"("pid_start_ticks":-1)"}) {
    std::string text = R"({"version":1,"tool":"cnnergy","pid":1,"host":"h","created_unix_s":0,"entries":[]})";
    const std::string b(bad);
    const std::string field = b.substr(0, b.find(':') + 1);
    const auto at = text.find(field);
    if (at != std::string::npos) text.replace(at, text.find_first_of(",}", at) - at, b);
    else text.insert(1, b + ",");
    std::ofstream(j.path()) << text;
    EXPECT_THROW(j.read(), DataError) << text;
  }
}

// ---- IDX and shapes (findings 5, 8) -------------------------------------------------------------

TEST(Idx, GzipBombStopsAtTheHeadersSize) {
  data::testing::TempDir dir;
  std::vector<std::uint8_t> images = data::testing::idx_images(1, 2, 2, {1, 2, 3, 4});
  images.resize(images.size() + (256u << 20), 0);  // 256 MiB of zeros after 4 pixels: a ~250 KB .gz
  const auto gz = data::testing::gzip_bytes(images);
  images.clear();
  images.shrink_to_fit();
  ASSERT_LT(gz.size(), 2u << 20);
  data::testing::write_bytes(dir / "img.gz", gz);
  data::testing::write_bytes(dir / "lbl", data::testing::idx_labels({0}));
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  const auto t0 = Clock::now();
  try {
    data::open_idx(dir / "img.gz", dir / "lbl", "bomb", 10, data::mnist_normalisation());
    FAIL() << "accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("img.gz"), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(t0), 2.0);
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of peak RSS added";
}

TEST(Idx, HeaderSizeOverflowIsRefused) {
  data::testing::TempDir dir;
  std::vector<std::uint8_t> img = {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0x10};
  data::testing::write_bytes(dir / "img", img);
  data::testing::write_bytes(dir / "lbl", data::testing::idx_labels({0}));
  EXPECT_THROW(data::open_idx(dir / "img", dir / "lbl", "x", 10, data::mnist_normalisation()), DataError);
}

TEST(ShapeArithmetic, NumelOverflowIsAShapeError) {
  EXPECT_THROW(Shape({1LL << 40, 1LL << 40}).numel(), ShapeError);
  EXPECT_THROW(Shape({-3, 4}).numel(), ShapeError);
  EXPECT_EQ(Shape({1LL << 31, 1LL << 31}).numel(), 1LL << 62);
}

}  // namespace
}  // namespace cnnergy
