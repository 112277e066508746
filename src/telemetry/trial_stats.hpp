// Telemetry statistics of a measurement window (Gera et al. 2018 compare hardware on exactly these):
// GPU and memory utilisation, memory used, power, temperature, clocks, throttle reasons and link
// traffic per GPU, plus CPU utilisation and RAPL package/DRAM energy. Accumulated incrementally, one
// sample at a time on the sampler thread (O(GPUs) per sample, nothing stored), and kept as JSON in
// the results store, where windows (repetitions) merge into the trial's figures.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "telemetry/rapl.hpp"

namespace cnnergy::telemetry {

struct Sample;
struct GpuSample;
class Sampler;

// Count, mean, minimum and maximum of a stream of values; mergeable.
struct RunningStat {
  std::uint64_t n = 0;
  double sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  void add(double v) {
    ++n;
    sum += v;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  void merge(const RunningStat& o);
  double mean() const { return n ? sum / static_cast<double>(n) : 0; }
  Json to_json() const;  // {"n","mean","min","max"}; null when empty
  static RunningStat from_json(const Json& j);
};

// The clock-event (throttle) reason bits counted per sample, in NVML's bit order; the last slot
// counts bits this build does not know.
inline constexpr std::size_t kReasonSlots = 10;
const std::array<const char*, kReasonSlots>& reason_slot_names();

struct GpuWindowStats {
  unsigned nvml_index = 0;
  std::uint64_t samples = 0;
  RunningStat utilization_gpu_pct, utilization_memory_pct, power_w, temperature_c, sm_clock_mhz, mem_clock_mhz;
  // Which NVML field power_w comes from: the instant field (GpuSample::power_is_instant) or the
  // driver's power usage, a 1 s average on Ampere and later; power_average_w is always the latter.
  // JSON: "power_field": "instant", "average_1s" or "mixed".
  std::uint64_t power_instant_samples = 0, power_usage_samples = 0;
  RunningStat power_average_w;
  std::string power_field() const;
  std::optional<double> memory_used_peak_mib;
  std::uint64_t reason_samples = 0;  // samples whose reason mask was readable
  std::array<std::uint64_t, kReasonSlots> reason_counts{};
  RunningStat pcie_tx_mb_s, pcie_rx_mb_s;
  // NVLink: first and last cumulative counters seen (KiB) and when, for the window's mean rate.
  std::optional<std::uint64_t> nvlink_tx_first_kib, nvlink_rx_first_kib, nvlink_tx_last_kib, nvlink_rx_last_kib;
  std::int64_t nvlink_first_ns = 0, nvlink_last_ns = 0;
  double nvlink_tx_kib = 0, nvlink_rx_kib = 0, nvlink_seconds = 0;  // merged totals (from windows)
  void add(const GpuSample& g);
  void merge(const GpuWindowStats& o);
  Json to_json() const;
  static GpuWindowStats from_json(const Json& j);
};

// CPU figures of a window: utilisation from /proc/stat, RAPL energies where readable. An empty
// optional is written as "unavailable" (the OS does not offer it here, or not to this user).
struct CpuWindowStats {
  std::optional<double> utilization_pct;
  std::optional<double> package_energy_j, dram_energy_j;
  double seconds = 0;  // time the utilisation covers (weights the merge)
  void merge(const CpuWindowStats& o);
  Json to_json() const;
  static CpuWindowStats from_json(const Json& j);
};

struct WindowTelemetry {
  double elapsed_ms = 0;
  std::optional<double> idle_power_w;  // trial level: mean board power just before the trial
  std::vector<GpuWindowStats> gpus;
  CpuWindowStats cpu;
  void merge(const WindowTelemetry& o);  // windows of one trial into the trial
  Json to_json() const;
  static WindowTelemetry from_json(const Json& j);  // DataError on a malformed document
};

// Merges the repetitions' telemetry (JSON as stored) into the trial's, with the idle power; ""
// when no repetition has any.
std::string merge_window_telemetry(const std::vector<std::string>& windows, std::optional<double> idle_power_w);

// CPU time counters of /proc/stat's first line (jiffies): busy and total.
struct CpuTimes {
  std::uint64_t busy = 0, total = 0;
};
std::optional<CpuTimes> parse_proc_stat(const std::string& text);
std::optional<CpuTimes> read_cpu_times(const std::string& path = "/proc/stat");

// Opens and closes windows over a sampler: while a window is open, every new sample is added to it
// by a sampler listener. A null sampler (a CPU-only device) still gives CPU figures.
class TelemetryRecorder {
 public:
  TelemetryRecorder(std::shared_ptr<Sampler> sampler, std::shared_ptr<RaplMeter> rapl);
  ~TelemetryRecorder();
  TelemetryRecorder(const TelemetryRecorder&) = delete;
  TelemetryRecorder& operator=(const TelemetryRecorder&) = delete;

  // A window holds the samples taken between begin() and end(); end() closes it at once (later
  // samples are not added) and returns its statistics.
  void begin();
  WindowTelemetry end();
  // Mean summed board power over the sampler's last `lookback_ms` before now: the idle power when
  // nothing of ours ran in that time (the caller decides when that is).
  std::optional<double> recent_power_w(double lookback_ms) const;

 private:
  void on_sample(const Sample& s);

  std::shared_ptr<Sampler> sampler_;
  std::shared_ptr<RaplMeter> rapl_;
  int listener_ = 0;
  std::mutex mutex_;
  bool open_ = false;
  WindowTelemetry current_;
  std::int64_t begin_ns_ = 0;
  std::optional<CpuTimes> cpu_begin_;
  std::optional<double> package_begin_mj_, dram_begin_mj_;
};

}  // namespace cnnergy::telemetry
