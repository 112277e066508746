// `cnnergy model-info`: per-layer and total operations, FLOPs, data volumes and CTC ratio of a zoo
// model (Castro et al. 2019, Section 4), or `--list` of every built-in model with its parameter count.
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_model_info(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
