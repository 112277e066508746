// convbench_html(): one chart per direction x precision x layout for time, workspace and energy
// (problems on the x axis, one series per implementation), and a log-log roofline per precision.
#include "report/convbench_html.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "report/html_report.hpp"
#include "report/svg.hpp"

namespace cnnergy::report {
namespace {

struct Key {
  std::string direction, precision, layout;
  auto operator<=>(const Key&) const = default;
};

bool ok(const Json& c) { return c.at("status").as_string() == "ok"; }

// One chart: problems (P1, P2, ...) on x, `field` of the ok cells on y, one series per implementation.
std::string metric_chart(const Json& study, const Key& key, const std::string& field, double scale,
                         const std::string& title, const std::string& y_title, const std::string& id) {
  std::vector<std::string> categories;
  std::map<std::string, std::size_t> index;
  for (const Json& p : study.at("problems").items()) {
    index[p.at("id").as_string()] = categories.size();
    categories.push_back("P" + std::to_string(categories.size() + 1));
  }
  std::map<std::string, ChartSeries> series;
  for (const Json& c : study.at("cells").items()) {
    if (!ok(c) || c.at("direction").as_string() != key.direction || c.at("precision").as_string() != key.precision ||
        c.at("layout").as_string() != key.layout || c.at(field).is_null())
      continue;
    ChartSeries& s = series[c.at("implementation").as_string()];
    s.name = c.at("implementation").as_string();
    s.line = false;
    s.x.push_back(static_cast<double>(index.at(c.at("problem").as_string())));
    s.y.push_back(c.at(field).as_number() * scale);
    s.tips.push_back(s.name + " on " + c.at("problem").as_string() + ": " + std::to_string(s.y.back()) + " " + y_title);
  }
  if (series.empty()) return {};
  ChartAxis x{"problem (table below)", {}, {}, categories};
  ChartAxis y{y_title, 0.0, {}, {}};
  Chart chart(id, title, x, y);
  for (auto& [name, s] : series) chart.add(std::move(s));
  chart.set_size(760, 380);
  return chart.svg();
}

std::string roofline(const Json& study, const std::string& precision, const std::string& id) {
  std::map<std::string, ChartSeries> series;
  double lo = 1e300, hi = -1e300;
  for (const Json& c : study.at("cells").items()) {
    if (!ok(c) || c.at("precision").as_string() != precision) continue;
    const double ai = c.at("arithmetic_intensity_flop_per_byte").as_number();
    const double tf = c.at("tflops").as_number();
    if (!(ai > 0) || !(tf > 0)) continue;
    const std::string name = c.at("implementation").as_string();
    ChartSeries& s = series[name];
    s.name = name;
    s.line = false;
    s.x.push_back(std::log10(ai));
    s.y.push_back(std::log10(tf));
    s.tips.push_back(name + " " + c.at("direction").as_string() + " " + c.at("layout").as_string() + " on " +
                     c.at("problem").as_string() + ": " + std::to_string(tf) + " TFLOP/s at " + std::to_string(ai) +
                     " FLOP/byte");
    lo = std::min(lo, s.x.back());
    hi = std::max(hi, s.x.back());
  }
  if (series.empty()) return {};
  Chart chart(id, "Roofline, " + precision + ": achieved TFLOP/s against arithmetic intensity (log10 both)",
              ChartAxis{"log10 arithmetic intensity (FLOP per byte of x, w, y)", {}, {}, {}},
              ChartAxis{"log10 TFLOP/s", {}, {}, {}});
  for (auto& [name, s] : series) chart.add(std::move(s));
  const Json& peaks = study.at("peaks");
  if (!peaks.is_null()) {
    const double peak = peaks.at(precision + "_tflops").as_number();
    const double bw = peaks.at("dram_gb_per_s").as_number();  // GB/s x FLOP/byte = GFLOP/s
    ChartSeries ceiling;
    ceiling.name = "ceiling (" + peaks.at("matched").as_string() + ")";
    ceiling.color = "#444";
    ceiling.dashed = true;
    ceiling.markers = false;
    ceiling.sets_range = false;
    const double x0 = lo - 1, x1 = hi + 1;
    const double knee = std::log10(peak * 1e3 / bw);
    for (const double x : {x0, std::clamp(knee, x0, x1), x1}) {
      ceiling.x.push_back(x);
      ceiling.y.push_back(std::min(std::log10(peak), std::log10(bw * std::pow(10.0, x) / 1e3)));
    }
    chart.add(std::move(ceiling));
  }
  chart.set_size(760, 420);
  return chart.svg();
}

}  // namespace

std::string convbench_section(const Json& study, const std::string& title, const std::string& id_prefix) {
  std::string body = "<h2>" + html_escape(title) + "</h2>\n<p class=\"note\">" + html_escape(study.at("device").as_string()) +
                     " (" + html_escape(study.at("backend").as_string()) + "); " +
                     html_escape(study.at("timing").as_string()) + ". Peaks: " +
                     html_escape(study.at("peaks").is_null() ? std::string("unknown for this device")
                                                             : study.at("peaks").at("source").as_string()) +
                     ". Energy: " +
                     html_escape(study.at("energy_source").is_null() ? std::string("not measured")
                                                                      : study.at("energy_source").as_string()) +
                     ".</p>\n<table><tr><th>problem</th><th>shape</th><th>source</th><th>layers</th></tr>\n";
  std::size_t i = 0;
  for (const Json& p : study.at("problems").items()) {
    std::string layers;
    for (const Json& l : p.at("layers").items()) layers += (layers.empty() ? "" : ", ") + l.as_string();
    body += "<tr><td>P" + std::to_string(++i) + "</td><td><code>" + html_escape(p.at("id").as_string()) + "</code></td><td>" +
            html_escape(p.at("source").as_string()) + "</td><td>" + html_escape(layers) + "</td></tr>\n";
  }
  body += "</table>\n";
  std::set<Key> keys;
  std::set<std::string> precisions;
  for (const Json& c : study.at("cells").items()) {
    keys.insert({c.at("direction").as_string(), c.at("precision").as_string(), c.at("layout").as_string()});
    precisions.insert(c.at("precision").as_string());
  }
  std::size_t n = 0;
  for (const Key& k : keys) {
    const std::string what = k.direction + ", " + k.precision + ", " + k.layout;
    body += "<h3>" + html_escape(what) + "</h3>\n";
    body += metric_chart(study, k, "time_ms_median", 1.0, "Time per call, " + what, "ms (median)",
                         id_prefix + "t" + std::to_string(n));
    body += metric_chart(study, k, "workspace_bytes", 1.0 / (1 << 20), "Extra memory (workspace), " + what, "MiB",
                         id_prefix + "m" + std::to_string(n));
    body += metric_chart(study, k, "joules_per_call_median", 1e3, "Energy per call, " + what, "mJ (median)",
                         id_prefix + "e" + std::to_string(n));
    ++n;
  }
  body += "<h3>Roofline</h3>\n";
  for (const auto& prec : precisions) body += roofline(study, prec, id_prefix + "r" + prec);
  std::size_t failed = 0;
  for (const Json& c : study.at("cells").items()) failed += ok(c) ? 0 : 1;
  body += "<p class=\"note\">" + std::to_string(failed) +
          " cells did not run (unsupported, does_not_fit or failed); their reasons are in the JSON and the terminal "
          "table.</p>\n";
  return body;
}

std::string convbench_html(const Json& study) {
  return html_page("cnnergy convbench", convbench_section(study, "Convolution study", ""));
}

}  // namespace cnnergy::report
