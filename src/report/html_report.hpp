// The HTML report: ONE self-contained file that opens offline (inline CSS, inline SVG charts, a few
// lines of inline JavaScript for tooltips; no external resource). Per sweep: environment, optimum
// table, normalised energy vs normalised time with iso-lines of E, EDP and EDS(k) through the reference
// (Krzywaniak et al. 2022, Fig. 1) and the Pareto front, each metric against each knob, per-phase stacked bars,
// per-layer breakdown, and every trial. Every string from the database is HTML-escaped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tune/metrics.hpp"
#include "tune/store.hpp"

namespace cnnergy::report {

struct HtmlReportOptions {
  std::vector<tune::Objective> objectives = tune::default_objectives();  // rows of the optimum table
  std::vector<double> eds_k = {1.5, 2.0};  // EDS iso-lines in the normalised chart
  std::optional<std::int64_t> sweep_id;    // only this sweep (default: every sweep in the store)
  std::string title;                       // default: "cnnergy report: <file name>"
  std::size_t stability_resamples = 0;     // > 0: bootstrap stability of every optimum (report/stability_view.hpp)
};

std::string render_html_report(const tune::ResultStore& store, const HtmlReportOptions& options = {});
// Renders and writes atomically; DataError when the store has no sweep (or not the one asked for).
void write_html_report(const tune::ResultStore& store, const std::string& path, const HtmlReportOptions& options = {});

// The page around a body: the report's style sheet and tooltip script, the escaped title as <title>.
// Other pages (the comparison) share the report's look this way.
std::string html_page(const std::string& title, const std::string& body_html);

}  // namespace cnnergy::report
