// Scaling figures of a data-parallel run against a one-GPU baseline (Castro et al. 2019, Tables 3-6;
// Gera et al. 2018's diminishing returns): speed-up and scaling efficiency from global throughput, and energy
// per sample of both. Strong scaling keeps the global batch (the baseline trains the same global
// batch on one GPU); weak scaling keeps the per-GPU batch (the baseline trains one per-GPU batch on
// one GPU).
#pragma once

#include <optional>
#include <string>

#include "train/parallel/dp_trainer.hpp"

namespace cnnergy::dist {

enum class ScalingMode { kStrong, kWeak };
std::string scaling_mode_name(ScalingMode m);  // "strong", "weak"

// The numbers of a baseline (from a run in this process or a saved JSON result).
struct BaselineFigures {
  int world_size = 1;
  std::int64_t global_batch = 0;
  double samples_per_s = 0;
  std::optional<double> joules_per_sample;
  std::string model;
};
BaselineFigures baseline_of(const DataParallelReport& report);
// The figures of an earlier run's `dist-train --json` text (`origin` names it in errors): every
// number range-checked before it is cast; DataError for anything malformed or impossible.
BaselineFigures baseline_from_text(const std::string& text, const std::string& origin);

struct ScalingComparison {
  ScalingMode mode = ScalingMode::kStrong;
  int gpus = 1;
  double baseline_samples_per_s = 0, samples_per_s = 0;
  double speedup = 0;     // samples_per_s / baseline_samples_per_s
  double efficiency = 0;  // speedup / gpus
  std::optional<double> baseline_joules_per_sample, joules_per_sample;
  std::optional<double> energy_ratio;  // joules_per_sample / baseline_joules_per_sample
};

// Throws InvalidArgument when the baseline does not fit the mode: more than one GPU, another model,
// or a batch that is not the run's global batch (strong) or per-GPU batch (weak).
ScalingComparison compare_scaling(const DataParallelReport& run, const BaselineFigures& baseline,
                                  ScalingMode mode);

}  // namespace cnnergy::dist
