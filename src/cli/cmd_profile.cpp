// `cnnergy profile` implementation.
#include "cli/cmd_profile.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/backend_flags.hpp"
#include "cli/vocabulary.hpp"
#include "core/errors.hpp"
#include "measure/layer_profile.hpp"
#include "measure/nvml_probe.hpp"
#include "measure/phase_energy.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "core/json.hpp"
#include "train/fixed_batch.hpp"
#include "train/precision.hpp"

namespace cnnergy::cli {

namespace {


std::string fmt(double v, int prec = 3) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}
std::string fmt_opt(const std::optional<double>& v, int prec = 4) { return v ? fmt(*v, prec) : "-"; }

Json summary_json(const Summary& s) {
  Json j = Json::object();
  j["median"] = s.median;
  j["min"] = s.min;
  j["max"] = s.max;
  j["cv"] = s.cv();
  j["n"] = s.n;
  return j;
}

}  // namespace

int run_profile(const std::vector<std::string>& args) {
  ArgParser p("profile", "Per-layer and per-phase time and energy of one training iteration of MODEL.");
  p.positional("MODEL", "zoo model (cnnergy model-info --list) or an ONNX file (PATH.onnx, onnx:PATH)");
  p.option("batch", "batch size, in samples", "64");
  declare_device_flag(p);
  p.option("precision", "fp32, tf32, fp16, bf16", "fp32", precision_names());
  p.option("layout", "activation layout", "nchw", {"nchw", "nhwc"});
  p.option("conv-candidates", "graph_find / auto: engines of cuDNN's ranking timed per convolution (1-100; like PyTorch's cudnn benchmark_limit)", "10");
  p.option("algo-cache", kAlgoCacheHelp);
  p.option("conv-algo", "GPU convolution algorithm policy: auto (the cheaper of find and graph_find per layer, host time included), find, heuristic (legacy cuDNN API), graph_find, graph_heuristic (graph API, cached execution plans) or an algorithm name, or own:NAME (the project's own kernels per layer: own:direct, own:im2col_gemm, own:implicit_gemm, own:fft, own:winograd, own:winograd_2x2; a layer one cannot run falls back to cuDNN auto with a note)", "auto");
  p.option("input", "model input override CxHxW");
  p.option("classes", "model class-count override");
  p.option("passes", "timed passes for per-layer times", "10");
  p.deprecated_alias("reps", "passes", "--reps counted timed passes here but windows in sweep");
  p.option("energy-top", "isolate the energy of this many hottest layers (0 = none)", "5");
  p.flag("no-phases", "skip the per-phase isolation windows");
  p.option("fuse-relu",
           "fuse each ReLU into the batch norm or add before it, as training does (off: every layer "
           "runs and is measured on its own, as the papers profile)",
           "on", {"on", "off"});
  declare_fuse_epilogue_flag(p);
  declare_fuse_statistics_flag(p);
  declare_space_to_depth_flag(p);
  declare_activation_budget_flag(p);
  p.option("extrapolate-epochs", "whole-training estimate for this many epochs (0 = none)", "0");
  p.option("dataset-size", "samples per epoch for the estimate", "1281167");
  declare_window_flags(p, "3", "1.0");
  declare_output_flags(p, "the profile");
  p.epilog("Energy needs an NVIDIA driver (NVML); without one, times only. Per-phase energy comes from\n"
           "isolation windows (docs/methodology.md): forward = F, backward = FB - F, update = U, with the\n"
           "closure gap against the whole step and the real loop shown.");
  if (!p.parse(args)) return 0;
  OutputSink sink(p);

  const RunConfig run = run_config_from_flags(p);
  BackendOptions bo = run.backend_options();
  const std::int64_t batch = p.get_int("batch", 1, 1 << 20);
  std::optional<Shape> input;
  if (auto s = p.get_optional("input")) input = parse_shape(*s);
  std::optional<std::int64_t> classes;
  if (p.get_optional("classes")) classes = p.get_int("classes", 1, 1 << 24);
  const auto epochs = p.get_int("extrapolate-epochs", 0, 1 << 20);
  const auto dataset_size = p.get_int("dataset-size", 1, 1LL << 40);
  LayerProfileOptions lo;
  lo.repetitions = static_cast<int>(p.get_int("passes", 1, 100000));
  lo.energy_top = p.get_int("energy-top", 0, 100000);
  WindowSpec ws;
  ws.min_seconds = p.get_double("window-s", 0.0, 3600.0);
  ws.repetitions = static_cast<int>(p.get_int("windows", 1, 1000));
  lo.energy_window = ws;

  auto graph = build_model(p.get("MODEL"), input, classes);
  auto backend = create_backend(bo);
  FixedBatchWorkload work(*graph, *backend, batch, 1, /*cuda_graph=*/false, p.get("fuse-relu") == "on",
                          ResidualFusion::kForwardAndBackward, run.activation_budget_bytes);
  Executor& ex = work.executor();
  SgdSolver& solver = work.solver();
  const AlgoSearchStats search = backend->algo_search_stats();  // binding searched, before any window
  if (const std::string line = algo_search_line(search); !line.empty())
    std::fprintf(stderr, "%s\n", line.c_str());
  const Tensor& host_images = work.host_images();
  const Tensor& images = work.device_images();

  auto probe = open_energy_probe(*backend);
  if (!probe) lo.energy_top = 0;
  const LayerProfile prof = profile_layers(ex, probe.get(), lo);

  std::optional<PhaseEnergyReport> phases;
  if (!p.get_flag("no-phases")) {
    // Data loading alone: a synchronous upload of a host batch (the synthetic loader's cost floor).
    auto load = [&] { backend->upload(host_images, images, true); };
    auto real = [&] {
      backend->upload(host_images, images, true);
      ex.forward(Phase::kTrain);
      ex.backward(solver.loss_scale());
      solver.step();
    };
    phases = measure_phase_energy(ex, solver, probe.get(), load, real, ws);
  }

  Json out = Json::object();
  out["model"] = graph->model_name();
  out["batch"] = batch;
  out["device"] = backend->device_name();
  out["precision"] = p.get("precision");
  out["energy_source"] = probe ? probe->source() : std::string("none");
  out["algo_search_ms"] = search.search_ms;
  Json layers = Json::array();
  for (const auto& t : prof.layers) {
    Json l = Json::object();
    l["name"] = t.name;
    l["type"] = t.type;
    l["fused_into"] = t.fused_into.empty() ? Json() : Json(t.fused_into);
    l["category"] = t.category;
    l["forward_ms"] = t.forward_ms;
    l["backward_ms"] = t.backward_ms;
    l["forward_gflop"] = t.forward_gflop;
    l["backward_gflop"] = t.backward_gflop;
    if (t.forward_joules) l["forward_joules"] = *t.forward_joules;
    if (t.backward_joules) l["backward_joules"] = *t.backward_joules;
    layers.push_back(l);
  }
  out["layers"] = layers;
  Json cats = Json::array();
  for (const auto& c : prof.categories) {
    Json j = Json::object();
    j["category"] = c.category;
    j["forward_ms"] = c.forward_ms;
    j["backward_ms"] = c.backward_ms;
    j["share"] = c.share;
    cats.push_back(j);
  }
  out["categories"] = cats;
  if (phases) {
    Json ph = Json::array();
    for (const auto& f : phases->phases) {
      Json j = Json::object();
      j["phase"] = f.name;
      j["ms_per_iteration"] = f.ms_per_iteration;
      j["ms_spread"] = f.ms_spread;
      if (f.joules_per_iteration) {
        j["joules_per_iteration"] = *f.joules_per_iteration;
        j["joules_spread"] = f.joules_spread;
      }
      ph.push_back(j);
    }
    out["phases"] = ph;
    out["step_ms"] = summary_json(phases->step.ms_per_iteration);
    out["real_iteration_ms"] = summary_json(phases->real_iteration.ms_per_iteration);
    if (phases->step.joules_per_iteration) out["step_joules"] = summary_json(*phases->step.joules_per_iteration);
    if (phases->real_iteration.joules_per_iteration)
      out["real_iteration_joules"] = summary_json(*phases->real_iteration.joules_per_iteration);
    out["time_gap_vs_step"] = phases->time_gap_vs_step;
    out["time_gap_vs_real"] = phases->time_gap_vs_real;
    if (phases->energy_gap_vs_step) out["energy_gap_vs_step"] = *phases->energy_gap_vs_step;
    if (phases->energy_gap_vs_real) out["energy_gap_vs_real"] = *phases->energy_gap_vs_real;
  }
  // Whole-training extrapolation (Castro et al. 2019, Tables 3-6): iterations per epoch, then time and energy
  // of the whole training, forward and backward separately.
  if (epochs > 0 && phases) {
    const double iters = std::floor(static_cast<double>(dataset_size) / static_cast<double>(batch)) * static_cast<double>(epochs);
    Json ex_j = Json::object();
    ex_j["epochs"] = epochs;
    ex_j["dataset_size"] = dataset_size;
    ex_j["iterations"] = iters;
    for (const auto& f : phases->phases) {
      if (f.name.rfind("load", 0) == 0) continue;
      ex_j[f.name + "_seconds"] = f.ms_per_iteration * iters / 1e3;
      if (f.joules_per_iteration) ex_j[f.name + "_joules"] = *f.joules_per_iteration * iters;
    }
    ex_j["total_seconds"] = phases->real_iteration.ms_per_iteration.median * iters / 1e3;
    if (phases->real_iteration.joules_per_iteration)
      ex_j["total_joules"] = phases->real_iteration.joules_per_iteration->median * iters;
    out["extrapolation"] = ex_j;
  }
  sink.finish(out, "layers");
  if (sink.machine()) return 0;

  std::printf("profile of %s, batch %lld, %s on %s; energy: %s\n\n", graph->model_name().c_str(),
              static_cast<long long>(batch), p.get("precision").c_str(), backend->device_name().c_str(),
              probe ? probe->source().c_str() : "none (no NVML)");
  std::printf("%-28s %-16s %10s %10s %9s %11s %11s\n", "layer", "type", "fwd ms", "bwd ms", "fwd GF/s", "fwd J",
              "bwd J");
  bool any_fused = false;
  for (const auto& t : prof.layers) {
    const bool fused = !t.fused_into.empty();  // its work runs (and is timed) in the layer before it
    any_fused = any_fused || fused;
    std::printf("%-28.28s %-16.16s %10s %10s %9s %11s %11s\n", t.name.c_str(), (fused ? t.type + " (fused)" : t.type).c_str(),
                fmt(t.forward_ms).c_str(), fmt(t.backward_ms).c_str(),
                fmt(t.forward_ms > 0 && !fused ? t.forward_gflop / (t.forward_ms / 1e3) : NAN, 0).c_str(),
                fmt_opt(t.forward_joules).c_str(), fmt_opt(t.backward_joules).c_str());
  }
  if (any_fused)
    std::printf("(fused): the ReLU runs inside the batch norm or add before it, whose row holds its time "
                "(--fuse-relu off measures it alone)\n");
  std::printf("%-28s %-16s %10s %10s\n\nhotspots by layer type (share of forward+backward time):\n", "total", "",
              fmt(prof.forward_total_ms).c_str(), fmt(prof.backward_total_ms).c_str());
  for (const auto& c : prof.categories)
    std::printf("  %-10s %6.1f%%  (fwd %s ms, bwd %s ms)\n", c.category.c_str(), c.share * 100, fmt(c.forward_ms).c_str(),
                fmt(c.backward_ms).c_str());
  if (phases) {
    std::printf("\nper phase, isolated windows (>= %.1f s, %d repetitions; median, spread max-min):\n", ws.min_seconds,
                ws.repetitions);
    for (const auto& f : phases->phases)
      std::printf("  %-13s %9s ms ±%-8s %10s J ±%s\n", f.name.c_str(), fmt(f.ms_per_iteration).c_str(),
                  fmt(f.ms_spread).c_str(), fmt_opt(f.joules_per_iteration).c_str(),
                  f.joules_per_iteration ? fmt(f.joules_spread, 4).c_str() : "-");
    std::printf("  whole step    %9s ms            %10s J\n", fmt(phases->step.ms_per_iteration.median).c_str(),
                phases->step.joules_per_iteration ? fmt(phases->step.joules_per_iteration->median, 4).c_str() : "-");
    std::printf("  step + upload %9s ms            %10s J   (batch uploaded on the compute stream, not overlapped;\n"
                "                                             `cnnergy train` overlaps it on a copy stream)\n", fmt(phases->real_iteration.ms_per_iteration.median).c_str(),
                phases->real_iteration.joules_per_iteration ? fmt(phases->real_iteration.joules_per_iteration->median, 4).c_str() : "-");
    std::printf("  closure: phases vs whole step %+.2f%% time, %s energy; vs step + upload %+.2f%% time, %s energy\n",
                phases->time_gap_vs_step * 100,
                phases->energy_gap_vs_step ? (fmt(*phases->energy_gap_vs_step * 100, 2) + "%").c_str() : "-",
                phases->time_gap_vs_real * 100,
                phases->energy_gap_vs_real ? (fmt(*phases->energy_gap_vs_real * 100, 2) + "%").c_str() : "-");
  }
  if (const Json* e = out.find("extrapolation")) std::printf("\nwhole training estimate: %s\n", e->dump().c_str());
  return 0;
}

}  // namespace cnnergy::cli
