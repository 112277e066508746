// `cnnergy profile`: per-layer forward/backward time (like `caffe time`), energy of the hottest
// layers by isolated repetition, a hotspot summary by layer category (Li et al. 2016, Fig. 2), per-phase
// time and energy by isolation with closure checks, and whole-training extrapolation (Castro et al. 2019).
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_profile(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
