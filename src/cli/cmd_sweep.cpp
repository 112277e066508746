// `cnnergy sweep` implementation: flags -> device -> knob space and definition -> plan (resume, shard,
// dry run) checked against the device up front -> runner (model or command) -> execute (grid or
// adaptive) with honest progress -> optimum table (with intervals and verdicts) and report.
#include "cli/cmd_sweep.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <iostream>
#include <memory>
#include <sstream>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/backend_flags.hpp"
#include "cli/sweep_infer.hpp"
#include "cli/sweep_session.hpp"
#include "cli/sweep_slurm.hpp"
#include "cli/vocabulary.hpp"
#include "cli/knobs_flag.hpp"
#include "core/build_info.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "report/export.hpp"
#include "report/html_report.hpp"
#include "report/progress.hpp"
#include "report/stability_view.hpp"
#include "report/sweep_data.hpp"
#include "report/table.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/sampler.hpp"
#include "tune/adaptive_sweep.hpp"
#include "tune/plan.hpp"
#include "tune/run/infer_trial.hpp"
#include "tune/run/runners.hpp"
#include "tune/store.hpp"
#include "tune/sweep_order.hpp"

namespace cnnergy::cli {

namespace {

using tune::Knob;

// The CPU's model name (/proc/cpuinfo), so a CPU result set is labelled by what it ran on.
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const auto v = line.substr(line.find(':') + 1);
      return v.substr(std::min(v.size(), v.find_first_not_of(' ')));
    }
  return "";
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += ' ';
    out += s;
  }
  return out;
}

// Each knob's help, with its unit (the values themselves are described in the epilog).
std::string knob_help(Knob k) {
  switch (k) {
    case Knob::kBatch: return "batch sizes to sweep, in samples per iteration";
    case Knob::kGpus: return "GPU counts to sweep (data-parallel replicas, one GPU each), e.g. 1,2,4";
    case Knob::kPrecision: return "precisions to sweep: fp32, tf32, fp16, bf16";
    case Knob::kLayout: return "activation layouts to sweep: nchw, nhwc";
    case Knob::kConvAlgo: return "convolution algorithm policies to sweep (auto, find, heuristic, graph_find, ..., own:direct, own:im2col_gemm, own:implicit_gemm, own:fft, own:winograd: the own kernels per layer with cuDNN auto where one cannot run)";
    case Knob::kCudaGraph: return "off,on: the step kernel by kernel or replayed as one CUDA graph";
    case Knob::kMemClock: return "memory clocks to sweep, in MHz";
    case Knob::kSmClock: return "SM clocks to sweep, in MHz (locked per trial)";
    case Knob::kPowerLimit: return "power limits to sweep, in W";
  }
  return "values of this knob";
}

