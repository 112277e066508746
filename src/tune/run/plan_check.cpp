// Up-front validation of a model sweep's plan against the device, before the first trial runs: each
// distinct backend configuration is created once (the backend refuses precisions, layouts and
// algorithm names it cannot run), CUDA graphs and GPU counts are checked against the device, and
// each batch size's training memory is estimated against the device's capacity.
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "core/errors.hpp"
#include "net/graph.hpp"
#include "net/model_info.hpp"
#include "net/zoo/zoo.hpp"
#include "train/precision.hpp"
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

namespace {

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1ull << 30));
  return buf;
}

}  // namespace

double estimate_training_bytes(const Graph& graph, std::int64_t batch, DType dtype) {
  const ModelInfo info = model_info(graph, 1, dtype);
  // Kept across a step: fp32 master weights, their gradients and momentum (12 bytes a parameter), a
  // low-precision working copy, and the layer outputs backward reads (the executor shares in-place
  // ReLU and flatten outputs with their input, so those are not counted). Convolution workspaces and
  // activation gradients are not counted; the liveness plan shares buffers this count does not.
  double bytes = static_cast<double>(info.parameters) * (12.0 + (dtype == DType::kF32 ? 0.0 : double(dtype_size_bytes(dtype))));
  for (const LayerInfo& l : info.layers) {
    if (l.type == "relu" || l.type == "flatten" || l.type == "dropout") continue;
    bytes += static_cast<double>(l.output_shape.numel()) * static_cast<double>(batch) * double(dtype_size_bytes(dtype));
  }
  return bytes;
}

PlanCheck check_model_plan(const ModelWorkload& w, const std::vector<TrialSpec>& trials, const DeviceLimits& limits) {
  PlanCheck out;
  const auto graph = build_model(w.model, w.input, w.classes);
  std::map<std::string, std::string> backend_error;  // by configuration: empty when it works
  std::map<std::string, double> capacity;            // device bytes by configuration (0 unknown)
  for (const TrialSpec& t : trials) {
    std::string reason;
    std::optional<RunConfig> run;
    std::string config;  // the knobs' own words where they do not parse
    try {
      run = trial_run_config(t, w.run);
      config = run->describe();
    } catch (const InvalidArgument& e) {
      config = t.key;
      backend_error[config] = e.what();
    }
    if (!backend_error.count(config)) {
      try {
        const auto backend = create_backend(run->backend_options());
        backend_error[config] = "";
        capacity[config] = static_cast<double>(backend->memory_stats().total_bytes);
      } catch (const Error& e) {
        backend_error[config] = e.what();
      }
    }
    reason = backend_error[config];
    const KnobValue* g = t.find(Knob::kGpus);
    // (--gpus N on the CPU trains N CPU replicas: only a CUDA device has a GPU count to respect.)
    if (reason.empty() && w.run.device.is_cuda() && g && g->number && limits.gpu_count && *g->number > *limits.gpu_count)
      reason = "--gpus " + g->text + " but the machine has " + std::to_string(*limits.gpu_count) + " GPU(s)";
    if (reason.empty() && g && g->number && *g->number > 1 && w.accuracy_epochs > 0)
      reason = "accuracy per trial is measured on one GPU; drop --accuracy-data for --gpus > 1";
    if (reason.empty() && knob_text(t, Knob::kCudaGraph, "off") == "on" && !w.run.device.is_cuda())
      reason = "--cuda-graph on needs --device cuda (this sweep runs on " + w.run.device.str() + ")";
    if (reason.empty()) {
      const KnobValue* b = t.find(Knob::kBatch);
      const std::int64_t batch = b && b->number ? *b->number : w.default_batch;
      const std::int64_t replicas = g && g->number ? std::max<std::int64_t>(*g->number, 1) : 1;
      const double need = estimate_training_bytes(*graph, (batch + replicas - 1) / replicas,
                                                  run->precision == Precision::kFp16   ? DType::kF16
                                                  : run->precision == Precision::kBf16 ? DType::kBF16
                                                                                       : DType::kF32);
      // The estimate is within a factor of two of what the executor allocates (a test checks it on
      // the CPU), so only a batch estimated above twice the capacity is refused as surely too big;
      // one closer to the edge runs, and a real out-of-memory is recorded as does_not_fit.
      if (capacity[config] > 0 && need > 2 * capacity[config])
        reason = "batch " + std::to_string(batch) + " needs about " + gib(need) + " by estimate (weights, gradients, "
                 "momentum and saved activations), more than twice the device's " + gib(capacity[config]);
    }
    if (reason.empty()) out.valid.push_back(t);
    else out.invalid.push_back({t, reason});
  }
  return out;
}

std::string describe_invalid(const PlanCheck& check) {
  std::string out;
  for (const auto& c : check.invalid) out += "  " + c.trial.key + ": " + c.reason + "\n";
  return out;
}

}  // namespace cnnergy::tune
