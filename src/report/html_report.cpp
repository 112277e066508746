// The self-contained HTML report: page skeleton, tables, and the charts of report_charts.cpp.
#include "report/html_report.hpp"

#include <algorithm>
#include <filesystem>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "report/convbench_html.hpp"
#include "report/export.hpp"
#include "report/report_charts.hpp"
#include "report/stability_view.hpp"
#include "report/svg.hpp"
#include "report/sweep_data.hpp"
#include "report/sweep_title.hpp"
#include "tune/significance.hpp"

namespace cnnergy::report {

using namespace cnnergy::tune;

namespace {

const char* const kCss = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 24px; color: #222; max-width: 1800px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 19px; margin-top: 36px; border-bottom: 2px solid #0072B2; padding-bottom: 4px; }
h3 { font-size: 16px; margin-top: 26px; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 13px; }
th, td { border: 1px solid #d0d0d0; padding: 3px 8px; text-align: right; vertical-align: top; white-space: nowrap; }
td.wrap { white-space: pre-wrap; min-width: 240px; max-width: 520px; } .scroll { overflow-x: auto; }
figure { margin: 0; } figcaption { max-width: 540px; }
th { background: #f0f4f8; } td.l, th.l { text-align: left; }
tr.ref td { background: #fff8e1; } tr.pareto td:first-child { border-left: 4px solid #D55E00; }
tr.failed td, tr.does_not_fit td, tr.skipped td { color: #888; }
code, pre { background: #f5f5f5; padding: 2px 4px; font-size: 12px; white-space: pre-wrap; word-break: break-all; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; } .note { color: #666; font-size: 12px; }
svg.chart { background: #fff; border: 1px solid #e0e0e0; }
svg .chart-title { font: bold 13px sans-serif; fill: #222; } svg .tick { font: 11px sans-serif; fill: #444; }
svg .axis-title { font: 12px sans-serif; fill: #222; } svg .legend { font: 11px sans-serif; fill: #222; }
svg .label { font: bold 11px sans-serif; } svg .plot { fill: #fcfcfc; stroke: #999; } svg .grid { stroke: #e6e6e6; }
svg .pt:hover, svg .bar:hover { stroke: #000; stroke-width: 1.5; }
#tip { position: absolute; display: none; background: #222; color: #fff; padding: 4px 7px; border-radius: 3px; font: 12px sans-serif; pointer-events: none; white-space: pre; z-index: 10; }
)";

// Tooltips from data-tip attributes; textContent only, so no markup from the data can run.
const char* const kScript = R"(
(function () {
  var tip = document.createElement('div');
  tip.id = 'tip';
  document.body.appendChild(tip);
  document.addEventListener('mouseover', function (e) {
    var el = e.target && e.target.closest ? e.target.closest('[data-tip]') : null;
    if (!el) { tip.style.display = 'none'; return; }
    tip.textContent = el.getAttribute('data-tip');
    tip.style.display = 'block';
  });
  document.addEventListener('mousemove', function (e) {
    tip.style.left = (e.pageX + 14) + 'px';
    tip.style.top = (e.pageY + 14) + 'px';
  });
})();
)";

std::string td(const std::string& s, bool left = false) { return std::string(left ? "<td class=\"l\">" : "<td>") + html_escape(s) + "</td>"; }
std::string th(const std::string& s, bool left = false) { return std::string(left ? "<th class=\"l\">" : "<th>") + html_escape(s) + "</th>"; }

std::string environment_table(const SweepRecord& s) {
  const Environment& e = s.environment;
  std::string gpus;
  for (std::size_t i = 0; i < e.gpu_names.size(); ++i) gpus += (i ? ", " : "") + e.gpu_names[i];
  std::vector<std::pair<std::string, std::string>> rows = {
      {"GPUs", gpus.empty() ? "-" : gpus}, {"driver", e.driver_version}, {"CUDA", e.cuda_version}, {"cuDNN", e.cudnn_version},
      {"host", e.host},  {"date", e.date}, {"cnnergy", e.cnnergy_version}, {"sweep created", s.created}, {"sweep key", s.sweep_key},
      {"definition", s.description}};
  for (const auto& [k, v] : e.extra) rows.emplace_back(k, v);
  std::string o = "<table class=\"env\">";
  for (const auto& [k, v] : rows)  // the definition keeps its line breaks (workload, knobs, settings)
    o += "<tr>" + th(k, true) + (k == "definition" ? "<td class=\"l wrap\">" + html_escape(v) + "</td>" : td(v.empty() ? "-" : v, true)) +
         "</tr>";
  return o + "</table>\n";
}

std::string optimum_table(const SweepData& d, const SweepStability& st) {
  const bool with_stability = st.resamples > 0;
  const char* unit = d.analysis.per_sample ? "sample" : "iteration";
  std::string o = "<table class=\"optima\"><tr>" + th("target metric", true) + th("value") + th("95 % interval") +
                  th("knobs", true) + th("verdict", true) + (with_stability ? th("stability", true) : "") + th("avg power") +
                  th(std::string("energy / ") + unit) + th("energy vs default") + th(std::string("time / ") + unit) +
                  th("time vs default") + "</tr>\n";
  if (d.analysis.reference) {
    const std::size_t r = *d.analysis.reference;
    o += "<tr class=\"ref\">" + td("default (reference)", true) + td("-") + td("-") + td(d.label(r), true) + td("", true) +
         (with_stability ? td("", true) : "") +
         td(format_metric(d, r, Metric::kAvgPower, "W")) + td(format_metric(d, r, d.analysis.energy_metric(), "J")) + td("-") +
         td(format_metric(d, r, d.analysis.time_metric(), "ms")) + td("-") + "</tr>\n";
  }
  for (const Optimum& opt : d.analysis.optima) {
    const std::string u = opt.objective.kind == Objective::Kind::kEds ? "" : std::string(metric_unit(opt.objective.metric));
    o += "<tr>" + td((opt.objective.maximise() ? "max " : "min ") + opt.objective.label(), true) + td(format_quantity(opt.value, u)) +
         td(format_interval(opt, u)) + td(d.label(opt.trial), true) + td(format_verdict(d, opt), true) +
         (with_stability ? td(stability_cell(d, st, opt.objective), true) : "") +
         td(format_metric(d, opt.trial, Metric::kAvgPower, "W")) + td(format_metric(d, opt.trial, d.analysis.energy_metric(), "J")) +
         td(format_percent(opt.energy_change_pct)) + td(format_quantity(opt.time, "ms")) + td(format_percent(opt.time_change_pct)) + "</tr>\n";
  }
  o = "<div class=\"scroll\">" + o + "</table></div>\n";
  o += "<p class=\"note\">Interval: " + std::string(kIntervalMethod) +
       "; an optimum whose interval overlaps the default's or the runner-up's is not distinguishable from it.</p>\n";
  if (!d.analysis.reference)
    o += "<p class=\"note\">No reference (default) trial finished: EDS and the changes against the default are not available.</p>\n";
  return o;
}

std::string trials_table(const SweepData& d) {
  const Metric tm = d.analysis.time_metric(), em = d.analysis.energy_metric();
  const char* unit = d.analysis.per_sample ? "sample" : "iteration";
  std::string o = "<table class=\"trials\"><tr>" + th("#") + th("trial", true) + th("status", true) + th("reps") +
                  th(std::string("time / ") + unit) + th("\u00b1 95 %") + th(std::string("energy / ") + unit) + th("\u00b1 95 %") + th("avg power") +
                  th("peak power") + th("EDP [J*s]") + th("EDS(k=2)") + th("GFLOPS/W") + th("accuracy") + th("error", true) + "</tr>\n";
  const Objective eds2 = parse_objective("eds:2");
  for (std::size_t i = 0; i < d.summaries.size(); ++i) {
    const TrialSummary& s = d.summaries[i];
    std::string cls(trial_status_name(s.status));
    if (s.reference) cls += " ref";
    if (std::find(d.analysis.pareto.begin(), d.analysis.pareto.end(), i) != d.analysis.pareto.end()) cls += " pareto";
    o += "<tr class=\"" + cls + "\">" + td(std::to_string(d.trials[i].trial_index)) + td(s.key + (s.reference ? "  (reference)" : ""), true) +
         td(std::string(trial_status_name(s.status)), true) + td(std::to_string(d.trials[i].repetitions)) +
         td(format_metric(d, i, tm, "ms")) + td(format_plus_minus(s.find(tm))) + td(format_metric(d, i, em, "J")) +
         td(format_plus_minus(s.find(em))) + td(format_metric(d, i, Metric::kAvgPower, "W")) +
         td(format_metric(d, i, Metric::kPeakPower, "W")) + td(format_metric(d, i, Metric::kEdp, "")) + td(format_optional(objective_value(s, eds2, d.reference(), d.analysis.per_sample), "")) +
         td(format_optional(d.median(i, Metric::kGflopsPerWatt), "")) + td(format_optional(d.median(i, Metric::kAccuracy), "")) +
         "<td class=\"l wrap\">" + html_escape(d.trials[i].error_message) + "</td></tr>\n";
  }
  return "<div class=\"scroll\">" + o + "</table></div>\n";
}

std::string sweep_section(const ResultStore& store, const SweepData& d, const HtmlReportOptions& options) {
  const std::string id = "s" + std::to_string(d.sweep.id);
  std::size_t counts[4] = {0, 0, 0, 0};
  for (const auto& s : d.summaries) ++counts[static_cast<int>(s.status)];
  std::string o = "<section id=\"" + id + "\">\n<h2>Sweep " + std::to_string(d.sweep.id) + ": " + html_escape(sweep_title(d)) + "</h2>\n";
  o += "<p>Command: <code>" + html_escape(d.sweep.command_line) + "</code></p>\n";
  o += "<p>" + std::to_string(d.summaries.size()) + " trials: " + std::to_string(counts[0]) + " ok, " + std::to_string(counts[1]) +
       " failed, " + std::to_string(counts[2]) + " did not fit, " + std::to_string(counts[3]) + " skipped. Energy and time are per " +
       (d.analysis.per_sample ? "sample" : "iteration") + ", all GPUs together; values are medians over the repetitions; \u00b1 is the " + std::string(kIntervalMethod) + ", relative to the mean.</p>\n";
  if (!d.sweep.notes.empty()) o += "<p class=\"note\">Notes: <code>" + html_escape(d.sweep.notes) + "</code></p>\n";
  o += "<h3>Environment</h3>\n" + environment_table(d.sweep);
  const SweepStability st = analyse_stability(d, options.stability_resamples);
  o += "<h3>Optimum per metric</h3>\n" + optimum_table(d, st);
  if (const std::string rep = stability_html(d, st); !rep.empty()) o += "<h3>Repeatability</h3>\n" + rep;
  const std::string norm = detail::normalised_chart(d, options.eds_k, id + "-norm");
  if (!norm.empty()) {
    o += "<h3>Energy against time, normalised to the default</h3>\n<div class=\"charts\">" + norm + "</div>\n";
    o += "<p class=\"note\">Dashed lines pass through the default setting (1, 1): points below a line are better than the default "
         "for that metric (Krzywaniak et al. 2022, Fig. 1). The Pareto front joins the trials no other trial beats in both time and energy.</p>\n";
  }
  const auto kc = detail::knob_charts(d, id + "-knob");
  if (!kc.empty()) {
    o += "<h3>Metrics against each knob</h3>\n<p class=\"note\">Points are medians; whiskers span the repetitions (min to max).</p>\n<div class=\"charts\">";
    for (const auto& c : kc) o += c;
    o += "</div>\n";
  }
  if (const std::string ic = detail::infer_charts(store, d, id); !ic.empty())
    o += "<h3>Inference: latency, throughput, energy per image</h3>\n<p class=\"note\">Latency of device-resident "
         "requests (run + synchronize), nearest-rank percentiles; throughput and energy from the measured windows.</p>\n"
         "<div class=\"charts\">" + ic + "</div>\n";
  if (const std::string ph = detail::phase_charts(d, id); !ph.empty()) o += "<h3>Phases</h3>\n<div class=\"charts\">" + ph + "</div>\n";
  if (const std::string ly = detail::layer_charts(d, id); !ly.empty()) o += "<h3>Layers</h3>\n<div class=\"charts\">" + ly + "</div>\n";
  o += "<h3>All trials</h3>\n" + trials_table(d);
  return o + "</section>\n";
}

}  // namespace

std::string render_html_report(const ResultStore& store, const HtmlReportOptions& options) {
  std::vector<SweepRecord> sweeps = store.sweeps();
  if (options.sweep_id) {
    sweeps.erase(std::remove_if(sweeps.begin(), sweeps.end(), [&](const SweepRecord& s) { return s.id != *options.sweep_id; }), sweeps.end());
    if (sweeps.empty()) throw DataError("results database " + store.path() + " has no sweep " + std::to_string(*options.sweep_id));
  }
  // Convolution studies (`convbench --db`) follow the sweeps; --sweep shows that sweep alone.
  const std::vector<StudyRecord> studies = options.sweep_id ? std::vector<StudyRecord>{} : store.studies();
  if (sweeps.empty() && studies.empty())
    throw DataError("results database " + store.path() + " holds no sweep or study yet: nothing to report");
  const std::string title = options.title.empty() ? "cnnergy report: " + std::filesystem::path(store.path()).filename().string() : options.title;
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width\">\n";
  o += "<title>" + html_escape(title) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n";
  o += "<h1>" + html_escape(title) + "</h1>\n<p class=\"note\">Generated " + html_escape(utc_timestamp()) + " from <code>" +
       html_escape(store.path()) + "</code>. This file is self-contained and works offline.</p>\n";
  if (sweeps.size() + studies.size() > 1) {
    o += "<ul>";
    for (const auto& s : sweeps)
      o += "<li><a href=\"#s" + std::to_string(s.id) + "\">Sweep " + std::to_string(s.id) + ": " + html_escape(s.description) + "</a></li>";
    for (const auto& s : studies)
      o += "<li><a href=\"#study" + std::to_string(s.id) + "\">Study " + std::to_string(s.id) + ": " + html_escape(s.kind) +
           " on " + html_escape(s.device) + ", " + html_escape(s.created) + "</a></li>";
    o += "</ul>\n";
  }
  for (const auto& s : sweeps) o += sweep_section(store, load_sweep(store, s.id, options.objectives), options);
  for (const auto& s : studies) {
    const std::string id = "study" + std::to_string(s.id);
    o += "<section id=\"" + id + "\">\n";
    if (s.kind == "convbench")
      o += convbench_section(Json::parse(s.document_json), "Study " + std::to_string(s.id) + ": convolution study, " +
                             s.created, id + "-");
    else
      o += "<h2>Study " + std::to_string(s.id) + ": " + html_escape(s.kind) + "</h2>\n<p class=\"note\">This cnnergy "
           "does not know how to draw this kind of study; its document is in `cnnergy export --json`.</p>\n";
    o += "<p class=\"note\">Command: <code>" + html_escape(s.command_line) + "</code></p>\n</section>\n";
  }
  o += "<script>" + std::string(kScript) + "</script>\n</body>\n</html>\n";
  return o;
}

std::string html_page(const std::string& title, const std::string& body_html) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" "
         "content=\"width=device-width\">\n<title>" + html_escape(title) + "</title>\n<style>" + kCss +
         "</style>\n</head>\n<body>\n" + body_html + "<script>" + std::string(kScript) + "</script>\n</body>\n</html>\n";
}

void write_html_report(const ResultStore& store, const std::string& path, const HtmlReportOptions& options) {
  write_file_atomically(path, render_html_report(store, options));
}

}  // namespace cnnergy::report
