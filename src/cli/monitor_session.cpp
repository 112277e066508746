// `cnnergy monitor`'s runs, repeats, command-less sampling and reports (see monitor_session.hpp).
#include "cli/monitor_session.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <optional>
#include <sstream>
#include <thread>

#include "core/errors.hpp"
#include "core/subprocess.hpp"

namespace cnnergy::cli {

namespace {

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string joined_command(const std::vector<std::string>& cmd) {
  std::string out;
  for (std::size_t i = 0; i < cmd.size(); ++i) out += (i ? " " : "") + cmd[i];
  return out;
}


// mean, sample standard deviation, min, max of the runs' values; empty when any run lacks the value.
struct Stat {
  double mean = 0, stddev = 0, min = 0, max = 0;
  std::size_t n = 0;
};

template <typename F>
std::optional<Stat> stat_of(const std::vector<MonitorRun>& runs, F value) {
  Stat s;
  std::vector<double> v;
  for (const auto& r : runs) {
    const std::optional<double> x = value(r);
    if (!x) return std::nullopt;
    v.push_back(*x);
  }
  if (v.empty()) return std::nullopt;
  s.n = v.size();
  s.min = s.max = v[0];
  for (double x : v) {
    s.mean += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean /= static_cast<double>(s.n);
  if (s.n > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(s.n - 1));
  }
  return s;
}

// "1.234 s" for one run; "1.234 s ± 0.012 s (1.0 %)" for several.
std::string show(const std::optional<Stat>& s, int decimals, const char* unit) {
  if (!s) return "not available";
  std::string out = fmt(s->mean, decimals) + " " + unit;
  if (s->n > 1) {
    out += " ± " + fmt(s->stddev, decimals) + " " + unit;
    if (s->mean != 0) out += " (" + fmt(100.0 * s->stddev / std::fabs(s->mean), 1) + " %)";
  }
  return out;
}

Json stat_json(const std::optional<Stat>& s) {
  if (!s) return Json();
  Json j = Json::object();
  j["mean"] = s->mean;
  j["stddev"] = s->stddev;
  j["min"] = s->min;
  j["max"] = s->max;
  j["n"] = s->n;
  return j;
}

std::optional<double> scaled(const std::optional<double>& v, double factor) {
  return v ? std::optional<double>(*v * factor) : std::nullopt;
}

const telemetry::GpuEnergy* gpu_of(const MonitorRun& r, std::size_t i) {
  return i < r.m.gpus.size() ? &r.m.gpus[i] : nullptr;
}

Json run_json(const MonitorRun& r) {
  Json x = Json::object();
  x["exit_code"] = r.exit_code;
  x["status"] = r.status_text;
  x["started_at"] = iso_utc_from_steady(r.m.begin_ns);
  x["ended_at"] = iso_utc_from_steady(r.m.end_ns);
  x["elapsed_s"] = r.m.elapsed_ms / 1e3;
  x["user_cpu_s"] = r.has_cpu_time ? Json(r.user_cpu_s) : Json();
  x["system_cpu_s"] = r.has_cpu_time ? Json(r.system_cpu_s) : Json();
  Json gpus = Json::array();
  for (const auto& g : r.m.gpus) {
    Json y = Json::object();
    y["index"] = g.index;
    y["source"] = telemetry::to_string(g.source);
    y["energy_j"] = json_or_null(scaled(g.energy_mj, 1e-3));
    y["uncertainty_j"] = json_or_null(scaled(g.uncertainty_mj, 1e-3));
    y["average_power_w"] = json_or_null(scaled(g.average_power_mw, 1e-3));
    y["peak_power_w"] = json_or_null(scaled(g.peak_power_mw, 1e-3));
    y["samples"] = g.samples;
    gpus.push_back(y);
  }
  x["gpus"] = gpus;
  x["gpu_energy_j"] = json_or_null(scaled(r.m.gpu_energy_mj(), 1e-3));
  x["cpu_energy_j"] = json_or_null(scaled(r.m.cpu_energy_mj, 1e-3));
  x["short_window"] = r.m.short_window;
  return x;
}

}  // namespace

std::string iso_utc_from_steady(std::int64_t steady_ns) {
  using namespace std::chrono;
  const auto now_wall = system_clock::now();
  const std::int64_t now_steady = telemetry::steady_now_ns();
  const auto wall = now_wall - nanoseconds(now_steady - steady_ns);
  const auto ms = duration_cast<milliseconds>(wall.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int the format could see (the compiler checks)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  return buf;
}

MonitorRun run_command_measured(const std::vector<std::string>& cmd, telemetry::EnergyMeter& meter,
                                std::atomic<pid_t>& child, const std::atomic<int>& early_signal,
                                const ChildOptions& options) {
  const auto window = meter.begin(joined_command(cmd));
  std::optional<ChildProcess> proc;
  try {
    proc.emplace(cmd, std::vector<std::pair<std::string, std::string>>{});
  } catch (const Error&) {
    meter.close(window);
    throw;
  }
  child = proc->pid();
  if (int s = early_signal.load()) proc->signal_group(s);
  const ChildStatus st = proc->wait(options);
  child = -1;
  meter.close(window);
  MonitorRun r;
  r.m = meter.result(window);
  r.user_cpu_s = st.user_cpu_s;
  r.system_cpu_s = st.system_cpu_s;
  r.has_cpu_time = true;
  r.exit_code = st.timed_out ? 124 : st.exit_code;  // 124: timed out, as timeout(1) reports it
  r.status_text = st.describe();
  return r;
}

MonitorRun sample_until_stopped(telemetry::EnergyMeter& meter, const telemetry::Sampler& sampler,
                                const std::atomic<int>& stop, double print_every_ms, std::FILE* live) {
  const auto window = meter.begin("sampling until interrupted");
  const auto t0 = std::chrono::steady_clock::now();
  auto next_print = t0 + std::chrono::duration<double, std::milli>(print_every_ms);
  if (live) {
    std::fprintf(live, "%-24s %9s", "time (UTC)", "elapsed");
    for (unsigned i : sampler.gpu_indices()) std::fprintf(live, "   GPU%u power  GPU%u energy", i, i);
    std::fprintf(live, "\n");
  }
  while (stop.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!live || std::chrono::steady_clock::now() < next_print) continue;
    next_print += std::chrono::duration<double, std::milli>(print_every_ms);
    const std::optional<telemetry::Sample> latest = sampler.latest();
    if (!latest) continue;
    const telemetry::Sample& s = *latest;
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(live, "%-24s %7.1f s", iso_utc_from_steady(s.t_ns).c_str(), elapsed_s);
    for (const auto& g : s.gpus)
      std::fprintf(live, "   %8s W  %10s J", g.power_mw ? fmt(*g.power_mw / 1e3, 1).c_str() : "-",
                   fmt(g.integrated_mj / 1e3, 1).c_str());
    std::fprintf(live, "\n");
    std::fflush(live);
  }
  meter.close(window);
  MonitorRun r;
  r.m = meter.result(window);
  r.status_text = "stopped by signal " + std::to_string(stop.load());
  return r;
}

std::string monitor_text_report(const std::string& what, const std::vector<MonitorRun>& runs,
                                const telemetry::Sampler& sampler) {
  std::ostringstream os;
  const MonitorRun& last = runs.back();
  os << "\n cnnergy monitor: " << what << " " << last.status_text;
  if (runs.size() > 1) os << " (" << runs.size() << " runs: mean ± sample standard deviation)";
  os << "\n  started " << iso_utc_from_steady(runs.front().m.begin_ns) << ", ended "
     << iso_utc_from_steady(last.m.end_ns) << "\n\n";
  os << "  elapsed          " << show(stat_of(runs, [](const MonitorRun& r) { return std::optional(r.m.elapsed_ms / 1e3); }), 3, "s")
     << "\n";
  for (std::size_t i = 0; i < last.m.gpus.size(); ++i) {
    const auto& g = last.m.gpus[i];
    const auto energy = stat_of(runs, [i](const MonitorRun& r) {
      const auto* x = gpu_of(r, i);
      return x ? scaled(x->energy_mj, 1e-3) : std::nullopt;
    });
    os << "  GPU " << g.index << " energy     ";
    if (!energy) {
      os << "not available\n";
      continue;
    }
    os << show(energy, 2, "J");
    if (runs.size() == 1 && g.uncertainty_mj) os << " (bound ± " << fmt(*g.uncertainty_mj / 1e3, 2) << " J)";
    os << " [" << telemetry::to_string(g.source) << "]";
    const auto avg = stat_of(runs, [i](const MonitorRun& r) {
      const auto* x = gpu_of(r, i);
      return x ? scaled(x->average_power_mw, 1e-3) : std::nullopt;
    });
    const auto peak = stat_of(runs, [i](const MonitorRun& r) {
      const auto* x = gpu_of(r, i);
      return x ? scaled(x->peak_power_mw, 1e-3) : std::nullopt;
    });
    if (avg) os << "\n                   average " << show(avg, 1, "W");
    if (peak) os << "   peak " << fmt(peak->max, 1) << " W";
    os << "\n";
  }
  if (last.m.gpus.size() > 1)
    os << "  GPUs total       " << show(stat_of(runs, [](const MonitorRun& r) { return scaled(r.m.gpu_energy_mj(), 1e-3); }), 2, "J")
       << "\n";
  const auto cpu_j = stat_of(runs, [](const MonitorRun& r) { return scaled(r.m.cpu_energy_mj, 1e-3); });
  os << "  CPU energy       " << (cpu_j ? show(cpu_j, 2, "J") + " (RAPL)" : std::string("not available (no readable RAPL)"))
     << "\n";
  if (last.has_cpu_time) {
    os << "  CPU time         user " << show(stat_of(runs, [](const MonitorRun& r) { return std::optional(r.user_cpu_s); }), 3, "s")
       << ", system " << show(stat_of(runs, [](const MonitorRun& r) { return std::optional(r.system_cpu_s); }), 3, "s")
       << "\n";
  }
  const auto st = sampler.stats();
  os << "  sampling         every " << fmt(st.interval_ms, 1) << " ms, sensor updates every "
     << fmt(st.sensor_period_ms, 1) << " ms" << (st.sensor_period_detected ? "" : " (assumed)") << ", " << st.samples
     << " samples";
  if (st.counter_reads) os << ", energy-counter read " << fmt(st.counter_read_mean_ms, 2) << " ms mean";
  os << "\n";
  bool short_window = false;
  for (const auto& r : runs) short_window = short_window || (r.m.short_window && !r.m.gpus.empty());
  if (short_window)
    os << "  note: a run was shorter than one sensor update period; its energy rests on one or two sensor\n"
          "        updates: use -r N (or a longer command) and read the spread\n";
  return os.str();
}

Json monitor_json_report(const std::vector<std::string>& cmd, const std::vector<MonitorRun>& runs,
                         const telemetry::Sampler& sampler, const std::vector<std::string>& knobs) {
  Json j = Json::object();
  Json c = Json::array();
  for (const auto& a : cmd) c.push_back(a);
  j["command"] = c;
  const MonitorRun& last = runs.back();
  j["exit_code"] = last.exit_code;
  j["status"] = last.status_text;
  j["started_at"] = iso_utc_from_steady(runs.front().m.begin_ns);
  j["ended_at"] = iso_utc_from_steady(last.m.end_ns);
  j["repeats"] = runs.size();
  Json list = Json::array();
  for (const auto& r : runs) list.push_back(run_json(r));
  j["runs"] = list;
  // Over the runs: mean, sample standard deviation, min, max (n = 1: the one value, stddev 0).
  Json s = Json::object();
  s["elapsed_s"] = stat_json(stat_of(runs, [](const MonitorRun& r) { return std::optional(r.m.elapsed_ms / 1e3); }));
  Json gpus = Json::array();
  for (std::size_t i = 0; i < last.m.gpus.size(); ++i) {
    Json g = Json::object();
    g["index"] = last.m.gpus[i].index;
    g["energy_j"] = stat_json(stat_of(runs, [i](const MonitorRun& r) {
      const auto* x = gpu_of(r, i);
      return x ? scaled(x->energy_mj, 1e-3) : std::nullopt;
    }));
    g["average_power_w"] = stat_json(stat_of(runs, [i](const MonitorRun& r) {
      const auto* x = gpu_of(r, i);
      return x ? scaled(x->average_power_mw, 1e-3) : std::nullopt;
    }));
    gpus.push_back(g);
  }
  s["gpus"] = gpus;
  s["gpu_energy_j"] = stat_json(stat_of(runs, [](const MonitorRun& r) { return scaled(r.m.gpu_energy_mj(), 1e-3); }));
  s["cpu_energy_j"] = stat_json(stat_of(runs, [](const MonitorRun& r) { return scaled(r.m.cpu_energy_mj, 1e-3); }));
  if (last.has_cpu_time) {
    s["user_cpu_s"] = stat_json(stat_of(runs, [](const MonitorRun& r) { return std::optional(r.user_cpu_s); }));
    s["system_cpu_s"] = stat_json(stat_of(runs, [](const MonitorRun& r) { return std::optional(r.system_cpu_s); }));
  }
  j["summary"] = s;
  const auto st = sampler.stats();
  Json sm = Json::object();
  sm["interval_ms"] = st.interval_ms;
  sm["sensor_period_ms"] = st.sensor_period_ms;
  sm["sensor_period_detected"] = st.sensor_period_detected;
  sm["samples"] = st.samples;
  sm["counter_reads"] = st.counter_reads;
  sm["counter_read_mean_ms"] = st.counter_read_mean_ms;
  sm["counter_read_max_ms"] = st.counter_read_max_ms;
  sm["power_read_mean_us"] = st.power_read_mean_us;
  sm["late_rounds"] = st.late_rounds;
  j["sampler"] = sm;
  Json k = Json::array();
  for (const auto& line : knobs) k.push_back(line);
  j["knobs"] = k;
  return j;
}

SampleCsv::SampleCsv(const std::string& path, const telemetry::Sampler& sampler, std::int64_t t0_ns)
    : out_(path), t0_ns_(t0_ns) {
  if (!out_) throw DataError("cannot write --csv file " + path + ": " + std::strerror(errno));
  out_ << "time_utc,time_s";
  for (unsigned i : sampler.gpu_indices()) {
    const std::string g = "gpu" + std::to_string(i) + "_";
    out_ << ',' << g << "power_w," << g << "power_average_w," << g << "energy_counter_j," << g << "integrated_j," << g
         << "sm_mhz," << g << "mem_mhz," << g << "util_gpu_pct," << g << "util_mem_pct," << g << "temperature_c," << g
         << "clock_event_reasons";
  }
  out_ << ",cpu_energy_j\n";
}

void SampleCsv::write(const telemetry::Sample& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto opt = [&](const auto& v, double scale) {
    out_ << ',';
    if (v) out_ << static_cast<double>(*v) * scale;
  };
  out_ << iso_utc_from_steady(s.t_ns) << ',' << static_cast<double>(s.t_ns - t0_ns_) / 1e9;
  for (const auto& g : s.gpus) {
    opt(g.power_mw, 1e-3);
    opt(g.power_average_mw, 1e-3);
    opt(g.energy_mj, 1e-3);
    out_ << ',' << g.integrated_mj * 1e-3;
    opt(g.sm_mhz, 1.0);
    opt(g.mem_mhz, 1.0);
    out_ << ',';
    if (g.utilization) out_ << g.utilization->gpu_percent;
    out_ << ',';
    if (g.utilization) out_ << g.utilization->memory_percent;
    opt(g.temperature_c, 1.0);
    out_ << ',';
    if (g.clock_event_reasons) {
      const auto names = telemetry::decode_clock_event_reasons(*g.clock_event_reasons);
      for (std::size_t i = 0; i < names.size(); ++i) out_ << (i ? "|" : "") << names[i];
    }
  }
  opt(s.cpu_energy_mj, 1e-3);
  out_ << '\n';
}

}  // namespace cnnergy::cli
