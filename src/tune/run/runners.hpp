// Trial runners: what `cnnergy sweep` plugs into the tuner's bookkeeping (tune/plan.hpp). A runner
// applies the trial's hardware knobs (journaled, restored afterwards), runs the workload — a built-in
// model on a backend, or an external command rerun per repetition with the knob values in CNNERGY_*
// environment variables (as Krzywaniak et al. 2022's tool runs any training program) — and measures repeated
// windows long enough for the energy sensor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/shape.hpp"
#include "measure/statistics.hpp"
#include "telemetry/settle.hpp"
#include "train/run_config.hpp"
#include "tune/knobs.hpp"
#include "tune/plan.hpp"

namespace cnnergy {
class Graph;
namespace telemetry {
class Nvml;
class Sampler;
class KnobControl;
}  // namespace telemetry

namespace tune {

struct MeasureSettings {
  int warmup_iterations = 5;    // model iterations (or command runs) before the first window
  double window_seconds = 3.0;  // each repetition lasts at least this long (DESIGN: >= 1 s, better 3 s)
  std::int64_t min_iterations = 10;
  int repetitions = 3;
  int max_repetitions = 0;       // --reps auto: > repetitions adds windows while the CV exceeds cv_threshold
  double cv_threshold = 0.05;    // fraction (0.05 = 5 %) of time (and energy) per iteration
  double cooldown_max_c = 0;    // > 0: before a trial, wait until the GPU is at or below this temperature
  double cooldown_timeout_s = 120;
  // Before the first window of every visit (after the knob change and the warm-up), keep the workload
  // running until temperature and power have settled (telemetry/settle.hpp); settle.max_wait_s = 0: off.
  telemetry::SettleRule settle{.max_wait_s = 0};
};

// The steady start of a visit: the wait for settling after `since_ns` (the workload's start), with
// `keep_busy` running the workload, added to `cooled_s` (the cool-down before it). Sets m.settle_s
// and m.settle_text; mark_settle() then puts the wait on the visit's first window.
void settle_before_windows(const MeasureSettings& settings, const std::shared_ptr<telemetry::Sampler>& sampler,
                           std::int64_t since_ns, double cooled_s, const std::function<void()>& keep_busy,
                           TrialMeasurement& m, const std::function<bool()>& stop = {});
void mark_settle(TrialMeasurement& m);

// What the device allows (power-limit range, supported clocks, GPU count) for knob validation.
DeviceLimits query_device_limits(const telemetry::Nvml* nvml, unsigned gpu);

// Applies power limit, locked SM clock and memory clock of each trial to the metered GPUs through one
// KnobController (journal first, restore on exit/signal/crash via `cnnergy restore`). "default" values
// restore the original setting. In dry-run mode nothing is changed: the plan is printed.
class HardwareKnobs {
 public:
  // handle_signals = false: the caller owns SIGINT/SIGTERM/SIGHUP (sweep stops after the trial in
  // progress and restores through the destructor) instead of the controller restoring and dying at once.
  HardwareKnobs(std::shared_ptr<const telemetry::Nvml> nvml, std::vector<unsigned> gpus, bool dry_run,
                bool handle_signals = true);
  // Any knob control: direct, through cnnergyd (telemetry::open_knob_control picks), or a dry run.
  HardwareKnobs(std::unique_ptr<telemetry::KnobControl> control, std::vector<unsigned> gpus);
  ~HardwareKnobs();
  HardwareKnobs(const HardwareKnobs&) = delete;
  HardwareKnobs& operator=(const HardwareKnobs&) = delete;
  void apply(const TrialSpec& trial);
  static bool touches_hardware(const TrialSpec& trial);

 private:
  std::shared_ptr<const telemetry::Nvml> nvml_;
  std::vector<unsigned> gpus_;
  std::unique_ptr<telemetry::KnobControl> controller_;
};

struct ModelWorkload {
  std::string model;
  std::optional<Shape> input;
  std::optional<std::int64_t> classes;
  std::int64_t default_batch = 64;
  // The trials' run settings where their knobs say nothing: the product's defaults with the sweep's
  // device and algorithm cache (trial_run_config lays each trial's knobs over them).
  RunConfig run;
  // Accuracy per trial (optional): train this many epochs on this data set and store top-1.
  std::string accuracy_data;
  std::int64_t accuracy_epochs = 0;
  std::int64_t accuracy_max_iterations = 0;
};

// A trial's run settings: its precision, layout and conv_algo knobs over `sweep`'s; a bad value
// throws InvalidArgument naming the knob.
RunConfig trial_run_config(const TrialSpec& trial, const RunConfig& sweep);
// A knob's text in the trial, or `fallback` where the trial leaves it unset or at "default".
std::string knob_text(const TrialSpec& trial, Knob knob, const std::string& fallback);

// `sampler` may be null (no NVML: time only); `knobs` may be null (no hardware knobs swept).
TrialRunner make_model_runner(const ModelWorkload& workload, const MeasureSettings& settings, HardwareKnobs* knobs,
                              std::shared_ptr<telemetry::Sampler> sampler);

// Up-front validation of a model sweep (before the first trial runs): every trial the device cannot
// run — a precision, layout or convolution algorithm the backend refuses (each distinct combination is
// created once), CUDA graphs or several GPUs off CUDA, more GPUs than the machine has, a batch whose
// estimated training memory exceeds the device's — is listed with its reason.
struct InvalidTrial {
  TrialSpec trial;
  std::string reason;
};
struct PlanCheck {
  std::vector<TrialSpec> valid;
  std::vector<InvalidTrial> invalid;
};
PlanCheck check_model_plan(const ModelWorkload& workload, const std::vector<TrialSpec>& trials, const DeviceLimits& limits);
std::string describe_invalid(const PlanCheck& check);  // one indented line per invalid trial
// An estimate of one replica's training memory at `batch`: fp32 weights, gradients and momentum, the
// low-precision working copy, and the saved layer outputs (workspaces and gradients not counted).
double estimate_training_bytes(const Graph& graph, std::int64_t batch, DType dtype);

// Logs a warning when a trial's windows (ms and, where metered, mJ per iteration) ended with a CV above
// the policy's threshold: its interval is wide, whatever --reps allowed.
void warn_if_noisy(const TrialSpec& trial, std::span<const double> ms, std::span<const double> mj,
                   const RepetitionPolicy& policy);

// How a trial's command runs are bounded: the whole trial (warm-up and windows) gets `timeout_s` (0: no
// limit); a run still going then, or when `stop` says so (Ctrl-C), has its process group ended (SIGTERM,
// SIGKILL after `kill_grace_s`) and the trial fails as "timed out" / "interrupted".
struct CommandLimits {
  double timeout_s = 0;
  double kill_grace_s = 10;
  std::function<bool()> stop;
};

// Reruns `command` once per iteration; a window is `min_iterations` runs or `window_seconds`, whichever
// is longer. A run that exits non-zero fails the trial (recorded, the sweep goes on).
TrialRunner make_command_runner(std::vector<std::string> command, const MeasureSettings& settings,
                                HardwareKnobs* knobs, std::shared_ptr<telemetry::Sampler> sampler,
                                CommandLimits limits = {});

}  // namespace tune
}  // namespace cnnergy
