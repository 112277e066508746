// measure_windows(): calibration by a short timed run, then repeated probe windows.
#include "measure/window.hpp"

#include <chrono>
#include <cmath>
#include <vector>

#include "core/errors.hpp"

namespace cnnergy {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
}  // namespace

WindowResult measure_windows(Backend& backend, EnergyProbe* probe, const std::function<void()>& iteration,
                             const WindowSpec& spec) {
  if (!(spec.min_seconds >= 0) || spec.min_iterations < 1 || spec.repetitions < 1 || spec.warmup_iterations < 0)
    throw InvalidArgument("measurement window needs min_seconds >= 0, min_iterations >= 1, repetitions >= 1");
  for (int i = 0; i < spec.warmup_iterations; ++i) iteration();
  backend.synchronize();

  // Calibrate: time a doubling number of iterations until the run lasts >= 50 ms (or 64 iterations).
  std::int64_t n = 1;
  double per_iter_ms = 0;
  for (;;) {
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < n; ++i) iteration();
    backend.synchronize();
    const double ms = ms_since(t0);
    per_iter_ms = ms / static_cast<double>(n);
    if (ms >= 50.0 || n >= 64) break;
    n *= 2;
  }
  WindowResult r;
  r.iterations_per_window = std::max<std::int64_t>(
      spec.min_iterations,
      static_cast<std::int64_t>(std::ceil(spec.min_seconds * 1e3 / std::max(per_iter_ms, 1e-6))));

  const RepetitionPolicy policy{spec.repetitions, std::max(spec.repetitions, spec.max_repetitions), spec.cv_threshold};
  std::vector<double> ms, joules, watts, uncertainty;
  while (wants_another_window(ms, policy) || (joules.size() == ms.size() && wants_another_window(joules, policy))) {
    backend.synchronize();
    if (probe) probe->begin();
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < r.iterations_per_window; ++i) iteration();
    backend.synchronize();
    const double window_ms = ms_since(t0);
    ms.push_back(window_ms / static_cast<double>(r.iterations_per_window));
    WindowSample sample{window_ms, r.iterations_per_window, std::nullopt, {}};
    if (probe) {
      if (auto reading = probe->end()) {
        sample.energy = reading;
        joules.push_back(reading->joules / static_cast<double>(r.iterations_per_window));
        watts.push_back(reading->average_watts);
        uncertainty.push_back(reading->uncertainty_joules / static_cast<double>(r.iterations_per_window));
        r.any_short_window = r.any_short_window || reading->short_window;
      }
      sample.telemetry_json = probe->window_telemetry_json();
    }
    r.windows.push_back(std::move(sample));
  }
  r.noisy = still_noisy(ms, policy) || still_noisy(joules, policy);
  r.ms_per_iteration = summarize(ms);
  if (joules.size() == ms.size() && !joules.empty()) {
    r.joules_per_iteration = summarize(joules);
    r.watts = summarize(watts);
    r.uncertainty_joules_per_iteration = summarize(uncertainty).median;
  }
  return r;
}

}  // namespace cnnergy
