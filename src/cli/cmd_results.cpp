// `cnnergy merge`, `cnnergy export` and `cnnergy report`: read results databases written by sweeps.
#include "cli/cmd_results.hpp"

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "report/export.hpp"
#include "report/html_report.hpp"
#include "report/stability_view.hpp"
#include "report/table.hpp"
#include "tune/metrics.hpp"
#include "tune/store.hpp"

namespace cnnergy::cli {

namespace {

// Which trials of the merged sweeps did not run to a result, and why (printed, and returned for the
// JSON summary): what a cluster merge job owes the user who reads its log.
Json report_failed_trials(const std::string& db, const std::vector<std::string>& sweep_keys) {
  const tune::ResultStore store(db, tune::ResultStore::Mode::kReadOnly);
  Json out = Json::array();
  for (const auto& key : sweep_keys) {
    const auto sweep = store.find_sweep(key);
    if (!sweep) continue;
    std::size_t ok = 0, total = 0;
    std::vector<std::string> lines;
    for (const auto& t : store.trials(sweep->id)) {
      ++total;
      if (t.summary.status == tune::TrialStatus::kOk) {
        ++ok;
        continue;
      }
      lines.push_back("  " + t.summary.key + ": " + std::string(tune::trial_status_name(t.summary.status)) +
                      (t.error_message.empty() ? "" : " (" + t.error_message + ")") +
                      (t.slurm_job_id.empty() ? "" : " [Slurm job " + t.slurm_job_id + "]"));
      Json f = Json::object();
      f["sweep_key"] = key;
      f["trial_key"] = t.summary.key;
      f["status"] = std::string(tune::trial_status_name(t.summary.status));
      f["error_message"] = t.error_message;
      f["slurm_job_id"] = t.slurm_job_id;
      out.push_back(f);
    }
    std::printf("sweep %s: %zu trial(s) stored, %zu ok, %zu without a result%s\n", key.c_str(), total, ok, total - ok,
                lines.empty() ? "" : ":");
    for (const auto& l : lines) std::printf("%s\n", l.c_str());
  }
  return out;
}

}  // namespace

int run_merge(const std::vector<std::string>& args) {
  ArgParser p("merge", "Merge results databases into one: the shards of a sweep (--shard i/N) become one sweep, "
                       "different sweeps are kept side by side. A trial present twice keeps the better status "
                       "(ok > does_not_fit > skipped > failed) and is reported.");
  p.positional("OUT.db", "the database to merge into (created when missing)");
  p.positional("IN.db...", "one or more databases to merge from (read only)");
  p.flag("same-sweep", "the inputs are the shards of one sweep: refuse (naming both sweep keys, merging nothing) an "
                      "input that holds another sweep");
  declare_output_flags(p, "the merge summary");
  p.epilog("The merge is one transaction: on any error (a damaged input, a full disk) OUT.db is left as it was.");
  // ArgParser takes a fixed number of positionals: the first two go through it, the rest are more inputs.
  std::vector<std::string> head, more_inputs;
  std::size_t positionals = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool takes_value = a == "-o" || a == "--out" || a == "--format" || a == "--json" || a == "--csv";
    if (takes_value && i + 1 < args.size()) {  // the option's value is not a database
      head.push_back(a);
      head.push_back(args[++i]);
    } else if (a.starts_with("-") || positionals < 2) {
      if (!a.starts_with("-")) ++positionals;
      head.push_back(a);
    } else {
      more_inputs.push_back(a);
    }
  }
  if (!p.parse(head)) return 0;
  OutputSink sink(p);
  std::vector<std::string> inputs = {p.get("IN.db...")};
  inputs.insert(inputs.end(), more_inputs.begin(), more_inputs.end());
  tune::MergeOptions options;
  options.one_sweep = p.get_flag("same-sweep");
  const tune::MergeReport r = tune::merge_stores(p.get("OUT.db"), inputs, options);
  constexpr std::size_t kMaxNotes = 20;  // merging a file twice would otherwise print every trial
  for (std::size_t i = 0; i < r.messages.size() && i < kMaxNotes; ++i) std::fprintf(stderr, "cnnergy: note: %s\n", r.messages[i].c_str());
  if (r.messages.size() > kMaxNotes) std::fprintf(stderr, "cnnergy: note: ... and %zu more\n", r.messages.size() - kMaxNotes);
  std::printf("merged %zu database(s) into %s: %zu trials copied, %zu sweeps created, %zu sweeps merged, %zu duplicates "
              "kept as stored, %zu duplicates replaced by a better status\n",
              inputs.size(), p.get("OUT.db").c_str(), r.trials_copied, r.sweeps_created, r.sweeps_merged, r.duplicates_kept,
              r.duplicates_replaced);
  Json summary = Json::object();
  summary["out"] = p.get("OUT.db");
  Json in = Json::array();
  for (const auto& i : inputs) in.push_back(i);
  summary["inputs"] = in;
  summary["trials_copied"] = r.trials_copied;
  summary["sweeps_created"] = r.sweeps_created;
  summary["sweeps_merged"] = r.sweeps_merged;
  summary["duplicates_kept"] = r.duplicates_kept;
  summary["duplicates_replaced"] = r.duplicates_replaced;
  summary["failed_trials"] = report_failed_trials(p.get("OUT.db"), r.sweep_keys);
  sink.finish(summary);
  return 0;
}

