// `cnnergy monitor [-r N] -- CMD ARGS...`: runs a command (N times), samples the GPUs (and CPU) while it
// runs, and reports elapsed time, energy per GPU, average and peak power, CPU time, like `perf stat` for
// joules; without a command it samples until Ctrl-C like `nvidia-smi -l`. This file holds the flags, the
// knobs (journaled KnobController, for the duration of the runs) and the signals; monitor_session.cpp measures.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "cli/args.hpp"
#include "cli/knobs_flag.hpp"
#include "cli/monitor_session.hpp"
#include "cli/sweep_slurm.hpp"
#include "cli/telemetry_commands.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "core/subprocess.hpp"
#include "exporter/monitor_exporter.hpp"
#include "telemetry/energy_meter.hpp"
#include "core/json.hpp"
#include "telemetry/knobs.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/signals.hpp"

namespace cnnergy::cli {

namespace {


std::vector<unsigned> parse_gpu_list(const std::string& text) {
  std::vector<unsigned> out;
  for (const auto& item : split_list(text, "GPU")) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 1024)
      throw InvalidArgument("--gpu: '" + item + "' is not a GPU index");
    out.push_back(static_cast<unsigned>(v));
  }
  return out;
}

// "1410" or "1200-1410" (MHz).
std::pair<std::uint32_t, std::uint32_t> parse_clock_range(const std::string& text,
                                                          const std::string& flag) {
  unsigned lo = 0, hi = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%u-%u%c", &lo, &hi, &tail) == 2 && lo > 0 && hi > 0)
    return {lo, hi};
  if (std::sscanf(text.c_str(), "%u%c", &lo, &tail) == 1 && lo > 0) return {lo, lo};
  throw InvalidArgument("--" + flag + " must be MHz or MIN-MAX in MHz, got '" + text + "'");
}

// Removes a sampler listener when it goes out of scope (token 0: none).
struct ListenerGuard {
  telemetry::Sampler& sampler;
  int token;
  ListenerGuard(telemetry::Sampler& s, int t) : sampler(s), token(t) {}
  ~ListenerGuard() {
    if (token) sampler.remove_listener(token);
  }
  ListenerGuard(const ListenerGuard&) = delete;
  ListenerGuard& operator=(const ListenerGuard&) = delete;
};

}  // namespace

