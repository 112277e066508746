// Window telemetry statistics: running min/mean/max per reading, merging windows into a trial, the
// JSON kept in the results store, /proc/stat CPU times, and the recorder that feeds windows from the
// sampler's listener (one add per sample: nothing is stored or sorted).
#include "telemetry/trial_stats.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/errors.hpp"
#include "telemetry/nvml_api.hpp"
#include "telemetry/sampler.hpp"

namespace cnnergy::telemetry {

namespace {

Json opt_number(const std::optional<double>& v) { return v ? Json(*v) : Json("unavailable"); }
std::optional<double> number_or_empty(const Json& j) {
  return j.is_number() ? std::optional<double>(j.as_number()) : std::nullopt;
}

}  // namespace

void RunningStat::merge(const RunningStat& o) {
  n += o.n;
  sum += o.sum;
  min = std::min(min, o.min);
  max = std::max(max, o.max);
}

Json RunningStat::to_json() const {
  if (n == 0) return Json();
  return Json(Json::Object{{"n", Json(n)}, {"mean", Json(mean())}, {"min", Json(min)}, {"max", Json(max)}});
}

RunningStat RunningStat::from_json(const Json& j) {
  RunningStat s;
  if (!j.is_object()) return s;
  s.n = static_cast<std::uint64_t>(j.at("n").as_number());
  s.sum = j.at("mean").as_number() * static_cast<double>(s.n);
  s.min = j.at("min").as_number();
  s.max = j.at("max").as_number();
  return s;
}

const std::array<const char*, kReasonSlots>& reason_slot_names() {
  static const std::array<const char*, kReasonSlots> kNames = {
      "gpu_idle",           "applications_clocks_setting", "sw_power_cap",           "hw_slowdown",
      "sync_boost",         "sw_thermal_slowdown",         "hw_thermal_slowdown",    "hw_power_brake_slowdown",
      "display_clock_setting", "other"};
  return kNames;
}

void GpuWindowStats::add(const GpuSample& g) {
  ++samples;
  if (g.utilization) {
    utilization_gpu_pct.add(g.utilization->gpu_percent);
    utilization_memory_pct.add(g.utilization->memory_percent);
  }
  if (g.power_mw) {
    power_w.add(*g.power_mw / 1e3);
    ++(g.power_is_instant ? power_instant_samples : power_usage_samples);
  }
  if (g.power_average_mw) power_average_w.add(*g.power_average_mw / 1e3);
  if (g.temperature_c) temperature_c.add(*g.temperature_c);
  if (g.sm_mhz) sm_clock_mhz.add(*g.sm_mhz);
  if (g.mem_mhz) mem_clock_mhz.add(*g.mem_mhz);
  if (g.memory_used_bytes) {
    const double mib = static_cast<double>(*g.memory_used_bytes) / (1024.0 * 1024.0);
    memory_used_peak_mib = std::max(memory_used_peak_mib.value_or(0), mib);
  }
  if (g.clock_event_reasons) {
    ++reason_samples;
    const std::uint64_t mask = *g.clock_event_reasons;
    for (std::size_t b = 0; b + 1 < kReasonSlots; ++b)
      if (mask & (1ull << b)) ++reason_counts[b];
    if (mask >> (kReasonSlots - 1)) ++reason_counts[kReasonSlots - 1];
  }
  if (g.pcie) {
    pcie_tx_mb_s.add(g.pcie->tx_kb_per_s / 1e3);
    pcie_rx_mb_s.add(g.pcie->rx_kb_per_s / 1e3);
  }
  if (g.nvlink) {
    if (!nvlink_tx_first_kib) {
      nvlink_tx_first_kib = g.nvlink->tx_kib, nvlink_rx_first_kib = g.nvlink->rx_kib;
      nvlink_first_ns = g.t_ns;
    }
    nvlink_tx_last_kib = g.nvlink->tx_kib, nvlink_rx_last_kib = g.nvlink->rx_kib;
    nvlink_last_ns = g.t_ns;
  }
}

namespace {
// NVLink traffic of a window from its first and last counters (a counter that went backwards, i.e.
// a driver reload, gives nothing rather than a wrong figure).
void fold_nvlink(GpuWindowStats& s) {
  if (!s.nvlink_tx_first_kib || s.nvlink_last_ns <= s.nvlink_first_ns) return;
  if (*s.nvlink_tx_last_kib < *s.nvlink_tx_first_kib || *s.nvlink_rx_last_kib < *s.nvlink_rx_first_kib) return;
  s.nvlink_tx_kib += static_cast<double>(*s.nvlink_tx_last_kib - *s.nvlink_tx_first_kib);
  s.nvlink_rx_kib += static_cast<double>(*s.nvlink_rx_last_kib - *s.nvlink_rx_first_kib);
  s.nvlink_seconds += static_cast<double>(s.nvlink_last_ns - s.nvlink_first_ns) * 1e-9;
  s.nvlink_tx_first_kib.reset();
}
}  // namespace

std::string GpuWindowStats::power_field() const {
  if (power_instant_samples && power_usage_samples) return "mixed";
  if (power_instant_samples) return "instant";
  if (power_usage_samples) return "average_1s";
  return "unknown";
}

void GpuWindowStats::merge(const GpuWindowStats& o) {
  samples += o.samples;
  utilization_gpu_pct.merge(o.utilization_gpu_pct);
  utilization_memory_pct.merge(o.utilization_memory_pct);
  power_w.merge(o.power_w);
  power_instant_samples += o.power_instant_samples;
  power_usage_samples += o.power_usage_samples;
  power_average_w.merge(o.power_average_w);
  temperature_c.merge(o.temperature_c);
  sm_clock_mhz.merge(o.sm_clock_mhz);
  mem_clock_mhz.merge(o.mem_clock_mhz);
  if (o.memory_used_peak_mib) memory_used_peak_mib = std::max(memory_used_peak_mib.value_or(0), *o.memory_used_peak_mib);
  reason_samples += o.reason_samples;
  for (std::size_t i = 0; i < kReasonSlots; ++i) reason_counts[i] += o.reason_counts[i];
  pcie_tx_mb_s.merge(o.pcie_tx_mb_s);
  pcie_rx_mb_s.merge(o.pcie_rx_mb_s);
  nvlink_tx_kib += o.nvlink_tx_kib;
  nvlink_rx_kib += o.nvlink_rx_kib;
  nvlink_seconds += o.nvlink_seconds;
}

Json GpuWindowStats::to_json() const {
  GpuWindowStats s = *this;
  fold_nvlink(s);
  Json::Object o{{"nvml_index", Json(nvml_index)},
                 {"samples", Json(samples)},
                 {"utilization_gpu_pct", s.utilization_gpu_pct.to_json()},
                 {"utilization_memory_pct", s.utilization_memory_pct.to_json()},
                 {"power_w", s.power_w.to_json()},
                 {"power_field", Json(power_field())},
                 {"power_instant_samples", Json(power_instant_samples)},
                 {"power_usage_samples", Json(power_usage_samples)},
                 {"power_average_w", s.power_average_w.to_json()},
                 {"temperature_c", s.temperature_c.to_json()},
                 {"sm_clock_mhz", s.sm_clock_mhz.to_json()},
                 {"mem_clock_mhz", s.mem_clock_mhz.to_json()},
                 {"memory_used_peak_mib", opt_number(s.memory_used_peak_mib)},
                 {"reason_samples", Json(reason_samples)},
                 {"pcie_tx_mb_s", s.pcie_tx_mb_s.n ? s.pcie_tx_mb_s.to_json() : Json("unavailable")},
                 {"pcie_rx_mb_s", s.pcie_rx_mb_s.n ? s.pcie_rx_mb_s.to_json() : Json("unavailable")}};
  Json::Object fractions, counts;
  for (std::size_t i = 0; i < kReasonSlots; ++i) {
    counts[reason_slot_names()[i]] = Json(reason_counts[i]);
    if (reason_samples)
      fractions[reason_slot_names()[i]] =
          Json(static_cast<double>(reason_counts[i]) / static_cast<double>(reason_samples));
  }
  o["throttle_fraction"] = reason_samples ? Json(std::move(fractions)) : Json("unavailable");
  o["throttle_counts"] = Json(std::move(counts));
  if (s.nvlink_seconds > 0) {
    o["nvlink_tx_mb_s"] = Json(s.nvlink_tx_kib * 1.024e-3 / s.nvlink_seconds);  // KiB -> MB (1e6 bytes)
    o["nvlink_rx_mb_s"] = Json(s.nvlink_rx_kib * 1.024e-3 / s.nvlink_seconds);
    o["nvlink_kib"] = Json(Json::Object{{"tx", Json(s.nvlink_tx_kib)}, {"rx", Json(s.nvlink_rx_kib)},
                                        {"seconds", Json(s.nvlink_seconds)}});
  } else {
    o["nvlink_tx_mb_s"] = Json("unavailable");
    o["nvlink_rx_mb_s"] = Json("unavailable");
  }
  return Json(std::move(o));
}

GpuWindowStats GpuWindowStats::from_json(const Json& j) {
  GpuWindowStats s;
  s.nvml_index = static_cast<unsigned>(j.at("nvml_index").as_number());
  s.samples = static_cast<std::uint64_t>(j.at("samples").as_number());
  s.utilization_gpu_pct = RunningStat::from_json(j["utilization_gpu_pct"]);
  s.utilization_memory_pct = RunningStat::from_json(j["utilization_memory_pct"]);
  s.power_w = RunningStat::from_json(j["power_w"]);
  // Telemetry stored before the power field was recorded reads as "unknown".
  if (j["power_instant_samples"].is_number())
    s.power_instant_samples = static_cast<std::uint64_t>(j["power_instant_samples"].as_number());
  if (j["power_usage_samples"].is_number())
    s.power_usage_samples = static_cast<std::uint64_t>(j["power_usage_samples"].as_number());
  s.power_average_w = RunningStat::from_json(j["power_average_w"]);
  s.temperature_c = RunningStat::from_json(j["temperature_c"]);
  s.sm_clock_mhz = RunningStat::from_json(j["sm_clock_mhz"]);
  s.mem_clock_mhz = RunningStat::from_json(j["mem_clock_mhz"]);
  s.memory_used_peak_mib = number_or_empty(j["memory_used_peak_mib"]);
  s.reason_samples = static_cast<std::uint64_t>(j["reason_samples"].is_number() ? j["reason_samples"].as_number() : 0);
  if (j["throttle_counts"].is_object())
    for (std::size_t i = 0; i < kReasonSlots; ++i)
      if (const Json* c = j["throttle_counts"].find(reason_slot_names()[i]); c && c->is_number())
        s.reason_counts[i] = static_cast<std::uint64_t>(c->as_number());
  s.pcie_tx_mb_s = RunningStat::from_json(j["pcie_tx_mb_s"]);
  s.pcie_rx_mb_s = RunningStat::from_json(j["pcie_rx_mb_s"]);
  if (j["nvlink_kib"].is_object()) {
    s.nvlink_tx_kib = j["nvlink_kib"].at("tx").as_number();
    s.nvlink_rx_kib = j["nvlink_kib"].at("rx").as_number();
    s.nvlink_seconds = j["nvlink_kib"].at("seconds").as_number();
  }
  return s;
}

void CpuWindowStats::merge(const CpuWindowStats& o) {
  if (utilization_pct && o.utilization_pct && seconds + o.seconds > 0)
    utilization_pct = (*utilization_pct * seconds + *o.utilization_pct * o.seconds) / (seconds + o.seconds);
  else if (!utilization_pct)
    utilization_pct = o.utilization_pct;
  auto add = [](std::optional<double>& a, const std::optional<double>& b) {
    if (a && b) *a += *b;
    else if (!a) a = b;
  };
  add(package_energy_j, o.package_energy_j);
  add(dram_energy_j, o.dram_energy_j);
  seconds += o.seconds;
}

Json CpuWindowStats::to_json() const {
  return Json(Json::Object{{"utilization_pct", opt_number(utilization_pct)},
                           {"package_energy_j", opt_number(package_energy_j)},
                           {"dram_energy_j", opt_number(dram_energy_j)},
                           {"seconds", Json(seconds)}});
}

CpuWindowStats CpuWindowStats::from_json(const Json& j) {
  CpuWindowStats c;
  if (!j.is_object()) return c;
  c.utilization_pct = number_or_empty(j["utilization_pct"]);
  c.package_energy_j = number_or_empty(j["package_energy_j"]);
  c.dram_energy_j = number_or_empty(j["dram_energy_j"]);
  c.seconds = j["seconds"].is_number() ? j["seconds"].as_number() : 0;
  return c;
}

void WindowTelemetry::merge(const WindowTelemetry& o) {
  elapsed_ms += o.elapsed_ms;
  if (o.idle_power_w) idle_power_w = o.idle_power_w;
  for (const auto& g : o.gpus) {
    auto it = std::find_if(gpus.begin(), gpus.end(), [&](const GpuWindowStats& x) { return x.nvml_index == g.nvml_index; });
    if (it == gpus.end()) gpus.push_back(g);
    else it->merge(g);
  }
  cpu.merge(o.cpu);
}

Json WindowTelemetry::to_json() const {
  Json::Array g;
  for (const auto& x : gpus) g.push_back(x.to_json());
  return Json(Json::Object{{"elapsed_ms", Json(elapsed_ms)},
                           {"idle_power_w", idle_power_w ? Json(*idle_power_w) : Json("unavailable")},
                           {"gpus", Json(std::move(g))},
                           {"cpu", cpu.to_json()}});
}

WindowTelemetry WindowTelemetry::from_json(const Json& j) {
  WindowTelemetry w;
  try {
    w.elapsed_ms = j.at("elapsed_ms").as_number();
    w.idle_power_w = number_or_empty(j["idle_power_w"]);
    for (const auto& g : j.at("gpus").as_array()) {
      GpuWindowStats s = GpuWindowStats::from_json(g);
      w.gpus.push_back(s);
    }
    w.cpu = CpuWindowStats::from_json(j["cpu"]);
  } catch (const Error& e) {
    throw DataError(std::string("malformed telemetry statistics: ") + e.what());
  }
  return w;
}

std::string merge_window_telemetry(const std::vector<std::string>& windows, std::optional<double> idle_power_w) {
  WindowTelemetry trial;
  bool any = false;
  for (const auto& text : windows) {
    if (text.empty()) continue;
    trial.merge(WindowTelemetry::from_json(Json::parse(text)));
    any = true;
  }
  if (!any) return "";
  trial.idle_power_w = idle_power_w;
  return trial.to_json().dump();
}

std::optional<CpuTimes> parse_proc_stat(const std::string& text) {
  std::istringstream in(text);
  std::string label;
  if (!(in >> label) || label != "cpu") return std::nullopt;
  // user nice system idle iowait irq softirq steal (guest time is already inside user/nice)
  std::uint64_t v[8] = {};
  int n = 0;
  while (n < 8 && in >> v[n]) ++n;
  if (n < 4) return std::nullopt;
  CpuTimes t;
  for (int i = 0; i < n; ++i) t.total += v[i];
  const std::uint64_t idle = v[3] + (n > 4 ? v[4] : 0);
  t.busy = t.total - idle;
  return t;
}

std::optional<CpuTimes> read_cpu_times(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return parse_proc_stat(line);
}

TelemetryRecorder::TelemetryRecorder(std::shared_ptr<Sampler> sampler, std::shared_ptr<RaplMeter> rapl)
    : sampler_(std::move(sampler)), rapl_(std::move(rapl)) {
  if (sampler_) listener_ = sampler_->add_listener([this](const Sample& s) { on_sample(s); });
}

TelemetryRecorder::~TelemetryRecorder() {
  if (sampler_) sampler_->remove_listener(listener_);
}

void TelemetryRecorder::on_sample(const Sample& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_ || s.t_ns < begin_ns_) return;
  for (std::size_t i = 0; i < s.gpus.size() && i < current_.gpus.size(); ++i) current_.gpus[i].add(s.gpus[i]);
}