void declare_flags(ArgParser& p) {
  p.option("model", "built-in model or ONNX file (PATH.onnx) to train or run (or give -- CMD ARGS)");
  p.option("mode", "what a trial of a built-in model measures: a training step, or inference requests (forward only, "
                   "batch norm folded, latency percentiles)", "train", {"train", "infer"});
  p.option("algo-cache", kAlgoCacheHelp);
  p.option("db", "results database (SQLite)", "cnnergy-results.db");
  p.group("Knobs (lists, ranges: see below)");
  for (Knob k : tune::kAllKnobs) p.option(std::string(tune::knob_flag(k)), knob_help(k));
  p.group("Options");
  declare_device_flag(p, "the device built-in models run on");
  p.option("gpu", "NVML index of the GPU whose knobs are set and energy metered (default: the device's)");
  p.option("input", "model input override CxHxW");
  p.option("classes", "model class-count override");
  p.group("Measurement");
  p.option("warmup", "warm-up iterations (model) or runs (command) per trial", "5");
  p.option("window-s", "minimum seconds of each measurement window", "3");
  p.option("min-iters", "minimum iterations (or command runs) per window", "10");
  p.option("windows", "measurement windows per trial (>= 3 for a spread), or 'auto': 3, then more while the CV of "
                      "time or energy per iteration exceeds --cv-threshold, up to --max-reps", "3");
  p.short_alias("windows", 'r');
  p.deprecated_alias("reps", "windows", "--reps counted windows here but timed passes in profile");
  p.option("cv-threshold", "--windows auto: add windows while the coefficient of variation exceeds this [%]", "5");
  p.option("max-reps", "--windows auto: most windows per trial", "10");
  p.option("cooldown-c", "before each trial (every visit) wait, idle, until the GPU is at or below this temperature, "
                         "in degrees C (0 = off)", "0");
  p.option("settle-s", "before each visit's first window, keep the workload running until temperature and power "
                       "have settled (their slopes over the last second below 0.1 C/s and 1 %/s), at most this many "
                       "seconds (0 = off); the wait is shown and stored per trial", "60");
  p.option("order", "the order of the windows: interleaved (A, B, C, A, B, C, ...: one window per visit, drift "
                    "spread over every setting), random (each pass shuffled, seeded by the sweep key) or sequential "
                    "(A, A, A, B, B, B, ...)", "interleaved", {"interleaved", "random", "sequential"});
  p.option("stability", "resample every trial's windows N times (bootstrap) and say how often each optimum "
                        "would have won: \"optimum in 97 % of resamples\" or \"unstable: ...\" (0 = off)", "0");
  p.group("Options");
  p.option("reference", "reference setting, e.g. power_limit_w=700 (default: the device default / first values)");
  p.option("search", "grid (every combination) or adaptive (one numeric knob, about a third of the trials)", "grid",
           {"grid", "adaptive"});
  p.option("objective", "what the adaptive search minimises: energy, edp, ed2p, eds:K, time", "energy");
  p.option("budget", "adaptive search: most trials (default a third of the grid)", "0");
  p.option("max-p99-ms", "--mode infer: the objective's optimum among settings whose p99 latency is at most this "
                         "(grid and adaptive); none meeting it exits 2 after storing every trial");
  p.option("requests", "--mode infer: timed requests per trial for the latency percentiles", "200");
  p.option("shard", "run only shard i of N (i/N), for cluster job arrays; merge the databases afterwards");
  p.flag("resume", "continue the sweep the database already holds: run only its missing trials (failed ones again)");
  p.flag("new", "store a second sweep even though the database already holds one with the same settings");
  p.flag("dry-run", "print the plan and change nothing (the only mode allowed on shared GPUs)");
  p.flag("skip-invalid", "drop the trials the device cannot run (listed with the reason) instead of refusing the plan");
  add_knobs_option(p);
  p.option("max-failures", "stop after this many failed trials in a row (0 = never)", "5");
  p.option("timeout-s", "-- CMD only: end a trial whose command runs (warm-up and windows together) take longer "
                        "than this, in s; its process group gets SIGTERM, then SIGKILL after --kill-grace-s, and "
                        "the trial is stored as failed (timed out) [default: no limit]");
  p.option("kill-grace-s", "seconds between SIGTERM and SIGKILL when a command is ended", "10");
  p.option("report", "write an HTML report to FILE when the sweep ends (also when it is interrupted)");
  p.option("accuracy-data", "also train each trial on this data set and store top-1 accuracy");
  p.option("accuracy-epochs", "epochs of that training", "1");
  p.option("accuracy-max-iters", "iterations per epoch of that training (0 = all)", "0");
  p.option("tag", "a label stored with the sweep (part of its identity), for `cnnergy compare --by tag`");
  p.option("preset", "run a paper's experiment: hardware-comparison (Gera et al. 2018; see docs/compare.md)");
  declare_output_flags(p, "the trial and optimum tables");
  declare_slurm_flags(p);
  p.allow_passthrough("an external training program, rerun per trial with CNNERGY_<KNOB> variables set");
  p.epilog(
      "Knob values: lists (--batch 64,128,256), inclusive ranges start:stop:step (--power-limit 200:700:25),\n"
      "--power-limit all[:STEP] = the device's allowed range [W], --sm-clock supported[:STEP] [MHz], 'default' = leave\n"
      "as is. --cuda-graph off,on: the training step run kernel by kernel or replayed as one CUDA graph (no dropout;\n"
      "with --gpus N > 1 each replica replays its data-parallel step, all-reduces included).\n"
      "Every trial is checked against the device before the first one runs (precision, layout, algorithm, knobs,\n"
      "estimated memory): a plan with trials it cannot run is refused (exit 2) unless --skip-invalid drops them.\n"
      "Verdicts: every metric has a 95 % t-interval of the mean over the windows; an optimum whose interval\n"
      "overlaps the default's or the runner-up's is reported as not distinguishable from it.\n"
      "Power-limit and clock knobs change GPU settings through a journal that `cnnergy restore` undoes after a crash;\n"
      "they need root, or the cnnergyd daemon (--knobs). Use --dry-run on GPUs you may not change. Exit codes: see `cnnergy --help`.");
}