int run_monitor(const std::vector<std::string>& args) {
  ArgParser p("monitor",
              "Run a command and report its time and energy per GPU (and CPU), average and peak power and CPU "
              "time, like `perf stat` for joules (-r N: N runs, mean ± standard deviation). Without a command, "
              "sample until Ctrl-C and print a line every --interval-ms, like `nvidia-smi -l`.");
  p.option("gpu", "GPU indices to monitor (and to apply knobs to), e.g. 0,1 [default: all]");
  p.deprecated_alias("gpus", "gpu", "monitor's --gpus took indices; --gpus is a GPU count in sweep and dist-train");
  p.group("Measurement");
  p.option("windows", "run the command N times, one measurement window each; the report gives mean ± standard "
                      "deviation (stops at the first run that fails)", "1");
  p.short_alias("windows", 'r');
  p.alias("windows", "repeat");
  p.option("interval-ms", "sampling interval, in ms (default: the sensor's own update period, detected at start); "
                          "without a command also the period of the printed lines [default there: 1000]");
  p.deprecated_alias("interval", "interval-ms");
  p.option("timeout-s", "end a run that takes longer than this, in s (its whole process group: SIGTERM, then "
                        "SIGKILL after --kill-grace-s); the run reports exit status 124 [default: no limit]");
  p.option("kill-grace-s", "seconds between SIGTERM (a timeout's, or the INT/TERM forwarded to the command) and "
                           "SIGKILL of the command's process group; a second signal kills at once", "10");
  p.group("Knobs (restored afterwards)");
  p.option("power-limit", "run the command with this power limit, in W");
  p.option("sm-clock", "run the command with the SM clock locked: MHz or MIN-MAX in MHz");
  p.option("mem-clock", "run the command with this memory clock, in MHz");
  p.flag("dry-run", "validate the knobs and print the plan; change nothing (the command still runs)");
  p.option("journal", "knob journal file [default: $CNNERGY_JOURNAL or ~/.cache/cnnergy/knob-journal.json]");
  add_knobs_option(p);
  p.group("Output");
  p.option("out", "write the report to FILE instead of stderr (the command's stdout stays its own)");
  p.short_alias("out", 'o');
  p.deprecated_alias("output", "out");
  p.option("format", "the report as text or JSON", "table", {"table", "json"});
  p.option("json", "also write the report as JSON to FILE (SI units: s, W, J; ISO-8601 UTC timestamps)");
  p.implicit_value("json", "", "use --format json (the report as JSON) or --json FILE");
  p.option("csv", "write every sample to FILE: UTC time, power (W), energy (J), clocks (MHz), utilisation, "
                  "temperature");
  p.option("prometheus-port",
           "serve live OpenMetrics (energy counter, power, clocks, utilisation, temperature, "
           "throttle reasons, window energies) at http://127.0.0.1:PORT/metrics; 0: a free port");
  p.option("jsonl", "stream one JSON object per sample and per completed window to FILE");
  p.group("Options");
  p.allow_passthrough("the command to run and its arguments");
  p.epilog(
      "The report goes to stderr (or -o FILE) so the command's own stdout stays clean.\n"
      "Exit status: the command's own (of the first failing run with -r); 128+N if a signal N killed it; 8 if\n"
      "it could not be started (not found, not executable); the tool's own errors use the codes in\n"
      "`cnnergy --help`. Without a command: 0 when stopped by SIGINT/SIGTERM.\n"
      "The command runs in a process group of its own (so it and its children can be ended together; it\n"
      "cannot read a terminal). SIGINT/SIGTERM/SIGHUP sent to cnnergy are forwarded to that group; if cnnergy\n"
      "itself is killed (even with SIGKILL) a watchdog ends the group. Changed GPU settings are\n"
      "restored when the runs end; after a crash or kill -9 run `cnnergy restore`.");
  if (!p.parse(args)) return 0;
  const std::vector<std::string>& cmd = p.passthrough();
  const std::int64_t repeats = p.get_int("windows", 1, 1000000);
  if (cmd.empty() && p.given("windows")) throw InvalidArgument("-r/--windows repeats a command: give -- CMD ARGS");
  ChildOptions child_options;
  if (p.has("timeout-s")) child_options.timeout_s = p.get_double("timeout-s", 0.001, 1e9);
  child_options.kill_grace_s = p.get_double("kill-grace-s", 0, 3600);
  std::string format = p.get("format");
  std::optional<std::string> json_path = p.get_optional("json");
  if (json_path && json_path->empty()) {  // the old bare --json: the report itself as JSON
    json_path.reset();
    if (!p.given("format")) format = "json";
  }

  telemetry::SamplerOptions so;
  if (p.has("interval-ms")) so.interval_ms = p.get_double("interval-ms", 1, 60000);
  if (auto g = p.get_optional("gpu")) so.gpus = parse_gpu_list(*g);
  const bool want_knobs = p.has("power-limit") || p.has("sm-clock") || p.has("mem-clock");
  std::optional<double> power_limit_w;
  if (p.has("power-limit")) power_limit_w = p.get_double("power-limit", 1, 100000);
  std::optional<std::pair<std::uint32_t, std::uint32_t>> sm_clock;
  if (auto s = p.get_optional("sm-clock")) sm_clock = parse_clock_range(*s, "sm-clock");
  std::optional<std::uint32_t> mem_clock;
  if (auto s = p.get_optional("mem-clock")) mem_clock = parse_clock_range(*s, "mem-clock").first;
  for (const auto& path : {p.get_optional("out"), json_path}) {  // fail before the runs, not after them
    if (!path) continue;
    std::ofstream probe(*path, std::ios::app);
    if (!probe) throw DataError("cannot write " + *path + ": " + std::strerror(errno));
  }

  auto opened = telemetry::Nvml::open();
  if (!opened.nvml) {
    if (want_knobs) throw NotSupported("cannot change GPU settings: " + opened.unavailable_reason);
    log_warn(opened.unavailable_reason);
  }

  // Signals: forwarded to the child while one runs; otherwise remembered: one arriving before a start
  // stops us before it (restoring on the way out), and it ends the command-less sampling. Like a
  // sweep's trial, a command still running --kill-grace-s after the first signal, or when a second
  // one arrives, gets SIGKILL (its whole group): a command that ignores INT and TERM cannot keep
  // monitor (and the GPU settings it holds) running.
  std::atomic<pid_t> child{0};
  std::atomic<int> early_signal{0}, signals_seen{0};
  std::atomic<std::int64_t> first_signal_ns{0};
  const double grace_s = child_options.kill_grace_s;
  telemetry::SignalWatcher watcher([&](int signo, bool) {
    const int seen = ++signals_seen;
    if (seen == 1) first_signal_ns = telemetry::steady_now_ns();
    const pid_t pid = child.load();
    if (pid <= 0) {
      early_signal = signo;
    } else if (seen == 1) {
      ::kill(-pid, signo);  // the command has a process group of its own: a terminal's Ctrl-C reaches only us
      std::fprintf(stderr, "\ncnnergy monitor: forwarded %s to the command; it is killed in %g s if still running "
                           "(send the signal again to kill it now)\n", ::strsignal(signo), grace_s);
    } else {
      ::kill(-pid, SIGKILL);
      std::fprintf(stderr, "\ncnnergy monitor: second signal: the command's process group was killed\n");
    }
    if (early_signal.load() == 0) early_signal = signo;  // no further run starts
  });
  child_options.stop = [&] {
    const int seen = signals_seen.load();
    if (seen == 0) return false;
    const double since_s = (telemetry::steady_now_ns() - first_signal_ns.load()) / 1e9;
    return seen >= 2 || since_s >= grace_s;  // then SIGKILL at once: the grace has passed already
  };
  child_options.stop_grace_s = 0;

  // Knobs first (they may be refused), through the journal; monitor handles signals itself.
  std::unique_ptr<telemetry::KnobControl> knobs;
  if (want_knobs) {
    knobs = open_knobs(p, opened.nvml, p.get_flag("dry-run"), p.get_optional("journal").value_or(""),
                       /*handle_signals=*/false);
    std::vector<unsigned> targets = so.gpus;
    if (targets.empty())
      for (const auto& d : opened.nvml->devices())
        if (!d.lost()) targets.push_back(d.index());
    for (unsigned g : targets) {
      if (power_limit_w) knobs->set_power_limit_w(g, *power_limit_w);
      if (sm_clock) knobs->lock_sm_clocks(g, sm_clock->first, sm_clock->second);
      if (mem_clock) knobs->set_memory_clock(g, *mem_clock);
    }
  }

  auto rapl = std::make_shared<telemetry::RaplMeter>();
  auto sampler = std::make_shared<telemetry::Sampler>(opened.nvml, rapl->available() ? rapl : nullptr, so);
  telemetry::EnergyMeter meter(sampler);
  std::unique_ptr<SampleCsv> csv;
  if (auto path = p.get_optional("csv")) csv = std::make_unique<SampleCsv>(*path, *sampler, telemetry::steady_now_ns());
  ListenerGuard csv_listener(
      *sampler, csv ? sampler->add_listener([w = csv.get()](const telemetry::Sample& s) { w->write(s); })
                    : 0);  // declared after csv: the listener is gone before the writer is
  std::optional<unsigned> prometheus_port;
  if (p.has("prometheus-port"))
    prometheus_port = static_cast<unsigned>(p.get_int("prometheus-port", 0, 65535));
  auto exporter =
      exporter::MonitorExporter::create(sampler, prometheus_port, p.get_optional("jsonl"));
  if (exporter) exporter->label_job(slurm_job_id_from_environment());  // under Slurm: slurm_job_id="..."
  if (int s = early_signal.load()) return 128 + s;  // interrupted before the start; knobs restore on the way out

  std::vector<MonitorRun> runs;
  if (cmd.empty()) {
    const double every_ms = so.interval_ms.value_or(1000.0);
    std::fprintf(stderr, "cnnergy monitor: sampling until Ctrl-C (SIGINT) or SIGTERM\n");
    runs.push_back(sample_until_stopped(meter, *sampler, early_signal, every_ms, stdout));
    if (exporter) exporter->on_window(runs.back().m);
  } else {
    for (std::int64_t i = 0; i < repeats; ++i) {
      runs.push_back(run_command_measured(cmd, meter, child, early_signal, child_options));
      if (exporter) exporter->on_window(runs.back().m);  // each run's window, as it completes
      if (runs.back().exit_code != 0 || early_signal.load() != 0) break;
    }
  }
  sampler->stop();
  if (knobs) knobs->restore();  // errors here are reported (the destructor would only log them)

  std::string what = cmd.empty() ? std::string("sampling") : "'" + cmd.front();
  for (std::size_t i = 1; i < cmd.size(); ++i) what += " " + cmd[i];
  if (!cmd.empty()) what += "'";
  const Json json = monitor_json_report(cmd, runs, *sampler, knobs ? knobs->plan() : std::vector<std::string>{});
  const std::string report =
      format == "json" ? json.dump(2) + "\n" : monitor_text_report(what, runs, *sampler);
  if (json_path) {
    std::ofstream f(*json_path);
    if (!(f << json.dump(2) << "\n")) throw DataError("cannot write --json file " + *json_path);
  }
  if (auto out = p.get_optional("out")) {
    std::ofstream f(*out);
    if (!(f << report)) throw DataError("cannot write -o/--out file " + *out + ": " + std::strerror(errno));
  } else {
    std::fputs(report.c_str(), stderr);
  }
  return cmd.empty() ? 0 : runs.back().exit_code;
}

}  // namespace cnnergy::cli
