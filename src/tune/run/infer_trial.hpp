// `sweep --mode infer`: the trial runner for inference (an InferenceSession per trial: latency
// percentiles of device-resident requests, then throughput and energy per image from windows; the
// latency is stored through tune/infer_latency.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tune/infer_latency.hpp"
#include "tune/metrics.hpp"
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

struct InferSettings {
  std::int64_t requests = 200;  // timed requests per trial for the percentiles
  bool cuda_graph_default = true;  // when --cuda-graph is not swept (ignored where unsupported)
};

// Knobs as for training (batch, precision, layout, conv algorithm, CUDA graph, power/clocks); one GPU.
// A batch that does not fit throws OutOfMemory (does_not_fit, with the memory it needed).
TrialRunner make_infer_runner(const ModelWorkload& workload, const MeasureSettings& settings, const InferSettings& infer,
                              HardwareKnobs* knobs, std::shared_ptr<telemetry::Sampler> sampler);

}  // namespace cnnergy::tune
