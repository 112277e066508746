// Trial runners: what `cnnergy sweep` plugs into the tuner's bookkeeping (tune/plan.hpp). A runner
// applies the trial's hardware knobs (journaled, restored afterwards), runs the workload — a built-in
// model on a backend, or an external command rerun per repetition with the knob values in CNNERGY_*
// environment variables (as seed 003's tool runs any training program) — and measures repeated
// windows long enough for the energy sensor.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/shape.hpp"
#include "tune/knobs.hpp"
#include "tune/plan.hpp"

namespace cnnergy {
namespace telemetry {
class Nvml;
class Sampler;
class KnobController;
}  // namespace telemetry

namespace tune {

struct MeasureSettings {
  int warmup_iterations = 5;    // model iterations (or command runs) before the first window
  double window_seconds = 3.0;  // each repetition lasts at least this long (DESIGN: >= 1 s, better 3 s)
  std::int64_t min_iterations = 10;
  int repetitions = 3;
  double cooldown_max_c = 0;    // > 0: before a trial, wait until the GPU is at or below this temperature
  double cooldown_timeout_s = 120;
};

// What the device allows (power-limit range, supported clocks, GPU count) for knob validation.
DeviceLimits query_device_limits(const telemetry::Nvml* nvml, unsigned gpu);

// Applies power limit, locked SM clock and memory clock of each trial to the metered GPUs through one
// KnobController (journal first, restore on exit/signal/crash via `cnnergy restore`). "default" values
// restore the original setting. In dry-run mode nothing is changed: the plan is printed.
class HardwareKnobs {
 public:
  HardwareKnobs(std::shared_ptr<const telemetry::Nvml> nvml, std::vector<unsigned> gpus, bool dry_run);
  ~HardwareKnobs();
  HardwareKnobs(const HardwareKnobs&) = delete;
  HardwareKnobs& operator=(const HardwareKnobs&) = delete;
  void apply(const TrialSpec& trial);
  static bool touches_hardware(const TrialSpec& trial);

 private:
  std::shared_ptr<const telemetry::Nvml> nvml_;
  std::vector<unsigned> gpus_;
  std::unique_ptr<telemetry::KnobController> controller_;
};

struct ModelWorkload {
  std::string model;
  std::optional<Shape> input;
  std::optional<std::int64_t> classes;
  Device device;
  std::int64_t default_batch = 64;
  std::string default_precision = "fp32";
  std::string default_layout = "nchw";
  std::string default_conv_algo = "auto";
  std::string algo_cache_dir;  // the persistent algorithm cache (BackendOptions); empty: none
  // Accuracy per trial (optional): train this many epochs on this data set and store top-1.
  std::string accuracy_data;
  std::int64_t accuracy_epochs = 0;
  std::int64_t accuracy_max_iterations = 0;
};

// `sampler` may be null (no NVML: time only); `knobs` may be null (no hardware knobs swept).
TrialRunner make_model_runner(const ModelWorkload& workload, const MeasureSettings& settings, HardwareKnobs* knobs,
                              std::shared_ptr<telemetry::Sampler> sampler);

// Reruns `command` once per iteration; a window is `min_iterations` runs or `window_seconds`, whichever
// is longer. A run that exits non-zero fails the trial (recorded, the sweep goes on).
TrialRunner make_command_runner(std::vector<std::string> command, const MeasureSettings& settings,
                                HardwareKnobs* knobs, std::shared_ptr<telemetry::Sampler> sampler);

}  // namespace tune
}  // namespace cnnergy
