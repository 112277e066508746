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
  // Each finished trial's windows (time order, settle waits) for the stability views; phases and
  // layers are moved out into the maps above.
  std::map<std::size_t, tune::TrialMeasurement> measurements;
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

inline constexpr const char* kNotMeasured = "not measured";
// A metric's median on one trial for tables: the value, "not measured" where the trial finished
// without it (no energy meter), "-" where the trial did not finish.
std::string format_metric(const SweepData& d, std::size_t trial, tune::Metric metric, std::string_view unit);
// The metric's 95 % interval half-width relative to its mean, as perf stat's ± column: "± 2.1 %";
// "-" with fewer than two repetitions or without the metric.
std::string format_plus_minus(const tune::Stats* s);
// An optimum's interval "[1.23 J, 1.31 J]" and its verdict ("distinct" or "not distinguishable from
// the default (knobs)" / "... from the runner-up (knobs)").
std::string format_interval(const tune::Optimum& o, std::string_view unit);
std::string format_verdict(const SweepData& d, const tune::Optimum& o);

}  // namespace cnnergy::report
