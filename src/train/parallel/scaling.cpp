// compare_scaling(): checks that the baseline is the right one for the mode, then the ratios.
#include "train/parallel/scaling.hpp"

#include "core/errors.hpp"
#include "core/json.hpp"

namespace cnnergy::dist {

std::string scaling_mode_name(ScalingMode m) {
  return m == ScalingMode::kStrong ? "strong" : "weak";
}

BaselineFigures baseline_of(const DataParallelReport& report) {
  BaselineFigures b;
  b.world_size = report.world_size;
  b.global_batch = report.global_batch;
  b.samples_per_s = report.samples_per_s;
  b.joules_per_sample = report.joules_per_sample;
  b.model = report.model;
  return b;
}

BaselineFigures baseline_from_text(const std::string& text, const std::string& origin) {
  try {
    const Json j = Json::parse(text);
    if (!j.is_object()) throw DataError("not a JSON object (the --json of a dist-train run)");
    BaselineFigures b;
    // Range-checked before any cast; the bounds are far beyond any real run.
    b.world_size = static_cast<int>(json_integer(j.at("world_size"), "world_size", 1, 1 << 20));
    b.global_batch = json_integer(j.at("global_batch"), "global_batch", 1, std::int64_t{1} << 40);
    b.samples_per_s = json_number_in(j.at("samples_per_s"), "samples_per_s", 1e-9, 1e15);
    if (const Json* e = j.find("joules_per_sample"); e && !e->is_null())
      b.joules_per_sample = json_number_in(*e, "joules_per_sample", 0, 1e15);
    if (const Json* m = j.find("model"); m && m->is_string()) b.model = m->str();
    return b;
  } catch (const DataError& e) {
    throw DataError("the baseline " + origin + " is not usable: " + e.what());
  }
}

ScalingComparison compare_scaling(const DataParallelReport& run, const BaselineFigures& baseline,
                                  ScalingMode mode) {
  if (baseline.world_size != 1)
    throw InvalidArgument("a scaling baseline runs on one GPU; this one used " +
                          std::to_string(baseline.world_size));
  if (!baseline.model.empty() && !run.model.empty() && baseline.model != run.model)
    throw InvalidArgument("the baseline trained '" + baseline.model + "', this run '" + run.model +
                          "'");
  const std::int64_t want = mode == ScalingMode::kStrong ? run.global_batch : run.per_replica_batch;
  if (baseline.global_batch != want)
    throw InvalidArgument(
        scaling_mode_name(mode) + " scaling compares with a one-GPU run of batch " +
        std::to_string(want) + " (the " + (mode == ScalingMode::kStrong ? "global" : "per-GPU") +
        " batch), but the baseline used " + std::to_string(baseline.global_batch));
  if (!(baseline.samples_per_s > 0))
    throw InvalidArgument("the baseline has no measured throughput");
  ScalingComparison c;
  c.mode = mode;
  c.gpus = run.world_size;
  c.baseline_samples_per_s = baseline.samples_per_s;
  c.samples_per_s = run.samples_per_s;
  c.speedup = run.samples_per_s / baseline.samples_per_s;
  c.efficiency = c.speedup / static_cast<double>(run.world_size);
  c.baseline_joules_per_sample = baseline.joules_per_sample;
  c.joules_per_sample = run.joules_per_sample;
  if (c.baseline_joules_per_sample && c.joules_per_sample && *c.baseline_joules_per_sample > 0)
    c.energy_ratio = *c.joules_per_sample / *c.baseline_joules_per_sample;
  return c;
}

}  // namespace cnnergy::dist
