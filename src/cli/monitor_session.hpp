// The measuring half of `cnnergy monitor`, apart from its flags: one run of the command (spawned, waited
// for with its user and system CPU time), repeated runs summarised as mean ± standard deviation like
// `perf stat -r`, sampling without a command until Ctrl-C like `nvidia-smi -l`, and the reports — text,
// JSON and the per-sample CSV — all in SI units (s, W, J) with wall-clock ISO-8601 timestamps.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/subprocess.hpp"
#include "telemetry/energy_meter.hpp"
#include "telemetry/sampler.hpp"

namespace cnnergy::cli {

// "2026-11-25T05:00:05.123Z" for a steady-clock instant (converted through the wall clock now).
std::string iso_utc_from_steady(std::int64_t steady_ns);

struct MonitorRun {
  int exit_code = 0;
  std::string status_text;   // "exited with status 0", "was killed by signal 9 (Killed)", "interrupted"
  telemetry::Measurement m;
  double user_cpu_s = 0, system_cpu_s = 0;  // of the command and its waited-for children (wait4)
  bool has_cpu_time = false;                // false without a command
};

// Spawns `cmd` in a process group of its own (signals at their defaults in the child), measures it in one
// window of `meter`, and waits for it (options: --timeout-s, the SIGTERM-to-SIGKILL grace). `child` holds
// its pid (= its group) while it runs, for signal forwarding; `early_signal` != 0 is sent to the group at
// once (a signal that arrived before the start). Error(kChildFailed) when it cannot be started.
MonitorRun run_command_measured(const std::vector<std::string>& cmd, telemetry::EnergyMeter& meter,
                                std::atomic<pid_t>& child, const std::atomic<int>& early_signal,
                                const ChildOptions& options = {});

// No command: one window from now until `stop` becomes non-zero (the SIGINT/SIGTERM handler sets it).
// Every `print_every_ms` one line (wall time, power and energy so far per GPU) goes to `live` (may be null).
MonitorRun sample_until_stopped(telemetry::EnergyMeter& meter, const telemetry::Sampler& sampler,
                                const std::atomic<int>& stop, double print_every_ms, std::FILE* live);

// Reports over one or more runs: with several, every figure is the mean ± the sample standard deviation.
std::string monitor_text_report(const std::string& what, const std::vector<MonitorRun>& runs,
                                const telemetry::Sampler& sampler);
Json monitor_json_report(const std::vector<std::string>& cmd, const std::vector<MonitorRun>& runs,
                         const telemetry::Sampler& sampler, const std::vector<std::string>& knobs);

// Streams every sample to a CSV file from the sampler thread: ISO wall-clock time, seconds since the
// start, and per GPU power (W), energy counter and integral (J), clocks (MHz), utilisation, temperature.
class SampleCsv {
 public:
  SampleCsv(const std::string& path, const telemetry::Sampler& sampler, std::int64_t t0_ns);
  void write(const telemetry::Sample& s);

 private:
  std::ofstream out_;
  std::mutex mutex_;
  std::int64_t t0_ns_;
};

}  // namespace cnnergy::cli