int run_export(const std::vector<std::string>& args) {
  ArgParser p("export", "Export a results database: CSV (one row per trial with every knob, metric median and "
                        "spread) and/or JSON (everything, repetitions included).");
  p.positional("DB", "results database written by `cnnergy sweep`");
  declare_output_flags(p, "the export");
  p.epilog("--csv FILE: the trials, one row each; --json FILE: everything. -o FILE.csv / FILE.json or --format\n"
           "csv|json put the same on stdout or in FILE.");
  if (!p.parse(args)) return 0;
  if (!p.given("csv") && !p.given("json") && !p.given("out") && !p.given("format"))
    throw InvalidArgument("'cnnergy export' needs --csv FILE, --json FILE, -o FILE or --format csv|json");
  if (p.given("format") && p.get("format") == "table")
    throw InvalidArgument("'cnnergy export' writes csv or json; use `cnnergy report DB` for tables");
  OutputSink sink(p);
  const tune::ResultStore store(p.get("DB"), tune::ResultStore::Mode::kReadOnly);
  sink.finish_with([&](const std::string& path) { report::export_json(store, path); },
                   [&](const std::string& path) { report::export_csv(store, path); });
  for (const char* name : {"csv", "json", "out"})
    if (auto path = p.get_optional(name); path && *path != "-") std::fprintf(stderr, "wrote %s\n", path->c_str());
  return 0;
}

namespace {

// One study in the terminal: what ran where, and per problem and direction the fastest implementation
// that ran (the study's own table and page have the rest: `cnnergy report DB -o page.html`).
void print_study_summary(std::ostream& os, const tune::StudyRecord& s) {
  os << "Study " << s.id << ": " << s.kind << " on " << s.device << ", " << s.created << "\n  " << s.command_line << "\n";
  if (s.kind != "convbench") return;
  const Json doc = Json::parse(s.document_json);
  struct Best {
    std::string name;
    double ms = 0;
    std::size_t ok = 0, cells = 0;
  };
  std::map<std::string, Best> best;  // "problem  direction precision layout"
  std::vector<std::string> order;
  for (const Json& c : doc.at("cells").items()) {
    const std::string key = c.at("problem").as_string() + "  " + c.at("direction").as_string() + " " +
                            c.at("precision").as_string() + " " + c.at("layout").as_string();
    if (!best.count(key)) order.push_back(key);
    Best& b = best[key];
    ++b.cells;
    if (c.at("status").as_string() != "ok") continue;
    const double ms = c.at("time_ms_median").as_number();
    if (b.ok++ == 0 || ms < b.ms) {
      b.ms = ms;
      b.name = c.at("implementation").as_string();
    }
  }
  for (const auto& key : order) {
    const Best& b = best[key];
    char line[64];
    std::snprintf(line, sizeof line, "%.3f ms", b.ms);
    os << "  " << key << ": " << (b.ok ? b.name + " " + line : std::string("nothing ran")) << " (fastest of " << b.ok
       << " that ran, " << b.cells << " cells)\n";
  }
  os << "\n";
}

}  // namespace

