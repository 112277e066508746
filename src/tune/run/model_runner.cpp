// The trial runner for built-in models: a backend configured by the trial's knobs, the model on
// synthetic data already on the device (the workload, not the loader, is what a sweep compares),
// repeated measurement windows, and optionally a short training for accuracy.
#include <chrono>
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
#include "telemetry/sampler.hpp"
#include "train/fixed_batch.hpp"
#include "train/precision.hpp"
#include "train/trainer.hpp"
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

namespace {

std::string text_knob(const TrialSpec& t, Knob k, const std::string& fallback) {
  const KnobValue* v = t.find(k);
  return v && !v->is_default() ? v->text : fallback;
}

void cool_down(const MeasureSettings& s, const std::shared_ptr<telemetry::Sampler>& sampler) {
  if (s.cooldown_max_c <= 0 || !sampler) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s.cooldown_timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto latest = sampler->latest();
    bool cool = true;
    if (latest)
      for (const auto& g : latest->gpus) cool = cool && (!g.temperature_c || *g.temperature_c <= s.cooldown_max_c);
    if (cool) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  log_warn("cool-down: the GPU did not reach " + std::to_string(s.cooldown_max_c) + " C within the timeout");
}

}  // namespace

TrialMeasurement run_data_parallel_trial(const Graph& graph, const BackendOptions& backend_options, std::int64_t gpus,
                                         std::int64_t global_batch, bool cuda_graph, const MeasureSettings& settings);

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

TrialRunner make_model_runner(const ModelWorkload& workload, const MeasureSettings& settings, HardwareKnobs* knobs,
                              std::shared_ptr<telemetry::Sampler> sampler) {
  return [workload, settings, knobs, sampler](const TrialSpec& trial) -> TrialMeasurement {
    const KnobValue* g = trial.find(Knob::kGpus);
    const std::int64_t gpus = g && g->number ? *g->number : 1;
    if (knobs) knobs->apply(trial);
    cool_down(settings, sampler);
    const KnobValue* b = trial.find(Knob::kBatch);
    const std::int64_t batch = b && b->number ? *b->number : workload.default_batch;
    BackendOptions bo;
    bo.device = workload.device;
    apply_precision(parse_precision(text_knob(trial, Knob::kPrecision, workload.default_precision)), bo);
    bo.layout = parse_layout(text_knob(trial, Knob::kLayout, workload.default_layout));
    bo.conv_algo_policy = text_knob(trial, Knob::kConvAlgo, workload.default_conv_algo);
    bo.algo_cache_dir = workload.algo_cache_dir;
    const bool cuda_graph = text_knob(trial, Knob::kCudaGraph, "off") == "on";
    auto graph = build_model(workload.model, workload.input, workload.classes);
    if (gpus > 1) {
      if (workload.accuracy_epochs > 0)
        throw NotSupported("accuracy per trial is measured on one GPU; drop --accuracy-data for --gpus > 1");
      // --cuda-graph on: every replica replays its step (all-reduces included) as one CUDA graph.
      return run_data_parallel_trial(*graph, bo, gpus, batch, cuda_graph, settings);
    }
    auto backend = create_backend(bo);

    TrialMeasurement m;
    {
      // OutOfMemory here: the batch does not fit; NotSupported: no graph for this backend or model.
      FixedBatchWorkload work(*graph, *backend, batch, 1, cuda_graph);
      m.algo_search_ms = backend->algo_search_stats().search_ms;  // binding searched; windows follow
      Backend* be = backend.get();
      auto probe = make_energy_probe(sampler, [be] { be->synchronize(); });
      WindowSpec ws{settings.window_seconds, settings.min_iterations, settings.repetitions, settings.warmup_iterations};
      const WindowResult r = measure_windows(*backend, probe.get(), [&] { work.step(); }, ws);
      m.repetitions = to_repetitions(r, probe ? probe->source() : std::string());
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
