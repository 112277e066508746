// Helpers for the cnnergyd tests: a daemon process with its policy, socket and state folder in a
// temp folder over the fake NVML, raw protocol I/O, and the fake driver's persisted settings (the
// ground truth of what the daemon changed, readable from any process).
#pragma once

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "core/json.hpp"
#include "telemetry/knob_protocol.hpp"
#include "telemetry/telemetry_test_util.hpp"

namespace cnnergy::test {

inline std::string daemon_binary() {
  if (const char* bin = std::getenv("CNNERGY_BIN"); bin && *bin) return std::string(bin) + "/cnnergyd";
  return CNNERGY_TEST_DAEMON;
}

inline std::string fake_uuid(unsigned gpu) {
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-fa4e%04x-c0de-4e11-8000-%012x", gpu, 0x5eed0000u + gpu);
  return uuid;
}

// One setting of one GPU from the fake driver's state file ("power_limit_mw", "sm_lock", ...), as
// written there; the driver's default when the GPU has no line yet.
inline std::string fake_setting(const std::string& state_file, unsigned gpu, const std::string& key) {
  const std::string text = read_file(state_file);
  const std::string uuid = fake_uuid(gpu);
  std::size_t at = text.find(uuid + " ");
  if (at == std::string::npos) return key == "power_limit_mw" ? "700000" : "0,0";
  const std::size_t end = text.find('\n', at);
  const std::string line = text.substr(at, end - at);
  const std::size_t k = line.find(" " + key + "=");
  if (k == std::string::npos) return "";
  const std::size_t v = k + key.size() + 2;
  return line.substr(v, line.find(' ', v) - v);
}

using telemetry::connect_unix;  // fd or -1

inline Json request(const std::string& op) {
  Json j = Json::object();
  j["v"] = telemetry::kKnobProtocolVersion;
  j["op"] = op;
  return j;
}

// One request, one reply (a null Json when the connection closed or nothing came in 10 s).
inline Json roundtrip(int fd, const Json& req) {
  if (!telemetry::write_message(fd, req)) return Json();
  const telemetry::Frame f = telemetry::read_frame(fd, 10000, 10000);
  if (f.status != telemetry::FrameStatus::kOk) return Json();
  return Json::parse(f.payload);
}

struct DaemonPolicy {
  std::string extra = R"("max_changes_per_minute": 100000, "frame_timeout_ms": 300)";
  std::string socket_group = "0";
};

// A cnnergyd over the fake NVML (FakeNvmlEnv's state file) in its own temp folder.
class DaemonProcess {
 public:
  explicit DaemonProcess(const FakeNvmlEnv& fake, const DaemonPolicy& policy = {})
      : dir_(fake.dir.path()) {
    ::chmod(dir_.c_str(), 0755);  // unprivileged clients must reach the socket
    write_policy(policy);
  }
  ~DaemonProcess() { stop(); }

  void write_policy(const DaemonPolicy& policy) const {
    write_file(policy_path(), "{\"version\": 1, \"socket_group\": \"" + policy.socket_group + "\"" +
                                  (policy.extra.empty() ? "" : ", " + policy.extra) + "}\n");
  }
  std::string socket() const { return dir_ + "/cnnergyd.sock"; }
  std::string state_dir() const { return dir_ + "/state"; }
  std::string policy_path() const { return dir_ + "/policy.json"; }
  std::string state_file() const { return dir_ + "/fake-state.txt"; }
  std::string log() const { return read_file(dir_ + "/daemon.err"); }
  pid_t pid() const { return pid_; }

  // Starts it; true once the socket accepts connections (false if it exited first: see log()).
  bool start() {
    pid_ = spawn({daemon_binary(), "--policy", policy_path(), "--socket", socket(), "--state-dir",
                  state_dir()},
                 dir_ + "/daemon.out", dir_ + "/daemon.err");
    return wait_until(
        [&] {
          if (exited()) return true;
          const int fd = connect_unix(socket());
          if (fd < 0) return false;
          ::close(fd);
          return true;
        },
        std::chrono::seconds(20)) && !exited();
  }
  bool exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
      return true;
    }
    return false;
  }
  int exit_code() const { return exit_code_; }
  // Runs it to completion (for starts that must fail); returns its exit code.
  int run_to_exit() {
    start();
    wait_until([&] { return exited(); }, std::chrono::seconds(20));
    return exit_code_;
  }
  void kill9() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
  }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
    }
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

}  // namespace cnnergy::test
