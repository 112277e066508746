// cnnergyd against the fake NVML: the policy parser, requests and refusals (unknown GPU, outside the
// policy or the device range, unknown protocol version, read-only, rate limit), leases between two
// clients and restore on disconnect, restore on restart after kill -9 before the socket accepts,
// and the daemon's refusals to start (path not a socket, corrupt journal).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/errors.hpp"
#include "daemon/policy.hpp"
#include "daemon_test_util.hpp"
#include "telemetry/knob_client.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::string error_message(const Json& reply) {
  return reply.is_object() && reply.find("error") ? reply["error"]["message"].as_string() : "";
}
}  // namespace

TEST(DaemonPolicy, ParsesStrictlyAndResolvesIds) {
  const auto p = daemon::Policy::parse(
      R"({"version": 1, "socket_group": "0", "users": ["root", 1234], "groups": ["0"], "gpus": [1],
          "power_limit_w": {"min": 250, "max": 600}, "max_changes_per_minute": 5})",
      "test");
  EXPECT_EQ(p.socket_gid, 0u);
  ASSERT_EQ(p.allowed_uids.size(), 2u);
  EXPECT_EQ(p.allowed_uids[1], 1234u);
  EXPECT_TRUE(p.gpu_allowed(1));
  EXPECT_FALSE(p.gpu_allowed(0));
  EXPECT_TRUE(p.user_allowed(1234, 100, {}));
  EXPECT_TRUE(p.user_allowed(4321, 0, {}));      // primary group 0 is allowed
  EXPECT_TRUE(p.user_allowed(4321, 5, {7, 0}));  // a supplementary group
  EXPECT_FALSE(p.user_allowed(4321, 5, {7}));
  EXPECT_THROW(daemon::Policy::parse(R"({"version": 1, "socket_group": "0", "gpu": [0]})", "t"), DataError);
  EXPECT_THROW(daemon::Policy::parse(R"({"version": 2, "socket_group": "0"})", "t"), DataError);
  EXPECT_THROW(daemon::Policy::parse(R"({"version": 1, "socket_group": "no-such-group-x9"})", "t"), DataError);
  EXPECT_THROW(daemon::Policy::parse(R"({"version": 1, "socket_group": "0", "power_limit_w": {"min": 5}})", "t"),
               DataError);
  EXPECT_THROW(daemon::Policy::parse(R"({"version": 1, "socket_group": "0", "socket_path": "rel.sock"})", "t"),
               DataError);
  const auto ro = daemon::Policy::parse(R"({"version": 1, "socket_group": "0", "read_only": true})", "t");
  EXPECT_FALSE(ro.user_allowed(0, 0, {}));
}

TEST(DaemonPolicy, ThePackagedExampleIsValid) {
  std::string text = read_file(std::string(CNNERGY_TEST_SOURCE_DIR) + "/packaging/cnnergyd.policy.example");
  ASSERT_FALSE(text.empty());
  for (std::size_t at; (at = text.find("\"cnnergy\"")) != std::string::npos;)
    text.replace(at, 9, "\"0\"");  // the group need not exist on the test machine
  const auto p = daemon::Policy::parse(text, "cnnergyd.policy.example");
  EXPECT_EQ(p.socket_path, "/run/cnnergy/cnnergyd.sock");
  EXPECT_FALSE(p.read_only);
  ASSERT_TRUE(p.power_limit_w.has_value());
  EXPECT_TRUE(p.power_limit_w->contains(300));
}

