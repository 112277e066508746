// `cnnergy sweep`: the tuner's main command — a product of knobs (or an adaptive 1-D search) over a
// built-in model or any external command, every trial stored in SQLite, optimum per metric printed,
// HTML report on request.
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_sweep(const std::vector<std::string>& args);

// Presets (sweep_preset.cpp): `--preset NAME` expands into one sweep per network of a paper's
// experiment; the argument lists it would run, and running them.
std::vector<std::vector<std::string>> preset_sweeps(const std::string& name, const std::vector<std::string>& args);
int run_sweep_preset(const std::string& name, const std::vector<std::string>& args);

}  // namespace cnnergy::cli
