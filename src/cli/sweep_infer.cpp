// `sweep --mode infer` output (sweep_infer.hpp): the latency table and the latency-bounded optimum.
#include "cli/sweep_infer.hpp"

#include <cstdio>

#include "report/sweep_data.hpp"
#include "tune/infer_latency.hpp"

namespace cnnergy::cli {
namespace {

std::string num(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

}  // namespace

InferSweepVerdict report_infer_sweep(std::ostream& out, const tune::ResultStore& store, std::int64_t sweep_id,
                                     const tune::Objective& objective, std::optional<double> max_p99_ms) {
  const report::SweepData data = report::load_sweep(store, sweep_id);
  std::vector<std::optional<tune::InferLatency>> latency(data.trials.size());
  for (std::size_t i = 0; i < data.trials.size(); ++i)
    latency[i] = tune::infer_latency_of(store.trial_telemetry_json(data.trials[i].id));
  out << "\ninference latency per trial (device-resident requests, run + synchronize):\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-48s %10s %10s %10s %12s %12s\n", "trial", "p50 ms", "p90 ms", "p99 ms", "img/s",
                "mJ/img");
  out << line;
  for (std::size_t i = 0; i < data.trials.size(); ++i) {
    const auto& s = data.summaries[i];
    if (!latency[i]) {
      std::snprintf(line, sizeof line, "  %-48s %s\n", s.key.c_str(),
                    s.status == tune::TrialStatus::kOk ? "no latency stored" : std::string(tune::trial_status_name(s.status)).c_str());
      out << line;
      continue;
    }
    const tune::Stats* t = s.find(tune::Metric::kTimePerSample);
    const tune::Stats* e = s.find(tune::Metric::kEnergyPerSample);
    std::snprintf(line, sizeof line, "  %-48s %10s %10s %10s %12s %12s\n", s.key.c_str(), num(latency[i]->p50_ms, 3).c_str(),
                  num(latency[i]->p90_ms, 3).c_str(), num(latency[i]->p99_ms, 3).c_str(),
                  t && t->median > 0 ? num(1000.0 / t->median, 1).c_str() : "-",
                  e ? num(e->median * 1e3, 3).c_str() : report::kNotMeasured);
    out << line;
  }
  InferSweepVerdict v;
  if (!max_p99_ms) return v;
  const auto c = tune::choose_under_latency_bound(data.summaries, [&](std::size_t i) { return latency[i]; }, objective,
                                                  *max_p99_ms);
  const std::string bound = num(*max_p99_ms, 3) + " ms";
  if (c.chosen) {
    const auto& s = data.summaries[*c.chosen];
    out << "\nbest " << objective.label() << " with p99 <= " << bound << ": " << s.key << " ("
        << report::format_quantity(*c.chosen_value, objective.kind == tune::Objective::Kind::kMetric
                                                        ? tune::metric_unit(tune::resolve_objective(objective, true).metric)
                                                        : "")
        << ", p99 " << num(latency[*c.chosen]->p99_ms, 3) << " ms; " << c.meeting << " of " << c.measured
        << " measured settings meet the bound)\n";
    return v;
  }
  v.bound_met = false;
  if (c.meeting > 0) {
    v.message = std::to_string(c.meeting) + " setting(s) meet p99 <= " + bound + " but none measured " +
                objective.label() + " (no energy meter?)";
  } else if (c.best_p99_index) {
    v.message = "no setting meets p99 <= " + bound + ": the best p99 seen is " + num(c.best_p99_ms, 3) + " ms (" +
                data.summaries[*c.best_p99_index].key + ", of " + std::to_string(c.measured) + " measured)";
  } else {
    v.message = "no setting meets p99 <= " + bound + ": no trial finished with a latency measurement";
  }
  out << "\n" << v.message << "\n";
  return v;
}

}  // namespace cnnergy::cli
