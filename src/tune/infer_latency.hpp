// Inference latency of a sweep trial (`sweep --mode infer`), kept in the trial's telemetry JSON under
// "inference", and the latency-bounded choice (`--max-p99-ms`): the cheapest setting in an objective
// whose p99 meets the bound. Bookkeeping only (the runner is tune/run/infer_trial.hpp), for the CLI and reports.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tune/metrics.hpp"

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
