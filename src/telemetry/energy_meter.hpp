// Energy-meter windows: begin/end (nestable, overlapping) over the sampler's data, each returning a
// Measurement with time, energy per GPU, average and peak power, where the energy came from, and
// how far it can be trusted. The caller's thread never reads the slow energy counter: begin/end
// only take a timestamp (after the optional device-sync hook has made the GPU finish its work).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/sampler.hpp"

namespace cnnergy::telemetry {

// Makes the device finish the work queued so far (e.g. cudaDeviceSynchronize). The telemetry layer
// does not know the backend, so the caller passes it.
using SyncFn = std::function<void()>;

enum class EnergySource { kNone, kCounter, kIntegratedPower };
const char* to_string(EnergySource s);

struct GpuEnergy {
  unsigned index = 0;  // NVML index
  EnergySource source = EnergySource::kNone;
  std::optional<double> energy_mj;
  std::optional<double> uncertainty_mj;    // bound on |error| from sensor granularity and timing
  std::optional<double> average_power_mw;  // energy / elapsed
  std::optional<double> peak_power_mw;     // highest power sample inside the window
  std::size_t samples = 0;                 // power samples inside the window
};

struct Measurement {
  std::string label;
  std::int64_t begin_ns = 0, end_ns = 0;  // steady clock
  double elapsed_ms = 0;
  std::vector<GpuEnergy> gpus;
  std::optional<double> cpu_energy_mj;  // RAPL (all packages), where readable
  // The window is shorter than the sensor's update period: its energy rests on one or two sensor
  // updates and must not be trusted alone (repeat the work in a longer window instead).
  bool short_window = false;
  double sensor_period_ms = 0;

  std::optional<double> gpu_energy_mj() const;       // sum over GPUs (empty if any is unknown)
  std::optional<double> gpu_uncertainty_mj() const;  // sum of the bounds
};

class EnergyMeter {
 public:
  using WindowId = std::uint64_t;

  // `cpu_from_samples`: take the CPU (RAPL) energy at window edges from the sampler's samples
  // (interpolated) instead of reading sysfs on the caller's thread, so begin/close only stamp a
  // time (the C API and Python module, whose begin/end must cost microseconds, ask for this).
  explicit EnergyMeter(std::shared_ptr<Sampler> sampler, bool cpu_from_samples = false);
  ~EnergyMeter();
  EnergyMeter(const EnergyMeter&) = delete;
  EnergyMeter& operator=(const EnergyMeter&) = delete;

  // Opens a window: calls `sync` (if any) first so earlier device work is not counted, then stamps.
  WindowId begin(std::string label = {}, const SyncFn& sync = {});
  // Closes a window: calls `sync` so the window's device work is finished, then stamps. Returns at
  // once; the numbers are ready once the sampler has read past the end (see result()).
  void close(WindowId id, const SyncFn& sync = {});
  // Waits until the sampler covers the window (about one interval plus one sensor period after
  // close), then returns its Measurement and forgets the window. After `timeout`, GPUs whose end is
  // not covered fall back to integrated power or report no energy.
  Measurement result(WindowId id, std::optional<std::chrono::milliseconds> timeout = {});
  // begin() and close() at a time stamped earlier by the caller (steady_now_ns()'s clock, not in
  // the future; a begin not before the sampler's first sample): the Python module stamps on the
  // training thread and registers from another thread. Samples the meter already saw inside the
  // window are counted again from the sampler's ring (peak, samples, power variation, CPU energy).
  WindowId begin_at(std::string label, std::int64_t t_ns);
  void close_at(WindowId id, std::int64_t t_ns);
  // close() + result().
  Measurement end(WindowId id, const SyncFn& sync = {});

  // The Measurement of a closed window if the sampler already covers it (then the window is
  // forgotten), else empty; never waits.
  std::optional<Measurement> try_result(WindowId id);
  // Forgets a window without computing its result (InvalidArgument if unknown).
  void discard(WindowId id);

  std::size_t open_windows() const;
  const Sampler& sampler() const { return *sampler_; }

 private:
  struct Boundary {
    std::optional<EnergyAt> counter, integrated;
  };
  struct GpuWindow {
    Boundary begin, end;
    double peak_mw = 0;
    std::size_t samples = 0;
    // Total variation of the sampled power over the window (up to the first sample past its end):
    // every change is seen up to one lag late, so integrated power is off by at most lag * this.
    double variation_mw = 0;
    std::optional<double> last_power_mw;
    bool variation_done = false;
  };
  struct Window {
    std::string label;
    std::int64_t begin_ns = 0, end_ns = 0;
    bool closed = false;
    std::optional<double> cpu_begin_mj, cpu_end_mj;
    std::vector<GpuWindow> gpus;
  };

  // The previous sample's CPU energy reading (t_ns, mJ), for interpolating window edges.
  using CpuReading = std::optional<std::pair<std::int64_t, double>>;
  void on_sample(const Sample& s);
  void accumulate(Window& w, const Sample& s, const CpuReading& previous_cpu);
  void replay(Window& w);  // mutex_ held: accumulate again over the samples already seen
  void resolve(Window& w);
  bool complete(const Window& w) const;
  Measurement make_measurement(const Window& w) const;

  std::shared_ptr<Sampler> sampler_;
  bool cpu_from_samples_ = false;
  CpuReading last_cpu_;  // of the previous sample
  std::int64_t last_sample_ns_ = std::numeric_limits<std::int64_t>::min();  // seen by on_sample
  int listener_token_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<WindowId, Window> windows_;
  WindowId next_id_ = 1;
};

}  // namespace cnnergy::telemetry
