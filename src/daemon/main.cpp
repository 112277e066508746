// cnnergyd: the knob daemon's entry point (flags, policy, NVML, recovery, socket, signals).
// Run by systemd as root (packaging/cnnergyd.service); see docs/daemon.md.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "daemon/server.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/signals.hpp"

namespace {

const char* kUsage =
    "usage: cnnergyd [--policy FILE] [--socket PATH] [--state-dir DIR] [--check]\n"
    "\n"
    "The cnnergy knob daemon: lets the users its policy names change GPU power limits and clocks\n"
    "without root, journals every change (with the user's uid) before making it, and restores a\n"
    "client's changes when its connection closes (exit, crash, kill -9). Started again after being\n"
    "killed, it restores the journaled settings before it accepts a connection.\n"
    "\n"
    "  --policy FILE     policy (JSON) [default: /etc/cnnergy/cnnergyd.json]; see docs/daemon.md\n"
    "  --socket PATH     overrides the policy's socket_path\n"
    "  --state-dir DIR   overrides the policy's state_dir (the lease journals)\n"
    "  --check           validate the policy, print what it allows, and exit\n"
    "\n"
    "Exit status: 0 after SIGTERM/SIGINT (every client's settings restored); 2 bad flag, socket path\n"
    "that exists and is not a socket, or another daemon running; 3 invalid policy or corrupt journal;\n"
    "4 no NVML; 6 cannot set the socket's group; 7 a GPU call failed.\n";

std::mutex g_log_mutex;
void log_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  std::fprintf(stderr, "cnnergyd: %s\n", line.c_str());
  std::fflush(stderr);
}

int run(const std::vector<std::string>& args) {
  using namespace cnnergy;
  std::string policy_path = "/etc/cnnergy/cnnergyd.json";
  std::optional<std::string> socket, state_dir;
  bool check = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* name) {
      if (i + 1 >= args.size()) throw InvalidArgument(std::string(name) + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--policy") {
      policy_path = value("--policy");
    } else if (a == "--socket") {
      socket = value("--socket");
    } else if (a == "--state-dir") {
      state_dir = value("--state-dir");
    } else if (a == "--check") {
      check = true;
    } else {
      throw InvalidArgument("unknown argument '" + a + "' (see cnnergyd --help)");
    }
  }
  daemon::Policy policy = daemon::Policy::load(policy_path);
  if (socket) policy.socket_path = *socket;
  if (state_dir) policy.state_dir = *state_dir;
  if (check) {
    std::printf("%s: %s\n", policy_path.c_str(), policy.summary().c_str());
    return 0;
  }
  ::signal(SIGPIPE, SIG_IGN);
  if (::geteuid() != 0)
    log_line("warning: not running as root: a real GPU driver will refuse every change");
  auto opened = telemetry::Nvml::open();
  if (!opened.nvml) throw NotSupported("cnnergyd: " + opened.unavailable_reason);
  log_line("policy " + policy_path + ": " + policy.summary());
  daemon::Daemon d(opened.nvml, policy, log_line);
  d.recover();  // before the socket exists: nobody is served before the GPUs are restored
  d.listen();
  telemetry::SignalWatcher watcher([&](int signo, bool) {
    log_line("signal " + std::to_string(signo) + ": stopping, restoring every client's settings");
    d.stop();
  });
  d.serve();
  log_line("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const cnnergy::Error& e) {
    std::fprintf(stderr, "cnnergyd: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnnergyd: internal error: %s\n", e.what());
    return 1;
  }
}
