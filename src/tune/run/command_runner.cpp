// The trial runner for external commands: the command is rerun per iteration with CNNERGY_* knob
// variables in its environment; each window covers whole runs, metered over the sampled GPUs.
#include <algorithm>
#include <chrono>
#include <span>

#include "core/errors.hpp"
#include "core/subprocess.hpp"
#include "measure/nvml_probe.hpp"
#include "measure/window.hpp"
#include "telemetry/sampler.hpp"
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

std::vector<Repetition> to_repetitions(const WindowResult& r, const std::string& source);
void add_trial_telemetry(TrialMeasurement& m, const WindowResult& r, std::optional<double> idle_power_w);

TrialMeasurement run_command_trial(const std::vector<std::string>& command, const MeasureSettings& settings,
                                   const TrialSpec& trial, const std::shared_ptr<telemetry::Sampler>& sampler) {
  const auto env = trial_environment(trial);
  auto run_once = [&] {
    const ChildStatus st = run_command(command, env);
    if (!st.ok())
      throw Error(ExitCode::kChildFailed, "'" + command.front() + "' exited with status " + std::to_string(st.exit_code) +
                                              " in trial " + trial.key);
  };
  auto probe = make_energy_probe(sampler, {});
  const auto idle_w = probe ? probe->measure_idle_power_w() : std::nullopt;  // before the command's first run
  for (int i = 0; i < settings.warmup_iterations; ++i) run_once();
  TrialMeasurement m;
  WindowResult all;  // every window, for the trial's telemetry statistics
  const RepetitionPolicy policy{settings.repetitions, std::max(settings.repetitions, settings.max_repetitions),
                                settings.cv_threshold};
  std::vector<double> ms_per_run, mj_per_run;
  while (wants_another_window(ms_per_run, policy) ||
         (mj_per_run.size() == ms_per_run.size() && wants_another_window(mj_per_run, policy))) {
    WindowSample w;
    if (probe) probe->begin();
    const auto t0 = std::chrono::steady_clock::now();
    do {
      run_once();
      ++w.iterations;
    } while (w.iterations < settings.min_iterations ||
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < settings.window_seconds);
    w.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (probe) {
      w.energy = probe->end();
      w.telemetry_json = probe->window_telemetry_json();
    }
    all.windows.push_back(w);
    WindowResult one;
    one.windows.push_back(w);
    for (auto& r : to_repetitions(one, probe ? probe->source() : std::string())) m.repetitions.push_back(std::move(r));
    ms_per_run.push_back(w.elapsed_ms / static_cast<double>(w.iterations));
    if (w.energy) mj_per_run.push_back(w.energy->joules * 1e3 / static_cast<double>(w.iterations));
  }
  warn_if_noisy(trial, ms_per_run, mj_per_run, policy);
  add_trial_telemetry(m, all, idle_w);
  return m;
}

TrialRunner make_command_runner(std::vector<std::string> command, const MeasureSettings& settings, HardwareKnobs* knobs,
                                std::shared_ptr<telemetry::Sampler> sampler) {
  if (command.empty()) throw InvalidArgument("sweep: no command after '--'");
  return [command, settings, knobs, sampler](const TrialSpec& trial) {
    if (knobs) knobs->apply(trial);
    return run_command_trial(command, settings, trial, sampler);
  };
}

}  // namespace cnnergy::tune
