// What `cnnergy sweep` does around the trials themselves: Ctrl-C (SIGINT/SIGTERM/SIGHUP) stops the sweep
// after the trial in progress so that the report of what finished is still written, the exact command
// that resumes it, and the refusal to store a second copy of a sweep the database already holds.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/signals.hpp"
#include "tune/store.hpp"

namespace cnnergy::cli {

// Owns the process's signal handling for the length of a sweep (knobs must then not install their own:
// HardwareKnobs(..., handle_signals = false)). The first signal asks the sweep to stop after the trial in
// progress; a second one ends the process at once (GPU settings then stay journaled for `cnnergy restore`).
class SweepInterrupt {
 public:
  SweepInterrupt();
  bool requested() const { return signal_.load() != 0; }
  int signal() const { return signal_.load(); }
  int exit_code() const { return 128 + signal_.load(); }  // like a shell reports a command a signal ended

 private:
  std::atomic<int> signal_{0};
  telemetry::SignalWatcher watcher_;
};

// `cnnergy sweep ARGS --resume`, shell-quoted, with --resume before a passthrough "--" and --new dropped.
std::string resume_command(const std::vector<std::string>& args);

// A sweep with the same key already in the store, and neither --resume nor --new given: InvalidArgument
// naming it and both choices (a second copy would silently double every trial in the reports).
void refuse_duplicate_sweep(const tune::SweepRecord& existing, const tune::ResultStore& store,
                            const std::vector<std::string>& args);

}  // namespace cnnergy::cli
