// `cnnergy monitor -- CMD ARGS...`: runs a command, samples the GPUs (and CPU) while it runs, and
// reports elapsed time, energy per GPU, average and peak power, like `perf stat` for joules. The
// command's exit status is passed through; optional knobs (power limit, SM/memory clocks) are
// applied through the journaled KnobController for the duration of the command.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "cli/args.hpp"
#include "cli/telemetry_commands.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "exporter/monitor_exporter.hpp"
#include "telemetry/energy_meter.hpp"
#include "core/json.hpp"
#include "telemetry/knobs.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/signals.hpp"

extern char** environ;

namespace cnnergy::cli {

namespace {


std::string joined_command(const std::vector<std::string>& cmd) {
  std::string out;
  for (std::size_t i = 0; i < cmd.size(); ++i) out += (i ? " " : "") + cmd[i];
  return out;
}

std::vector<unsigned> parse_gpu_list(const std::string& text) {
  std::vector<unsigned> out;
  for (const auto& item : split_list(text, "GPU")) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 1024)
      throw InvalidArgument("--gpus: '" + item + "' is not a GPU index");
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

// Streams every sample to a CSV file from the sampler thread.
class CsvWriter {
 public:
  CsvWriter(const std::string& path, const telemetry::Sampler& sampler, std::int64_t t0_ns)
      : out_(path), t0_ns_(t0_ns) {
    if (!out_) throw DataError("cannot write --csv file " + path + ": " + std::strerror(errno));
    out_ << "time_s";
    for (unsigned i : sampler.gpu_indices()) {
      const std::string g = "gpu" + std::to_string(i) + "_";
      out_ << ',' << g << "power_mw," << g << "power_average_mw," << g << "energy_counter_mj," << g
           << "integrated_mj," << g << "sm_mhz," << g << "mem_mhz," << g << "util_gpu_pct," << g
           << "util_mem_pct," << g << "temperature_c," << g << "clock_event_reasons";
    }
    out_ << ",cpu_energy_mj\n";
  }
  void write(const telemetry::Sample& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto opt = [&](const auto& v) {
      out_ << ',';
      if (v) out_ << *v;
    };
    out_ << static_cast<double>(s.t_ns - t0_ns_) / 1e9;
    for (const auto& g : s.gpus) {
      opt(g.power_mw);
      opt(g.power_average_mw);
      opt(g.energy_mj);
      out_ << ',' << g.integrated_mj;
      opt(g.sm_mhz);
      opt(g.mem_mhz);
      out_ << ',';
      if (g.utilization) out_ << g.utilization->gpu_percent;
      out_ << ',';
      if (g.utilization) out_ << g.utilization->memory_percent;
      opt(g.temperature_c);
      out_ << ',';
      if (g.clock_event_reasons) {
        const auto names = telemetry::decode_clock_event_reasons(*g.clock_event_reasons);
        for (std::size_t i = 0; i < names.size(); ++i) out_ << (i ? "|" : "") << names[i];
      }
    }
    opt(s.cpu_energy_mj);
    out_ << '\n';
  }

