// The trial runner for built-in models: a backend configured by the trial's knobs, the model on
// synthetic data already on the device (the workload, not the loader, is what a sweep compares),
// repeated measurement windows, and optionally a short training for accuracy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <thread>

#include "core/errors.hpp"
#include "core/log.hpp"
#include "data/dataset.hpp"
#include "measure/nvml_probe.hpp"
#include "measure/window.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "telemetry/rapl.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/trial_stats.hpp"
#include "train/fixed_batch.hpp"
#include "train/trainer.hpp"
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

namespace {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g %%", fraction * 100);
  return buf;
}

}  // namespace

TrialMeasurement run_data_parallel_trial(const Graph& graph, const BackendOptions& backend_options, std::int64_t gpus,
                                         std::int64_t global_batch, bool cuda_graph, const MeasureSettings& settings);

void settle_before_windows(const MeasureSettings& settings, const std::shared_ptr<telemetry::Sampler>& sampler,
                           std::int64_t since_ns, double cooled_s, const std::function<void()>& keep_busy,
                           TrialMeasurement& m, const std::function<bool()>& stop) {
  if (!sampler) return;  // nothing to watch (a CPU trial, no NVML): no wait, and none recorded
  const telemetry::SettleResult r = telemetry::wait_until_settled(sampler, since_ns, settings.settle, keep_busy, stop);
  if (settings.settle.max_wait_s > 0 || settings.cooldown_max_c > 0) m.settle_s = cooled_s + r.waited_s;
  if (settings.settle.max_wait_s > 0) m.settle_text = r.describe();
  if (cooled_s > 0) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "cooled %.1f s, ", cooled_s);
    m.settle_text = buf + m.settle_text;
  }
}

void mark_settle(TrialMeasurement& m) {
  if (m.settle_s && !m.repetitions.empty()) m.repetitions.front().settle_s = m.settle_s;
}

void warn_if_noisy(const TrialSpec& trial, std::span<const double> ms, std::span<const double> mj,
                   const RepetitionPolicy& policy) {
  const bool time_noisy = still_noisy(ms, policy), energy_noisy = mj.size() == ms.size() && still_noisy(mj, policy);
  if (!time_noisy && !energy_noisy) return;
  log_warn("trial " + trial.key + " stayed noisy after " + std::to_string(ms.size()) + " windows (CV of time " +
           percent(summarize(ms).cv()) + (mj.empty() ? std::string() : ", of energy " + percent(summarize(mj).cv())) +
           " > " + percent(policy.cv_threshold) + "): its interval is wide");
}

// Turns measured windows into the store's repetitions.
std::vector<Repetition> to_repetitions(const WindowResult& r, const std::string& source) {
  std::vector<Repetition> reps;
  for (const auto& w : r.windows) {
    Repetition rep;
    rep.elapsed_ms = w.elapsed_ms;
    rep.iterations = w.iterations;
    if (w.energy) {
      for (double j : w.energy->per_device_joules) rep.energy_mj.push_back(j * 1e3);
      if (rep.energy_mj.empty()) rep.energy_mj.push_back(w.energy->joules * 1e3);
      rep.peak_power_w = w.energy->peak_watts;
      rep.max_temperature_c = w.energy->max_temperature_c;
      rep.energy_source = source;
    }
    reps.push_back(std::move(rep));
  }
  return reps;
}

// The windows' telemetry statistics into the measurement: per repetition and merged for the trial.
void add_trial_telemetry(TrialMeasurement& m, const WindowResult& r, std::optional<double> idle_power_w) {
  for (const auto& w : r.windows) m.repetition_telemetry_json.push_back(w.telemetry_json);
  m.telemetry_json = telemetry::merge_window_telemetry(m.repetition_telemetry_json, idle_power_w);
}

