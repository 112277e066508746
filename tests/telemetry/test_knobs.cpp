// Knob control against the fake driver: journal before change, restore on destruction, after an
// exception and on SIGTERM; validation messages; permission and support errors; dry runs; a
// journal left by a dead run restored at start, one held by a live run refused.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "telemetry/knobs.hpp"
#include "telemetry_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;

namespace {
std::shared_ptr<Nvml> open_fake() {
  auto r = Nvml::open();
  if (!r.nvml) throw std::runtime_error("fake NVML did not open: " + r.unavailable_reason);
  return r.nvml;
}
std::uint32_t limit_mw(const Nvml& nvml, unsigned gpu) {
  return nvml.device(gpu).power_limits().current_mw.value();
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
KnobOptions quiet(const std::string& journal) {
  KnobOptions o;
  o.journal_path = journal;
  o.announce = [](const std::string&) {};
  return o;
}
}  // namespace

TEST(Knobs, PowerLimitIsJournaledFirstAndRestoredOnDestruction) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  Rng rng(seed);
  test::FakeNvmlEnv fake(2);
  auto nvml = open_fake();
  const double watts = 200 + rng.next_u32() % 500;
  {
    KnobController k(nvml, quiet(fake.journal()));
    k.set_power_limit_w(1, watts);
    EXPECT_EQ(limit_mw(*nvml, 1), static_cast<std::uint32_t>(watts * 1000));
    EXPECT_EQ(limit_mw(*nvml, 0), 700000u);
    const JournalData j = Journal(fake.journal()).read();
    ASSERT_EQ(j.entries.size(), 1u);
    EXPECT_EQ(j.entries[0].uuid, nvml->device(1).uuid());
    EXPECT_EQ(j.entries[0].original_power_limit_mw, 700000u);
    k.set_power_limit_w(1, 250);  // a second change keeps the first original
    EXPECT_EQ(Journal(fake.journal()).read().entries.size(), 1u);
    EXPECT_EQ(k.active_changes(), 1u);
  }
  EXPECT_EQ(limit_mw(*nvml, 1), 700000u);
  EXPECT_FALSE(Journal(fake.journal()).exists());
}

TEST(Knobs, ValidationNamesTheRangeAndTheNearestClock) {
  test::FakeNvmlEnv fake(1);
  auto nvml = open_fake();
  KnobController k(nvml, quiet(fake.journal()));
  try {
    k.set_power_limit_w(0, 800);
    FAIL() << "accepted 800 W";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "200 W")) << e.what();
    EXPECT_TRUE(contains(e.what(), "700 W")) << e.what();
  }
  EXPECT_THROW(k.set_power_limit_w(0, 199.0), InvalidArgument);
  EXPECT_THROW(k.set_power_limit_w(0, std::nan("")), InvalidArgument);
  try {
    k.lock_sm_clocks(0, 1001, 1001);
    FAIL() << "accepted 1001 MHz";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "nearest supported clock is 1005 MHz")) << e.what();
  }
  EXPECT_THROW(k.lock_sm_clocks(0, 1410, 1200), InvalidArgument);
  EXPECT_THROW(k.set_memory_clock(0, 1000), InvalidArgument);
  EXPECT_THROW(k.set_power_limit_w(7, 300), InvalidArgument);  // no such GPU
  EXPECT_FALSE(Journal(fake.journal()).exists());  // nothing was changed, nothing journaled
  EXPECT_EQ(limit_mw(*nvml, 0), 700000u);
}

TEST(Knobs, ClocksLockAndRestore) {
  test::FakeNvmlEnv fake(1);
  test::ScopedEnv env;
  env.set("CNNERGY_FAKE_NVML_MEM_CLOCKS", "2619,1593");
  auto nvml = open_fake();
  test::FakeTruth truth;
  {
    KnobController k(nvml, quiet(fake.journal()));
    k.lock_sm_clocks(0, 1200, 1410);
    k.set_memory_clock(0, 1593);
    EXPECT_EQ(truth.locked_sm(0), std::make_pair(1200u, 1410u));
    EXPECT_EQ(truth.locked_mem(0), std::make_pair(1593u, 1593u));
    truth.set_load(0, 0.5);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    EXPECT_EQ(nvml->device(0).sm_clock_mhz(), 1410u);
    EXPECT_EQ(nvml->device(0).mem_clock_mhz(), 1593u);
    EXPECT_EQ(Journal(fake.journal()).read().entries.size(), 2u);
  }
  EXPECT_EQ(truth.locked_sm(0), std::make_pair(0u, 0u));
  EXPECT_EQ(truth.locked_mem(0), std::make_pair(0u, 0u));
}

TEST(Knobs, MemoryClockFallsBackToApplicationClocksOnOldDrivers) {
  test::FakeNvmlEnv fake(1);
  test::ScopedEnv env;
  env.set("CNNERGY_NVML_LIBRARY", test::fake_nvml_minimal_path());
  env.set("CNNERGY_FAKE_NVML_MEM_CLOCKS", "2619,1593");
  auto nvml = open_fake();
  {
    KnobController k(nvml, quiet(fake.journal()));
    k.set_memory_clock(0, 1593);
    EXPECT_EQ(nvml->device(0).clocks().app_mem_mhz, 1593u);
    const JournalData j = Journal(fake.journal()).read();
    ASSERT_EQ(j.entries.size(), 1u);
    EXPECT_EQ(j.entries[0].kind, KnobKind::kApplicationClocks);
    EXPECT_EQ(j.entries[0].original_app_mem_mhz, 2619u);
  }
  EXPECT_EQ(nvml->device(0).clocks().app_mem_mhz, 2619u);
  EXPECT_EQ(nvml->device(0).clocks().app_sm_mhz, 1980u);
}

