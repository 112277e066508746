// `cnnergy sweep`: the tuner's main command — a product of knobs (or an adaptive 1-D search) over a
// built-in model or any external command, every trial stored in SQLite, optimum per metric printed,
// HTML report on request.
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_sweep(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
