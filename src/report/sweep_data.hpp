// One sweep as every report reads it: the stored sweep and trials, the analysis (optima against the
// reference, Pareto front), and the per-phase and per-layer profiles where the store has them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tune/metrics.hpp"
#include "tune/store.hpp"

namespace cnnergy::report {

struct SweepData {
  tune::SweepRecord sweep;
  std::vector<tune::StoredTrial> trials;      // by trial index
  std::vector<tune::TrialSummary> summaries;  // same order
  tune::Analysis analysis;
  std::map<std::size_t, std::vector<tune::PhaseMeasurement>> phases;  // by position in `trials`
  std::map<std::size_t, std::vector<tune::LayerMeasurement>> layers;
  std::vector<tune::Knob> knobs;  // knobs that vary in this sweep, canonical order

  const tune::TrialSummary* reference() const {
    return analysis.reference ? &summaries[*analysis.reference] : nullptr;
  }
  // Median of a metric on one trial, or empty.
  std::optional<double> median(std::size_t trial, tune::Metric metric) const;
  // A short label of a trial's knobs for charts: "batch=64 power_limit_w=200" (or "default").
  std::string label(std::size_t trial) const;
};

// Loads one sweep. `objectives` (default: tune::default_objectives()) decide the optimum table.
SweepData load_sweep(const tune::ResultStore& store, std::int64_t sweep_id,
                     const std::vector<tune::Objective>& objectives = tune::default_objectives());

// Numbers for people: SI prefixes for J, W, s (values given in ms are shown in s/ms/us as fits),
// otherwise four significant digits. "-" for an empty value.
std::string format_quantity(double value, std::string_view unit);
std::string format_optional(const std::optional<double>& value, std::string_view unit);
std::string format_percent(const std::optional<double>& pct);  // "+4.5 %", "-25.7 %", "-"

}  // namespace cnnergy::report