// What the sweep runs on: NVML (knob limits, energy, power/clock knobs) and the compute device.
struct DeviceSetup {
  std::shared_ptr<telemetry::Nvml> nvml;
  Device device;
  unsigned gpu = 0;
  tune::DeviceLimits limits;
  bool simulated = false;  // the fake NVML device: energy and clocks are simulated
};

DeviceSetup open_device(const ArgParser& p, bool is_command) {
  DeviceSetup s;
  auto opened = telemetry::Nvml::open();
  s.nvml = opened.nvml;
  if (!s.nvml) log_info(opened.unavailable_reason + "; no power or clock knobs either");
  // Commands choose their own device; --device only names the GPU to meter.
  if (p.get_optional("device") || !is_command) s.device = device_from_flags(p);
  s.gpu = s.device.is_cuda() ? static_cast<unsigned>(s.device.index) : 0;
  if (p.get_optional("gpu")) s.gpu = static_cast<unsigned>(p.get_int("gpu", 0, 1024));
  s.limits = tune::query_device_limits(s.nvml.get(), s.gpu);
  s.simulated = s.nvml && s.nvml->device_count() > 0 && s.nvml->device(0).name().find("fake") != std::string::npos;
  return s;
}

tune::MeasureSettings measure_settings(const ArgParser& p) {
  tune::MeasureSettings ms;
  ms.warmup_iterations = static_cast<int>(p.get_int("warmup", 0, 1 << 20));
  ms.window_seconds = p.get_double("window-s", 0.0, 86400.0);
  ms.min_iterations = p.get_int("min-iters", 1, 1LL << 40);
  if (p.get("windows") == "auto") {
    ms.repetitions = 3;
    ms.max_repetitions = static_cast<int>(p.get_int("max-reps", 3, 1000));
    ms.cv_threshold = p.get_double("cv-threshold", 0.01, 1000.0) / 100.0;
  } else {
    ms.repetitions = static_cast<int>(p.get_int("windows", 1, 1000));
  }
  ms.cooldown_max_c = p.get_double("cooldown-c", 0.0, 120.0);
  ms.settle.max_wait_s = p.get_double("settle-s", 0.0, 3600.0);
  return ms;
}

// The sweep's identity: workload, knob space, reference and every setting that changes a measurement.
tune::SweepDefinition sweep_definition(const ArgParser& p, const DeviceSetup& dev, bool is_command) {
  tune::SweepDefinition def;
  def.workload = is_command ? "command=" + joined(p.passthrough()) : "model=" + p.get("model") + " device=" + dev.device.str();
  if (auto s = p.get_optional("input")) def.workload += " input=" + *s;
  if (!is_command && p.get("mode") == "infer") {
    def.workload += " mode=infer";
    def.settings["requests"] = p.get("requests");
  }
  for (Knob k : tune::kAllKnobs)
    if (auto v = p.get_optional(std::string(tune::knob_flag(k)))) def.space.set(k, tune::parse_knob_values(k, *v, dev.limits));
  def.reference = p.get_optional("reference") ? def.space.parse_reference(p.get("reference"), dev.limits)
                                              : def.space.default_reference(dev.limits);
  def.settings = {{"warmup", p.get("warmup")}, {"window_s", p.get("window-s")}, {"min_iters", p.get("min-iters")},
                  {"reps", p.get("windows")}, {"search", p.get("search")}, {"settle_s", p.get("settle-s")},
                  {"order", p.get("search") == "adaptive" ? "sequential" : p.get("order")}};
  if (p.get_double("cooldown-c", 0.0, 120.0) > 0) def.settings["cooldown_c"] = p.get("cooldown-c");
  if (p.get("windows") == "auto") {
    def.settings["cv_threshold_pct"] = p.get("cv-threshold");
    def.settings["max_reps"] = p.get("max-reps");
  }
  if (dev.simulated) def.settings["device"] = "simulated";
  const std::string tag = p.get_optional("tag").value_or("");
  if (!tag.empty()) def.settings["tag"] = tag;  // another tag is another sweep (resume, merge keep them apart)
  return def;
}

