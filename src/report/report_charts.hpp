// The charts of one sweep for the HTML report, as SVG strings (internal to the report library).
#pragma once

#include <string>
#include <vector>

#include "report/sweep_data.hpp"

namespace cnnergy::report::detail {

// Krzywaniak et al. 2022, Fig. 1: energy / E_ref against time / t_ref for every finished trial, with the iso-lines
// E = 1, EDP = 1 and EDS(k) = 1 through the reference, the Pareto front and the optima labelled.
// Empty when there is no reference trial.
std::string normalised_chart(const SweepData& data, const std::vector<double>& eds_k, const std::string& id);

// Each metric against each varying knob; one series per combination of the other knobs.
std::vector<std::string> knob_charts(const SweepData& data, const std::string& id_prefix);

// Per-phase energy and time as stacked bars, one bar per trial; empty when no trial has phases.
std::string phase_charts(const SweepData& data, const std::string& id_prefix);

// Per-layer forward/backward time (and energy where measured) of one trial (the reference when it
// has a profile); empty when no trial has layers.
std::string layer_charts(const SweepData& data, const std::string& id_prefix);

// An inference sweep's p50/p99 latency against throughput and energy per image against batch size
// (infer_charts.cpp); empty when no trial stored a latency (a training sweep).
std::string infer_charts(const tune::ResultStore& store, const SweepData& data, const std::string& id_prefix);

}  // namespace cnnergy::report::detail
