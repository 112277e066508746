// Stability views of a stored sweep: bootstrap shares of the optimum, the reference's drift over
// time, windows in time order and the settle time (terminal lines and HTML).
#include "report/stability_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

#include "report/svg.hpp"

namespace cnnergy::report {

using namespace cnnergy::tune;

namespace {

std::optional<std::time_t> parse_utc(const std::string& iso) {  // "2026-11-21T22:52:03Z"
  std::tm tm{};
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec) != 6)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return timegm(&tm);
}

std::string pct_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f %%", v);
  return buf;
}

// Each window's value of `metric`, with its sequence number, for trial i (windows without one: none).
std::vector<std::pair<std::int64_t, double>> ordered_windows(const SweepData& d, std::size_t i, Metric metric) {
  std::vector<std::pair<std::int64_t, double>> out;
  const auto it = d.measurements.find(i);
  if (it == d.measurements.end()) return out;
  const auto per_rep = repetition_metrics(it->second);
  const auto m = per_rep.find(metric);
  if (m == per_rep.end()) return out;
  const auto& reps = it->second.repetitions;
  for (std::size_t r = 0; r < reps.size() && r < m->second.size(); ++r)
    if (reps[r].sequence) out.emplace_back(*reps[r].sequence, m->second[r]);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<Drift> drift_of(const SweepData& d, Metric metric) {
  if (!d.analysis.reference) return std::nullopt;
  const auto w = ordered_windows(d, *d.analysis.reference, metric);
  std::vector<double> v;
  std::vector<std::int64_t> seq;
  for (const auto& [s, x] : w) seq.push_back(s), v.push_back(x);
  return reference_drift(v, seq);
}

std::string drift_line(const char* what, const Drift& dr, std::string_view unit) {
  return std::string(what) + " " + format_quantity(dr.first, unit) + " -> " + format_quantity(dr.last, unit) + " (" +
         pct_text(dr.change_pct) + " over " + std::to_string(dr.windows) + " windows; its 95 % interval is " +
         format_quantity(dr.interval_width, unit) + " wide)" +
         (dr.flagged ? "  FLAG: the reference moved more than its interval allows; rerun with --order interleaved, "
                       "a longer --settle-s or --cooldown-c"
                     : "");
}

std::vector<std::string> names(const SweepData& d) {
  std::vector<std::string> n;
  for (std::size_t i = 0; i < d.summaries.size(); ++i) n.push_back(d.label(i));
  return n;
}

}  // namespace

const Stability* SweepStability::find(const Objective& o) const {
  for (const auto& s : optima)
    if (s.objective.name() == o.name()) return &s;
  return nullptr;
}

SweepStability analyse_stability(const SweepData& d, std::size_t resamples) {
  SweepStability s;
  s.resamples = resamples;
  for (const auto& [i, m] : d.measurements) {
    if (m.settle_s) s.settle_s = s.settle_s.value_or(0) + *m.settle_s;
    for (const auto& r : m.repetitions) s.time_ordered = s.time_ordered || r.sequence.has_value();
  }
  std::optional<std::time_t> first, last;
  for (const auto& t : d.trials) {
    const auto a = parse_utc(t.started), b = parse_utc(t.finished);
    if (a) first = first ? std::min(*first, *a) : *a;
    if (b) last = last ? std::max(*last, *b) : *b;
  }
  if (first && last && *last >= *first) s.wall_s = static_cast<double>(*last - *first);
  s.energy_drift = drift_of(d, d.analysis.energy_metric());
  s.time_drift = drift_of(d, d.analysis.time_metric());
  if (resamples == 0) return s;
  std::vector<ResampleInput> in;
  for (std::size_t i = 0; i < d.summaries.size(); ++i) {
    ResampleInput r{d.summaries[i], {}};
    if (const auto it = d.measurements.find(i); it != d.measurements.end() && !it->second.repetitions.empty())
      r.per_repetition = repetition_metrics(it->second);
    in.push_back(std::move(r));
  }
  std::vector<Objective> objectives;
  for (const auto& o : d.analysis.optima) objectives.push_back(o.objective);
  s.optima = bootstrap_stability(in, objectives, resamples);
  return s;
}

std::string stability_cell(const SweepData& d, const SweepStability& s, const Objective& o) {
  const Stability* st = s.find(o);
  return st ? stability_text(*st, names(d)) : "";
}

void print_stability(std::ostream& out, const SweepData& d, const SweepStability& s) {
  if (s.resamples)
    out << "stability: the optimum of each target over " << s.resamples
        << " bootstrap resamples of every trial's windows (\"unstable\" below " << Stability::kStableFraction * 100
        << " %)\n";
  if (s.energy_drift) out << drift_line("reference drift, energy:", *s.energy_drift, "J") << "\n";
  if (s.time_drift) out << drift_line("reference drift, time:", *s.time_drift, "ms") << "\n";
  if (!s.energy_drift && !s.time_drift && d.analysis.reference && s.time_ordered)
    out << "reference drift: fewer than 3 windows of the reference in time order\n";
  if (s.settle_s) {
    out << "steady starts: " << format_quantity(*s.settle_s * 1e3, "ms") << " waiting";
    if (s.wall_s && *s.wall_s > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " of %.0f s of sweep (%.1f %%)", *s.wall_s, 100 * *s.settle_s / *s.wall_s);
      out << buf;
    }
    out << "\n";
  }
}

