// Sweep interruption and duplicate-sweep handling (see sweep_session.hpp).
#include "cli/sweep_session.hpp"

#include <unistd.h>

#include <cstdio>

#include "core/errors.hpp"

namespace cnnergy::cli {

SweepInterrupt::SweepInterrupt()
    : watcher_([this](int signo, bool) {
        if (signal_.exchange(signo) == 0) {
          static const char kNote[] =
              "\ncnnergy: interrupted: finishing the trial in progress, then writing the report of what finished "
              "(send the signal again to stop at once)\n";
          [[maybe_unused]] const auto n = ::write(STDERR_FILENO, kNote, sizeof kNote - 1);
          return;
        }
        static const char kNow[] =
            "\ncnnergy: stopped at once: finished trials are stored; if GPU settings were changed, run "
            "`cnnergy restore`\n";
        [[maybe_unused]] const auto n = ::write(STDERR_FILENO, kNow, sizeof kNow - 1);
        telemetry::SignalWatcher::terminate_with(signo);
      }) {}

namespace {

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string resume_command(const std::vector<std::string>& args) {
  std::string out = "cnnergy sweep";
  bool resumed = false, passthrough = false;
  for (const auto& a : args) {
    if (!passthrough && a == "--") {
      out += " --resume";
      resumed = passthrough = true;
    }
    if (!passthrough && (a == "--new" || a == "--resume")) continue;
    out += " " + shell_quote(a);
  }
  if (!resumed) out += " --resume";
  return out;
}

void refuse_duplicate_sweep(const tune::SweepRecord& existing, const tune::ResultStore& store,
                            const std::vector<std::string>& args) {
  const auto trials = store.trials(existing.id);
  throw InvalidArgument("the database " + store.path() + " already holds this sweep (sweep " +
                        std::to_string(existing.id) + ", created " + existing.created + ", " +
                        std::to_string(trials.size()) + " trial(s) stored). Choose:\n  " + resume_command(args) +
                        "\n      runs only the trials still missing (failed ones again), into the same sweep;\n"
                        "  add --new to measure everything again as a second sweep beside it.");
}

}  // namespace cnnergy::cli
