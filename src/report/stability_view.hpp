// Can the sweep's verdict be rerun? The views over a stored sweep's windows in time order: how often
// each setting is the optimum when the windows are resampled (bootstrap), the reference setting's
// drift across the sweep (flagged when it moved more than its interval allows), each setting's
// windows in time order, and the time the sweep spent waiting for steady starts.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "report/sweep_data.hpp"
#include "tune/stability.hpp"

namespace cnnergy::report {

struct SweepStability {
  std::size_t resamples = 0;                 // 0: no bootstrap was asked for
  std::vector<tune::Stability> optima;       // one per objective of the analysis
  std::optional<tune::Drift> energy_drift;   // the reference's energy per work unit over time
  std::optional<tune::Drift> time_drift;     // ... and its time per work unit
  std::optional<double> settle_s;            // every trial's settle waits together
  std::optional<double> wall_s;              // first trial started -> last trial finished
  bool time_ordered = false;                 // the windows carry their time order (schema 5 sweeps)
  const tune::Stability* find(const tune::Objective& o) const;
};

// `resamples` = 0 computes drift and settle time only.
SweepStability analyse_stability(const SweepData& d, std::size_t resamples);

// For the optimum table's verdict column: "optimum in 97 % of resamples" / "unstable: ...".
std::string stability_cell(const SweepData& d, const SweepStability& s, const tune::Objective& o);

// Terminal lines: the reference's drift (with "FLAG" when it moved more than its interval allows),
// the settle time against the sweep's wall time, and which stability the table's column shows.
void print_stability(std::ostream& out, const SweepData& d, const SweepStability& s);

// One row per finished trial: its windows' energy (or time) per work unit in time order, each with
// its sequence number ("#4 1.23 J"), for people and for the HTML report.
struct TimeOrderRow {
  std::size_t trial = 0;
  std::vector<std::pair<std::int64_t, double>> windows;  // (sequence, value)
};
std::vector<TimeOrderRow> windows_in_time_order(const SweepData& d, tune::Metric metric);

// The drift and stability lines as HTML (escaped) for the report's section.
std::string stability_html(const SweepData& d, const SweepStability& s);

// Reruns of one sweep (the same sweep key stored several times, `sweep --new`): per objective, which
// setting each run named and with what verdict, and whether every run agrees ("the same optimum in 3
// of 3 runs", or each run's distinct optimum differs: "runs disagree"). Runs are analysed alike:
// `objectives` as in load_sweep(). Prints nothing for keys stored once.
void print_rerun_agreement(std::ostream& out, const tune::ResultStore& store,
                           const std::vector<tune::Objective>& objectives);

}  // namespace cnnergy::report
