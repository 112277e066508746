// ChildProcess over posix_spawnp (own process group), a forked watchdog that ends the group when this
// process dies (its pipe's write end closes with us, SIGKILL included), and waits through a pidfd.
#include "core/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/errors.hpp"

extern char** environ;

namespace cnnergy {

namespace {

double seconds_of(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; }

// The watchdog (a forked copy of us, async-signal-safe calls only): reads the group id, then waits. A 'd'
// byte means the command was dealt with; end of file means we died: SIGTERM the group, give it the grace
// period, then SIGKILL it.
[[noreturn]] void watchdog_main(int read_fd, long grace_ms) {
  ::setsid();  // out of our process group and session: a kill of our job or terminal leaves it alive
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(s, &ign, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int fd = 3; fd < 1024; ++fd)  // every other descriptor: an inherited write end would keep us waiting
    if (fd != read_fd) ::close(fd);
  pid_t group = 0;
  std::size_t got = 0;
  while (got < sizeof group) {
    const ssize_t n = ::read(read_fd, reinterpret_cast<char*>(&group) + got, sizeof group - got);
    if (n > 0) got += static_cast<std::size_t>(n);
    else if (n == 0 || errno != EINTR) ::_exit(0);  // we died before the command started: nothing to end
  }
  char c = 0;
  ssize_t n;
  while ((n = ::read(read_fd, &c, 1)) < 0 && errno == EINTR) {
  }
  if (n == 1 || group <= 1) ::_exit(0);
  if (::kill(-group, SIGTERM) == 0) {
    for (long waited = 0; waited < grace_ms; waited += 50) {
      timespec ts{0, 50 * 1000 * 1000};
      ::nanosleep(&ts, nullptr);
      if (::kill(-group, 0) != 0) ::_exit(0);
    }
    ::kill(-group, SIGKILL);
  }
  ::_exit(0);
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Whether process group `group` has a member that is still running. kill(-group, 0) also counts
// zombies, and an orphan's zombie waits for init, which in a container may never reap it: the
// members' states in /proc decide then.
bool group_running(pid_t group) {
  if (::kill(-group, 0) != 0) return false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long ppid = 0, pgrp = 0;
    if (rest >> state >> ppid >> pgrp && pgrp == group && state != "Z" && state != "X") return true;
  }
  return false;
}

}  // namespace

std::string ChildStatus::describe() const {
  if (timed_out) return "timed out (its process group was ended)";
  if (stopped) return "stopped (interrupted; its process group was ended)";
  if (signalled)
    return "was killed by signal " + std::to_string(exit_code - 128) + " (" + ::strsignal(exit_code - 128) + ")";
  return "exited with status " + std::to_string(exit_code);
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& extra_env) {
  if (argv.empty()) throw InvalidArgument("no command given");
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra_env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  // The watchdog first, so that there is no moment in which the command runs without one.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw InternalError(std::string("pipe2 failed: ") + std::strerror(errno));
  constexpr long kWatchdogGraceMs = 5000;
  const pid_t w = ::fork();
  if (w < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw InternalError(std::string("fork failed: ") + std::strerror(errno));
  }
  if (w == 0) watchdog_main(fds[0], kWatchdogGraceMs);
  ::close(fds[0]);
  watchdog_ = w;
  watchdog_fd_ = fds[1];

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaddset(&defaults, s);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setpgroup(&attr, 0);  // a group of its own: its children are ended with it
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], nullptr, &attr, args.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    release_watchdog();
    throw Error(ExitCode::kChildFailed, "cannot start '" + argv[0] + "': " + std::strerror(rc) +
                                            (rc == ENOENT ? " (command not found)" : ""));
  }
  pid_ = pid;
  [[maybe_unused]] const ssize_t n = ::write(watchdog_fd_, &pid, sizeof pid);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) end_group(0.5);
  release_watchdog();
}

void ChildProcess::release_watchdog() {
  if (watchdog_fd_ >= 0) {
    const char done = 'd';
    [[maybe_unused]] const ssize_t n = ::write(watchdog_fd_, &done, 1);
    ::close(watchdog_fd_);
    watchdog_fd_ = -1;
  }
  if (watchdog_ > 0) {
    while (::waitpid(watchdog_, nullptr, 0) < 0 && errno == EINTR) {
    }
    watchdog_ = -1;
  }
}

void ChildProcess::signal_group(int signo) const {
  if (pid_ > 0) ::kill(-pid_, signo);
}

// SIGTERM to the group, reaping the leader; SIGKILL after `grace_s` if any member is left.
void ChildProcess::end_group(double grace_s) {
  auto reap = [this](int flags) {
    if (reaped_) return true;
    pid_t r;
    while ((r = ::wait4(pid_, &status_, flags, &usage_)) < 0 && errno == EINTR) {
    }
    if (r == pid_ || (r < 0 && errno == ECHILD)) reaped_ = true;
    return reaped_;
  };
  reap(WNOHANG);
  if (reaped_ && !group_running(pid_)) return;  // nothing left (zombies waiting for init do not count)
  ::kill(-pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (std::chrono::steady_clock::now() < deadline) {
    reap(WNOHANG);
    if (reaped_ && !group_running(pid_)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-pid_, SIGKILL);
  reap(0);
}

ChildStatus ChildProcess::wait(const ChildOptions& options) {
  ChildStatus s;
  const auto t0 = std::chrono::steady_clock::now();
  const int pidfd = pidfd_open(pid_);
  while (!reaped_) {
    pid_t r;
    while ((r = ::wait4(pid_, &status_, WNOHANG, &usage_)) < 0 && errno == EINTR) {
    }
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (r < 0) throw InternalError(std::string("wait4 failed: ") + std::strerror(errno));
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (options.timeout_s > 0 && elapsed_s >= options.timeout_s) {
      s.timed_out = true;
      break;
    }
    if (options.stop && options.stop()) {
      s.stopped = true;
      break;
    }
    int wait_ms = 50;
    if (options.timeout_s > 0) wait_ms = std::max(1, std::min(wait_ms, static_cast<int>((options.timeout_s - elapsed_s) * 1e3) + 1));
    if (pidfd >= 0) {
      pollfd pfd{pidfd, POLLIN, 0};
      ::poll(&pfd, 1, wait_ms);  // readable when the command exits; EINTR just loops
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(wait_ms, 2)));
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  // The command on timeout/stop; members it left behind otherwise.
  end_group(s.stopped && options.stop_grace_s >= 0 ? options.stop_grace_s : options.kill_grace_s);
  release_watchdog();
  if (WIFSIGNALED(status_)) {
    s.signalled = true;
    s.exit_code = 128 + WTERMSIG(status_);
  } else {
    s.exit_code = WEXITSTATUS(status_);  // posix_spawnp reports a failed exec as exit 127
  }
  s.user_cpu_s = seconds_of(usage_.ru_utime);
  s.system_cpu_s = seconds_of(usage_.ru_stime);
  pid_ = -1;
  return s;
}

std::optional<std::uint64_t> process_start_ticks(long pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const auto close = line.rfind(')');  // the command name in parentheses may hold spaces and ')'
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return std::nullopt;
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

ChildStatus run_command(const std::vector<std::string>& argv,
                        const std::vector<std::pair<std::string, std::string>>& extra_env, const ChildOptions& options) {
  ChildProcess child(argv, extra_env);
  return child.wait(options);
}

}  // namespace cnnergy
