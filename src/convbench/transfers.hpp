// CPU-GPU transfer cost of a convolution problem (Li et al. 2016, Section 5.D): pageable and pinned
// host memory, host-to-device and device-to-host, for a batch of input and for all the layer's tensors.
#pragma once

#include <vector>

#include "backend/ops.hpp"
#include "convbench/study.hpp"

namespace cnnergy::convbench {

// Times each transfer `repetitions` times (one untimed first), host wall clock around the
// synchronous copy (upload, then synchronize; download waits). Rows for problem `index` at the
// backend's dtype; conv_forward_ms and share_of_total are left for the caller.
std::vector<TransferRow> measure_transfers(Backend& backend, const ConvProblem& problem, std::size_t index,
                                           const std::string& precision, int repetitions);

}  // namespace cnnergy::convbench
