// The comparison as one self-contained HTML page: grouped bars per workload (throughput, energy per
// unit of work, GFLOPS/W; whiskers = the spread over repetitions), every result set's Pareto front of
// time and energy on one chart, and the utilisation and power distributions (min, mean, max) per
// set. Every string from the databases goes through html_escape.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "report/compare.hpp"
#include "report/html_report.hpp"
#include "report/svg.hpp"
#include "report/sweep_data.hpp"

namespace cnnergy::report {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

using Pick = std::optional<Figure> CompareEntry::*;

// Grouped vertical bars: one group per workload, one bar per result set, whiskers at value +- spread.
// Workloads are named W1, W2, ... by their position in `numbering` (the page lists them once).
std::string grouped_bars_svg(const std::string& id, const std::string& title, const std::string& value_title,
                             const Comparison& c, const std::vector<std::string>& workloads, Pick pick,
                             const std::vector<std::string>& numbering) {
  std::vector<std::size_t> shown;  // sets with a bar somewhere: the legend lists only those
  for (std::size_t si = 0; si < c.sets.size(); ++si)
    for (const auto& w : workloads)
      if (auto it = c.sets[si].workloads.find(w); it != c.sets[si].workloads.end() && (it->second.*pick)) {
        shown.push_back(si);
        break;
      }
  const int width = 640, left = 64, right = 16, top = 34, bottom = 40 + 14 * static_cast<int>(shown.size());
  const int height = 270 + bottom;
  double hi = 0;
  for (const auto& w : workloads)
    for (const auto& s : c.sets)
      if (auto it = s.workloads.find(w); it != s.workloads.end() && (it->second.*pick))
        hi = std::max(hi, (it->second.*pick)->value + (it->second.*pick)->spread);
  if (hi <= 0) return "";
  const auto ticks = nice_ticks(0, hi, 5);
  const double top_value = std::max(hi, ticks.back());
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  auto y_of = [&](double v) { return top + plot_h * (1.0 - v / top_value); };
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"" << html_escape(id) << "\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << " " << height << "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">";
  o << "<text class=\"chart-title\" x=\"" << left << "\" y=\"18\">" << html_escape(title) << "</text>";
  o << "<rect class=\"plot\" x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << plot_h << "\"/>";
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : top_value;
  for (double t : ticks) {
    o << "<line class=\"grid\" x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << num(y_of(t)) << "\" y2=\""
      << num(y_of(t)) << "\"/><text class=\"tick\" text-anchor=\"end\" x=\"" << left - 4 << "\" y=\"" << num(y_of(t) + 4)
      << "\">" << html_escape(format_tick(t, step)) << "</text>";
  }
  o << "<text class=\"axis-title\" transform=\"translate(14," << top + plot_h / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << html_escape(value_title) << "</text>";
  const double group_w = plot_w / static_cast<double>(workloads.size());
  const double bar_w = group_w * 0.8 / static_cast<double>(std::max<std::size_t>(1, c.sets.size()));
  for (std::size_t wi = 0; wi < workloads.size(); ++wi) {
    const double gx = left + group_w * static_cast<double>(wi) + group_w * 0.1;
    for (std::size_t si = 0; si < c.sets.size(); ++si) {
      auto it = c.sets[si].workloads.find(workloads[wi]);
      if (it == c.sets[si].workloads.end() || !(it->second.*pick)) continue;
      const Figure& f = *(it->second.*pick);
      const double x = gx + bar_w * static_cast<double>(si);
      const std::string tip = c.sets[si].label + "\n" + workloads[wi] + "\n" + format_figure(f, "");
      o << "<rect class=\"bar\" data-tip=\"" << html_escape(tip) << "\" x=\"" << num(x) << "\" y=\"" << num(y_of(f.value))
        << "\" width=\"" << num(bar_w * 0.92) << "\" height=\"" << num(y_of(0) - y_of(f.value)) << "\" fill=\""
        << palette_color(si) << "\"><title>" << html_escape(tip) << "</title></rect>";
      if (f.spread > 0) {
        const double cx = x + bar_w * 0.46;
        o << "<line stroke=\"#222\" x1=\"" << num(cx) << "\" x2=\"" << num(cx) << "\" y1=\""
          << num(y_of(std::max(0.0, f.value - f.spread))) << "\" y2=\"" << num(y_of(f.value + f.spread)) << "\"/>";
      }
    }
    const auto pos = std::find(numbering.begin(), numbering.end(), workloads[wi]) - numbering.begin();
    o << "<text class=\"tick\" text-anchor=\"middle\" x=\"" << num(gx + group_w * 0.4) << "\" y=\"" << top + plot_h + 14
      << "\">W" << pos + 1 << "</text>";
  }
  for (std::size_t li = 0; li < shown.size(); ++li) {
    const std::size_t si = shown[li];
    const double lx = left, ly = top + plot_h + 34 + static_cast<double>(li) * 14;
    o << "<rect x=\"" << num(lx) << "\" y=\"" << num(ly - 9) << "\" width=\"10\" height=\"10\" fill=\"" << palette_color(si)
      << "\"/><text class=\"legend\" x=\"" << num(lx + 14) << "\" y=\"" << num(ly) << "\">" << html_escape(c.sets[si].label)
      << "</text>";
  }
  o << "</svg>";
  return o.str();
}

std::string range_text(const std::optional<Figure>& f) {
  if (!f) return "-";
  std::string s = num(f->value);
  if (f->low && f->high) s += " (" + num(*f->low) + " .. " + num(*f->high) + ")";
  return s;
}

}  // namespace

