// SignalWatcher: self-pipe signal handling.
#include "telemetry/signals.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/errors.hpp"

namespace cnnergy::telemetry {

namespace {

// A signal handler can reach only globals: the pipe's write end, and whether a watcher exists.
// Both are lock-free atomics, set and cleared by the one SignalWatcher alive at a time.
std::atomic<int> g_signal_pipe_write{-1};
std::atomic<bool> g_watcher_alive{false};
static_assert(std::atomic<int>::is_always_lock_free, "signal handler needs a lock-free atomic");

void on_signal(int signo, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const int fd = g_signal_pipe_write.load();
  if (fd >= 0) {
    // si_code <= 0: sent by a process (SI_USER, SI_QUEUE, SI_TKILL); > 0: by the kernel/terminal.
    const unsigned char msg[2] = {static_cast<unsigned char>(signo),
                                  static_cast<unsigned char>(info && info->si_code <= 0 ? 1 : 0)};
    ssize_t ignored = ::write(fd, msg, sizeof msg);
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

SignalWatcher::SignalWatcher(Handler handler, std::vector<int> signals)
    : handler_(std::move(handler)), signals_(std::move(signals)) {
  bool expected = false;
  if (!g_watcher_alive.compare_exchange_strong(expected, true))
    throw InternalError("only one SignalWatcher may be active at a time");
  if (::pipe2(pipe_, O_CLOEXEC) != 0) {
    g_watcher_alive = false;
    throw InternalError(std::string("pipe2 failed: ") + std::strerror(errno));
  }
  ::fcntl(pipe_[1], F_SETFL, O_NONBLOCK);  // a flood of signals must never block the handler
  g_signal_pipe_write = pipe_[1];
  thread_ = std::thread([this] { run(); });
  previous_.resize(signals_.size());
  for (std::size_t i = 0; i < signals_.size(); ++i) {
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(signals_[i], &sa, &previous_[i]);
  }
}

SignalWatcher::~SignalWatcher() {
  for (std::size_t i = 0; i < signals_.size(); ++i)
    ::sigaction(signals_[i], &previous_[i], nullptr);
  const unsigned char stop[2] = {0, 0};  // signal number 0: the thread's cue to finish
  ssize_t ignored = ::write(pipe_[1], stop, sizeof stop);
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  g_signal_pipe_write = -1;
  ::close(pipe_[0]);
  ::close(pipe_[1]);
  g_watcher_alive = false;
}

void SignalWatcher::run() {
  for (;;) {
    unsigned char msg[2];
    const ssize_t n = ::read(pipe_[0], msg, sizeof msg);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof msg) || msg[0] == 0) return;
    handler_(msg[0], msg[1] != 0);
  }
}

void SignalWatcher::terminate_with(int signo) {
  std::signal(signo, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signo);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::kill(::getpid(),
         signo);  // to the process: whichever thread takes it, the default action ends it
  for (;;) ::pause();
}

}  // namespace cnnergy::telemetry
