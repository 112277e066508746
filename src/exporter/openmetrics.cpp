// OpenMetrics rendering of the latest sample and the completed windows, and the JSON-lines stream.
#include "exporter/openmetrics.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "telemetry/nvml.hpp"

namespace cnnergy::exporter {

namespace {

// Every clock-event reason NVML names, so each series is always present (0 or 1).
const std::vector<std::pair<std::uint64_t, std::string>>& known_reasons() {
  static const auto reasons = [] {
    std::vector<std::pair<std::uint64_t, std::string>> out;
    for (int bit = 0; bit < 64; ++bit) {
      const auto names = telemetry::decode_clock_event_reasons(std::uint64_t{1} << bit);
      if (names.size() == 1 && names[0].rfind("other", 0) != 0)
        out.emplace_back(std::uint64_t{1} << bit, names[0]);
    }
    return out;
  }();
  return reasons;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class Writer {
 public:
  void family(const std::string& name, const char* type, const char* unit, const char* help) {
    os_ << "# TYPE " << name << ' ' << type << '\n';
    if (unit && *unit) os_ << "# UNIT " << name << ' ' << unit << '\n';
    os_ << "# HELP " << name << ' ' << help << '\n';
  }
  void sample(const std::string& name, const std::string& labels, double value) {
    os_ << name;
    if (!labels.empty()) os_ << '{' << labels << '}';
    os_ << ' ' << num(value) << '\n';
  }
  std::string str() { return os_.str() + "# EOF\n"; }

 private:
  std::ostringstream os_;
};

std::string gpu_label(const GpuLabels& g, const JobIds& jobs) {
  std::string out = "gpu=\"" + std::to_string(g.index) + "\",uuid=\"" + escape_label(g.uuid) + "\"";
  if (!g.name.empty()) out += ",model=\"" + escape_label(g.name) + "\"";
  if (const auto it = jobs.find(g.index); it != jobs.end() && !it->second.empty())
    out += ",slurm_job_id=\"" + escape_label(it->second) + "\"";
  return out;
}

}  // namespace

std::vector<GpuLabels> gpu_labels(const telemetry::Sampler& sampler) {
  std::vector<GpuLabels> out;
  for (unsigned i : sampler.gpu_indices()) {
    GpuLabels g;
    g.index = i;
    if (sampler.nvml()) {
      g.uuid = sampler.nvml()->device(i).uuid();
      g.name = sampler.nvml()->device(i).name();
    }
    out.push_back(g);
  }
  return out;
}

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

MetricsState::MetricsState(std::vector<GpuLabels> gpus) : gpus_(std::move(gpus)) {}

void MetricsState::on_sample(const telemetry::Sample& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  latest_ = s;
  ++samples_;
}

void MetricsState::on_window(const telemetry::Measurement& m) {
  std::lock_guard<std::mutex> lock(mutex_);
  WindowTotals& w = windows_[m.label];
  ++w.count;
  w.seconds_total += m.elapsed_ms / 1000.0;
  w.last_seconds = m.elapsed_ms / 1000.0;
  w.last_energy_j.reset();
  if (auto e = m.gpu_energy_mj()) {
    w.energy_j_total += *e / 1000.0;
    w.last_energy_j = *e / 1000.0;
  }
}

void MetricsState::set_job_source(std::function<JobIds()> source) {
  std::lock_guard<std::mutex> lock(mutex_);
  job_source_ = std::move(source);
}

std::string MetricsState::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const JobIds jobs = job_source_ ? job_source_() : JobIds{};
  const auto labels_of = [&jobs](const GpuLabels& g) { return gpu_label(g, jobs); };
  Writer w;
  // One family at a time over every GPU, as the format requires (no interleaving).
  const auto per_gpu = [&](const std::string& name, const char* type, const char* unit,
                           const char* help, const std::string& suffix, auto&& value) {
    if (!latest_) return;
    bool any = false;
    for (std::size_t slot = 0; slot < gpus_.size() && slot < latest_->gpus.size(); ++slot)
      any = any || value(latest_->gpus[slot]).has_value();
    if (!any) return;
    w.family(name, type, unit, help);
    for (std::size_t slot = 0; slot < gpus_.size() && slot < latest_->gpus.size(); ++slot)
      if (auto v = value(latest_->gpus[slot])) w.sample(name + suffix, labels_of(gpus_[slot]), *v);
  };
  using G = telemetry::GpuSample;
  using O = std::optional<double>;
  per_gpu("cnnergy_gpu_energy_joules", "counter", "joules",
          "GPU energy: the driver's counter where the GPU has one, else integrated power",
          "_total", [](const G& g) -> O {
            return g.energy_mj ? double(*g.energy_mj) / 1000.0 : g.integrated_mj / 1000.0;
          });
  per_gpu("cnnergy_gpu_power_watts", "gauge", "watts",
          "GPU power: NVML's instant field where the GPU reports it, else its power usage (a 1 s average "
          "on Ampere and later; the JSON-lines stream's power_field says which)", "",
          [](const G& g) -> O { return g.power_mw ? O(*g.power_mw / 1000.0) : O(); });
  per_gpu("cnnergy_gpu_power_average_watts", "gauge", "watts", "GPU power, the driver's 1 s average",
          "", [](const G& g) -> O {
            return g.power_average_mw ? O(*g.power_average_mw / 1000.0) : O();
          });
  per_gpu("cnnergy_gpu_sm_clock_hertz", "gauge", "hertz", "SM clock", "",
          [](const G& g) -> O { return g.sm_mhz ? O(*g.sm_mhz * 1e6) : O(); });
  per_gpu("cnnergy_gpu_memory_clock_hertz", "gauge", "hertz", "memory clock", "",
          [](const G& g) -> O { return g.mem_mhz ? O(*g.mem_mhz * 1e6) : O(); });
  per_gpu("cnnergy_gpu_utilization_ratio", "gauge", "ratio",
          "fraction of the last sample period a kernel ran", "", [](const G& g) -> O {
            return g.utilization ? O(g.utilization->gpu_percent / 100.0) : O();
          });
  per_gpu("cnnergy_gpu_memory_utilization_ratio", "gauge", "ratio",
          "fraction of the last sample period device memory was read or written", "",
          [](const G& g) -> O {
            return g.utilization ? O(g.utilization->memory_percent / 100.0) : O();
          });
  per_gpu("cnnergy_gpu_temperature_celsius", "gauge", "celsius", "GPU temperature", "",
          [](const G& g) -> O { return g.temperature_c ? O(*g.temperature_c) : O(); });
  if (latest_) {
    bool any = false;
    for (const auto& g : latest_->gpus) any = any || g.clock_event_reasons.has_value();
    if (any) {
      w.family("cnnergy_gpu_throttle_reason", "gauge", "",
               "1 while this clock-event (throttle) reason holds the SM clock down, else 0");
      for (std::size_t slot = 0; slot < gpus_.size() && slot < latest_->gpus.size(); ++slot) {
        const auto& mask = latest_->gpus[slot].clock_event_reasons;
        if (!mask) continue;
        for (const auto& [bit, name] : known_reasons())
          w.sample("cnnergy_gpu_throttle_reason",
                   labels_of(gpus_[slot]) + ",reason=\"" + name + "\"", (*mask & bit) ? 1 : 0);
      }
    }
    if (latest_->cpu_energy_mj) {
      w.family("cnnergy_cpu_energy_joules", "counter", "joules",
               "CPU package energy from RAPL since the monitor started");
      w.sample("cnnergy_cpu_energy_joules_total", "", *latest_->cpu_energy_mj / 1000.0);
    }
  }
  w.family("cnnergy_sampler_samples", "counter", "", "samples taken by the sampler");
  w.sample("cnnergy_sampler_samples_total", "", double(samples_));
  if (!windows_.empty()) {
    const auto per_window = [&](const std::string& name, const char* type, const char* unit,
                                const char* help, const std::string& suffix, auto&& value) {
      w.family(name, type, unit, help);
      for (const auto& [label, t] : windows_)
        if (auto v = value(t)) w.sample(name + suffix, "window=\"" + escape_label(label) + "\"", *v);
    };
    using O2 = std::optional<double>;
    per_window("cnnergy_window_completions", "counter", "", "windows of this name completed",
               "_total", [](const WindowTotals& t) -> O2 { return double(t.count); });
    per_window("cnnergy_window_energy_joules", "counter", "joules",
               "GPU energy of the completed windows of this name, summed", "_total",
               [](const WindowTotals& t) -> O2 { return t.energy_j_total; });
    per_window("cnnergy_window_duration_seconds", "counter", "seconds",
               "time of the completed windows of this name, summed", "_total",
               [](const WindowTotals& t) -> O2 { return t.seconds_total; });
    per_window("cnnergy_window_last_energy_joules", "gauge", "joules",
               "GPU energy of the latest completed window of this name", "",
               [](const WindowTotals& t) -> O2 { return t.last_energy_j; });
  }
  return w.str();
}

JsonlStream::JsonlStream(const std::string& path, std::vector<GpuLabels> gpus)
    : gpus_(std::move(gpus)) {
  out_ = std::fopen(path.c_str(), "w");
  if (!out_) throw DataError("cannot write --jsonl file " + path + ": " + std::strerror(errno));
  t0_ns_ = telemetry::steady_now_ns();
  const double unix_now = std::chrono::duration<double>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  unix_minus_steady_s_ = unix_now - double(t0_ns_) / 1e9;
}

JsonlStream::~JsonlStream() {
  if (out_) std::fclose(out_);
}

void JsonlStream::write_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fputs(line.c_str(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);  // a log pipeline tails the file: each line is complete when written
}

void JsonlStream::on_sample(const telemetry::Sample& s) {
  Json j = Json::object();
  j["type"] = "sample";
  j["time_s"] = double(s.t_ns - t0_ns_) / 1e9;
  j["unix_time_s"] = double(s.t_ns) / 1e9 + unix_minus_steady_s_;
  j["steady_time_s"] = double(s.t_ns) / 1e9;  // CLOCK_MONOTONIC: the time base of cnnergy windows
  Json gpus = Json::array();
  for (std::size_t slot = 0; slot < s.gpus.size() && slot < gpus_.size(); ++slot) {
    const auto& g = s.gpus[slot];
    const auto scaled = [](const auto& v, double f) { return v ? Json(double(*v) * f) : Json(); };
    Json x = Json::object();
    x["gpu"] = gpus_[slot].index;
    x["uuid"] = gpus_[slot].uuid;
    x["power_w"] = scaled(g.power_mw, 1e-3);
    x["power_field"] = g.power_mw ? Json(g.power_is_instant ? "instant" : "average_1s") : Json();  // which NVML field
    x["power_average_w"] = scaled(g.power_average_mw, 1e-3);
    x["energy_counter_j"] = scaled(g.energy_mj, 1e-3);
    x["integrated_energy_j"] = g.integrated_mj / 1000.0;
    x["sm_clock_mhz"] = json_or_null(g.sm_mhz);
    x["mem_clock_mhz"] = json_or_null(g.mem_mhz);
    x["utilization_gpu_percent"] = g.utilization ? Json(g.utilization->gpu_percent) : Json();
    x["utilization_memory_percent"] = g.utilization ? Json(g.utilization->memory_percent) : Json();
    x["temperature_c"] = json_or_null(g.temperature_c);
    Json reasons = Json::array();
    if (g.clock_event_reasons)
      for (const auto& r : telemetry::decode_clock_event_reasons(*g.clock_event_reasons))
        reasons.push_back(r);
    x["throttle_reasons"] = reasons;
    gpus.push_back(x);
  }
  j["gpus"] = gpus;
  j["cpu_energy_j"] = s.cpu_energy_mj ? Json(*s.cpu_energy_mj / 1000.0) : Json();
  write_line(j.dump());
}

void JsonlStream::on_window(const telemetry::Measurement& m) {
  const auto joules = [](const std::optional<double>& mj) { return mj ? Json(*mj / 1000.0) : Json(); };
  Json j = Json::object();
  j["type"] = "window";
  j["name"] = m.label;
  j["begin_s"] = double(m.begin_ns - t0_ns_) / 1e9;
  j["time_s"] = m.elapsed_ms / 1000.0;
  j["energy_j"] = joules(m.gpu_energy_mj());
  j["uncertainty_j"] = joules(m.gpu_uncertainty_mj());
  j["cpu_energy_j"] = joules(m.cpu_energy_mj);
  j["below_sensor_period"] = m.short_window;
  Json gpus = Json::array();
  for (const auto& g : m.gpus) {
    Json x = Json::object();
    x["gpu"] = g.index;
    x["source"] = telemetry::to_string(g.source);
    x["energy_j"] = joules(g.energy_mj);
    x["uncertainty_j"] = joules(g.uncertainty_mj);
    x["avg_power_w"] = joules(g.average_power_mw);
    x["peak_power_w"] = joules(g.peak_power_mw);
    gpus.push_back(x);
  }
  j["gpus"] = gpus;
  write_line(j.dump());
}

}  // namespace cnnergy::exporter
