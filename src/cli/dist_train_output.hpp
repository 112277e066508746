// What `cnnergy dist-train` and `cnnergy concurrent` print and write: the per-rank / per-node /
// total tables and epoch lines on the terminal, the JSON of a data-parallel report, the scaling
// comparison against a one-GPU baseline, and reading a baseline back from an earlier JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/json.hpp"
#include "train/parallel/dp_trainer.hpp"
#include "train/parallel/scaling.hpp"

namespace cnnergy::cli::dist_output {

Json opt(const std::optional<double>& v);  // the number, or null
Json report_json(const dist::DataParallelReport& r);
// The figures of an earlier run's --json, as the baseline of a scaling comparison (DataError).
dist::BaselineFigures baseline_from_json(const std::string& path);
double per_it(double total_ms, std::int64_t iterations);   // ms per iteration, 0 without any
void print_report(const dist::DataParallelReport& r);
void print_scaling(const dist::ScalingComparison& c, bool gpu);
Json scaling_json(const dist::ScalingComparison& c);

}  // namespace cnnergy::cli::dist_output
