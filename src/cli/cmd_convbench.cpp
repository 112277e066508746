// `cnnergy convbench` implementation: flags -> problems (command line, preset, model) -> the study
// (convbench/study.hpp) -> table, --json/--csv (rows: the cells) and --html (charts).
#include "cli/cmd_convbench.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>

#include <unistd.h>

#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "convbench/output.hpp"
#include "convbench/problem.hpp"
#include "convbench/study.hpp"
#include "core/errors.hpp"
#include "report/convbench_html.hpp"
#include "train/precision.hpp"
#include "tune/store.hpp"

namespace cnnergy::cli {
namespace {

// ArgParser keeps the last value of an option; --problem is repeatable, so its occurrences are
// taken out of the arguments first (both "--problem X" and "--problem=X").
std::vector<std::string> take_repeated(std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> values, rest;
  const std::string flag = "--" + name;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      rest.insert(rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (args[i] == flag) {
      if (i + 1 >= args.size()) throw InvalidArgument(flag + " needs a value (e.g. " + flag + " n=128,c=64,h=56,w=56,k=64,r=3,s=3,pad=1)");
      values.push_back(args[++i]);
    } else if (args[i].starts_with(flag + "=")) {
      values.push_back(args[i].substr(flag.size() + 1));
    } else {
      rest.push_back(args[i]);
    }
  }
  args = std::move(rest);
  return values;
}

std::vector<std::string> checked_list(const std::string& text, const std::string& flag,
                                      const std::vector<std::string>& choices) {
  std::vector<std::string> out;
  for (const auto& item : split_list(text, flag)) {
    if (std::find(choices.begin(), choices.end(), item) == choices.end()) {
      std::string all;
      for (const auto& c : choices) all += (all.empty() ? "" : ", ") + c;
      throw InvalidArgument(flag + ": invalid value '" + item + "' (choose one of: " + all + ")");
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

}  // namespace

int run_convbench(const std::vector<std::string>& raw_args) {
  std::vector<std::string> args = raw_args;
  const std::vector<std::string> problem_texts = take_repeated(args, "problem");
  ArgParser p("convbench",
              "Convolution study: every implementation x direction x precision x layout of each problem, with time, "
              "TFLOP/s, % of peak, extra memory, energy per call and a status (Li et al. 2016).");
  p.group("Problems");
  p.option("problem", "a convolution n=..,c=..,h=..,w=..,k=..,r=..,s=..[,stride=1,pad=0,groups=1,dilation=1] (repeatable)");
  p.option("preset", "a preset of problems: li2016 (Li et al. 2016, Table I, batch scaled to the device memory)", {},
           convbench::preset_names());
  p.option("model", "every distinct convolution of this zoo model (cnnergy model-info --list)");
  p.option("batch", "batch of --model's problems (and of --preset's, overriding its scaled batch)");
  p.group("Cells");
  p.option("impl", "implementation names, comma-separated, given to each direction (default: every name the "
                   "backend lists per direction; on CUDA also graph_find, graph_heuristic and own:*); a "
                   "graph-API engine by its tag, graph:eng..., as --graph-engines all lists them");
  p.option("graph-engines", "also a row per cuDNN graph-API engine configuration that runs each problem and "
                            "direction (CUDA): off or all", "off", {"off", "all"});
  p.option("direction", "directions, comma-separated", "forward,backward_data,backward_filter");
  p.option("precision", "precisions, comma-separated (fp32, tf32, bf16, fp16)", "fp32");
  p.option("layout", "layouts, comma-separated (nchw, nhwc)", "nchw");
  declare_device_flag(p);
  p.option("workspace-mib", "largest workspace an implementation may take, MiB", "4096");
  p.option("calls", "timed calls per cell (median and spread)", "10");
  p.option("warmup", "untimed calls per cell before timing", "2");
  p.option("transfers", "time pageable and pinned host<->device copies of each problem's tensors", "on", {"on", "off"});
  p.option("metrics", "kernel view per cell: off, kernels (CUPTI activity: kernels, share, registers, shared "
                      "memory), full (kernels + hardware counters over one call through CUPTI's range profiler: "
                      "achieved occupancy, IPC, warp execution efficiency, global sectors per request, shared "
                      "bank conflicts, DRAM bytes and throughput, tensor pipe use)", "off", {"off", "kernels", "full"});
  p.option("seed", "seed of the random operands", "1");
  declare_window_flags(p, "3", "1.0");
  p.group("Output");
  p.option("html", "write a self-contained HTML page: time, memory and energy per implementation, roofline");
  p.option("db", "also keep the study in this results database (SQLite, created when missing), where `cnnergy "
                 "report DB` draws it beside any sweeps");
  declare_output_flags(p, "the results table");
  p.epilog("Each cell gives the implementation name to make_conv in that direction's field with fallback off, so a\n"
           "name that cannot run the shape says why (status unsupported) instead of timing another algorithm.\n"
           "Energy per call: the call repeated back to back for >= --window-s seconds, --windows times, metered\n"
           "by NVML (GPU) or RAPL (CPU); --window-s 0 skips it. See docs/convbench.md for every column.");
  if (!p.parse(args)) return 0;
  OutputSink sink(p);

  std::vector<convbench::ConvProblem> problems;
  for (const auto& t : problem_texts) problems.push_back(convbench::parse_problem(t));
  std::optional<std::int64_t> batch;
  if (p.get_optional("batch")) batch = p.get_int("batch", 1, 1 << 20);

  convbench::StudyOptions o;
  o.device = device_from_flags(p);
  o.directions = checked_list(p.get("direction"), "--direction", convbench::direction_names());
  o.precisions = checked_list(p.get("precision"), "--precision", precision_names());
  o.layouts.clear();
  for (const auto& l : checked_list(p.get("layout"), "--layout", {"nchw", "nhwc"})) o.layouts.push_back(parse_layout(l));
  if (auto impl = p.get_optional("impl")) o.implementations = split_list(*impl, "--impl");
  o.graph_engines = p.get("graph-engines") == "all";
  o.workspace_limit_bytes = static_cast<std::size_t>(p.get_int("workspace-mib", 0, 1 << 24)) << 20;
  o.repetitions = static_cast<int>(p.get_int("calls", 1, 100000));
  o.warmup = static_cast<int>(p.get_int("warmup", 0, 100000));
  o.windows = static_cast<int>(p.get_int("windows", 1, 1000));
  o.window_s = p.get_double("window-s", 0.0, 3600.0);
  o.transfers = p.get("transfers") == "on";
  o.metrics = convbench::parse_metrics_level(p.get("metrics"));
  o.seed = static_cast<std::uint64_t>(p.get_int("seed", 0, std::int64_t{1} << 62));

  if (auto preset = p.get_optional("preset")) {
    // Scale by the memory of the device the study runs on (1 on the CPU, whose backend reports none).
    std::size_t total = 0;
    if (o.device.is_cuda()) {
      BackendOptions bo;
      bo.device = o.device;
      total = create_backend(bo)->memory_stats().total_bytes;
    }
    auto preset_problems = convbench::preset_problems(*preset, convbench::li2016_memory_scale(total));
    for (auto& pp : preset_problems) {
      if (batch) {
        pp.desc.n = *batch;
        pp.id = convbench::problem_id(pp.desc);
        pp.source += " (batch " + std::to_string(*batch) + " from --batch)";
      }
      problems.push_back(std::move(pp));
    }
  }
  if (auto model = p.get_optional("model")) {
    if (!batch) throw InvalidArgument("--model needs --batch N (the batch its convolutions run at)");
    for (auto& mp : convbench::model_problems(*model, *batch)) problems.push_back(std::move(mp));
  } else if (batch && !p.get_optional("preset")) {
    throw InvalidArgument("--batch applies to --model or --preset; a --problem carries its own n=");
  }
  if (problems.empty())
    throw InvalidArgument("convbench needs problems: --problem n=..,c=..,h=..,w=..,k=..,r=..,s=.. (repeatable), "
                          "--preset li2016 or --model NAME --batch N");

  // The database is opened (and so checked) before anything is measured.
  std::optional<tune::ResultStore> store;
  if (auto db = p.get_optional("db")) {
    if (db->empty()) throw InvalidArgument("--db is empty: give the results database's file name");
    store.emplace(*db);
  }

  std::size_t done = 0;
  const bool tty = ::isatty(STDERR_FILENO) != 0;  // a progress line only where someone watches it
  const auto progress = [&](const std::string& what) {
    std::fprintf(stderr, "\rconvbench: cell %zu: %-100.100s", ++done, what.c_str());
    std::fflush(stderr);
  };
  const convbench::StudyResult result =
      convbench::run_study(problems, o, tty ? std::function<void(const std::string&)>(progress) : nullptr);
  if (tty) std::fprintf(stderr, "\n");
  const Json doc = convbench::study_to_json(result);
  std::fputs(convbench::study_table(result).c_str(), stdout);
  if (auto html = p.get_optional("html")) {
    std::ofstream f(*html);
    if (!f) throw InvalidArgument("--html: cannot write " + *html);
    f << report::convbench_html(doc);
    if (!f) throw DataError("--html: writing " + *html + " failed");
  }
  sink.finish(doc, "cells");
  if (store) {
    tune::StudyRecord rec;
    rec.kind = "convbench";
    rec.command_line = "cnnergy convbench";
    for (const auto& a : raw_args) rec.command_line += " " + a;
    rec.device = result.device_name;
    rec.document_json = doc.dump();
    const std::int64_t id = store->add_study(rec);
    std::fprintf(stderr, "stored as study %lld in %s (cnnergy report %s)\n", static_cast<long long>(id),
                 store->path().c_str(), store->path().c_str());
  }
  return 0;
}

}  // namespace cnnergy::cli
