// The sampler thread: reads every GPU's power, energy counter, clocks, utilisation and temperature
// (and the CPU's RAPL energy) at a fixed interval into a ring buffer of timestamped samples, so the
// workload never waits for a sensor: the ~4 ms energy-counter read happens only on this thread.
// It also turns the counter readings into "counter points" (value, estimated time of the sensor
// update that produced it, and how uncertain that time is) that the energy meter interpolates.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "telemetry/nvml.hpp"
#include "telemetry/rapl.hpp"

namespace cnnergy::telemetry {

// Nanoseconds of std::chrono::steady_clock: the one time base of samples and windows.
std::int64_t steady_now_ns();

struct SamplerOptions {
  std::optional<double> interval_ms;       // sampling period; default: the sensor's update period
  std::optional<double> sensor_period_ms;  // skip detection when known
  double detect_timeout_ms = 650;          // longest time detection may watch the sensor at start
  std::size_t capacity = 1 << 14;          // samples kept (about 27 min at 100 ms)
  bool read_energy_counter = true;
  bool read_extended = true;   // clocks, utilisation, temperature, clock-event reasons, memory used
  // PCIe throughput (NVML samples it for 20 ms inside the call) and NVLink counters, every
  // `links_every` rounds: off the workload's path, but it lengthens the sampler's round.
  bool read_links = false;
  unsigned links_every = 5;
  std::vector<unsigned> gpus;  // NVML indices to sample; empty: every accessible GPU
};

struct GpuSample {
  std::int64_t t_ns = 0;                  // when the power was read
  std::optional<std::uint32_t> power_mw;  // instant power where available, else power usage
  bool power_is_instant = false;
  std::optional<std::uint32_t> power_average_mw;
  std::optional<std::uint64_t> energy_mj;  // raw counter
  std::optional<std::uint32_t> sm_mhz, mem_mhz, temperature_c;
  std::optional<Utilization> utilization;
  std::optional<std::uint64_t> clock_event_reasons;
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<LinkThroughput> pcie;
  std::optional<LinkCounters> nvlink;
  double integrated_mj = 0;  // trapezoid integral of power_mw since the sampler started
};

struct Sample {
  std::int64_t t_ns = 0;                // start of this round of reads
  std::vector<GpuSample> gpus;          // one per sampled GPU, in the order of gpu_indices()
  std::optional<double> cpu_energy_mj;  // RAPL, cumulative since the sampler started
};

// A change of the energy counter: the sensor update that produced `energy_mj` happened in
// (lo_ns, hi_ns]: after the last read that still showed the old value, before this read returned,
// and within one sensor period of it. The meter places it at the middle, +- half the width.
struct CounterBracket {
  std::int64_t lo_ns = 0, hi_ns = 0;
  std::uint64_t energy_mj = 0;
};

struct CounterPoint {
  std::int64_t t_ns = 0;
  std::int64_t half_width_ns = 0;
  std::uint64_t energy_mj = 0;
};

// Energy at one instant, interpolated from the sampler's data, with a bound on its error.
struct EnergyAt {
  double energy_mj = 0;
  double uncertainty_mj = 0;
};

struct SamplerStats {
  std::uint64_t samples = 0;
  std::uint64_t counter_reads = 0;
  double counter_read_mean_ms = 0, counter_read_max_ms = 0;
  std::uint64_t power_reads = 0;
  double power_read_mean_us = 0;
  double round_mean_ms = 0;       // one round of reads over every GPU
  std::uint64_t late_rounds = 0;  // rounds that started more than half an interval late
  double interval_ms = 0, sensor_period_ms = 0;
  bool sensor_period_detected = false;
};

class Sampler {
 public:
  using Listener = std::function<void(const Sample&)>;

  // `nvml` may be null (no driver) and `rapl` may be null: the sampler then records time (and what
  // is there). Detects the sensor period (unless given), takes a first sample, starts the thread.
  Sampler(std::shared_ptr<const Nvml> nvml, std::shared_ptr<RaplMeter> rapl,
          SamplerOptions options = {});
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  void stop();  // idempotent; the destructor calls it

  double interval_ms() const { return interval_ms_; }
  double sensor_period_ms() const { return sensor_period_ms_; }
  bool sensor_period_detected() const { return sensor_period_detected_; }
  const std::vector<unsigned>& gpu_indices() const { return gpu_indices_; }
  std::size_t gpu_count() const { return gpu_indices_.size(); }
  const std::shared_ptr<const Nvml>& nvml() const { return nvml_; }
  const std::shared_ptr<RaplMeter>& rapl() const { return rapl_; }
  bool has_counter(std::size_t slot) const { return has_counter_.at(slot); }
  bool has_power(std::size_t slot) const { return has_power_.at(slot); }
  // How late a power reading may show a change of the true power: one sensor period for instant
  // power, 1 s where only the 1 s average (nvmlDeviceGetPowerUsage on Ampere+) is readable.
  double power_lag_ms(std::size_t slot) const {
    return has_instant_.at(slot) ? sensor_period_ms_ : 1000.0;
  }

  std::vector<Sample> samples() const;  // the ring's contents, oldest first
  // The ring's samples from the last one at or before t_ns on, oldest first (all of them when t_ns
  // is older than the ring; `covered` says whether a sample at or before t_ns was still there).
  std::vector<Sample> samples_from(std::int64_t t_ns, bool* covered = nullptr) const;
  std::optional<Sample> latest() const;
  std::vector<CounterPoint> counter_points(std::size_t slot) const;
  SamplerStats stats() const;

  // Energy of GPU `slot` at time t: from the counter points around t, or from the integrated power
  // of the samples around t. Empty while the sampler has not yet seen past t (or the data was
  // overwritten, or the reading is absent).
  std::optional<EnergyAt> counter_energy_at(std::size_t slot, std::int64_t t_ns) const;
  std::optional<EnergyAt> integrated_energy_at(std::size_t slot, std::int64_t t_ns) const;

  // Called on the sampler thread after each new sample (keep it short). Returns a token for
  // removal.
  int add_listener(Listener listener);
  void remove_listener(int token);  // waits for a call in progress to finish

 private:
  void detect_sensor_period();
  Sample take_sample();
  void run();

  std::shared_ptr<const Nvml> nvml_;
  std::shared_ptr<RaplMeter> rapl_;
  SamplerOptions options_;
  std::vector<unsigned> gpu_indices_;
  std::vector<bool> has_counter_, has_power_, has_instant_;
  double interval_ms_ = 100, sensor_period_ms_ = 100;
  bool sensor_period_detected_ = false;

  mutable std::mutex data_mutex_;
  std::vector<Sample> ring_;
  std::size_t ring_head_ = 0;                          // next write position once full
  std::vector<std::vector<CounterBracket>> brackets_;  // per slot, oldest first, bounded
  std::vector<std::optional<std::uint64_t>> last_counter_;
  std::vector<std::int64_t> last_counter_read_start_;
  SamplerStats stats_;
  double counter_read_total_ms_ = 0, power_read_total_us_ = 0, round_total_ms_ = 0;
  std::uint64_t rounds_ = 0;  // take_sample calls, for links_every

  std::mutex listener_mutex_;
  std::map<int, Listener> listeners_;
  int next_token_ = 1;

  std::mutex run_mutex_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cnnergy::telemetry