tune::Environment sweep_environment(const DeviceSetup& dev, bool is_command) {
  tune::Environment env = tune::host_environment();
  if (dev.nvml) {
    env.driver_version = dev.nvml->driver_version();
    for (const auto& d : dev.nvml->devices()) env.gpu_names.push_back(d.name());
  }
  if (build::kHaveCuda) env.cuda_version = build::kCudaVersion;
  if (!is_command && dev.device.is_cuda()) {  // what the trials will actually run on
    BackendOptions probe_options;
    probe_options.device = dev.device;
    const auto b = create_backend(probe_options);
    env.cuda_version = b->cuda_runtime_version();
    env.cudnn_version = b->cudnn_version();
    env.extra["device_name"] = b->device_name();
  }
  if (dev.simulated) env.extra["simulated"] = "fake NVML device: energy and clocks are simulated, not measured";
  if (!is_command && !dev.device.is_cuda()) env.extra["cpu_model"] = cpu_model_name();
  return env;
}

tune::ModelWorkload model_workload(const ArgParser& p, const DeviceSetup& dev) {
  tune::ModelWorkload w;
  w.model = p.get("model");
  if (auto s = p.get_optional("input")) w.input = parse_shape(*s);
  if (p.get_optional("classes")) w.classes = p.get_int("classes", 1, 1 << 24);
  // The trials' knobs set precision, layout and algorithm; the sweep gives the device and the
  // algorithm cache (trials after the first search nothing seen).
  SettingMap cache;
  if (auto v = p.get_optional("algo-cache")) cache.emplace("algo-cache", *v);
  w.run = RunConfig::from_flags(cache);
  w.run.device = dev.device;
  if (auto d = p.get_optional("accuracy-data")) {
    w.accuracy_data = *d;
    w.accuracy_epochs = p.get_int("accuracy-epochs", 1, 10000);
    w.accuracy_max_iterations = p.get_int("accuracy-max-iters", 0, 1LL << 40);
  }
  return w;
}

// Checks every trial against the device before anything runs or any file is written. Without
// --skip-invalid a plan with an impossible trial is refused as a whole (InvalidArgument, exit 2), so
// no partial database is left; with it the impossible trials leave the list and are returned, to be
// recorded as skipped with their reason.
std::vector<tune::InvalidTrial> check_trials(const ArgParser& p, const DeviceSetup& dev, bool is_command,
                                             std::vector<tune::TrialSpec>& trials) {
  if (is_command) return {};  // an external command's knobs were checked against the device when parsed
  const auto check = tune::check_model_plan(model_workload(p, dev), trials, dev.limits);
  if (check.invalid.empty()) return {};
  if (!p.get_flag("skip-invalid") && !p.get_flag("dry-run"))
    throw InvalidArgument(std::to_string(check.invalid.size()) + " of " + std::to_string(trials.size()) +
                          " trials cannot run on " + dev.device.str() + ":\n" + tune::describe_invalid(check) +
                          "nothing was run; drop those values, or add --skip-invalid to run the others");
  std::cerr << "dropping " << check.invalid.size() << " trial(s) the device cannot run:\n" << tune::describe_invalid(check);
  trials = check.valid;
  return check.invalid;
}

