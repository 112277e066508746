// The energy-window interface the measurement code uses. It is implemented over NVML by the
// telemetry adapter (measure/nvml_probe.hpp), so phase and layer attribution can be tested with a
// simulated device and run where there is no GPU driver at all (no probe: time only).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cnnergy {

struct ProbeReading {
  double joules = 0;              // summed over the metered devices
  double uncertainty_joules = 0;  // from the sensor's granularity (0 when unknown)
  double average_watts = 0;
  double peak_watts = 0;
  bool short_window = false;      // shorter than the sensor's update period: do not trust alone
  std::vector<double> per_device_joules;  // one entry per metered device, in the probe's order
  std::optional<double> max_temperature_c;
};

class EnergyProbe {
 public:
  virtual ~EnergyProbe() = default;
  // begin() marks the start of a window; end() its end. The caller synchronises the device first,
  // so the window holds exactly the work it measures. end() is empty when no energy is available.
  virtual void begin() = 0;
  virtual std::optional<ProbeReading> end() = 0;
  virtual std::string source() const = 0;  // "nvml energy counter", "nvml integrated power", ...
  virtual double sensor_period_ms() const = 0;
  // Telemetry statistics of the window the last end() closed (telemetry/trial_stats.hpp, as JSON),
  // "" where the probe keeps none. Given even when end() had no energy (CPU figures, utilisation).
  virtual std::string window_telemetry_json() const { return {}; }
  // Waits a short while with nothing of ours running and returns the mean power seen meanwhile
  // (the idle power of Gera et al. 2018); empty where the probe cannot tell.
  virtual std::optional<double> measure_idle_power_w() { return std::nullopt; }
};

}  // namespace cnnergy