TEST(Knobs, PermissionAndSupportErrorsAreTypedAndLeaveNoJournal) {
  test::FakeNvmlEnv fake(1);
  test::ScopedEnv env;
  env.set("CNNERGY_FAKE_NVML_FAIL", "set:no_permission");
  {
    auto nvml = open_fake();
    KnobController k(nvml, quiet(fake.journal()));
    try {
      k.set_power_limit_w(0, 300);
      FAIL() << "no error";
    } catch (const PermissionDenied& e) {
      EXPECT_TRUE(contains(e.what(), "root or CAP_SYS_ADMIN")) << e.what();
    }
    EXPECT_THROW(k.lock_sm_clocks(0, 1200, 1200), PermissionDenied);
    EXPECT_FALSE(Journal(fake.journal()).exists());
    EXPECT_EQ(limit_mw(*nvml, 0), 700000u);
  }
  env.set("CNNERGY_FAKE_NVML_FAIL", "set:not_supported");
  auto nvml = open_fake();
  KnobController k(nvml, quiet(fake.journal()));
  EXPECT_THROW(k.set_power_limit_w(0, 300), NotSupported);
  EXPECT_FALSE(Journal(fake.journal()).exists());
}

TEST(Knobs, DryRunValidatesAndChangesNothing) {
  test::FakeNvmlEnv fake(2);
  auto nvml = open_fake();
  std::vector<std::string> said;
  KnobOptions o = quiet(fake.journal());
  o.dry_run = true;
  o.announce = [&](const std::string& s) { said.push_back(s); };
  KnobController k(nvml, o);
  k.set_power_limit_w(0, 350);
  k.lock_sm_clocks(1, 1410, 1410);
  EXPECT_THROW(k.set_power_limit_w(0, 900), InvalidArgument);  // still validated
  ASSERT_EQ(k.plan().size(), 2u);
  EXPECT_TRUE(contains(k.plan()[0], "700 W -> 350 W")) << k.plan()[0];
  EXPECT_EQ(said.size(), 2u);
  EXPECT_FALSE(Journal(fake.journal()).exists());
  EXPECT_EQ(limit_mw(*nvml, 0), 700000u);
  EXPECT_EQ(k.active_changes(), 0u);
}

TEST(Knobs, RestoredAfterAnException) {
  test::FakeNvmlEnv fake(1);
  auto nvml = open_fake();
  try {
    KnobController k(nvml, quiet(fake.journal()));
    k.set_power_limit_w(0, 320);
    throw std::runtime_error("the workload failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(limit_mw(*nvml, 0), 700000u);
  EXPECT_FALSE(Journal(fake.journal()).exists());
}

TEST(Knobs, JournalOfADeadRunIsRestoredFirstAndALiveOneRefused) {
  test::FakeNvmlEnv fake(2);
  auto nvml = open_fake();
  nvml->device(1).set_power_limit_mw(300000);  // what the crashed run left behind
  JournalData d = Journal::for_this_process();
  d.pid = test::dead_pid();
  d.entries.push_back({nvml->device(1).uuid(), 1, "", KnobKind::kPowerLimit, 650000, 0, 0});
  Journal(fake.journal()).write(d);
  {
    KnobController k(nvml, quiet(fake.journal()));
    EXPECT_EQ(limit_mw(*nvml, 1), 650000u);
    EXPECT_FALSE(Journal(fake.journal()).exists());
  }
  d.pid = static_cast<long>(::getpid());  // a live writer: another process is at work
  Journal(fake.journal()).write(d);
  EXPECT_THROW(KnobController(nvml, quiet(fake.journal())), InvalidArgument);
  test::write_file(fake.journal(), "{ broken");
  EXPECT_THROW(KnobController(nvml, quiet(fake.journal())), DataError);
}

TEST(Knobs, SigtermRestoresAndEndsTheProcessBySignal) {
  test::FakeNvmlEnv fake(1);
  const std::string ready = fake.dir.file("ready");
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      auto nvml = open_fake();
      KnobController k(nvml, quiet(fake.journal()));  // handles SIGINT/SIGTERM/SIGHUP
      k.set_power_limit_w(0, 275);
      test::write_file(ready, "1");
      std::this_thread::sleep_for(std::chrono::seconds(30));
    } catch (...) {
    }
    ::_exit(3);
  }
  ASSERT_TRUE(
      test::wait_until([&] { return !test::read_file(ready).empty(); }, std::chrono::seconds(20)));
  {
    auto nvml = open_fake();
    EXPECT_EQ(limit_mw(*nvml, 0), 275000u);  // the child's change is visible here
  }
  ::kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  auto nvml = open_fake();
  EXPECT_EQ(limit_mw(*nvml, 0), 700000u);
  EXPECT_FALSE(Journal(fake.journal()).exists());
}