TEST(Daemon, ChangesWithinPolicyAndRefusesBadRequestsLeavingTheGpuAsItWas) {
  FakeNvmlEnv fake(2);
  DaemonPolicy pol;
  pol.extra += R"(, "power_limit_w": {"min": 250, "max": 650}, "gpus": [0])";
  DaemonProcess d(fake, pol);
  ASSERT_TRUE(d.start()) << d.log();
  telemetry::KnobClient c(d.socket());
  c.set_power_limit_w(0, 300);
  EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "300000");
  const auto refused = [&](auto&& fn, const char* what) {
    try {
      fn();
      ADD_FAILURE() << what << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "300000") << what;
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_TRUE(contains(refused([&] { c.set_power_limit_w(7, 300); }, "unknown GPU"), "no GPU 7"));
  EXPECT_TRUE(contains(refused([&] { c.set_power_limit_w(0, 200); }, "outside policy"), "250 to 650 W"));
  EXPECT_TRUE(contains(refused([&] { c.set_power_limit_w(1, 300); }, "GPU outside policy"), "not among"));
  EXPECT_TRUE(contains(refused([&] { c.lock_sm_clocks(0, 1001, 1001); }, "unsupported clock"),
                       "nearest supported clock is 1005 MHz"));
  EXPECT_EQ(fake_setting(d.state_file(), 0, "sm_lock"), "0,0");

  const int fd = connect_unix(d.socket());
  ASSERT_GE(fd, 0);
  Json v2 = request("state");
  v2["v"] = 2;
  const Json r2 = roundtrip(fd, v2);
  EXPECT_FALSE(r2["ok"].as_bool());
  EXPECT_EQ(r2["error"]["code"].as_string(), "unsupported");
  EXPECT_TRUE(contains(error_message(r2), "unknown protocol version 2")) << r2.dump();
  Json extra = request("set_power_limit");
  extra["gpu"] = 0, extra["watts"] = 300, extra["path"] = "/etc/passwd";
  EXPECT_TRUE(contains(error_message(roundtrip(fd, extra)), "takes no 'path'"));
  EXPECT_TRUE(contains(error_message(roundtrip(fd, request("rm -rf /"))), "unknown operation"));
  Json frac = request("set_power_limit");
  frac["gpu"] = 0.5, frac["watts"] = 300;
  EXPECT_TRUE(contains(error_message(roundtrip(fd, frac)), "whole number"));
  const Json st = roundtrip(fd, request("state"));
  ASSERT_TRUE(st["ok"].as_bool()) << st.dump();
  EXPECT_EQ(st["gpus"].items().size(), 2u);
  EXPECT_EQ(st["gpus"].items()[0]["power_limit_w"].as_number(), 300);
  EXPECT_TRUE(st["gpus"].items()[0]["changeable"].as_bool());
  EXPECT_FALSE(st["gpus"].items()[1]["changeable"].as_bool());
  ::close(fd);

  c.restore();  // "reset_all": back to the original; the connection keeps GPU 0 (a sweep between trials)
  EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "700000");
  EXPECT_TRUE(c.state()["gpus"].items()[0]["held_by_you"].as_bool());
  c.call(request("release"));  // gives it back
  EXPECT_TRUE(c.state()["gpus"].items()[0]["held_by_uid"].is_null());
}

TEST(Daemon, LeasesBelongToTheConnectionAndAreRestoredWhenItCloses) {
  FakeNvmlEnv fake(2);
  DaemonProcess d(fake);
  ASSERT_TRUE(d.start()) << d.log();
  auto a = std::make_unique<telemetry::KnobClient>(d.socket());
  telemetry::KnobClient b(d.socket());
  a->set_power_limit_w(0, 320);
  a->lock_sm_clocks(0, 1005, 1005);
  try {
    b.set_power_limit_w(0, 400);
    FAIL() << "a second client changed a GPU another holds";
  } catch (const PermissionDenied& e) {
    EXPECT_TRUE(contains(e.what(), "held by uid " + std::to_string(::getuid()) + " since 20")) << e.what();
  }
  b.set_power_limit_w(1, 400);  // the other GPU is free
  const Json st = b.state();
  EXPECT_FALSE(st["gpus"].items()[0]["held_by_you"].as_bool());
  EXPECT_TRUE(st["gpus"].items()[1]["held_by_you"].as_bool());
  EXPECT_EQ(fake_setting(d.state_file(), 0, "sm_lock"), "1005,1005");
  a->reset_sm_clocks(0);
  EXPECT_EQ(fake_setting(d.state_file(), 0, "sm_lock"), "0,0");
  EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "320000");
  a.reset();  // disconnect: the daemon restores a's change and frees GPU 0
  EXPECT_TRUE(wait_until([&] { return fake_setting(d.state_file(), 0, "power_limit_mw") == "700000"; },
                         std::chrono::seconds(5)));
  b.set_power_limit_w(0, 450);
  EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "450000");
  EXPECT_EQ(fake_setting(d.state_file(), 1, "power_limit_mw"), "400000");
  d.stop();  // SIGTERM: every client's settings restored
  EXPECT_EQ(d.exit_code(), 0) << d.log();
  EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "700000");
  EXPECT_EQ(fake_setting(d.state_file(), 1, "power_limit_mw"), "700000");
}

TEST(Daemon, KilledDaemonRestoresTheJournalOnTheNextStartBeforeAcceptingConnections) {
  FakeNvmlEnv fake(2);
  DaemonProcess d(fake);
  ASSERT_TRUE(d.start()) << d.log();
  telemetry::KnobClient c(d.socket());
  c.set_power_limit_w(1, 275);
  c.lock_sm_clocks(0, 1200, 1200);
  d.kill9();
  // Nobody restored: the settings and the lease journal (with the client's uid) are still there.
  EXPECT_EQ(fake_setting(d.state_file(), 1, "power_limit_mw"), "275000");
  std::string journal;
  for (const auto& e : std::filesystem::directory_iterator(d.state_dir()))
    if (e.path().filename().string().rfind("lease-", 0) == 0) journal = read_file(e.path().string());
  EXPECT_TRUE(contains(journal, "\"owner_uid\": " + std::to_string(::getuid()))) << journal;
  EXPECT_THROW(c.set_power_limit_w(1, 300), Error);  // the client sees its daemon gone
  // start() returns as soon as the socket accepts: by then the settings must already be back.
  ASSERT_TRUE(d.start()) << d.log();
  EXPECT_EQ(fake_setting(d.state_file(), 1, "power_limit_mw"), "700000");
  EXPECT_EQ(fake_setting(d.state_file(), 0, "sm_lock"), "0,0");
  EXPECT_TRUE(contains(d.log(), "restoring the settings of uid")) << d.log();
  for (const auto& e : std::filesystem::directory_iterator(d.state_dir()))
    EXPECT_NE(e.path().filename().string().rfind("lease-", 0), 0u) << e.path();
}

