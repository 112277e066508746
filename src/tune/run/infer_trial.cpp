// The trial runner of `sweep --mode infer` (infer_trial.hpp):
// per trial an InferenceSession (batch norm folded, ReLU fused, the request replayed as a CUDA graph
// where the backend records graphs) on random images, latency percentiles, then measured windows.
#include "tune/run/infer_trial.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "core/rng.hpp"
#include "infer/drivers.hpp"
#include "infer/session.hpp"
#include "measure/nvml_probe.hpp"
#include "measure/window.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"
#include "telemetry/rapl.hpp"
#include "telemetry/sampler.hpp"

namespace cnnergy::tune {

// From model_runner.cpp: windows into the store's repetitions, and their telemetry statistics.
std::vector<Repetition> to_repetitions(const WindowResult& r, const std::string& source);
void add_trial_telemetry(TrialMeasurement& m, const WindowResult& r, std::optional<double> idle_power_w);

TrialRunner make_infer_runner(const ModelWorkload& workload, const MeasureSettings& settings, const InferSettings& infer,
                              HardwareKnobs* knobs, std::shared_ptr<telemetry::Sampler> sampler) {
  if (infer.requests < 1) throw InvalidArgument("--requests must be at least 1");
  auto rapl = std::make_shared<telemetry::RaplMeter>();
  return [workload, settings, infer, knobs, sampler, rapl](const TrialSpec& trial) -> TrialMeasurement {
    const KnobValue* g = trial.find(Knob::kGpus);
    if (g && g->number && *g->number > 1)
      throw NotSupported("sweep --mode infer runs on one device (--gpus " + g->text + ")");
    if (knobs) knobs->apply(trial);
    const double cooled_s = telemetry::cool_down(sampler, settings.cooldown_max_c, settings.cooldown_timeout_s);
    const KnobValue* b = trial.find(Knob::kBatch);
    InferenceOptions io;
    io.batch = b && b->number ? *b->number : 1;  // inference sweeps default to batch 1, not training's 64
    io.cuda_graph = knob_text(trial, Knob::kCudaGraph, infer.cuda_graph_default ? "on" : "off") == "on";
    const BackendOptions bo = trial_run_config(trial, workload.run).backend_options();  // as `infer` runs
    const auto graph = build_model(workload.model, workload.input, workload.classes);
    auto backend = create_backend(bo);
    TrialMeasurement m;
    // OutOfMemory here: the batch does not fit (its message says how much it needed).
    InferenceSession session(*graph, *backend, io);
    {  // the request payload: fp32 NCHW images from N(0, 1), copied to the device once
      Tensor host = Tensor::host(graph->tensor(graph->input_tensor()).shape.with_batch(io.batch));
      Rng rng(1);
      rng.fill_normal(host.f32(), 0.0f, 1.0f);
      session.upload_images(host);
    }
    for (int i = 0; i < std::max(2, settings.warmup_iterations); ++i) session.run();  // + recording the graph
    backend->synchronize();
    m.algo_search_ms = backend->algo_search_stats().search_ms;
    std::vector<double> ms;
    ms.reserve(static_cast<std::size_t>(infer.requests));
    for (std::int64_t i = 0; i < infer.requests; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      session.run();
      backend->synchronize();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const LatencySummary s = summarize_latencies(std::move(ms));
    Backend* be = backend.get();
    auto probe = workload.run.device.is_cuda() ? make_energy_probe(sampler, [be] { be->synchronize(); }, rapl)
                                           : make_cpu_energy_probe(rapl);
    const auto idle_w = probe ? probe->measure_idle_power_w() : std::nullopt;
    // Steady before the windows (the idle-power wait above cooled it a little): requests until settled.
    settle_before_windows(settings, sampler, telemetry::steady_now_ns(), cooled_s, [&] {
      session.run();
      be->synchronize();
    }, m);
    const WindowSpec ws{settings.window_seconds, settings.min_iterations, settings.repetitions, 0,
                        settings.max_repetitions, settings.cv_threshold};
    const WindowResult r = measure_windows(*backend, probe.get(), [&] { session.run(); }, ws);
    m.repetitions = to_repetitions(r, probe ? probe->source() : std::string());
    mark_settle(m);
    add_trial_telemetry(m, r, idle_w);
    m.telemetry_json = with_infer_latency(
        m.telemetry_json, InferLatency{io.batch, s.count, s.mean_ms, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms});
    m.samples_per_iteration = static_cast<double>(io.batch);
    m.flops_per_iteration = static_cast<double>(graph->total_workload().flops_forward) * static_cast<double>(io.batch);
    return m;
  };
}

}  // namespace cnnergy::tune
