// `cnnergy compare DB... [--baseline DB|tag] [--by device|sweep|tag] [--html FILE]`: opens every
// database read-only, matches trials on their workload and prints them side by side; no common
// workload is not an error (exit 0, the unmatched lists are the answer).
#include "cli/cmd_compare.hpp"

#include <iostream>

#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "core/json.hpp"
#include "report/compare.hpp"
#include "report/export.hpp"

namespace cnnergy::cli {
namespace {

Json figure_json(const std::optional<report::Figure>& f) {
  if (!f) return Json();
  Json j = Json::object();
  j["value"] = f->value;
  j["spread"] = f->spread;
  return j;
}

// The machine-readable comparison: one row per (workload, set), with the baseline's ratios.
Json comparison_json(const report::Comparison& c) {
  Json doc = Json::object();
  Json sets = Json::array();
  for (const auto& s : c.sets) {
    Json x = Json::object();
    x["label"] = s.label;
    x["db"] = s.db_path;
    x["device"] = s.device;
    x["tag"] = s.tag;
    sets.push_back(x);
  }
  doc["sets"] = sets;
  doc["baseline"] = c.sets.empty() ? Json() : Json(c.sets[c.baseline].label);
  Json rows = Json::array();
  for (const auto& [workload, members] : c.matched) {
    const auto& base_set = c.sets[c.baseline];
    const auto base = base_set.workloads.find(workload);
    for (std::size_t i : members) {
      const report::CompareEntry& e = c.sets[i].workloads.at(workload);
      Json r = Json::object();
      r["workload"] = workload;
      r["set"] = c.sets[i].label;
      r["trial"] = e.trial_key;
      r["per_sample"] = e.per_sample;
      r["throughput_per_s"] = figure_json(e.throughput_per_s);
      r["time_ms"] = figure_json(e.time_ms);
      r["energy_j"] = figure_json(e.energy_j);
      r["gflops_per_w"] = figure_json(e.gflops_per_w);
      r["avg_power_w"] = figure_json(e.avg_power_w);
      auto ratio = [&](const std::optional<report::Figure> report::CompareEntry::*f) -> Json {
        if (base == base_set.workloads.end() || !(e.*f) || !(base->second.*f) || (base->second.*f)->value == 0)
          return Json();
        return Json((e.*f)->value / (base->second.*f)->value);
      };
      r["time_ratio_vs_baseline"] = ratio(&report::CompareEntry::time_ms);
      r["energy_ratio_vs_baseline"] = ratio(&report::CompareEntry::energy_j);
      rows.push_back(r);
    }
  }
  doc["rows"] = rows;
  Json unmatched = Json::array();
  for (const auto& [workload, set] : c.unmatched) {
    Json u = Json::object();
    u["workload"] = workload;
    u["only_in"] = c.sets[set].label;
    unmatched.push_back(u);
  }
  doc["unmatched"] = unmatched;
  return doc;
}

}  // namespace

int run_compare(const std::vector<std::string>& args) {
  ArgParser p("compare",
              "Set result sets from several databases (other GPUs, the CPU, other drivers, other tags) side by side: "
              "trials are matched on their workload (model, batch, precision, mode, GPU count); throughput, time and "
              "energy per sample, GFLOPS/W, power, utilisation, memory and temperature with ratios against the "
              "baseline (Gera et al. 2018 compare ML hardware this way). Databases are opened read-only.");
  p.positional("DB...", "one or more results databases");
  p.option("baseline", "the set the ratios are against: a database path, a tag or a set label (default: the first)");
  p.option("by", "what a result set is: device (GPU or CPU kind), sweep, or tag", "device", {"device", "sweep", "tag"});
  p.option("html", "also write the comparison as a self-contained HTML page here");
  declare_output_flags(p, "the comparison table (JSON/CSV: one row per workload and result set)");
  p.epilog("Per workload, each set shows its trial at the reference (default) hardware setting where it has one.\n"
           "A workload present in some sets only is listed as such; no common workload at all exits 0.");
  // ArgParser takes a fixed number of positionals: the first goes through it, the rest are more databases.
  std::vector<std::string> head, more;
  bool have_first = false;
  bool value_next = false;
  for (const auto& a : args) {
    if (value_next) {
      head.push_back(a);
      value_next = false;
    } else if (a.starts_with("-")) {
      head.push_back(a);
      value_next = (a == "--baseline" || a == "--by" || a == "--html" || a == "-o" || a == "--out" ||
                    a == "--format" || a == "--json" || a == "--csv");
    } else if (!have_first) {
      head.push_back(a);
      have_first = true;
    } else {
      more.push_back(a);
    }
  }
  if (!p.parse(head)) return 0;
  OutputSink sink(p);
  std::vector<std::string> dbs = {p.get("DB...")};
  dbs.insert(dbs.end(), more.begin(), more.end());
  report::CompareOptions o;
  o.by = report::parse_compare_by(p.get("by"));
  o.baseline = p.get_optional("baseline");
  const report::Comparison c = report::build_comparison(dbs, o);
  report::print_comparison(std::cout, c);
  if (auto html = p.get_optional("html")) {
    report::write_file_atomically(*html, report::render_comparison_html(c));
    std::cout << "html: " << *html << "\n";
  }
  sink.finish(comparison_json(c), "rows");
  return 0;
}

}  // namespace cnnergy::cli