int run_report(const std::vector<std::string>& args) {
  ArgParser p("report", "Print each sweep's trials and its optimum per metric (energy saved and time lost against "
                        "the default, as in Krzywaniak et al. 2022, Tables 2-3), and write a self-contained HTML report with charts.");
  p.positional("DB", "results database written by `cnnergy sweep` or `cnnergy convbench --db`");
  declare_output_flags(p, "the self-contained HTML report (charts included; without -o only the tables)",
                       /*main_is_stdout=*/false);
  p.group("Output");  // (re)declared here: report's stdout format means the tables or the export
  p.option("format", "what goes to stdout: the tables, or the database's export as JSON or CSV", "table",
           {"table", "json", "csv"});
  p.group("Options");
  p.deprecated_alias("output", "out");
  p.option("metric", "comma-separated metrics for the optimum table: time, energy, power, peak_power, edp, ed2p, "
                     "eds:K, gflops, gflops_per_w, samples_per_j, accuracy",
           "energy,time,edp,ed2p,eds:1.5,eds:2,gflops_per_w,samples_per_j,accuracy");
  p.option("eds-k", "comma-separated k values of the EDS lines in the normalised chart", "1.5,2");
  p.option("sweep", "only this sweep id (default: every sweep in the database)");
  p.flag("quiet", "do not print the terminal tables");
  p.option("stability", "resample every trial's windows N times (bootstrap): how often each optimum would have won, "
                        "in the optimum tables and the HTML (0 = off)", "0");
  if (!p.parse(args)) return 0;
  OutputSink sink(p, /*main_is_stdout=*/false);

  report::HtmlReportOptions options;
  options.objectives.clear();
  for (const auto& m : split_list(p.get("metric"), "--metric")) options.objectives.push_back(tune::parse_objective(m));
  options.eds_k.clear();
  for (const auto& k : split_list(p.get("eds-k"), "--eds-k")) options.eds_k.push_back(tune::parse_objective("eds:" + k).eds_k);
  if (p.get_optional("sweep")) options.sweep_id = p.get_int("sweep", 1, INT64_MAX);
  options.stability_resamples = static_cast<std::size_t>(p.get_int("stability", 0, 1000000));

  const tune::ResultStore store(p.get("DB"), tune::ResultStore::Mode::kReadOnly);
  const auto sweeps = store.sweeps();
  const auto studies = store.studies();
  if (sweeps.empty() && studies.empty())
    throw DataError("results database " + store.path() + " holds no sweep or study yet: nothing to report");
  bool found = sweeps.empty() && !options.sweep_id;
  for (const auto& s : sweeps) {
    if (options.sweep_id && s.id != *options.sweep_id) continue;
    found = true;
    if (p.get_flag("quiet") || sink.machine()) continue;
    const report::SweepData d = report::load_sweep(store, s.id, options.objectives);
    report::print_trials_table(std::cout, d);
    std::cout << "\n";
    const report::SweepStability stability = report::analyse_stability(d, options.stability_resamples);
    report::print_optimum_table(std::cout, d, &stability);
    std::cout << "\n";
  }
  if (!found) throw InvalidArgument("results database " + store.path() + " has no sweep " + std::to_string(*options.sweep_id));
  if (!options.sweep_id && !p.get_flag("quiet") && !sink.machine())  // reruns of one sweep (`sweep --new`)
    report::print_rerun_agreement(std::cout, store, options.objectives);
  if (!options.sweep_id && !p.get_flag("quiet") && !sink.machine())
    for (const auto& s : studies) print_study_summary(std::cout, s);
  if (const auto out = p.get_optional("out")) {
    report::write_html_report(store, *out, options);
    std::fprintf(sink.machine() ? stderr : stdout, "wrote %s\n", out->c_str());
  }
  sink.finish_with([&](const std::string& path) { report::export_json(store, path); },
                   [&](const std::string& path) { report::export_csv(store, path); });
  return 0;
}

}  // namespace cnnergy::cli
