// `sweep --mode infer`: the trial runner for inference (an InferenceSession per trial: latency
// percentiles of device-resident requests, then throughput and energy per image from windows) and the
// latency-bounded choice (`--max-p99-ms`: the cheapest setting in the objective whose p99 meets the bound).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tune/metrics.hpp"
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

// A trial's request latency (ms; nearest-rank percentiles of run + synchronize on device-resident
// images). Stored in the trial's telemetry JSON under the key "inference" (no schema change).
struct InferLatency {
  std::int64_t batch = 0;
  std::size_t count = 0;
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
};
std::string with_infer_latency(const std::string& telemetry_json, const InferLatency& latency);
std::optional<InferLatency> infer_latency_of(const std::string& telemetry_json);  // empty when absent

struct InferSettings {
  std::int64_t requests = 200;  // timed requests per trial for the percentiles
  bool cuda_graph_default = true;  // when --cuda-graph is not swept (ignored where unsupported)
};

// Knobs as for training (batch, precision, layout, conv algorithm, CUDA graph, power/clocks); one GPU.
// A batch that does not fit throws OutOfMemory (does_not_fit, with the memory it needed).
TrialRunner make_infer_runner(const ModelWorkload& workload, const MeasureSettings& settings, const InferSettings& infer,
                              HardwareKnobs* knobs, std::shared_ptr<telemetry::Sampler> sampler);

// The choice under a latency bound among finished trials (index into `trials`): the lowest objective
// value among those whose p99 <= max_p99_ms. `latency_of(i)` gives trial i's latency (empty: not
// measured, never chosen). With no trial meeting the bound, `chosen` is empty and best_p99_* name the
// lowest p99 seen.
struct LatencyBoundChoice {
  std::optional<std::size_t> chosen;
  std::optional<double> chosen_value;
  std::optional<std::size_t> best_p99_index;
  double best_p99_ms = 0;
  std::size_t measured = 0, meeting = 0;
};
LatencyBoundChoice choose_under_latency_bound(const std::vector<TrialSummary>& trials,
                                              const std::function<std::optional<InferLatency>(std::size_t)>& latency_of,
                                              const Objective& objective, double max_p99_ms);

}  // namespace cnnergy::tune
