// `sweep --mode infer` output: each finished trial's request latency beside its throughput and energy
// per image, and the choice under a latency bound (--max-p99-ms) with what to say when none meets it.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "tune/metrics.hpp"
#include "tune/store.hpp"

namespace cnnergy::cli {

struct InferSweepVerdict {
  bool bound_met = true;   // false: a bound was given and no finished trial met it
  std::string message;     // for a bound no setting meets: the best p99 seen and where the trials are
};

InferSweepVerdict report_infer_sweep(std::ostream& out, const tune::ResultStore& store, std::int64_t sweep_id,
                                     const tune::Objective& objective, std::optional<double> max_p99_ms);

}  // namespace cnnergy::cli
