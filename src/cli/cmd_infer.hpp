// `cnnergy infer`: inference of a model from batch 1 to large batches — latency percentiles end to
// end and on the device, throughput, energy per image from >= 1 s windows with idle power beside it
// (closed loop), or a Poisson arrival rate with a batching window (open loop, MLPerf's server
// scenario); runs the model on a NumPy array of the user's inputs and writes its logits.
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_infer(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
