// Running an external command (sweeps rerun a user's training program per trial, monitor measures one):
// posix_spawnp into a process group of its own, with extra environment variables; waiting for it with a
// timeout and a stop request; the whole group ended (SIGTERM, then SIGKILL after a grace period) on every
// exit path, including SIGKILL of cnnergy itself (a watchdog process ends the group when we die).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cnnergy {

struct ChildStatus {
  int exit_code = 0;      // the command's exit code, or 128 + signal when a signal ended it
  bool signalled = false;
  bool timed_out = false;  // ended by us: its time limit passed
  bool stopped = false;    // ended by us: the caller asked (an interrupted sweep)
  double user_cpu_s = 0, system_cpu_s = 0;  // of the command and the children it waited for
  bool ok() const { return exit_code == 0 && !timed_out && !stopped; }
  std::string describe() const;  // "exited with status 3", "was killed by signal 9 (Killed)", "timed out"
};

struct ChildOptions {
  double timeout_s = 0;      // > 0: end the command's group when it runs longer
  double kill_grace_s = 10;  // SIGTERM first; SIGKILL when the group is still there after this long
  std::function<bool()> stop;  // polled while waiting (every 50 ms); true ends the group (e.g. Ctrl-C)
  // The grace when stop() ended the command (< 0: kill_grace_s). 0 for a caller whose stop() comes
  // after a grace of its own (monitor: the signal it forwarded, --kill-grace-s ago): SIGKILL at once.
  double stop_grace_s = -1;
};

// A started command: its own process group (leader = pid) and a watchdog that ends that group if this
// process dies first. The destructor ends whatever of the group is left and reaps the command.
class ChildProcess {
 public:
  // Throws Error(kChildFailed) when the command cannot be started (not found, not executable).
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& extra_env);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Waits until the command exits, its timeout passes or stop() says so; in the latter two cases the
  // group gets SIGTERM, then SIGKILL after the grace period. Members left behind after the command
  // itself exited are ended the same way (a trial must not leave work running into the next one).
  ChildStatus wait(const ChildOptions& options);
  // Sends `signo` to the whole group (forwarding a signal cnnergy received).
  void signal_group(int signo) const;

 private:
  void end_group(double grace_s);
  void release_watchdog();

  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  rusage usage_{};
  pid_t watchdog_ = -1;
  int watchdog_fd_ = -1;  // write end: closing it (our death) tells the watchdog to end the group
};

// The start time of process `pid` in clock ticks since boot (/proc/PID/stat field 22); nullopt when
// there is no such process. A PID with its start time names one process even after PIDs wrap.
std::optional<std::uint64_t> process_start_ticks(long pid);

// Compatibility helpers over ChildProcess (no timeout, no stop).
ChildStatus run_command(const std::vector<std::string>& argv,
                        const std::vector<std::pair<std::string, std::string>>& extra_env,
                        const ChildOptions& options = {});

}  // namespace cnnergy
