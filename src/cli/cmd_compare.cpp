// `cnnergy compare DB... [--baseline DB|tag] [--by device|sweep|tag] [--html FILE]`: opens every
// database read-only, matches trials on their workload and prints them side by side; no common
// workload is not an error (exit 0, the unmatched lists are the answer).
#include "cli/cmd_compare.hpp"

#include <iostream>

#include "cli/args.hpp"
#include "report/compare.hpp"
#include "report/export.hpp"

namespace cnnergy::cli {

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
      value_next = (a == "--baseline" || a == "--by" || a == "--html");
    } else if (!have_first) {
      head.push_back(a);
      have_first = true;
    } else {
      more.push_back(a);
    }
  }
  if (!p.parse(head)) return 0;
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
  return 0;
}

}  // namespace cnnergy::cli