std::int64_t open_sweep_record(tune::ResultStore& store, const ArgParser& p, const std::vector<std::string>& args,
                               const tune::SweepDefinition& def, const tune::Environment& env, bool simulated) {
  if (p.get_flag("resume"))
    if (const auto existing = store.find_sweep(def.key())) return existing->id;
  // (A sweep already in the database without --resume or --new was refused before anything ran.)
  tune::SweepRecord rec;
  rec.sweep_key = def.key();
  rec.command_line = "cnnergy sweep " + joined(args);
  rec.description = (simulated ? "[SIMULATED DEVICE] " : "") + def.canonical();
  rec.environment = env;
  return store.add_sweep(rec, p.get_optional("tag").value_or(""));
}

// --order: interleaved and random orders measure one window per visit, in as many passes as windows
// were asked for (--windows auto: 3 passes, more for noisy trials up to --max-reps). The adaptive search
// keeps its own order (sequential).
tune::OrderOptions order_options(const ArgParser& p, const tune::SweepDefinition& def, const tune::MeasureSettings& ms) {
  tune::OrderOptions o;
  o.order = p.get("search") == "adaptive" ? tune::SweepOrder::kSequential : tune::parse_sweep_order(p.get("order"));
  o.passes = ms.repetitions;
  o.max_passes = std::max(ms.repetitions, ms.max_repetitions);
  o.cv_threshold = ms.cv_threshold;
  const std::string key = def.key();  // "sw-" + 16 hex digits: the shuffle is replayable from the sweep
  o.seed = std::stoull(key.substr(3), nullptr, 16);
  return o;
}

// "power_limit_w=300: ok" / "...: failed (message)" for the progress line of a finished trial.
std::string trial_outcome(const tune::TrialRecord& r) {
  std::string s = r.spec.key + ": " + std::string(tune::trial_status_name(r.status));
  if (!r.error_message.empty()) s += " (" + r.error_message.substr(0, 80) + ")";
  if (!r.measurement.settle_text.empty()) s += ", " + r.measurement.settle_text;
  return s;
}

