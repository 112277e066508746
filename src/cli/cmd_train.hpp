// `cnnergy train`: trains a zoo model on a data set and reports time, throughput, accuracy (and
// energy where the GPU can be metered) per epoch, plus per-phase times of Algorithm 1.
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_train(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
