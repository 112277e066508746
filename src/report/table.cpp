// Text tables for the terminal.
#include "report/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/errors.hpp"
#include "report/stability_view.hpp"
#include "report/sweep_title.hpp"
#include "tune/significance.hpp"

namespace cnnergy::report {

using namespace cnnergy::tune;

std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;  // count lead bytes only
  return n;
}

void TextTable::add_column(std::string header, Align align) {
  headers_.push_back(std::move(header));
  aligns_.push_back(align);
}

void TextTable::add_row(std::vector<std::string> cells) {
  if (cells.size() != headers_.size())
    throw InvalidArgument("table row has " + std::to_string(cells.size()) + " cells for " + std::to_string(headers_.size()) + " columns");
  for (auto& c : cells)
    for (auto& ch : c)
      if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';  // one line per row, whatever the error text
  rows_.push_back(std::move(cells));
}

std::string TextTable::render() const {
  std::vector<std::size_t> width(headers_.size());
  for (std::size_t c = 0; c < headers_.size(); ++c) {
    width[c] = display_width(headers_[c]);
    for (const auto& r : rows_) width[c] = std::max(width[c], display_width(r[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - display_width(cells[c]), ' ');
      if (c) out += "  ";
      out += aligns_[c] == Align::kRight ? pad + cells[c] : cells[c] + (c + 1 < cells.size() ? pad : "");
    }
    return out + "\n";
  };
  std::string out = line(headers_);
  std::size_t total = 0;
  for (std::size_t c = 0; c < width.size(); ++c) total += width[c] + (c ? 2 : 0);
  out += std::string(total, '-') + "\n";
  for (const auto& r : rows_) out += line(r);
  return out;
}

namespace {

std::string knob_cell(const TrialSummary& t, Knob k) {
  for (const auto& s : t.knobs)
    if (s.knob == k) return s.value.text;
  return "-";
}

std::string header_with_unit(Knob k) {
  const auto unit = knob_unit(k);
  std::string name(knob_flag(k));
  return unit.empty() ? name : name + " [" + std::string(unit) + "]";
}

}  // namespace

void print_trials_table(std::ostream& out, const SweepData& d) {
  const bool ps = d.analysis.per_sample;
  const Metric tm = d.analysis.time_metric(), em = d.analysis.energy_metric();
  const char* unit_name = ps ? "sample" : "iteration";
  TextTable t;
  t.add_column("#");
  for (Knob k : d.knobs) t.add_column(header_with_unit(k));
  t.add_column("status", TextTable::Align::kLeft);
  t.add_column(std::string("time/") + unit_name);
  t.add_column("\u00b1 95 %");
  t.add_column(std::string("energy/") + unit_name);
  t.add_column("\u00b1 95 %");
  t.add_column("avg power");
  t.add_column("EDP [J*s]");
  t.add_column("EDS(k=2)");
  t.add_column("GFLOPS/W");
  t.add_column("note", TextTable::Align::kLeft);
  const TrialSummary* ref = d.reference();
  for (std::size_t i = 0; i < d.summaries.size(); ++i) {
    const TrialSummary& s = d.summaries[i];
    std::vector<std::string> row = {std::to_string(d.trials[i].trial_index)};
    for (Knob k : d.knobs) row.push_back(knob_cell(s, k));
    row.push_back(std::string(trial_status_name(s.status)));
    row.push_back(format_metric(d, i, tm, "ms"));
    row.push_back(format_plus_minus(s.find(tm)));
    row.push_back(format_metric(d, i, em, "J"));
    row.push_back(format_plus_minus(s.find(em)));
    row.push_back(format_metric(d, i, Metric::kAvgPower, "W"));
    row.push_back(format_metric(d, i, Metric::kEdp, ""));
    const auto eds2 = objective_value(s, parse_objective("eds:2"), ref, ps);
    row.push_back(!eds2 && s.status == TrialStatus::kOk && !s.find(em) ? std::string(kNotMeasured) : format_optional(eds2, ""));
    row.push_back(s.find(Metric::kGflops) ? format_metric(d, i, Metric::kGflopsPerWatt, "") : "-");
    std::string note;
    if (s.reference) note = "reference";
    if (std::find(d.analysis.pareto.begin(), d.analysis.pareto.end(), i) != d.analysis.pareto.end())
      note += note.empty() ? "pareto" : ", pareto";
    if (!d.trials[i].error_message.empty()) note += (note.empty() ? "" : "; ") + d.trials[i].error_message.substr(0, 160);
    row.push_back(note);
    t.add_row(std::move(row));
  }
  out << "sweep " << d.sweep.id << ": " << sweep_title(d) << " (" << d.sweep.sweep_key << ")\n";
  out << t.render();
  out << "values are medians; \u00b1 is the " << kIntervalMethod << ", relative to the mean\n";
  if (!d.analysis.energy_measured) out << "energy: " << kNotMeasured << " (no GPU energy meter or RAPL for this workload)\n";
  if (!ref) out << "no reference trial finished: EDS and savings against the default are not available\n";
}

void print_optimum_table(std::ostream& out, const SweepData& d, const SweepStability* stability) {
  const bool with_stability = stability && stability->resamples > 0;
  const bool ps = d.analysis.per_sample;
  const char* unit_name = ps ? "sample" : "iteration";
  TextTable t;
  t.add_column("target metric", TextTable::Align::kLeft);
  t.add_column("value");
  t.add_column("95 % interval");
  t.add_column("knobs", TextTable::Align::kLeft);
  t.add_column("verdict", TextTable::Align::kLeft);
  if (with_stability) t.add_column("stability", TextTable::Align::kLeft);
  t.add_column("avg power");
  t.add_column(std::string("energy/") + unit_name);
  t.add_column("energy vs default");
  t.add_column(std::string("time/") + unit_name);
  t.add_column("time vs default");
  if (d.analysis.reference) {
    const std::size_t r = *d.analysis.reference;
    std::vector<std::string> row = {"default (reference)", "-", "-", d.label(r), "", format_metric(d, r, Metric::kAvgPower, "W"),
                                    format_metric(d, r, d.analysis.energy_metric(), "J"), "-",
                                    format_metric(d, r, d.analysis.time_metric(), "ms"), "-"};
    if (with_stability) row.insert(row.begin() + 5, "");
    t.add_row(row);
  }
  for (const Optimum& o : d.analysis.optima) {
    const std::string unit = o.objective.kind == Objective::Kind::kEds ? "" : std::string(metric_unit(o.objective.metric));
    std::vector<std::string> row = {(o.objective.maximise() ? "max " : "min ") + o.objective.label(),
                                    format_quantity(o.value, unit), format_interval(o, unit), d.label(o.trial),
                                    format_verdict(d, o), format_metric(d, o.trial, Metric::kAvgPower, "W"),
                                    format_metric(d, o.trial, d.analysis.energy_metric(), "J"),
                                    format_percent(o.energy_change_pct), format_quantity(o.time, "ms"),
                                    format_percent(o.time_change_pct)};
    if (with_stability) row.insert(row.begin() + 5, stability_cell(d, *stability, o.objective));
    t.add_row(row);
  }
  out << t.render();
  out << "interval: " << kIntervalMethod << "; overlapping intervals are \"not distinguishable\"\n";
  if (!d.analysis.pareto.empty()) {
    out << "Pareto front (time, energy): ";
    for (std::size_t k = 0; k < d.analysis.pareto.size(); ++k) out << (k ? "; " : "") << d.label(d.analysis.pareto[k]);
    out << "\n";
  }
  if (stability) print_stability(out, d, *stability);
}

}  // namespace cnnergy::report