// Runs the plan (grid or adaptive) with the progress bar; the hardware knobs are restored on return.
// Returns the number of trials this run finished with a result (ok or does-not-fit).
std::size_t run_trials(const ArgParser& p, const DeviceSetup& dev, bool is_command, tune::ResultStore& store,
                std::int64_t sweep_id, const tune::SweepDefinition& def, const tune::SweepPlan& plan,
                const SweepInterrupt& interrupt) {
  // Energy: one sampler for the whole sweep, over the GPU whose knobs we turn (all GPUs for commands).
  std::shared_ptr<telemetry::Sampler> sampler;
  if (dev.nvml && dev.nvml->device_count() > 0 && (dev.device.is_cuda() || is_command)) {
    telemetry::SamplerOptions so;
    if (!is_command || p.get_optional("gpu")) so.gpus = {dev.gpu};
    so.read_links = true;  // PCIe/NVLink traffic for the trials' telemetry statistics
    sampler = std::make_shared<telemetry::Sampler>(dev.nvml, nullptr, so);
  }
  std::unique_ptr<tune::HardwareKnobs> hw;
  for (const auto& t : plan.to_run)
    if (tune::HardwareKnobs::touches_hardware(t) && !hw)
      hw = std::make_unique<tune::HardwareKnobs>(open_knobs(p, dev.nvml, false, "", /*handle_signals=*/false),
                                                 std::vector<unsigned>{dev.gpu});
  tune::MeasureSettings ms = measure_settings(p);
  const tune::OrderOptions order = order_options(p, def, ms);
  if (order.order != tune::SweepOrder::kSequential) ms.repetitions = 1, ms.max_repetitions = 0;  // one window a visit
  const bool infer = !is_command && p.get("mode") == "infer";
  tune::InferSettings is;
  is.requests = p.get_int("requests", 1, 10000000);
  tune::CommandLimits limits;
  if (p.has("timeout-s")) limits.timeout_s = p.get_double("timeout-s", 0.001, 1e9);
  limits.kill_grace_s = p.get_double("kill-grace-s", 0, 3600);
  limits.stop = [&interrupt] { return interrupt.requested(); };
  const tune::TrialRunner runner = is_command ? tune::make_command_runner(p.passthrough(), ms, hw.get(), sampler, limits)
                                   : infer    ? tune::make_infer_runner(model_workload(p, dev), ms, is, hw.get(), sampler)
                                              : tune::make_model_runner(model_workload(p, dev), ms, hw.get(), sampler);
  // --max-p99-ms in the adaptive search: a setting above the bound counts as worse than every one within.
  std::function<bool(const tune::TrialMeasurement&)> feasible;
  if (infer && p.get_optional("max-p99-ms")) {
    const double bound = p.get_double("max-p99-ms", 0.0, 1e9);
    feasible = [bound](const tune::TrialMeasurement& m) {
      const auto l = tune::infer_latency_of(m.telemetry_json);
      return l && l->p99_ms <= bound;
    };
  }

  std::cerr << "sweep " << def.key() << " (" << plan.to_run.size() << " trials to run, " << plan.already_done
            << " already done; " << tune::sweep_order_name(order.order) << " order"
            << (order.order == tune::SweepOrder::kRandom ? ", seed " + std::to_string(order.seed) : std::string())
            << ") -> " << p.get("db") << (dev.simulated ? "  [SIMULATED DEVICE]" : "") << "\n";
  report::ProgressBar bar(p.get("search") == "adaptive" ? plan.to_run.size() : tune::planned_visits(plan, order));
  auto progress = [&](const tune::SweepProgress& pr) {
    if (pr.last && pr.last->measurement.algo_search_ms && *pr.last->measurement.algo_search_ms > 0)
      log_info("trial " + pr.last->spec.key + ": convolution algorithm search " +
               std::to_string(*pr.last->measurement.algo_search_ms / 1e3) + " s (outside the measured windows)");
    if (pr.starting) bar.start(pr.starting->key);
    else bar.update(pr.done, pr.last ? trial_outcome(*pr.last) : "");
  };
  if (p.get("search") == "adaptive") {
    const auto knobs = def.space.knobs();
    if (knobs.size() != 1 || !tune::knob_is_numeric(knobs.front()))
      throw InvalidArgument("--search adaptive needs exactly one numeric knob (e.g. --power-limit or --sm-clock)");
    tune::AdaptiveOptions ao;
    ao.max_trials = static_cast<std::size_t>(p.get_int("budget", 0, 1 << 20));
    // The adaptive search has no cancel hook: a trial asked for after Ctrl-C fails as "interrupted" (stored
    // as failed, so --resume runs it again) and ends the search.
    auto interruptible = [&](const tune::TrialSpec& t) {
      if (interrupt.requested()) throw NotSupported("interrupted (signal " + std::to_string(interrupt.signal()) + ")");
      return runner(t);
    };
    try {
      const auto r = tune::execute_adaptive_sweep(store, sweep_id, plan.to_run, knobs.front(),
                                                  tune::parse_objective(p.get("objective")), interruptible, ao, progress,
                                                  feasible);
      bar.finish();
      std::cout << "adaptive search: " << r.trials_run << " trials of " << plan.to_run.size() << ", best "
                << r.best_key << "\n";
      return r.best_key.empty() ? 0 : r.trials_run;
    } catch (const NotSupported&) {
      if (!interrupt.requested()) throw;
      bar.finish();
      return 1;  // interrupted: the exit code says so
    }
  } else {
    tune::FailurePolicy policy(static_cast<std::size_t>(p.get_int("max-failures", 0, 1 << 20)));
    const auto out = tune::execute_sweep_in_order(store, sweep_id, plan, runner, policy, order,
                                                  [&] { return interrupt.requested(); }, progress);
    bar.finish();
    std::cout << "trials: " << out.ok << " ok, " << out.failed << " failed, " << out.does_not_fit << " did not fit, "
              << out.skipped << " skipped"
              << (out.run_elsewhere ? ", " + std::to_string(out.run_elsewhere) + " run by another process" : "")
              << (out.stopped_early ? " (stopped: " + out.stop_reason + ")" : "") << "\n";
    return out.ok + out.does_not_fit + out.run_elsewhere + (plan.to_run.empty() || interrupt.requested() ? 1 : 0);
  }
}