TrialRunner make_model_runner(const ModelWorkload& workload, const MeasureSettings& settings, HardwareKnobs* knobs,
                              std::shared_ptr<telemetry::Sampler> sampler) {
  // The CPU as the device: metered by RAPL where readable (one meter for the whole sweep).
  std::shared_ptr<telemetry::RaplMeter> rapl = std::make_shared<telemetry::RaplMeter>();
  return [workload, settings, knobs, sampler, rapl](const TrialSpec& trial) -> TrialMeasurement {
    const KnobValue* g = trial.find(Knob::kGpus);
    const std::int64_t gpus = g && g->number ? *g->number : 1;
    if (knobs) knobs->apply(trial);
    const double cooled_s = telemetry::cool_down(sampler, settings.cooldown_max_c, settings.cooldown_timeout_s);
    const KnobValue* b = trial.find(Knob::kBatch);
    const std::int64_t batch = b && b->number ? *b->number : workload.default_batch;
    // As `train` runs by default, so a trial measures what `train` would run.
    const BackendOptions bo = trial_run_config(trial, workload.run).backend_options();
    const bool cuda_graph = knob_text(trial, Knob::kCudaGraph, "off") == "on";
    auto graph = build_model(workload.model, workload.input, workload.classes);
    if (gpus > 1) {
      if (workload.accuracy_epochs > 0)
        throw NotSupported("accuracy per trial is measured on one GPU; drop --accuracy-data for --gpus > 1");
      // --cuda-graph on: every replica replays its step (all-reduces included) as one CUDA graph.
      TrialMeasurement dp = run_data_parallel_trial(*graph, bo, gpus, batch, cuda_graph, settings);
      std::vector<double> ms;
      for (const auto& r : dp.repetitions) ms.push_back(r.elapsed_ms / static_cast<double>(std::max<std::int64_t>(1, r.iterations)));
      warn_if_noisy(trial, ms, {}, {settings.repetitions, std::max(settings.repetitions, settings.max_repetitions),
                                    settings.cv_threshold});
      return dp;
    }
    auto backend = create_backend(bo);

    TrialMeasurement m;
    {
      // OutOfMemory here: the batch does not fit; NotSupported: no graph for this backend or model.
      FixedBatchWorkload work(*graph, *backend, batch, 1, cuda_graph);
      m.algo_search_ms = backend->algo_search_stats().search_ms;  // binding searched; windows follow
      Backend* be = backend.get();
      auto probe = workload.run.device.is_cuda() ? make_energy_probe(sampler, [be] { be->synchronize(); }, rapl)
                                             : make_cpu_energy_probe(rapl);
      const auto idle_w = probe ? probe->measure_idle_power_w() : std::nullopt;
      // Warm-up, then steady: the warm-up's samples count towards the settling rule's window.
      const std::int64_t since_ns = telemetry::steady_now_ns();
      for (int i = 0; i < settings.warmup_iterations; ++i) work.step();
      backend->synchronize();
      settle_before_windows(settings, sampler, since_ns, cooled_s, [&] {
        work.step();
        be->synchronize();
      }, m);
      WindowSpec ws{settings.window_seconds, settings.min_iterations, settings.repetitions, 0,
                    settings.max_repetitions, settings.cv_threshold};
      const WindowResult r = measure_windows(*backend, probe.get(), [&] { work.step(); }, ws);
      if (r.noisy) {
        std::vector<double> ms, mj;
        for (const auto& w : r.windows) {
          ms.push_back(w.elapsed_ms / static_cast<double>(w.iterations));
          if (w.energy) mj.push_back(w.energy->joules * 1e3 / static_cast<double>(w.iterations));
        }
        warn_if_noisy(trial, ms, mj, {ws.repetitions, std::max(ws.repetitions, ws.max_repetitions), ws.cv_threshold});
      }
      m.repetitions = to_repetitions(r, probe ? probe->source() : std::string());
      mark_settle(m);
      add_trial_telemetry(m, r, idle_w);
      const Workload w = graph->total_workload();
      m.samples_per_iteration = static_cast<double>(batch);
      m.flops_per_iteration = static_cast<double>(w.flops_forward + w.flops_backward) * static_cast<double>(batch);
    }
    if (workload.accuracy_epochs > 0) {
      TrainConfig tc;
      tc.batch_size = batch;
      tc.epochs = workload.accuracy_epochs;
      tc.max_iterations_per_epoch = workload.accuracy_max_iterations;
      tc.solver.loss_scale = SolverOptions::loss_scale_for(bo.dtype);
      tc.cuda_graph = cuda_graph;
      const auto rep = train(*graph, *backend, data::open_dataset(workload.accuracy_data), tc, nullptr, {});
      if (!rep.epochs.empty() && rep.epochs.back().top1) m.accuracy = *rep.epochs.back().top1;
    }
    return m;
  };
}

}  // namespace cnnergy::tune
