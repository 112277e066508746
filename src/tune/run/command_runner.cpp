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
                                   const TrialSpec& trial, const std::shared_ptr<telemetry::Sampler>& sampler,
                                   const CommandLimits& limits) {
  const auto env = trial_environment(trial);
  const auto trial_start = std::chrono::steady_clock::now();
  auto run_once = [&] {
    ChildOptions o;
    o.kill_grace_s = limits.kill_grace_s;
    o.stop = limits.stop;
    if (limits.timeout_s > 0) {
      const double used_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - trial_start).count();
      o.timeout_s = std::max(1e-3, limits.timeout_s - used_s);
    }
    const ChildStatus st = run_command(command, env, o);
    if (st.timed_out)
      throw Error(ExitCode::kChildFailed, "timed out: trial " + trial.key + " ran longer than --timeout-s " +
                                              std::to_string(limits.timeout_s) + " s; '" + command.front() +
                                              "' and its process group were ended");
    if (st.stopped) throw Error(ExitCode::kChildFailed, "interrupted: '" + command.front() + "' was ended in trial " + trial.key);
    if (!st.ok())
      throw Error(ExitCode::kChildFailed, "'" + command.front() + "' " + st.describe() + " in trial " + trial.key);
  };
  const double cooled_s = telemetry::cool_down(sampler, settings.cooldown_max_c, settings.cooldown_timeout_s);
  auto probe = make_energy_probe(sampler, {});
  const auto idle_w = probe ? probe->measure_idle_power_w() : std::nullopt;  // before the command's first run
  TrialMeasurement m;
  const std::int64_t since_ns = telemetry::steady_now_ns();  // the warm-up's samples count towards settling
  for (int i = 0; i < settings.warmup_iterations; ++i) run_once();
  settle_before_windows(settings, sampler, since_ns, cooled_s, run_once, m, limits.stop);
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
  mark_settle(m);
  add_trial_telemetry(m, all, idle_w);
  return m;
}

TrialRunner make_command_runner(std::vector<std::string> command, const MeasureSettings& settings, HardwareKnobs* knobs,
                                std::shared_ptr<telemetry::Sampler> sampler, CommandLimits limits) {
  if (command.empty()) throw InvalidArgument("sweep: no command after '--'");
  return [command, settings, knobs, sampler, limits](const TrialSpec& trial) {
    if (knobs) knobs->apply(trial);
    return run_command_trial(command, settings, trial, sampler, limits);
  };
}

}  // namespace cnnergy::tune
