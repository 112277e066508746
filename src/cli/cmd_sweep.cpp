// `cnnergy sweep` implementation: flags -> knob space and definition -> plan (resume, shard, dry run)
// -> runner (model or command) -> execute (grid or adaptive) -> optimum table and report.
#include "cli/cmd_sweep.hpp"

#include <iostream>
#include <memory>
#include <sstream>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/backend_flags.hpp"
#include "core/build_info.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "report/html_report.hpp"
#include "report/progress.hpp"
#include "report/sweep_data.hpp"
#include "report/table.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/sampler.hpp"
#include "tune/adaptive_sweep.hpp"
#include "tune/plan.hpp"
#include "tune/run/runners.hpp"
#include "tune/store.hpp"

namespace cnnergy::cli {

namespace {

using tune::Knob;

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += ' ';
    out += s;
  }
  return out;
}

}  // namespace

int run_sweep(const std::vector<std::string>& args) {
  ArgParser p("sweep", "Sweep knobs (batch, GPUs, power limit, SM/memory clock, convolution algorithm, precision, "
                       "layout) over a built-in model or an external command; store every trial; report the optimum "
                       "for time, energy, EDP, ED2P, EDS(k), GFLOPS/W against the reference (default) setting.");
  p.option("model", "built-in model to train (or give -- CMD ARGS)");
  p.option("algo-cache", kAlgoCacheHelp);
  p.option("db", "results database (SQLite)", "cnnergy-results.db");
  for (Knob k : tune::kAllKnobs) p.option(std::string(tune::knob_flag(k)), "values of this knob (see below)");
  p.option("device", "device for built-in models: cpu, cuda, cuda:N (default: cuda when a GPU is present)");
  p.option("gpu", "NVML index of the GPU whose knobs are set and energy metered (default: the device's)");
  p.option("input", "model input override CxHxW");
  p.option("classes", "model class-count override");
  p.option("warmup", "warm-up iterations (model) or runs (command) per trial", "5");
  p.option("window-s", "minimum seconds of each measurement window", "3");
  p.option("min-iters", "minimum iterations (or command runs) per window", "10");
  p.option("reps", "measurement windows per trial (>= 3 for a spread)", "3");
  p.option("cooldown-c", "before each trial wait until the GPU is at or below this temperature (0 = off)", "0");
  p.option("reference", "reference setting, e.g. power_limit_w=700 (default: the device default / first values)");
  p.option("search", "grid (every combination) or adaptive (one numeric knob, about a third of the trials)", "grid",
           {"grid", "adaptive"});
  p.option("objective", "what the adaptive search minimises: energy, edp, ed2p, eds:K, time", "energy");
  p.option("budget", "adaptive search: most trials (default a third of the grid)", "0");
  p.option("shard", "run only shard i of N (i/N), for cluster job arrays; merge the databases afterwards");
  p.flag("resume", "skip trials the database already holds (failed ones run again)");
  p.flag("dry-run", "print the plan and change nothing (the only mode allowed on shared GPUs)");
  p.option("max-failures", "stop after this many failed trials in a row (0 = never)", "5");
  p.option("report", "write an HTML report here when the sweep ends");
  p.option("accuracy-data", "also train each trial on this data set and store top-1 accuracy");
  p.option("accuracy-epochs", "epochs of that training", "1");
  p.option("accuracy-max-iters", "iterations per epoch of that training (0 = all)", "0");
  p.allow_passthrough("an external training program, rerun per trial with CNNERGY_<KNOB> variables set");
  p.epilog(
      "Knob values: lists (--batch 64,128,256), inclusive ranges start:stop:step (--power-limit 200:700:25),\n"
      "--power-limit all[:STEP] = the device's allowed range, --sm-clock supported[:STEP], 'default' = leave as is.\n"
      "--cuda-graph off,on: the training step run kernel by kernel or replayed as one CUDA graph (no dropout; with\n"
      "--gpus N > 1 each replica replays its data-parallel step, all-reduces included).\n"
      "Power-limit and clock knobs change GPU settings through a journal that `cnnergy restore` undoes after a crash;\n"
      "they need root. Use --dry-run on GPUs you may not change. Exit codes: see `cnnergy --help`.");
  if (!p.parse(args)) return 0;

  const bool is_command = !p.passthrough().empty();
  if (is_command == p.get_optional("model").has_value())
    throw InvalidArgument("give exactly one workload: --model M or -- CMD ARGS");

  // NVML: limits for validation, sampler for energy, knobs for power/clocks.
  std::shared_ptr<telemetry::Nvml> nvml;
  {
    auto opened = telemetry::Nvml::open();
    nvml = opened.nvml;
    if (!nvml) log_info(opened.unavailable_reason + "; no power or clock knobs either");
  }
  Device device = Device{};
  if (auto d = p.get_optional("device")) device = parse_device(*d);
  else if (!is_command && cuda_device_count() > 0) device = parse_device("cuda");
  unsigned gpu = device.is_cuda() ? static_cast<unsigned>(device.index) : 0;
  if (p.get_optional("gpu")) gpu = static_cast<unsigned>(p.get_int("gpu", 0, 1024));
  const tune::DeviceLimits limits = tune::query_device_limits(nvml.get(), gpu);

  tune::KnobSpace space;
  for (Knob k : tune::kAllKnobs)
    if (auto v = p.get_optional(std::string(tune::knob_flag(k)))) space.set(k, tune::parse_knob_values(k, *v, limits));
  if (!is_command && !device.is_cuda() && space.has(Knob::kCudaGraph))
    for (const auto& v : space.values(Knob::kCudaGraph))
      if (v.text == "on") throw NotSupported("--cuda-graph on needs --device cuda (this sweep runs on " + device.str() + ")");
  const auto reference = p.get_optional("reference") ? space.parse_reference(p.get("reference"), limits)
                                                      : space.default_reference(limits);
  tune::MeasureSettings ms;
  ms.warmup_iterations = static_cast<int>(p.get_int("warmup", 0, 1 << 20));
  ms.window_seconds = p.get_double("window-s", 0.0, 86400.0);
  ms.min_iterations = p.get_int("min-iters", 1, 1LL << 40);
  ms.repetitions = static_cast<int>(p.get_int("reps", 1, 1000));
  ms.cooldown_max_c = p.get_double("cooldown-c", 0.0, 120.0);

  const bool simulated = nvml && nvml->device_count() > 0 && nvml->device(0).name().find("fake") != std::string::npos;
  tune::SweepDefinition def;
  def.workload = is_command ? "command=" + joined(p.passthrough()) : "model=" + p.get("model") + " device=" + device.str();
  if (auto s = p.get_optional("input")) def.workload += " input=" + *s;
  def.space = space;
  def.reference = reference;
  def.settings = {{"warmup", p.get("warmup")}, {"window_s", p.get("window-s")}, {"min_iters", p.get("min-iters")},
                  {"reps", p.get("reps")}, {"search", p.get("search")}};
  if (simulated) def.settings["device"] = "simulated";

  tune::ResultStore store(p.get("db"));
  tune::Environment env = tune::host_environment();
  if (nvml) {
    env.driver_version = nvml->driver_version();
    for (const auto& d : nvml->devices()) env.gpu_names.push_back(d.name());
  }
  if (build::kHaveCuda) env.cuda_version = build::kCudaVersion;
  if (!is_command && device.is_cuda()) {  // what the trials will actually run on
    BackendOptions probe_options;
    probe_options.device = device;
    const auto b = create_backend(probe_options);
    env.cuda_version = b->cuda_runtime_version();
    env.cudnn_version = b->cudnn_version();
    env.extra["device_name"] = b->device_name();
  }
  if (simulated) env.extra["simulated"] = "fake NVML device: energy and clocks are simulated, not measured";
  const auto existing = store.find_sweep(def.key());
  const bool resume = p.get_flag("resume");
  tune::PlanOptions po;
  po.resume = resume;
  if (auto s = p.get_optional("shard")) po.shard = tune::parse_shard(*s);
  const std::string description = (simulated ? "[SIMULATED DEVICE] " : "") + def.canonical();

  std::int64_t sweep_id = 0;
  if (resume && existing) sweep_id = existing->id;
  const auto all_trials = space.trials(reference);
  auto plan = tune::plan_sweep(all_trials, po, [&](const std::string& key) -> std::optional<tune::TrialStatus> {
    if (sweep_id == 0) return std::nullopt;
    return store.trial_status(sweep_id, key);
  });
  if (p.get_flag("dry-run")) {
    std::cout << (simulated ? "[simulated device]\n" : "");
    tune::print_plan(std::cout, plan, def, po);
    std::cout << "dry run: no GPU setting was changed and nothing was measured\n";
    return 0;
  }
  if (sweep_id == 0) {
    tune::SweepRecord rec;
    rec.sweep_key = def.key();
    rec.command_line = "cnnergy sweep " + joined(args);
    rec.description = description;
    rec.environment = env;
    sweep_id = store.add_sweep(rec);
  }

  // Energy: one sampler for the whole sweep, over the GPU whose knobs we turn (all GPUs for commands).
  std::shared_ptr<telemetry::Sampler> sampler;
  if (nvml && nvml->device_count() > 0 && (device.is_cuda() || is_command)) {
    telemetry::SamplerOptions so;
    if (!is_command || p.get_optional("gpu")) so.gpus = {gpu};
    sampler = std::make_shared<telemetry::Sampler>(nvml, nullptr, so);
  }
  std::unique_ptr<tune::HardwareKnobs> hw;
  for (const auto& t : plan.to_run)
    if (tune::HardwareKnobs::touches_hardware(t) && !hw) hw = std::make_unique<tune::HardwareKnobs>(nvml, std::vector<unsigned>{gpu}, false);

  tune::TrialRunner runner;
  if (is_command) {
    runner = tune::make_command_runner(p.passthrough(), ms, hw.get(), sampler);
  } else {
    tune::ModelWorkload w;
    w.model = p.get("model");
    if (auto s = p.get_optional("input")) w.input = parse_shape(*s);
    if (p.get_optional("classes")) w.classes = p.get_int("classes", 1, 1 << 24);
    w.device = device;
    w.algo_cache_dir = algo_cache_dir_from_flags(p);  // trials after the first search nothing seen
    if (auto d = p.get_optional("accuracy-data")) {
      w.accuracy_data = *d;
      w.accuracy_epochs = p.get_int("accuracy-epochs", 1, 10000);
      w.accuracy_max_iterations = p.get_int("accuracy-max-iters", 0, 1LL << 40);
    }
    runner = tune::make_model_runner(w, ms, hw.get(), sampler);
  }

  std::cerr << "sweep " << def.key() << " (" << plan.to_run.size() << " trials to run, " << plan.already_done
            << " already done) -> " << p.get("db") << (simulated ? "  [SIMULATED DEVICE]" : "") << "\n";
  report::ProgressBar bar(plan.to_run.size());
  auto progress = [&](const tune::SweepProgress& pr) {
    if (pr.last && pr.last->measurement.algo_search_ms && *pr.last->measurement.algo_search_ms > 0)
      std::cerr << "\ntrial " << pr.last->spec.key << ": convolution algorithm search "
                << *pr.last->measurement.algo_search_ms / 1e3 << " s (outside the measured windows)\n";
    bar.update(pr.done, pr.last ? pr.last->spec.key : "");
  };
  tune::FailurePolicy policy(static_cast<std::size_t>(p.get_int("max-failures", 0, 1 << 20)));
  if (p.get("search") == "adaptive") {
    const auto knobs = space.knobs();
    if (knobs.size() != 1 || !tune::knob_is_numeric(knobs.front()))
      throw InvalidArgument("--search adaptive needs exactly one numeric knob (e.g. --power-limit or --sm-clock)");
    tune::AdaptiveOptions ao;
    ao.max_trials = static_cast<std::size_t>(p.get_int("budget", 0, 1 << 20));
    const auto r = tune::execute_adaptive_sweep(store, sweep_id, plan.to_run, knobs.front(),
                                                tune::parse_objective(p.get("objective")), runner, ao, progress);
    bar.finish();
    std::cout << "adaptive search: " << r.trials_run << " trials of " << plan.to_run.size() << ", best " << r.best_key
              << "\n";
  } else {
    const auto out = tune::execute_sweep(store, sweep_id, plan, runner, policy, {}, progress);
    bar.finish();
    std::cout << "trials: " << out.ok << " ok, " << out.failed << " failed, " << out.does_not_fit << " did not fit, "
              << out.skipped << " skipped" << (out.stopped_early ? " (stopped: " + out.stop_reason + ")" : "") << "\n";
  }
  hw.reset();  // restore the GPU settings before reporting

  const auto data = report::load_sweep(store, sweep_id);
  if (simulated) std::cout << "\n[SIMULATED DEVICE: energy, power and clocks come from the fake NVML model]\n";
  report::print_trials_table(std::cout, data);
  std::cout << "\n";
  report::print_optimum_table(std::cout, data);
  if (auto path = p.get_optional("report")) {
    report::HtmlReportOptions ho;
    ho.sweep_id = sweep_id;
    if (simulated) ho.title = "cnnergy sweep on a SIMULATED device";
    report::write_html_report(store, *path, ho);
    std::cout << "report: " << *path << "\n";
  }
  return 0;
}

}  // namespace cnnergy::cli
