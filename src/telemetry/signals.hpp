// Turns SIGINT/SIGTERM/SIGHUP into calls on an ordinary thread. The signal handler itself only
// writes the signal number to a pipe (async-signal-safe); a watcher thread reads it and runs the
// handler, which may then do real work: restore GPU settings, forward the signal to a child.
#pragma once

#include <csignal>
#include <functional>
#include <thread>
#include <vector>

namespace cnnergy::telemetry {

class SignalWatcher {
 public:
  // `user_sent`: the signal came from kill()/sigqueue() (not from the terminal or the kernel); a
  // terminal's Ctrl-C already reaches the whole foreground process group.
  using Handler = std::function<void(int signo, bool user_sent)>;

  // Installs handlers for `signals`; only one watcher may exist at a time (InternalError
  // otherwise).
  explicit SignalWatcher(Handler handler, std::vector<int> signals = {SIGINT, SIGTERM, SIGHUP});
  ~SignalWatcher();  // puts the previous dispositions back and stops the thread
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Ends the process the way `signo` would have with its default action (so the parent sees
  // "killed by SIGTERM"), after the caller has cleaned up.
  [[noreturn]] static void terminate_with(int signo);

 private:
  void run();

  Handler handler_;
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  int pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace cnnergy::telemetry