std::vector<TimeOrderRow> windows_in_time_order(const SweepData& d, Metric metric) {
  std::vector<TimeOrderRow> rows;
  for (std::size_t i = 0; i < d.summaries.size(); ++i) {
    auto w = ordered_windows(d, i, metric);
    if (!w.empty()) rows.push_back({i, std::move(w)});
  }
  return rows;
}

std::string stability_html(const SweepData& d, const SweepStability& s) {
  std::string o;
  if (!s.optima.empty()) {
    o += "<p>Stability over " + std::to_string(s.resamples) +
         " bootstrap resamples of every trial's windows (\"unstable\" when no setting is the optimum in at least 95 %):</p><ul>";
    for (const auto& st : s.optima)
      o += "<li>" + html_escape(st.objective.label() + ": " + stability_text(st, names(d))) + "</li>";
    o += "</ul>\n";
  }
  if (s.energy_drift) o += "<p>" + html_escape(drift_line("Reference drift, energy:", *s.energy_drift, "J")) + "</p>\n";
  if (s.time_drift) o += "<p>" + html_escape(drift_line("Reference drift, time:", *s.time_drift, "ms")) + "</p>\n";
  if (s.settle_s) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "Steady starts: %.1f s waiting", *s.settle_s);
    std::string line = buf;
    if (s.wall_s && *s.wall_s > 0) {
      std::snprintf(buf, sizeof buf, " of %.0f s of sweep (%.1f %%)", *s.wall_s, 100 * *s.settle_s / *s.wall_s);
      line += buf;
    }
    o += "<p>" + html_escape(line) + "</p>\n";
  }
  const Metric metric = d.analysis.energy_measured ? d.analysis.energy_metric() : d.analysis.time_metric();
  const auto rows = windows_in_time_order(d, metric);
  if (!rows.empty()) {
    const std::string unit(metric_unit(metric));
    o += "<p>Each setting's windows in time order (" + html_escape(std::string(metric_label(metric))) +
         "; #N = the window's place in the sweep):</p><div class=\"scroll\"><table><tr><th class=\"l\">trial</th>"
         "<th class=\"l\">windows</th></tr>";
    for (const auto& r : rows) {
      std::string cells;
      for (const auto& [seq, v] : r.windows)
        cells += (cells.empty() ? "" : "   ") + ("#" + std::to_string(seq) + " " + format_quantity(v, unit));
      o += "<tr" + std::string(d.analysis.reference && *d.analysis.reference == r.trial ? " class=\"ref\"" : "") +
           "><td class=\"l\">" + html_escape(d.label(r.trial)) + "</td><td class=\"l\">" + html_escape(cells) +
           "</td></tr>";
    }
    o += "</table></div>\n";
  }
  return o;
}

void print_rerun_agreement(std::ostream& out, const ResultStore& store, const std::vector<Objective>& objectives) {
  std::map<std::string, std::vector<std::int64_t>> runs;  // sweep key -> ids, oldest first
  for (const auto& s : store.sweeps()) runs[s.sweep_key].push_back(s.id);
  for (const auto& [key, ids] : runs) {
    if (ids.size() < 2) continue;
    out << "reruns of sweep " << key << " (" << ids.size() << " runs):\n";
    // objective label -> per run (setting, verdict), in the analysis's order of objectives
    std::vector<std::pair<std::string, std::vector<std::pair<std::string, Verdict>>>> named;
    for (std::int64_t id : ids) {
      const SweepData d = load_sweep(store, id, objectives);
      for (const auto& o : d.analysis.optima) {
        const std::string label = (o.objective.maximise() ? "max " : "min ") + o.objective.label();
        auto it = std::find_if(named.begin(), named.end(), [&](const auto& n) { return n.first == label; });
        if (it == named.end()) it = named.insert(named.end(), {label, {}});
        it->second.emplace_back(d.label(o.trial), o.verdict);
      }
    }
    for (const auto& [label, per_run] : named) {
      std::map<std::string, std::size_t> distinct;  // settings named with a distinct verdict
      std::string line;
      for (const auto& [setting, verdict] : per_run) {
        line += (line.empty() ? "" : "; ") + setting + (verdict == Verdict::kDistinct ? "" : " (n.d.)");
        if (verdict == Verdict::kDistinct) ++distinct[setting];
      }
      std::map<std::string, std::size_t> all;
      for (const auto& [setting, verdict] : per_run) ++all[setting];
      std::string summary;
      const std::string n = std::to_string(per_run.size());
      if (distinct.size() > 1) summary = "runs disagree: different distinct optima";
      else if (all.size() == 1) summary = "the same optimum in " + n + " of " + n + " runs";
      else if (distinct.size() == 1)
        summary = "consistent: " + distinct.begin()->first + " whenever distinct, not distinguishable otherwise";
      else summary = "consistent: not distinguishable in any run (the settings named differ)";
      out << "  " << label << ": " << summary << "  [" << line << "]\n";
    }
  }
}

}  // namespace cnnergy::report
