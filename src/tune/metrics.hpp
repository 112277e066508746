// Trial metrics from raw measurements (time, energy per GPU, samples, FLOPs, repetitions), their
// statistics over repetitions, the objectives a sweep optimises (E, EDP, ED²P, EDS(k) of Krzywaniak et al. 2022
// Eqs. 3-4, GFLOPS/W of Castro et al. 2019, Table 11, ...), the optimum per objective and the Pareto front.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tune/knobs.hpp"

namespace cnnergy::tune {

// One measurement window of one trial (one repetition).
struct Repetition {
  double elapsed_ms = 0;                   // wall time of the window
  std::int64_t iterations = 0;             // training iterations (or runs of an external command) in it
  std::vector<double> energy_mj;           // energy of each GPU over the window
  std::optional<double> peak_power_w;      // highest sampled board power, summed over GPUs
  std::optional<double> max_temperature_c;
  std::string energy_source;               // how the meter got the energy ("counter", "sampled", ...)
  // Time order: the window's place among every window of its sweep (1, 2, ...; empty where unknown),
  // and the seconds the runner waited for a steady start just before it (settling and cool-down;
  // empty where that visit did not wait, e.g. the second window of a visit).
  std::optional<std::int64_t> sequence;
  std::optional<double> settle_s;
};

struct PhaseMeasurement {  // per-phase time and energy of one iteration (Castro et al. 2019: load, forward, ...)
  std::string phase;
  double time_ms = 0, time_ms_stddev = 0;
  double energy_mj = 0, energy_mj_stddev = 0;
};

struct LayerMeasurement {  // per-layer profile of one iteration
  std::int64_t layer_index = 0;
  std::string name, type;
  double forward_ms = 0, backward_ms = 0;
  std::optional<double> energy_mj;
  double flops = 0;
};

// Everything the trial runner hands back for one trial.
struct TrialMeasurement {
  std::vector<Repetition> repetitions;
  double samples_per_iteration = 0;        // 0 = unknown (an external command): no per-sample metrics
  double flops_per_iteration = 0;          // 0 = unknown: no GFLOPS metrics
  std::optional<double> accuracy;          // fraction in [0, 1] where the run measured it
  std::vector<PhaseMeasurement> phases;
  std::vector<LayerMeasurement> layers;
  // Telemetry statistics (telemetry/trial_stats.hpp, JSON): the repetitions' merged, with the idle
  // power, and each repetition's (empty, or one per repetition; "" where a window has none).
  std::string telemetry_json;
  std::vector<std::string> repetition_telemetry_json;
  // Wall time the trial's backend spent choosing convolution algorithms before its windows (outside
  // them; 0 where every decision came from the persistent cache). Not stored in the results DB yet.
  std::optional<double> algo_search_ms;
  // Seconds the trial waited for thermally steady starts (cool-down and settling, every visit), and
  // how the last wait ended, for the progress line ("settled in 2.1 s (T +0.03 C/s, P -0.2 %/s)";
  // not stored).
  std::optional<double> settle_s;
  std::string settle_text;
};

// Metrics of one trial that need no other trial. EDS(k) needs the reference and is an Objective.
enum class Metric {
  kTimePerIteration,    // ms
  kTimePerSample,       // ms
  kEnergyPerIteration,  // J, all GPUs
  kEnergyPerSample,     // J, all GPUs
  kAvgPower,            // W, all GPUs: energy / time
  kPeakPower,           // W
  kEdp,                 // J*s of one work unit (a sample where known, else an iteration)
  kEd2p,                // J*s^2 of one work unit
  kGflops,              // achieved GFLOP/s
  kGflopsPerWatt,       // GFLOP per joule (= GFLOPS/W)
  kSamplesPerJoule,
  kAccuracy,            // fraction
};
inline constexpr std::array<Metric, 12> kAllMetrics = {
    Metric::kTimePerIteration, Metric::kTimePerSample, Metric::kEnergyPerIteration, Metric::kEnergyPerSample,
    Metric::kAvgPower,         Metric::kPeakPower,     Metric::kEdp,                Metric::kEd2p,
    Metric::kGflops,           Metric::kGflopsPerWatt, Metric::kSamplesPerJoule,    Metric::kAccuracy};

std::string_view metric_name(Metric m);   // column name with unit: "time_per_sample_ms", "edp_js"
std::string_view metric_label(Metric m);  // for people: "time per sample"
std::string_view metric_unit(Metric m);   // "ms", "J", "W", "J*s", "" ...
bool metric_higher_is_better(Metric m);
Metric parse_metric_name(std::string_view name);

struct Stats {
  std::size_t n = 0;
  double median = 0, mean = 0, stddev = 0, min = 0, max = 0;  // stddev: sample (n-1), 0 when n < 2
  double cv() const { return mean != 0 ? stddev / mean : 0; }
};
// Statistics of the finite values (InvalidArgument when there are none).
Stats compute_stats(const std::vector<double>& values);

// Per-repetition values of every metric the measurement supports, and their statistics. Repetitions
// with no iterations or no time are an error (InvalidArgument): the runner must not produce them.
std::map<Metric, std::vector<double>> repetition_metrics(const TrialMeasurement& m);
std::map<Metric, Stats> compute_trial_metrics(const TrialMeasurement& m);

// EDS(k) of Krzywaniak et al. 2022, Eq. 4: (k-1)/(k E_ref) * E + 1/(k t_ref) * t; 1 at the reference, < 1 better.
double eds(double energy, double time, double energy_ref, double time_ref, double k);

// What a search or a report optimises: a metric, or EDS(k) / normalised E, t, EDP against the reference.
struct Objective {
  enum class Kind { kMetric, kEds } kind = Kind::kMetric;
  Metric metric = Metric::kEnergyPerSample;
  double eds_k = 2.0;
  std::string name() const;   // "energy_per_sample_j", "eds_k2"
  std::string label() const;  // "energy per sample", "EDS(k=2)"
  bool maximise() const { return kind == Kind::kMetric && metric_higher_is_better(metric); }
};
// Accepts metric names and short forms: time, energy, power, peak_power, edp, ed2p, eds, eds:K,
// eds(k=K), gflops, gflops_per_w, samples_per_j, accuracy. time/energy/edp/ed2p mean per sample where
// the sweep knows samples (resolved by the analysis), per iteration otherwise.
Objective parse_objective(const std::string& text);
// The objectives of Krzywaniak et al. 2022, Tables 2-3 plus the efficiency ones: E, time, EDP, ED²P, EDS(1.5), EDS(2),
// GFLOPS/W, samples per joule, accuracy.
std::vector<Objective> default_objectives();

enum class TrialStatus { kOk, kFailed, kDoesNotFit, kSkipped };
std::string_view trial_status_name(TrialStatus s);  // ok, failed, does_not_fit, skipped
TrialStatus parse_trial_status(std::string_view s);

// What the analysis needs of one trial (from the store or straight from a run).
struct TrialSummary {
  std::string key;
  std::vector<KnobSetting> knobs;
  TrialStatus status = TrialStatus::kOk;
  bool reference = false;
  std::map<Metric, Stats> metrics;
  const Stats* find(Metric m) const;
};

// Is the optimum told apart from the alternatives by more than the noise? Intervals are 95 %
// t-intervals of the mean (tune/significance.hpp); overlapping intervals are "not distinguishable".
enum class Verdict {
  kDistinct,                        // its interval overlaps neither the default's nor the runner-up's
  kNotDistinguishableFromDefault,   // its interval overlaps the reference (default) trial's
  kNotDistinguishableFromRunnerUp,  // ... the second-best trial's
  kNoInterval,                      // fewer than two repetitions: no interval, no verdict
};

struct Optimum {
  Objective objective;
  std::size_t trial = 0;           // index into the summaries
  double value = 0;                // objective value (median)
  std::optional<double> energy;    // per work unit, J (empty: energy not measured)
  double time = 0;                 // per work unit, ms
  std::optional<double> avg_power_w;
  std::optional<double> energy_change_pct, time_change_pct;  // against the reference: -25 = 25 % less
  std::optional<double> interval_low, interval_high;          // 95 % t-interval of the objective
  std::optional<std::size_t> runner_up;                       // the second-best trial, when there is one
  Verdict verdict = Verdict::kNoInterval;
};

struct Analysis {
  // Time (and energy) per sample where every finished trial knows its samples, else per iteration;
  // energy being measured or not never changes the basis.
  bool per_sample = false;
  bool energy_measured = false;          // every finished trial has energy
  std::optional<std::size_t> reference;  // index of the reference trial, when it ran fine
  std::vector<Optimum> optima;           // one per objective that has a value on some trial
  std::vector<std::size_t> pareto;       // indices on the (time, energy) Pareto front, by time
  Metric time_metric() const { return per_sample ? Metric::kTimePerSample : Metric::kTimePerIteration; }
  Metric energy_metric() const { return per_sample ? Metric::kEnergyPerSample : Metric::kEnergyPerIteration; }
};

// Objective value of one trial (medians), given the reference trial for EDS; empty when it cannot be
// computed (failed trial, metric not measured, EDS without a reference).
std::optional<double> objective_value(const TrialSummary& trial, const Objective& objective,
                                      const TrialSummary* reference, bool per_sample);
// What EDS(k) of a trial needs: its time and energy statistics and the reference's (per sample or
// per iteration); empty when a trial did not finish, a figure is missing or a reference is zero.
struct EdsInputs {
  const Stats *t, *e, *t_ref, *e_ref;
};
std::optional<EdsInputs> eds_inputs(const TrialSummary& trial, const TrialSummary* reference, bool per_sample);
// Resolves time/energy/EDP objectives to the per-sample or per-iteration basis.
Objective resolve_objective(Objective objective, bool per_sample);

Analysis analyse(const std::vector<TrialSummary>& trials, const std::vector<Objective>& objectives);

// Indices of the points not dominated in (time, energy), both minimised, ordered by time. A point
// equal to another in both keeps only the first.
std::vector<std::size_t> pareto_front(const std::vector<std::pair<double, double>>& time_energy);

}  // namespace cnnergy::tune
