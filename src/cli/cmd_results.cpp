// `cnnergy merge`, `cnnergy export` and `cnnergy report`: read results databases written by sweeps.
#include "cli/cmd_results.hpp"

#include <cstdint>
#include <cstdio>
#include <iostream>

#include "cli/args.hpp"
#include "core/errors.hpp"
#include "report/export.hpp"
#include "report/html_report.hpp"
#include "report/table.hpp"
#include "tune/metrics.hpp"
#include "tune/store.hpp"

namespace cnnergy::cli {

int run_merge(const std::vector<std::string>& args) {
  ArgParser p("merge", "Merge results databases into one: the shards of a sweep (--shard i/N) become one sweep, "
                       "different sweeps are kept side by side. A trial present twice keeps the better status "
                       "(ok > does_not_fit > skipped > failed) and is reported.");
  p.positional("OUT.db", "the database to merge into (created when missing)");
  p.positional("IN.db...", "one or more databases to merge from (read only)");
  p.epilog("The merge is one transaction: on any error (a damaged input, a full disk) OUT.db is left as it was.");
  // ArgParser takes a fixed number of positionals: the first two go through it, the rest are more inputs.
  std::vector<std::string> head, more_inputs;
  std::size_t positionals = 0;
  for (const auto& a : args) {
    if (a.starts_with("-") || positionals < 2) {
      if (!a.starts_with("-")) ++positionals;
      head.push_back(a);
    } else {
      more_inputs.push_back(a);
    }
  }
  if (!p.parse(head)) return 0;
  std::vector<std::string> inputs = {p.get("IN.db...")};
  inputs.insert(inputs.end(), more_inputs.begin(), more_inputs.end());
  const tune::MergeReport r = tune::merge_stores(p.get("OUT.db"), inputs);
  constexpr std::size_t kMaxNotes = 20;  // merging a file twice would otherwise print every trial
  for (std::size_t i = 0; i < r.messages.size() && i < kMaxNotes; ++i) std::fprintf(stderr, "cnnergy: note: %s\n", r.messages[i].c_str());
  if (r.messages.size() > kMaxNotes) std::fprintf(stderr, "cnnergy: note: ... and %zu more\n", r.messages.size() - kMaxNotes);
  std::printf("merged %zu database(s) into %s: %zu trials copied, %zu sweeps created, %zu sweeps merged, %zu duplicates "
              "kept as stored, %zu duplicates replaced by a better status\n",
              inputs.size(), p.get("OUT.db").c_str(), r.trials_copied, r.sweeps_created, r.sweeps_merged, r.duplicates_kept,
              r.duplicates_replaced);
  return 0;
}

int run_export(const std::vector<std::string>& args) {
  ArgParser p("export", "Export a results database: CSV (one row per trial with every knob, metric median and "
                        "spread) and/or JSON (everything, repetitions included).");
  p.positional("DB", "results database written by `cnnergy sweep`");
  p.option("csv", "write the trials as CSV to this file");
  p.option("json", "write everything as JSON to this file");
  if (!p.parse(args)) return 0;
  const auto csv = p.get_optional("csv"), json = p.get_optional("json");
  if (!csv && !json) throw InvalidArgument("'cnnergy export' needs --csv FILE and/or --json FILE");
  const tune::ResultStore store(p.get("DB"), tune::ResultStore::Mode::kReadOnly);
  if (csv) {
    report::export_csv(store, *csv);
    std::printf("wrote %s\n", csv->c_str());
  }
  if (json) {
    report::export_json(store, *json);
    std::printf("wrote %s\n", json->c_str());
  }
  return 0;
}

int run_report(const std::vector<std::string>& args) {
  ArgParser p("report", "Print each sweep's trials and its optimum per metric (energy saved and time lost against "
                        "the default, as in Krzywaniak et al. 2022, Tables 2-3), and write a self-contained HTML report with charts.");
  p.positional("DB", "results database written by `cnnergy sweep`");
  p.option("output", "HTML report to write (also -o); without it only the terminal tables are printed");
  p.option("metric", "comma-separated metrics for the optimum table: time, energy, power, peak_power, edp, ed2p, "
                     "eds:K, gflops, gflops_per_w, samples_per_j, accuracy",
           "energy,time,edp,ed2p,eds:1.5,eds:2,gflops_per_w,samples_per_j,accuracy");
  p.option("eds-k", "comma-separated k values of the EDS lines in the normalised chart", "1.5,2");
  p.option("sweep", "only this sweep id (default: every sweep in the database)");
  p.flag("quiet", "do not print the terminal tables");
  std::vector<std::string> translated;
  for (const auto& a : args) translated.push_back(a == "-o" ? "--output" : a.starts_with("-o=") ? "--output=" + a.substr(3) : a);
  if (!p.parse(translated)) return 0;

  report::HtmlReportOptions options;
  options.objectives.clear();
  for (const auto& m : split_list(p.get("metric"), "--metric")) options.objectives.push_back(tune::parse_objective(m));
  options.eds_k.clear();
  for (const auto& k : split_list(p.get("eds-k"), "--eds-k")) options.eds_k.push_back(tune::parse_objective("eds:" + k).eds_k);
  if (p.get_optional("sweep")) options.sweep_id = p.get_int("sweep", 1, INT64_MAX);

  const tune::ResultStore store(p.get("DB"), tune::ResultStore::Mode::kReadOnly);
  const auto sweeps = store.sweeps();
  if (sweeps.empty()) throw DataError("results database " + store.path() + " holds no sweep yet: nothing to report");
  bool found = false;
  for (const auto& s : sweeps) {
    if (options.sweep_id && s.id != *options.sweep_id) continue;
    found = true;
    if (p.get_flag("quiet")) continue;
    const report::SweepData d = report::load_sweep(store, s.id, options.objectives);
    report::print_trials_table(std::cout, d);
    std::cout << "\n";
    report::print_optimum_table(std::cout, d);
    std::cout << "\n";
  }
  if (!found) throw InvalidArgument("results database " + store.path() + " has no sweep " + std::to_string(*options.sweep_id));
  if (const auto out = p.get_optional("output")) {
    report::write_html_report(store, *out, options);
    std::printf("wrote %s\n", out->c_str());
  }
  return 0;
}

}  // namespace cnnergy::cli