void TelemetryRecorder::begin() {
  std::lock_guard<std::mutex> lock(mutex_);
  current_ = WindowTelemetry{};
  if (sampler_)
    for (unsigned idx : sampler_->gpu_indices()) {
      GpuWindowStats g;
      g.nvml_index = idx;
      current_.gpus.push_back(g);
    }
  begin_ns_ = steady_now_ns();
  cpu_begin_ = read_cpu_times();
  package_begin_mj_ = rapl_ ? rapl_->total_mj() : std::nullopt;
  dram_begin_mj_ = rapl_ ? rapl_->dram_total_mj() : std::nullopt;
  open_ = true;
}

WindowTelemetry TelemetryRecorder::end() {
  const std::int64_t end_ns = steady_now_ns();
  const auto cpu_end = read_cpu_times();
  const auto package_end = rapl_ ? rapl_->total_mj() : std::nullopt;
  const auto dram_end = rapl_ ? rapl_->dram_total_mj() : std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  open_ = false;
  WindowTelemetry w = std::move(current_);
  w.elapsed_ms = static_cast<double>(end_ns - begin_ns_) / 1e6;
  w.cpu.seconds = w.elapsed_ms / 1e3;
  if (cpu_begin_ && cpu_end && cpu_end->total > cpu_begin_->total)
    w.cpu.utilization_pct = 100.0 * static_cast<double>(cpu_end->busy - cpu_begin_->busy) /
                            static_cast<double>(cpu_end->total - cpu_begin_->total);
  if (package_begin_mj_ && package_end) w.cpu.package_energy_j = (*package_end - *package_begin_mj_) / 1e3;
  if (dram_begin_mj_ && dram_end) w.cpu.dram_energy_j = (*dram_end - *dram_begin_mj_) / 1e3;
  return w;
}

std::optional<double> TelemetryRecorder::recent_power_w(double lookback_ms) const {
  if (!sampler_) return std::nullopt;
  const std::int64_t from = steady_now_ns() - static_cast<std::int64_t>(lookback_ms * 1e6);
  double sum = 0;
  std::size_t n = 0;
  for (const Sample& s : sampler_->samples()) {
    if (s.t_ns < from) continue;
    double total = 0;
    bool all = !s.gpus.empty();
    for (const auto& g : s.gpus) {
      if (!g.power_mw) all = false;
      else total += *g.power_mw / 1e3;
    }
    if (all) sum += total, ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

}  // namespace cnnergy::telemetry