// `--report FILE`: a folder or an unwritable place is refused before any trial runs.
void check_report_path(const std::string& path) {
  std::error_code ec;
  if (path.empty()) throw InvalidArgument("--report is empty: give the HTML file to write");
  if (std::filesystem::is_directory(path, ec))
    throw InvalidArgument("--report " + path + " is a directory: give the HTML file to write, e.g. " +
                          (std::filesystem::path(path) / "report.html").string());
  const bool existed = std::filesystem::exists(path, ec);
  {
    std::ofstream probe(path, std::ios::app);
    if (!probe) throw DataError("cannot write --report file " + path + ": " + std::strerror(errno));
  }
  if (!existed) std::filesystem::remove(path, ec);  // no empty file left if the sweep fails
}

// Returns the message of a latency bound no setting met (--mode infer --max-p99-ms), empty otherwise.
std::string report_results(const ArgParser& p, const tune::ResultStore& store, std::int64_t sweep_id, bool simulated) {
  const auto data = report::load_sweep(store, sweep_id);
  if (simulated) std::cout << "\n[SIMULATED DEVICE: energy, power and clocks come from the fake NVML model]\n";
  report::print_trials_table(std::cout, data);
  std::cout << "\n";
  const auto resamples = static_cast<std::size_t>(p.get_int("stability", 0, 1000000));
  const report::SweepStability stability = report::analyse_stability(data, resamples);
  report::print_optimum_table(std::cout, data, &stability);
  std::string unmet;
  if (p.get_optional("model") && p.get("mode") == "infer") {
    std::optional<double> bound;
    if (p.get_optional("max-p99-ms")) bound = p.get_double("max-p99-ms", 0.0, 1e9);
    const auto v = report_infer_sweep(std::cout, store, sweep_id, tune::parse_objective(p.get("objective")), bound);
    if (!v.bound_met) unmet = v.message;
  }
  if (auto path = p.get_optional("report")) {
    report::HtmlReportOptions ho;
    ho.sweep_id = sweep_id;
    ho.stability_resamples = resamples;
    if (simulated) ho.title = "cnnergy sweep on a SIMULATED device";
    report::write_html_report(store, *path, ho);
    std::cout << "report: " << *path << "\n";
  }
  return unmet;
}

}  // namespace