std::string render_comparison_html(const Comparison& c) {
  std::ostringstream b;
  b << "<h1>cnnergy comparison</h1>\n<p class=\"note\">Trials matched on their workload (model, batch, precision, "
       "mode, GPU count), as Gera et al. 2018 compare ML hardware. Whiskers: one standard deviation over the "
       "repetitions. Baseline of the ratios: <b>"
    << html_escape(c.sets.empty() ? std::string("-") : c.sets[c.baseline].label) << "</b>.</p>\n";
  b << "<h2>Result sets</h2>\n<table><tr><th class=\"l\">set</th><th class=\"l\">database</th><th class=\"l\">sweep</th>"
       "<th class=\"l\">tag</th><th class=\"l\">device</th><th>workloads</th></tr>\n";
  for (const auto& s : c.sets)
    b << "<tr><td class=\"l\">" << html_escape(s.label) << "</td><td class=\"l\">" << html_escape(s.db_path)
      << "</td><td class=\"l\">" << html_escape(s.sweep_key) << "</td><td class=\"l\">" << html_escape(s.tag)
      << "</td><td class=\"l\">" << html_escape(s.device) << "</td><td>" << s.workloads.size() << "</td></tr>\n";
  b << "</table>\n";
  for (const auto& n : c.notes) b << "<p class=\"note\">" << html_escape(n) << "</p>\n";

  std::vector<std::string> common;
  for (const auto& [w, sets] : c.matched) common.push_back(w);
  // One numbering of every workload (W1, W2, ...) for all charts.
  std::vector<std::string> all_workloads;
  for (const auto& s : c.sets)
    for (const auto& [w, e] : s.workloads) all_workloads.push_back(w);
  std::sort(all_workloads.begin(), all_workloads.end());
  all_workloads.erase(std::unique(all_workloads.begin(), all_workloads.end()), all_workloads.end());
  b << "<h2>Workloads</h2>\n<table id=\"workloads\"><tr><th>#</th><th class=\"l\">workload</th><th class=\"l\">in</th></tr>\n";
  for (std::size_t i = 0; i < all_workloads.size(); ++i) {
    std::string in;
    for (const auto& s : c.sets)
      if (s.workloads.count(all_workloads[i])) in += (in.empty() ? "" : ", ") + s.label;
    b << "<tr><td>W" << i + 1 << "</td><td class=\"l\">" << html_escape(all_workloads[i]) << "</td><td class=\"l\">"
      << html_escape(in) << "</td></tr>\n";
  }
  b << "</table>\n";
  if (common.empty()) b << "<p id=\"no-common\">No workload is in more than one result set.</p>\n";
  b << "<div class=\"charts\">";
  if (!common.empty()) {
    const bool ps = c.sets[c.matched.begin()->second.front()].workloads.at(common.front()).per_sample;
    b << grouped_bars_svg("bars-throughput", "Throughput", ps ? "samples/s" : "iterations/s", c,
                          common, &CompareEntry::throughput_per_s, all_workloads)
      << grouped_bars_svg("bars-energy", ps ? "Energy per sample" : "Energy per iteration", "J", c, common,
                          &CompareEntry::energy_j, all_workloads)
      << grouped_bars_svg("bars-gflops-per-w", "GFLOPS/W", "GFLOP/J", c, common, &CompareEntry::gflops_per_w, all_workloads);
  }
  b << "</div>\n";
 for (const auto& w : common) {
    b << "<h3>" << html_escape(w) << "</h3>\n<div class=\"scroll\"><table class=\"cmp\"><tr><th class=\"l\">set</th>"
         "<th class=\"l\">trial</th><th>throughput /s</th><th>time</th><th>energy</th><th>GFLOPS/W</th><th>power W</th>"
         "<th>idle W</th><th>GPU util %</th><th>mem util %</th><th>memory MiB</th><th>temp C</th><th>SM MHz</th>"
         "<th class=\"l\">throttle</th></tr>\n";
    for (std::size_t si : c.matched.at(w)) {
      const ResultSet& s = c.sets[si];
      const CompareEntry& e = s.workloads.at(w);
      b << "<tr><td class=\"l\">" << html_escape(s.label) << "</td><td class=\"l\">" << html_escape(e.trial_key) << "</td><td>"
        << html_escape(format_figure(e.throughput_per_s, "")) << "</td><td>" << html_escape(format_figure(e.time_ms, "ms"))
        << "</td><td>" << html_escape(format_figure(e.energy_j, "J")) << "</td><td>"
        << html_escape(format_figure(e.gflops_per_w, "")) << "</td><td>" << html_escape(range_text(e.power_w)) << "</td><td>"
        << (e.idle_power_w ? num(*e.idle_power_w) : "-") << "</td><td>" << html_escape(range_text(e.gpu_util_pct))
        << "</td><td>" << html_escape(range_text(e.mem_util_pct)) << "</td><td>"
        << (e.memory_peak_mib ? num(*e.memory_peak_mib) : "-") << "</td><td>" << html_escape(range_text(e.temperature_c))
        << "</td><td>" << html_escape(range_text(e.sm_clock_mhz)) << "</td><td class=\"l\">" << html_escape(e.top_throttle)
        << "</td></tr>\n";
    }
    b << "</table></div>\n";
  }

  // Each set's Pareto front of (time, energy) over all its trials of the first common workload (or
  // of its own first workload when nothing is common).
  b << "<h2>Pareto fronts of time and energy</h2>\n<div class=\"charts\">";
  std::vector<std::string> front_workloads = common;
  if (front_workloads.empty())
    for (const auto& s : c.sets)
      if (!s.all_points.empty()) front_workloads.push_back(s.all_points.begin()->first);
  std::sort(front_workloads.begin(), front_workloads.end());
  front_workloads.erase(std::unique(front_workloads.begin(), front_workloads.end()), front_workloads.end());
  for (std::size_t wi = 0; wi < front_workloads.size() && wi < 8; ++wi) {
    const std::string& w = front_workloads[wi];
    const auto pos = std::find(all_workloads.begin(), all_workloads.end(), w) - all_workloads.begin();
    Chart chart("pareto-" + std::to_string(wi), "Time and energy of every trial, each set's Pareto front: W" + std::to_string(pos + 1), ChartAxis{"time per unit of work [ms]", {}, {}, {}},
                ChartAxis{"energy per unit of work [J]", {}, {}, {}});
    bool any = false;
    for (std::size_t si = 0; si < c.sets.size(); ++si) {
      auto it = c.sets[si].all_points.find(w);
      if (it == c.sets[si].all_points.end() || it->second.empty()) continue;
      ChartSeries all;
      all.name = c.sets[si].label + " (all trials)";
      all.color = palette_color(si);
      all.line = false;
      all.in_legend = false;
      all.marker_radius = 2.5;
      for (const auto& [t, e] : it->second) all.x.push_back(t), all.y.push_back(e);
      ChartSeries front;
      front.name = c.sets[si].label;
      front.color = palette_color(si);
      for (std::size_t i : tune::pareto_front(it->second)) {
        front.x.push_back(it->second[i].first);
        front.y.push_back(it->second[i].second);
        front.tips.push_back(c.sets[si].label + ": " + format_quantity(it->second[i].first, "ms") + ", " +
                             format_quantity(it->second[i].second, "J"));
      }
      chart.add(std::move(all));
      chart.add(std::move(front));
      any = true;
    }
    if (any) b << chart.svg();
  }
  b << "</div>\n";

  // Distributions: min .. mean .. max of power and utilisation of each set's trial per workload.
  b << "<h2>Power and utilisation distributions</h2>\n<div class=\"charts\">";
  const std::vector<std::pair<std::string, Pick>> dists = {{"Board power [W]", &CompareEntry::power_w},
                                                           {"GPU utilisation [%]", &CompareEntry::gpu_util_pct},
                                                           {"Memory utilisation [%]", &CompareEntry::mem_util_pct}};
  std::vector<std::string> cats;
  for (std::size_t i = 0; i < all_workloads.size(); ++i) cats.push_back("W" + std::to_string(i + 1));
  for (std::size_t di = 0; di < dists.size(); ++di) {
    Chart chart("dist-" + std::to_string(di), dists[di].first + " per workload: mean, whiskers min..max",
                ChartAxis{"workload", {}, {}, cats}, ChartAxis{dists[di].first, {}, {}, {}});
    bool any = false;
    for (std::size_t si = 0; si < c.sets.size(); ++si) {
      ChartSeries s;
      s.name = c.sets[si].label;
      s.color = palette_color(si);
      s.line = false;
      for (std::size_t wi = 0; wi < all_workloads.size(); ++wi) {
        auto it = c.sets[si].workloads.find(all_workloads[wi]);
        if (it == c.sets[si].workloads.end() || !(it->second.*dists[di].second)) continue;
        const Figure& f = *(it->second.*dists[di].second);
        s.x.push_back(static_cast<double>(wi) + 0.12 * (static_cast<double>(si) - 0.5 * static_cast<double>(c.sets.size() - 1)));
        s.y.push_back(f.value);
        s.y_low.push_back(f.low.value_or(f.value));
        s.y_high.push_back(f.high.value_or(f.value));
        s.tips.push_back(c.sets[si].label + " " + all_workloads[wi] + ": " + range_text(f));
      }
      if (s.x.empty()) continue;
      chart.add(std::move(s));
      any = true;
    }
    if (any) b << chart.svg();
  }
  b << "</div>\n";

  if (!c.unmatched.empty()) {
    b << "<h2>Workloads in one set only</h2>\n<table id=\"unmatched\"><tr><th class=\"l\">workload</th><th class=\"l\">only in</th></tr>\n";
    for (const auto& [w, set] : c.unmatched)
      b << "<tr><td class=\"l\">" << html_escape(w) << "</td><td class=\"l\">" << html_escape(c.sets[set].label) << "</td></tr>\n";
    b << "</table>\n";
  }
  return html_page("cnnergy comparison", b.str());
}

}  // namespace cnnergy::report
