// Loading a sweep for reports, and number formatting with units.
#include "report/sweep_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "tune/significance.hpp"

namespace cnnergy::report {

using namespace cnnergy::tune;

std::optional<double> SweepData::median(std::size_t trial, Metric metric) const {
  const Stats* s = summaries.at(trial).find(metric);
  return s ? std::optional<double>(s->median) : std::nullopt;
}

std::string SweepData::label(std::size_t trial) const {
  const auto& k = summaries.at(trial).knobs;
  if (k.empty()) return "default";
  std::string out;
  for (const auto& s : k) {
    // only knobs that vary: a constant knob adds length, not information
    if (std::find(knobs.begin(), knobs.end(), s.knob) == knobs.end()) continue;
    out += (out.empty() ? "" : " ") + std::string(knob_name(s.knob)) + "=" + s.value.text;
  }
  return out.empty() ? summaries.at(trial).key : out;
}

SweepData load_sweep(const ResultStore& store, std::int64_t sweep_id, const std::vector<Objective>& objectives) {
  SweepData d;
  d.sweep = store.sweep(sweep_id);
  d.trials = store.trials(sweep_id);
  std::map<Knob, std::set<std::string>> values;
  for (std::size_t i = 0; i < d.trials.size(); ++i) {
    d.summaries.push_back(d.trials[i].summary);
    for (const auto& s : d.trials[i].summary.knobs) values[s.knob].insert(s.value.text);
    if (d.trials[i].summary.status != TrialStatus::kOk) continue;
    TrialRecord rec = store.read_trial(d.trials[i].id);
    if (!rec.measurement.phases.empty()) d.phases[i] = std::move(rec.measurement.phases);
    if (!rec.measurement.layers.empty()) d.layers[i] = std::move(rec.measurement.layers);
    rec.measurement.phases.clear();
    rec.measurement.layers.clear();
    d.measurements[i] = std::move(rec.measurement);
  }
  for (const auto& [k, v] : values)
    if (v.size() > 1) d.knobs.push_back(k);
  d.analysis = analyse(d.summaries, objectives);
  return d;
}

namespace {

std::string sig4(double v) {
  char buf[64];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3)) std::snprintf(buf, sizeof buf, "%.3e", v);
  else if (a >= 1000) std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 100) std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (a >= 10) std::snprintf(buf, sizeof buf, "%.2f", v);
  else std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

std::string prefixed(double v, const std::string& base) {
  static const std::pair<double, const char*> kPrefixes[] = {{1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""},
                                                             {1e-3, "m"}, {1e-6, "u"}, {1e-9, "n"}};
  const double a = std::fabs(v);
  for (const auto& [scale, p] : kPrefixes)
    if (a >= scale * 0.9995 || scale == 1e-9) return sig4(v / scale) + " " + p + base;
  return sig4(v) + " " + base;
}

}  // namespace

std::string format_quantity(double value, std::string_view unit) {
  if (!std::isfinite(value)) return "-";
  if (value == 0) return "0" + (unit.empty() ? std::string() : " " + std::string(unit));
  if (unit == "ms") return prefixed(value * 1e-3, "s");
  if (unit == "J" || unit == "W" || unit == "s") return prefixed(value, std::string(unit));
  return sig4(value) + (unit.empty() ? "" : " " + std::string(unit));
}

std::string format_optional(const std::optional<double>& value, std::string_view unit) {
  return value ? format_quantity(*value, unit) : "-";
}

std::string format_percent(const std::optional<double>& pct) {
  if (!pct || !std::isfinite(*pct)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f %%", *pct);
  return buf;
}

std::string format_metric(const SweepData& d, std::size_t trial, Metric metric, std::string_view unit) {
  if (const auto v = d.median(trial, metric)) return format_quantity(*v, unit);
  return d.summaries.at(trial).status == TrialStatus::kOk ? kNotMeasured : "-";
}

std::string format_plus_minus(const Stats* s) {
  if (!s) return "-";
  const auto ci = mean_interval(*s);
  if (!ci || s->mean == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "\u00b1 %.1f %%", ci->half_width() / std::fabs(s->mean) * 100);
  return buf;
}

std::string format_interval(const Optimum& o, std::string_view unit) {
  if (!o.interval_low || !o.interval_high) return "-";
  return "[" + format_quantity(*o.interval_low, unit) + ", " + format_quantity(*o.interval_high, unit) + "]";
}

std::string format_verdict(const SweepData& d, const Optimum& o) {
  switch (o.verdict) {
    case Verdict::kDistinct: return "distinct";
    case Verdict::kNotDistinguishableFromDefault:
      return verdict_text(o.verdict) + (d.analysis.reference ? " (" + d.label(*d.analysis.reference) + ")" : "");
    case Verdict::kNotDistinguishableFromRunnerUp:
      return verdict_text(o.verdict) + (o.runner_up ? " (" + d.label(*o.runner_up) + ")" : "");
    case Verdict::kNoInterval: return verdict_text(o.verdict);
  }
  return "";
}

}  // namespace cnnergy::report
