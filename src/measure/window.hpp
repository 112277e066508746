// Repeated measurement windows: a piece of device work (one "iteration" of it) is run back to back
// for long enough that the energy sensor (updating every ~100 ms) sees it many times, and the window
// is repeated so every figure comes with its spread. This is how energy per phase and per layer
// stays honest when the work itself lasts milliseconds (docs/architecture.md, "Measuring energy honestly").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "measure/energy_probe.hpp"
#include "measure/statistics.hpp"

namespace cnnergy {

struct WindowSpec {
  double min_seconds = 1.0;         // each window lasts at least this long ...
  std::int64_t min_iterations = 3;  // ... and runs at least this many iterations
  int repetitions = 3;              // windows per measurement (median and spread)
  int warmup_iterations = 2;        // run before the first window
  int max_repetitions = 0;          // > repetitions: more windows while the CV exceeds cv_threshold
  double cv_threshold = 0.05;       // of time (and energy) per iteration, as a fraction
};

// One window as measured (the raw data behind the summaries; the results store keeps these).
struct WindowSample {
  double elapsed_ms = 0;
  std::int64_t iterations = 0;
  std::optional<ProbeReading> energy;
  std::string telemetry_json;  // the probe's window statistics ("" when it keeps none)
};

struct WindowResult {
  std::vector<WindowSample> windows;
  std::int64_t iterations_per_window = 0;
  Summary ms_per_iteration;                 // over the repetitions
  std::optional<Summary> joules_per_iteration;
  std::optional<Summary> watts;
  double uncertainty_joules_per_iteration = 0;  // sensor granularity of the median window
  bool any_short_window = false;
  bool noisy = false;  // time or energy per iteration ended with a CV above spec.cv_threshold
};

// Runs `iteration` (which enqueues device work) warm-up times, calibrates how many iterations fill
// spec.min_seconds, then measures spec.repetitions windows (more, up to spec.max_repetitions, while
// time or energy per iteration varies by more than spec.cv_threshold). The device is synchronised at window
// boundaries only. `probe` may be null (time only). Throws InvalidArgument for a bad spec.
WindowResult measure_windows(Backend& backend, EnergyProbe* probe, const std::function<void()>& iteration,
                             const WindowSpec& spec);

}  // namespace cnnergy