TEST(Daemon, RefusesToStartOnACorruptJournalOrAPathThatIsNotASocket) {
  FakeNvmlEnv fake(1);
  {
    DaemonProcess d(fake);
    write_file(d.socket(), "not a socket\n");
    EXPECT_EQ(d.run_to_exit(), 2);
    EXPECT_TRUE(contains(d.log(), "exists and is not a socket")) << d.log();
    EXPECT_EQ(read_file(d.socket()), "not a socket\n");  // never replaced
    ScopedEnv env;
    env.set("CNNERGY_DAEMON_SOCKET", d.socket());
    const RunResult r = run_cnnergy({"daemon-state"}, fake.dir);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, "is not a socket")) << r.err;
    std::filesystem::remove(d.socket());
  }
  {
    DaemonProcess d(fake);
    std::filesystem::create_directories(d.state_dir());
    write_file(d.state_dir() + "/lease-1-1.json", "{\"version\": 1, \"entries\": [");
    write_file(d.state_file(), "# fake\n" + fake_uuid(0) + " power_limit_mw=333000 sm_lock=0,0 mem_lock=0,0 app=0,0\n");
    EXPECT_EQ(d.run_to_exit(), 3);
    EXPECT_TRUE(contains(d.log(), "corrupt")) << d.log();
    EXPECT_TRUE(contains(d.log(), "lease-1-1.json")) << d.log();
    EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "333000");  // left as it was
    EXPECT_FALSE(std::filesystem::exists(d.socket()));
  }
}

TEST(Daemon, ReadOnlyPolicyAndRateLimitRefuseChanges) {
  FakeNvmlEnv fake(1);
  {
    DaemonPolicy pol;
    pol.extra = R"("read_only": true)";
    DaemonProcess d(fake, pol);
    ASSERT_TRUE(d.start()) << d.log();
    telemetry::KnobClient c(d.socket());
    EXPECT_FALSE(c.hello()["may_change"].as_bool());
    EXPECT_THROW(c.set_power_limit_w(0, 300), PermissionDenied);
    EXPECT_THROW(c.reset_sm_clocks(0), PermissionDenied);
    EXPECT_EQ(c.state()["gpus"].items()[0]["power_limit_w"].as_number(), 700);
    EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "700000");
  }
  {
    DaemonPolicy pol;
    pol.extra = R"("max_changes_per_minute": 3)";
    DaemonProcess d(fake, pol);
    ASSERT_TRUE(d.start()) << d.log();
    telemetry::KnobClient c(d.socket());
    c.set_power_limit_w(0, 300);
    c.set_power_limit_w(0, 310);
    c.set_power_limit_w(0, 320);
    try {
      c.set_power_limit_w(0, 330);
      FAIL() << "a fourth change in a minute was accepted";
    } catch (const PermissionDenied& e) {
      EXPECT_TRUE(contains(e.what(), "allows 3 per minute")) << e.what();
    }
    EXPECT_EQ(fake_setting(d.state_file(), 0, "power_limit_mw"), "320000");
  }
}

TEST(Daemon, ConnectionsBeyondTheBoundAreAnsweredBusyAndClosed) {
  FakeNvmlEnv fake(1);
  DaemonPolicy pol;
  pol.extra = R"("max_clients": 2)";
  DaemonProcess d(fake, pol);
  ASSERT_TRUE(d.start()) << d.log();
  // A served connection (retrying while the start-up probe's slot is still being freed).
  const auto served = [&] {
    int fd = -1;
    wait_until(
        [&] {
          fd = connect_unix(d.socket());
          const Json r = roundtrip(fd, request("hello"));
          if (r.is_object() && r["ok"].is_bool() && r["ok"].as_bool()) return true;
          ::close(fd);
          return false;
        },
        std::chrono::seconds(10));
    return fd;
  };
  const int a = served(), b = served();
  const int c = connect_unix(d.socket());
  const telemetry::Frame f = telemetry::read_frame(c, 10000, 10000);  // answered without asking
  ASSERT_EQ(f.status, telemetry::FrameStatus::kOk);
  EXPECT_TRUE(contains(error_message(Json::parse(f.payload)), "maximum of 2 connections"));
  EXPECT_EQ(telemetry::read_frame(c, 10000, 10000).status, telemetry::FrameStatus::kClosed);
  ::close(c);
  ::close(a);  // a slot frees: a new client is served again
  const int e = served();
  EXPECT_TRUE(roundtrip(e, request("state"))["ok"].as_bool());
  ::close(e);
  ::close(b);
}