 private:
  std::ofstream out_;
  std::mutex mutex_;
  std::int64_t t0_ns_;
};

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

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string text_report(const std::string& command, const std::string& status_text,
                        const telemetry::Measurement& m, const telemetry::Sampler& sampler) {
  std::ostringstream os;
  os << "\n cnnergy monitor: '" << command << "' " << status_text << "\n\n";
  os << "  elapsed          " << fmt(m.elapsed_ms / 1000.0, 3) << " s\n";
  for (const auto& g : m.gpus) {
    os << "  GPU " << g.index << " energy     ";
    if (g.energy_mj) {
      os << fmt(*g.energy_mj / 1000.0, 2) << " J";
      if (g.uncertainty_mj) os << " +- " << fmt(*g.uncertainty_mj / 1000.0, 2) << " J";
      os << " (" << telemetry::to_string(g.source) << ")";
      if (g.average_power_mw) os << "   average " << fmt(*g.average_power_mw / 1000.0, 1) << " W";
      if (g.peak_power_mw) os << "   peak " << fmt(*g.peak_power_mw / 1000.0, 1) << " W";
    } else {
      os << "not available";
    }
    os << "\n";
  }
  if (m.gpus.size() > 1 && m.gpu_energy_mj())
    os << "  GPUs total       " << fmt(*m.gpu_energy_mj() / 1000.0, 2) << " J\n";
  os << "  CPU energy       "
     << (m.cpu_energy_mj ? fmt(*m.cpu_energy_mj / 1000.0, 2) + " J (RAPL)"
                         : std::string("not available (no readable RAPL)"))
     << "\n";
  const auto st = sampler.stats();
  os << "  sampling         every " << fmt(st.interval_ms, 1) << " ms, sensor updates every "
     << fmt(st.sensor_period_ms, 1) << " ms" << (st.sensor_period_detected ? "" : " (assumed)")
     << ", " << st.samples << " samples";
  if (st.counter_reads)
    os << ", energy-counter read " << fmt(st.counter_read_mean_ms, 2) << " ms mean";
  os << "\n";
  if (m.short_window && !m.gpus.empty())
    os << "  note: the command ran for less than one sensor update period; its energy rests on one "
          "or two\n"
          "        sensor updates (run it several times in a loop for a trustworthy number)\n";
  return os.str();
}

Json json_report(const std::vector<std::string>& cmd, int exit_code, const std::string& status_text,
                 const telemetry::Measurement& m, const telemetry::Sampler& sampler,
                 const std::vector<std::string>& knobs) {
  Json j = Json::object();
  Json c = Json::array();
  for (const auto& a : cmd) c.push_back(a);
  j["command"] = c;
  j["exit_code"] = exit_code;
  j["status"] = status_text;
  j["elapsed_ms"] = m.elapsed_ms;
  Json gpus = Json::array();
  for (const auto& g : m.gpus) {
    Json x = Json::object();
    x["index"] = g.index;
    x["source"] = telemetry::to_string(g.source);
    x["energy_mj"] = json_or_null(g.energy_mj);
    x["uncertainty_mj"] = json_or_null(g.uncertainty_mj);
    x["average_power_mw"] = json_or_null(g.average_power_mw);
    x["peak_power_mw"] = json_or_null(g.peak_power_mw);
    x["samples"] = g.samples;
    gpus.push_back(x);
  }
  j["gpus"] = gpus;
  j["gpu_energy_mj"] = json_or_null(m.gpu_energy_mj());
  j["cpu_energy_mj"] = json_or_null(m.cpu_energy_mj);
  j["short_window"] = m.short_window;
  const auto st = sampler.stats();
  Json s = Json::object();
  s["interval_ms"] = st.interval_ms;
  s["sensor_period_ms"] = st.sensor_period_ms;
  s["sensor_period_detected"] = st.sensor_period_detected;
  s["samples"] = st.samples;
  s["counter_reads"] = st.counter_reads;
  s["counter_read_mean_ms"] = st.counter_read_mean_ms;
  s["counter_read_max_ms"] = st.counter_read_max_ms;
  s["power_read_mean_us"] = st.power_read_mean_us;
  s["late_rounds"] = st.late_rounds;
  j["sampler"] = s;
  Json k = Json::array();
  for (const auto& line : knobs) k.push_back(line);
  j["knobs"] = k;
  return j;
}

}  // namespace

int run_monitor(const std::vector<std::string>& args) {
  ArgParser p("monitor",
              "Run a command and report its time and energy per GPU (and CPU), average and peak "
              "power, like `perf stat` for joules.");
  p.option("interval",
           "sampling interval in ms (default: the sensor's own update period, detected at start)");
  p.option("csv",
           "write every sample (time, power, energy, clocks, utilisation, temperature) to this CSV "
           "file");
  p.flag("json", "print the report as JSON");
  p.option("output", "write the report to this file instead of stderr");
  p.option("gpus", "GPU indices to monitor (and to apply knobs to), e.g. 0,1 [default: all]");
  p.option("power-limit", "run the command with this power limit, in W (restored afterwards)");
  p.option("sm-clock",
           "run the command with the SM clock locked: MHz or MIN-MAX (restored afterwards)");
  p.option("mem-clock", "run the command with this memory clock, in MHz (restored afterwards)");
  p.flag("dry-run",
         "validate the knobs and print the plan; change nothing (the command still runs)");
  p.option("journal",
           "knob journal file [default: $CNNERGY_JOURNAL or ~/.cache/cnnergy/knob-journal.json]");
  p.option("prometheus-port",
           "serve live OpenMetrics (energy counter, power, clocks, utilisation, temperature, "
           "throttle reasons, window energies) at http://127.0.0.1:PORT/metrics; 0: a free port");
  p.option("jsonl", "stream one JSON object per sample and per completed window to this file");
  p.allow_passthrough("the command to run and its arguments");
  p.epilog(
      "The report goes to stderr (or --output) so the command's own stdout stays clean.\n"
      "Exit status: the command's own; 128+N if a signal N killed it; 8 if it could not be "
      "started\n"
      "(not found, not executable); the tool's own errors use the codes in `cnnergy --help`.\n"
      "SIGINT/SIGTERM/SIGHUP sent to cnnergy are forwarded to the command. Changed GPU settings "
      "are\n"
      "restored when the command ends; after a crash or kill -9 run `cnnergy restore`.");
  if (!p.parse(args)) return 0;
  const std::vector<std::string>& cmd = p.passthrough();
  if (cmd.empty())
    throw InvalidArgument(
        "cnnergy monitor needs a command: cnnergy monitor [options] -- CMD ARGS...");

  telemetry::SamplerOptions so;
  if (p.has("interval")) so.interval_ms = p.get_double("interval", 1, 60000);
  if (auto g = p.get_optional("gpus")) so.gpus = parse_gpu_list(*g);
  const bool want_knobs = p.has("power-limit") || p.has("sm-clock") || p.has("mem-clock");
  std::optional<double> power_limit_w;
  if (p.has("power-limit")) power_limit_w = p.get_double("power-limit", 1, 100000);
  std::optional<std::pair<std::uint32_t, std::uint32_t>> sm_clock;
  if (auto s = p.get_optional("sm-clock")) sm_clock = parse_clock_range(*s, "sm-clock");
  std::optional<std::uint32_t> mem_clock;
  if (auto s = p.get_optional("mem-clock")) mem_clock = parse_clock_range(*s, "mem-clock").first;

  auto opened = telemetry::Nvml::open();
  if (!opened.nvml) {
    if (want_knobs) throw NotSupported("cannot change GPU settings: " + opened.unavailable_reason);
    log_warn(opened.unavailable_reason);
  }

  // Signals: forwarded to the child once it runs; one arriving before (while knobs are applied or
  // the sampler starts) stops us before the start, restoring on the way out.
  std::atomic<pid_t> child{0};
  std::atomic<int> early_signal{0};
  telemetry::SignalWatcher watcher([&](int signo, bool user_sent) {
    const pid_t pid = child.load();
    if (pid > 0) {
      if (user_sent) ::kill(pid, signo);  // a terminal's Ctrl-C already reached the child's group
    } else {
      early_signal = signo;
    }
  });

  // Knobs first (they may be refused), through the journal; monitor handles signals itself.
  std::unique_ptr<telemetry::KnobController> knobs;
  if (want_knobs) {
    telemetry::KnobOptions ko;
    ko.dry_run = p.get_flag("dry-run");
    ko.handle_signals = false;
    if (auto j = p.get_optional("journal")) ko.journal_path = *j;
    ko.announce = [](const std::string& line) {
      std::fprintf(stderr, "cnnergy: %s\n", line.c_str());
    };
    knobs = std::make_unique<telemetry::KnobController>(opened.nvml, ko);
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
  auto sampler =
      std::make_shared<telemetry::Sampler>(opened.nvml, rapl->available() ? rapl : nullptr, so);
  telemetry::EnergyMeter meter(sampler);
  std::unique_ptr<CsvWriter> csv;
  if (auto path = p.get_optional("csv"))
    csv = std::make_unique<CsvWriter>(*path, *sampler, telemetry::steady_now_ns());
  ListenerGuard csv_listener(
      *sampler,
      csv ? sampler->add_listener([w = csv.get()](const telemetry::Sample& s) { w->write(s); })
          : 0);  // declared after csv: the listener is gone before the writer is
  std::optional<unsigned> prometheus_port;
  if (p.has("prometheus-port"))
    prometheus_port = static_cast<unsigned>(p.get_int("prometheus-port", 0, 65535));
  auto exporter =
      exporter::MonitorExporter::create(sampler, prometheus_port, p.get_optional("jsonl"));
  if (int s = early_signal.load())
    return 128 + s;  // interrupted before the start; knobs restore on the way out

  std::vector<char*> argv;
  for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, s);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  const auto window = meter.begin(joined_command(cmd));
  pid_t pid = 0;
  const int spawn_rc = ::posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (spawn_rc != 0) {
    meter.close(window);
    throw Error(ExitCode::kChildFailed, "cannot run '" + cmd[0] + "': " + std::strerror(spawn_rc) +
                                            (spawn_rc == ENOENT ? " (command not found)" : ""));
  }
  child = pid;
  if (int s = early_signal.load()) ::kill(pid, s);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw InternalError(std::string("waitpid failed: ") + std::strerror(errno));
  }
  child = -1;
  meter.close(window);
  const telemetry::Measurement m = meter.result(window);
  if (exporter) exporter->on_window(m);
  sampler->stop();
  if (knobs) knobs->restore();  // errors here are reported (the destructor would only log them)

  int exit_code = 0;
  std::string status_text;
  if (WIFEXITED(status)) {
    exit_code = WEXITSTATUS(status);
    status_text = "exited with status " + std::to_string(exit_code);
  } else if (WIFSIGNALED(status)) {
    exit_code = 128 + WTERMSIG(status);
    status_text = std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                  strsignal(WTERMSIG(status)) + ")";
  }
  const std::string report = p.get_flag("json")
                                 ? json_report(cmd, exit_code, status_text, m, *sampler,
                                               knobs ? knobs->plan() : std::vector<std::string>{})
                                           .dump(2) +
                                       "\n"
                                 : text_report(joined_command(cmd), status_text, m, *sampler);
  if (auto out = p.get_optional("output")) {
    std::ofstream f(*out);
    if (!f) throw DataError("cannot write --output file " + *out + ": " + std::strerror(errno));
    f << report;
  } else {
    std::fputs(report.c_str(), stderr);
  }
  return exit_code;
}

}  // namespace cnnergy::cli
