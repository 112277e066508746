// `cnnergy compare`: result sets (sweeps) from several databases — other GPUs, the CPU, other
// drivers or other tags — matched on their workload (model, batch, precision, mode, GPU count) and
// set side by side with ratios against a baseline, as Gera et al. 2018 compare ML hardware.
// Databases are only ever opened read-only.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tune/metrics.hpp"
#include "tune/store.hpp"

namespace cnnergy::report {

enum class CompareBy { kDevice, kSweep, kTag };
CompareBy parse_compare_by(const std::string& text);  // device | sweep | tag (InvalidArgument otherwise)

// One figure with its spread (the stored statistics over repetitions, or a telemetry min..max).
struct Figure {
  double value = 0;
  double spread = 0;  // standard deviation over repetitions (0 where there is one value)
  std::optional<double> low, high;  // min and max where known
};

// One trial of one result set as the comparison shows it.
struct CompareEntry {
  std::string trial_key;
  bool per_sample = false;  // time/energy per sample (else per iteration: an external command)
  std::optional<Figure> throughput_per_s, time_ms, energy_j, gflops_per_w, avg_power_w, peak_power_w;
  // From the trial's telemetry statistics (absent in databases before schema 3, or without NVML).
  std::optional<Figure> power_w, gpu_util_pct, mem_util_pct, temperature_c, sm_clock_mhz;
  std::optional<double> idle_power_w, memory_peak_mib, cpu_util_pct, cpu_package_w;  // CPU W: RAPL package+DRAM
  std::string top_throttle;  // the reason seen in most samples, with its fraction ("" if none)
};

// One result set: a sweep of one database, labelled by --by.
struct ResultSet {
  std::string label, db_path, sweep_key, tag, device;
  std::map<std::string, CompareEntry> workloads;      // by workload key: the trial compared
  std::map<std::string, std::vector<std::pair<double, double>>> all_points;  // (time, energy) of every ok trial
};

struct Comparison {
  std::vector<ResultSet> sets;
  std::size_t baseline = 0;                  // index into sets
  // Workloads present in two or more sets (compared, each row the sets that have it), and in one
  // set only (listed as such).
  std::map<std::string, std::vector<std::size_t>> matched;
  std::map<std::string, std::size_t> unmatched;
  std::vector<std::string> notes;            // how trials were chosen, what was merged
};

struct CompareOptions {
  CompareBy by = CompareBy::kDevice;
  std::optional<std::string> baseline;  // a database path or a tag (or a set label)
};

// The workload of a trial: "model=resnet50 batch=64 precision=fp32 mode=training gpus=1".
std::string workload_key(const std::string& sweep_workload, const tune::TrialSpec& trial_knobs);

// Opens every database read-only (DataError for a missing, damaged, foreign or newer-schema file),
// groups sweeps by `options.by` and matches trials. InvalidArgument when the baseline matches no set.
Comparison build_comparison(const std::vector<std::string>& db_paths, const CompareOptions& options);

// The side-by-side tables; says so when no workload is common (and lists what each set has alone).
void print_comparison(std::ostream& out, const Comparison& c);
// The self-contained HTML page (grouped bars per workload, each set's Pareto front of time and energy,
// utilisation and power distributions); every string from the databases is escaped.
std::string render_comparison_html(const Comparison& c);

std::string format_figure(const std::optional<Figure>& f, const std::string& unit);

}  // namespace cnnergy::report
