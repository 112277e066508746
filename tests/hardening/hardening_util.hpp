// Helpers shared by the hardening tests: a fresh temporary directory (from the tune tests), waiting
// for processes, and running a test body in a forked child.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "tune/tune_test_util.hpp"

namespace cnnergy::hardening_testing {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Alive and not a zombie (an orphan's zombie waits for init to reap it).
inline bool process_running(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

inline bool wait_gone(pid_t pid, double seconds) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < seconds) {
    if (!process_running(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return !process_running(pid);
}

inline pid_t read_pid(const std::string& path, double seconds = 5) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < seconds) {
    std::ifstream in(path);
    long v = 0;
    if (in >> v && v > 0) return static_cast<pid_t>(v);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// Runs `body` in a forked child; returns its exit status (a gtest failure in the child is exit 1).
template <typename F>
int in_child(F&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (...) {
      rc = 99;
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace cnnergy::hardening_testing
