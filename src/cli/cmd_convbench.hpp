// `cnnergy convbench`: the convolution study of Li et al. 2016 on today's GPU — every
// implementation x direction x precision x layout of each problem (--problem, --preset li2016,
// --model), with time, TFLOP/s, % of peak, extra memory, energy per call, status and transfers.
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_convbench(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