int run_sweep(const std::vector<std::string>& args) {
  ArgParser p("sweep", "Sweep knobs (batch, GPUs, power limit, SM/memory clock, convolution algorithm, precision, "
                       "layout) over a built-in model or an external command; store every trial; report the optimum "
                       "for time, energy, EDP, ED2P, EDS(k), GFLOPS/W against the reference (default) setting.");
  declare_flags(p);
  if (!p.parse(args)) return 0;
  if (auto preset = p.get_optional("preset")) return run_sweep_preset(*preset, args);
  if (p.get_flag("resume") && p.get_flag("new")) throw InvalidArgument("give --resume or --new, not both");
  OutputSink sink(p);
  const bool is_command = !p.passthrough().empty();
  if (is_command == p.get_optional("model").has_value())
    throw InvalidArgument("give exactly one workload: --model M or -- CMD ARGS");
  if (p.get("windows") != "auto") p.get_int("windows", 1, 1000);  // a bad --windows is refused before anything opens
  if (p.get("mode") == "infer" && is_command)
    throw InvalidArgument("--mode infer measures a built-in model (--model M), not an external command");
  if (p.get_optional("max-p99-ms")) {
    if (p.get("mode") != "infer") throw InvalidArgument("--max-p99-ms bounds inference latency: add --mode infer");
    if (!(p.get_double("max-p99-ms", -1e12, 1e12) > 0)) throw InvalidArgument("--max-p99-ms must be above 0 ms");
  }
  if (p.get("mode") == "infer") p.get_int("requests", 1, 10000000);
  measure_settings(p);
  p.get_int("stability", 0, 1000000);  // refused before anything runs

  const DeviceSetup dev = open_device(p, is_command);
  const tune::SweepDefinition def = sweep_definition(p, dev, is_command);
  auto trials = def.space.trials(def.reference);
  const auto dropped = check_trials(p, dev, is_command, trials);
  if (p.get("db").empty()) throw InvalidArgument("--db is empty: give the results database's file name");
  for (const char* f : {"slurm-opt", "shards", "slurm-dir"})
    if (p.given(f) && !p.get_flag("slurm")) throw InvalidArgument(std::string("--") + f + " goes with --slurm");
  if (p.get_flag("slurm")) return run_sweep_on_slurm(p, args, def, trials, !is_command && dev.device.is_cuda());
  if (auto r = p.get_optional("report")) check_report_path(*r);  // before the sweep, not after it
  tune::ResultStore store(p.get("db"));
  store.set_default_job_id(slurm_job_id_from_environment());  // each trial joins with `sacct`
  tune::PlanOptions po;
  po.resume = p.get_flag("resume");
  if (auto s = p.get_optional("shard")) po.shard = tune::parse_shard(*s);
  const auto existing = store.find_sweep(def.key());
  // An interleaved sweep cut short leaves trials stored ok with fewer windows than asked: --resume adds the rest.
  std::map<std::string, std::size_t> stored_windows;
  const int min_windows = p.get("windows") == "auto" ? 3 : static_cast<int>(p.get_int("windows", 1, 1000));
  if (existing && po.resume && p.get("order") != "sequential" && p.get("search") != "adaptive")
    for (const auto& t : store.trials(existing->id)) stored_windows[t.summary.key] = t.repetitions;
  const auto plan = tune::plan_sweep(trials, po, [&](const std::string& key) -> std::optional<tune::TrialStatus> {
    if (!existing || !po.resume) return std::nullopt;
    const auto st = store.trial_status(existing->id, key);
    if (st == tune::TrialStatus::kOk && stored_windows.count(key) &&
        stored_windows[key] < static_cast<std::size_t>(min_windows))
      return std::nullopt;
    return st;
  });
  if (existing && !po.resume && !p.get_flag("new")) {
    if (!p.get_flag("dry-run")) refuse_duplicate_sweep(*existing, store, args);
    std::cout << "note: the database already holds this sweep (sweep " << existing->id
              << "); a real run needs --resume or --new\n";
  }
  if (p.get_flag("dry-run")) {
    std::cout << (dev.simulated ? "[simulated device]\n" : "");
    tune::print_plan(std::cout, plan, def, po);
    if (!dropped.empty())
      std::cout << dropped.size() << " trial(s) the device cannot run (see above) are not in the plan"
                << (p.get_flag("skip-invalid") ? "" : "; without --skip-invalid a real run refuses the whole plan") << "\n";
    std::cout << "dry run: no GPU setting was changed and nothing was measured\n";
    return 0;
  }
  const std::int64_t sweep_id = open_sweep_record(store, p, args, def, sweep_environment(dev, is_command), dev.simulated);
  for (const auto& d : dropped)  // recorded, so the database says why a cell of the grid is empty
    store.write_trial(sweep_id, tune::TrialRecord{d.trial, tune::TrialStatus::kSkipped, d.reason, {}, tune::utc_timestamp(),
                                                  tune::utc_timestamp()});
  {
    // Signals are ours from here: Ctrl-C stops after the trial in progress and the report is still written.
    SweepInterrupt interrupt;
    const std::size_t finished = run_trials(p, dev, is_command, store, sweep_id, def, plan, interrupt);  // knobs restored
    const std::string unmet = report_results(p, store, sweep_id, dev.simulated);
    sink.finish_with([&](const std::string& path) { report::export_json(store, path); },
                     [&](const std::string& path) { report::export_csv(store, path); });
    if (interrupt.requested()) {
      std::cout.flush();
      std::fprintf(stderr,
                   "\ncnnergy: sweep interrupted (signal %d): the trials above finished and are stored in %s.\n"
                   "Continue it with:\n  %s\n",
                   interrupt.signal(), p.get("db").c_str(), resume_command(args).c_str());
      return interrupt.exit_code();
    }
    if (finished == 0) {
      std::fprintf(stderr, "cnnergy: every trial of this sweep failed (see the table above and the database %s)\n",
                   p.get("db").c_str());
      return static_cast<int>(ExitCode::kData);
    }
    if (!unmet.empty())  // every measured trial is stored (and reported) above
      throw InvalidArgument(unmet + "; all measured trials are kept in " + p.get("db"));
  }
  return 0;
}

}  // namespace cnnergy::cli
