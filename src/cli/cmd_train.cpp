// `cnnergy train` implementation: flags -> TrainConfig, run, print per-epoch lines and a summary.
#include "cli/cmd_train.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/backend_flags.hpp"
#include "cli/vocabulary.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "data/dataset.hpp"
#include "measure/nvml_probe.hpp"
#include "net/graph.hpp"
#include "net/onnx/onnx_import.hpp"
#include "net/zoo/zoo.hpp"
#include "train/precision.hpp"
#include "core/json.hpp"
#include "train/trainer.hpp"

namespace cnnergy::cli {

namespace {

LrPolicy parse_lr_policy(const std::string& s) {
  if (s == "fixed") return LrPolicy::kFixed;
  if (s == "step") return LrPolicy::kStep;
  if (s == "exp") return LrPolicy::kExponential;
  throw InvalidArgument("unknown --lr-policy '" + s + "' (choose one of: fixed, step, exp)");
}

// "fashion-mnist" and friends pass through; "synthetic" alone takes the model's input shape.
std::string data_spec(const std::string& data, const Graph& graph, std::int64_t dataset_size) {
  if (data != "synthetic") return data;
  const Shape& in = graph.input_per_sample();
  return "synthetic:" + std::to_string(in[0]) + "x" + std::to_string(in[1]) + "x" + std::to_string(in[2]) +
         ":classes=" + std::to_string(graph.num_classes()) +
         (dataset_size > 0 ? ":size=" + std::to_string(dataset_size) : std::string());
}


Json optional_json(const std::optional<double>& v) { return v ? Json(*v) : Json(); }

Json report_json(const Graph& graph, const Backend& backend, const std::string& precision,
                       const TrainConfig& tc, const TrainReport& report) {
  Json j = Json::object();
  j["model"] = graph.model_name();
  j["device"] = backend.device_name();
  j["precision"] = precision;
  j["batch"] = tc.batch_size;
  j["energy_source"] = report.energy_source;
  Json epochs = Json::array();
  for (const auto& e : report.epochs) {
    Json x = Json::object();
    x["epoch"] = e.epoch;
    x["iterations"] = e.iterations;
    x["train_loss"] = e.train_loss;
    x["top1"] = optional_json(e.top1);
    x["top5"] = optional_json(e.top5);
    x["seconds"] = e.seconds;
    x["samples_per_s"] = e.samples_per_s;
    x["joules"] = optional_json(e.joules);
    x["average_watts"] = optional_json(e.joules ? std::optional<double>(e.average_watts) : std::nullopt);  // null: not measured
    epochs.push_back(x);
  }
  j["epochs"] = epochs;
  Json phases = Json::object();
  for (std::size_t i = 0; i < report.phase_names.size(); ++i) {
    Json x = Json::object();
    x["median_ms"] = report.phase_ms[i].median;
    x["min_ms"] = report.phase_ms[i].min;
    x["max_ms"] = report.phase_ms[i].max;
    phases[report.phase_names[i]] = x;
  }
  j["phases"] = phases;
  j["iteration_median_ms"] = report.iteration_ms.median;
  j["loader_wait_ms"] = report.loader_wait_ms;
  j["total_seconds"] = report.total_seconds;
  j["total_joules"] = optional_json(report.total_joules);
  j["seconds_to_target"] = optional_json(report.seconds_to_target);
  j["joules_to_target"] = optional_json(report.joules_to_target);
  j["flops_per_sample"] = report.flops_per_sample;
  j["peak_memory_bytes"] = report.peak_memory_bytes;
  j["activation_bytes"] = report.activation_bytes;
  j["activation_budget_bytes"] = tc.activation_budget_bytes ? Json(static_cast<double>(*tc.activation_budget_bytes)) : Json();
  j["recomputed_outputs"] = report.recomputed_outputs;
  j["conv_statistics"] = report.conv_statistics;
  j["conv_statistics_computed"] = report.conv_statistics_computed;
  j["cuda_graph"] = tc.cuda_graph;
  j["graph_recordings"] = report.graph_recordings;
  return j;
}

}  // namespace

int run_train(const std::vector<std::string>& args) {
  ArgParser p("train", "Train a model and report seconds, samples/s, loss and held-out top-1/top-5 accuracy per "
                       "epoch, with per-phase times (load, forward, backward, update) of Castro et al. 2019's Algorithm 1.");
  p.option("model", "zoo model (cnnergy model-info --list) or an ONNX file (PATH.onnx, onnx:PATH)", "lenet5");
  p.option("data", "data set: fashion-mnist[:DIR], mnist:DIR, cifar10:DIR, folder:DIR, synthetic[:CxHxW:...]",
           "fashion-mnist");
  declare_device_flag(p);
  p.option("precision", "fp32 (TF32 off), tf32, fp16 (loss scaling), bf16", "fp32", precision_names());
  p.option("layout", "activation layout on the GPU", "nchw", {"nchw", "nhwc"});
  p.option("batch", "batch size, in samples", "64");
  p.option("epochs", "epochs", "1");
  p.option("max-iters", "iterations per epoch at most (0 = whole epoch)", "0");
  p.option("eval-batches", "held-out batches per evaluation (0 = all)", "0");
  p.option("lr", "base learning rate", "0.01");
  p.option("lr-policy", "learning-rate policy", "fixed", {"fixed", "step", "exp"});
  p.option("lr-gamma", "step: factor every --lr-step epochs; exp: factor per epoch", "0.1");
  p.option("lr-step", "epochs between steps (step policy)", "20");
  p.option("momentum", "SGD momentum", "0.9");
  p.option("weight-decay", "L2 weight decay (weights only)", "0.0005");
  p.option("target-accuracy", "stop once held-out top-1 reaches this fraction in (0, 1]");
  p.option("save", "write a checkpoint here after every epoch");
  p.option("resume", "continue where the last run stopped: from the --save checkpoint (as a flag, like sweep's "
                     "--resume), or from --resume-from FILE");
  p.implicit_value("resume", "");
  p.option("resume-from", "continue from this checkpoint file");
  p.option("input", "model input override CxHxW");
  p.option("init", "initial weights of an ONNX model: file (its initialisers) or random (seeded, the zoo's rules)",
           "file");
  p.option("classes", "model class-count override");
  p.option("dataset-size", "synthetic data set size", "0");
  p.option("conv-candidates", "graph_find / auto: engines of cuDNN's ranking timed per convolution (1-100; like PyTorch's cudnn benchmark_limit)", "10");
  p.option("algo-cache", kAlgoCacheHelp);
  declare_fuse_epilogue_flag(p);
  declare_fuse_statistics_flag(p);
  declare_space_to_depth_flag(p);
  declare_activation_budget_flag(p);
  p.option("conv-algo", "GPU convolution algorithm policy: auto (the cheaper of find and graph_find per layer, host time included), find, heuristic (legacy cuDNN API), graph_find, graph_heuristic (graph API, cached execution plans) or an algorithm name, or own:NAME (the project's own kernels per layer: own:direct, own:im2col_gemm, own:implicit_gemm, own:fft, own:winograd, own:winograd_2x2; a layer one cannot run falls back to cuDNN auto with a note)", "auto");
  p.option("workers", "data-loader threads", "2");
  p.option("prefetch", "batches prefetched", "3");
  p.option("seed", "seed for weights, shuffling, dropout", "1");
  p.flag("no-energy", "do not meter energy (time only)");
  p.flag("cuda-graph", "replay each training step as one recorded CUDA graph (not with dropout)");
  p.option("extrapolate-epochs", "estimate a whole training of this many epochs from the measured ones", "0");
  declare_output_flags(p, "the per-epoch report");
  p.epilog("Loss is the mean of the losses read every 20 iterations. Exit codes: see `cnnergy --help`.");
  if (!p.parse(args)) return 0;

  const RunConfig run = run_config_from_flags(p);
  BackendOptions bo = run.backend_options();

  TrainConfig tc;
  tc.batch_size = p.get_int("batch", 1, 1 << 20);
  tc.epochs = p.get_int("epochs", 1, 100000);
  tc.max_iterations_per_epoch = p.get_int("max-iters", 0, 1LL << 40);
  tc.eval_batches = p.get_int("eval-batches", 0, 1LL << 40);
  tc.solver.schedule.policy = parse_lr_policy(p.get("lr-policy"));
  tc.solver.schedule.base_lr = p.get_double("lr", 1e-12, 100.0);
  tc.solver.schedule.gamma = p.get_double("lr-gamma", 1e-12, 100.0);
  tc.solver.schedule.step_size = p.get_int("lr-step", 1, 1 << 30);
  tc.solver.momentum = p.get_double("momentum", 0.0, 0.999999);
  tc.solver.weight_decay = p.get_double("weight-decay", 0.0, 1.0);
  tc.solver.loss_scale = SolverOptions::loss_scale_for(bo.dtype);
  if (auto t = p.get_optional("target-accuracy")) tc.target_accuracy = p.get_double("target-accuracy", -1e9, 1e9);
  if (tc.target_accuracy && !(*tc.target_accuracy > 0 && *tc.target_accuracy <= 1))
    throw InvalidArgument("--target-accuracy must lie in (0, 1], got " + p.get("target-accuracy"));
  tc.save_path = p.get_optional("save").value_or("");
  if (auto from = p.get_optional("resume-from")) {
    tc.resume_path = *from;
  } else if (auto r = p.get_optional("resume")) {
    if (!r->empty()) {  // the old spelling: a path right after --resume
      std::fprintf(stderr, "cnnergy: warning: --resume PATH is deprecated and will be removed in the next release; "
                           "use --resume-from PATH (--resume alone continues from the --save checkpoint)\n");
      tc.resume_path = *r;
    } else if (tc.save_path.empty()) {
      throw InvalidArgument("--resume continues from the --save checkpoint: give --save FILE, or --resume-from FILE");
    } else if (std::filesystem::exists(tc.save_path)) {
      tc.resume_path = tc.save_path;
    } else {  // like sweep --resume on an empty database: nothing to continue, start from the beginning
      std::fprintf(stderr, "cnnergy: note: no checkpoint at %s yet; training from the start\n", tc.save_path.c_str());
    }
  }
  tc.loader_workers = static_cast<int>(p.get_int("workers", 1, 64));
  tc.prefetch = static_cast<int>(p.get_int("prefetch", 1, 64));
  tc.seed = static_cast<std::uint64_t>(p.get_int("seed", 0, 1LL << 62));
  tc.cuda_graph = p.get_flag("cuda-graph");
  tc.activation_budget_bytes = run.activation_budget_bytes;

  std::optional<Shape> input;
  if (auto s = p.get_optional("input")) input = parse_shape(*s);
  std::optional<std::int64_t> classes;
  if (p.get_optional("classes")) classes = p.get_int("classes", 1, 1 << 24);
  OutputSink sink(p);  // checks -o/--json/--csv are writable before training, not after it
  auto graph = build_model_init(p.get("model"), input, classes, p.get("init"));
  const auto splits = data::open_dataset(data_spec(p.get("data"), *graph, p.get_int("dataset-size", 0, 1LL << 40)));
  auto backend = create_backend(bo);

  std::printf("training %s on %s (%lld samples), %s %s, batch %lld, %s\n", graph->model_name().c_str(),
              splits.train->name().c_str(), static_cast<long long>(splits.train->size()), backend->name().c_str(),
              backend->device_name().c_str(), static_cast<long long>(tc.batch_size), p.get("precision").c_str());
  std::printf("%6s %10s %8s %8s %9s %11s %9s\n", "epoch", "loss", "top-1", "top-5", "seconds", "samples/s", "lr");
  const auto extrapolate = p.get_int("extrapolate-epochs", 0, 1 << 20);
  std::unique_ptr<EnergyProbe> probe = p.get_flag("no-energy") ? nullptr : open_energy_probe(*backend);
  const auto report = train(*graph, *backend, splits, tc, probe.get(), [](const EpochReport& e) {
    std::printf("%6lld %10.4f %7.2f%% %7.2f%% %9.2f %11.1f %9.2g", static_cast<long long>(e.epoch), e.train_loss,
                e.top1 ? *e.top1 * 100 : std::nan(""), e.top5 ? *e.top5 * 100 : std::nan(""), e.seconds,
                e.samples_per_s, e.learning_rate);
    if (e.joules) std::printf("  %.1f J, %.1f W", *e.joules, e.average_watts);
    std::printf("\n");
    std::fflush(stdout);
  });
  if (report.epochs.empty()) {
    std::printf("nothing to train: the checkpoint already covers %lld epochs\n", static_cast<long long>(tc.epochs));
    sink.finish(report_json(*graph, *backend, p.get("precision"), tc, report), "epochs");
    return 0;
  }
  if (const std::string line = algo_search_line(backend->algo_search_stats()); !line.empty())
    std::printf("\n%s\n", line.c_str());
  std::printf("\nper iteration (median over %zu iterations, device time):\n", report.iteration_ms.n);
  for (std::size_t i = 0; i < report.phase_names.size(); ++i)
    std::printf("  %-9s %9.3f ms  (spread %.3f..%.3f)\n", report.phase_names[i].c_str(), report.phase_ms[i].median,
                report.phase_ms[i].min, report.phase_ms[i].max);
  std::printf("  %-9s %9.3f ms\n", "iteration", report.iteration_ms.median);
  if (tc.cuda_graph)
    std::printf("  (CUDA graph: the step is one replayed graph; %lld recordings)\n",
                static_cast<long long>(report.graph_recordings));
  const double it_s = report.iteration_ms.median / 1e3;
  if (it_s > 0)
    std::printf("  GFLOPS    %9.1f  (forward+backward FLOPs of the layers / iteration time)\n",
                report.flops_per_sample * static_cast<double>(tc.batch_size) / it_s / 1e9);
  std::printf("  loader waits: %.1f ms in total; total time %.2f s\n", report.loader_wait_ms, report.total_seconds);
  if (tc.activation_budget_bytes)
    std::printf("activations and their gradients: %.1f MiB planned (budget %.1f MiB); %zu outputs recomputed in "
                "backward\n",
                static_cast<double>(report.activation_bytes) / 1048576.0,
                static_cast<double>(*tc.activation_budget_bytes) / 1048576.0, report.recomputed_outputs);
  if (report.conv_statistics > 0)
    std::printf("statistics fusion: %zu batch norms paired with their convolution; %zu took the statistics it "
                "computed at the last step, the others reduced their input themselves\n",
                report.conv_statistics, report.conv_statistics_computed);
  double train_s = 0, joules = 0;
  std::int64_t iters = 0;
  for (const auto& e : report.epochs) {
    train_s += e.seconds;
    iters += e.iterations;
    joules += e.joules.value_or(0);
  }
  if (iters > 0 && report.total_joules) {
    const double j_batch = joules / static_cast<double>(iters), s_batch = train_s / static_cast<double>(iters);
    const double gflop_batch = report.flops_per_sample * static_cast<double>(tc.batch_size) / 1e9;
    std::printf("energy (%s, epoch windows): %.3f J/batch, %.2f W, %.5f J/sample, %.1f GFLOPS, %.2f GFLOPS/W\n",
                report.energy_source.c_str(), j_batch, j_batch / s_batch, j_batch / static_cast<double>(tc.batch_size),
                gflop_batch / s_batch, gflop_batch / j_batch);
  } else {
    std::printf("energy: not metered (%s)\n", probe ? "no reading" : "no NVML / --no-energy");
  }
  if (extrapolate > 0 && iters > 0) {
    const double per_epoch = static_cast<double>(splits.train->size() / tc.batch_size);
    const double whole = per_epoch * static_cast<double>(extrapolate);
    const double s_batch = train_s / static_cast<double>(iters);
    std::printf("whole training, %lld epochs x %.0f iterations: %.1f s", static_cast<long long>(extrapolate), per_epoch,
                whole * s_batch);
    if (report.phase_names.size() == 4)  // a graphed step has no forward/backward split
      std::printf(" (forward %.1f s, backward %.1f s from the phase medians)", whole * report.phase_ms[1].median / 1e3,
                  whole * report.phase_ms[2].median / 1e3);
    if (report.total_joules) std::printf(", %.0f J", whole * joules / static_cast<double>(iters));
    std::printf("\n");
  }
  if (report.joules_to_target) std::printf("energy to target: %.1f J\n", *report.joules_to_target);
  sink.finish(report_json(*graph, *backend, p.get("precision"), tc, report), "epochs");
  if (report.seconds_to_target)
    std::printf("reached top-1 >= %.2f%% after %.2f s of training\n", *tc.target_accuracy * 100, *report.seconds_to_target);
  else if (tc.target_accuracy)
    std::printf("did not reach top-1 >= %.2f%%\n", *tc.target_accuracy * 100);
  return 0;
}

}  // namespace cnnergy::cli
