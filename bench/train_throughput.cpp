// Training-throughput benchmark (issue: CUDA backend): for each model x batch x precision, trains on
// synthetic data already on the device and reports images/s, per-phase time (forward, backward,
// update; device events) and peak device memory. Prints a table and writes JSON (--out).
// Host time (steady_clock, medians, no added synchronisation) is what the CPU spends enqueueing each
// phase: forward_host_ms, backward_host_ms, update_host_ms (eager cells) or step_host_ms (CUDA-graph
// cells); a phase whose host time is close to its device time is host-bound (the GPU waits on the CPU).
// --host-layers adds, for eager cells, host time per layer category and pass (Executor::set_hook).
// The PyTorch peer (bench/peer_pytorch.py) measures the same cells in the same call.
// Time to first step: first_step_s runs from a cell's start (backend, model build, binding with its
// convolution algorithm search, the warm-up iterations) to its first timed iteration, as the peer's
// first_step_s does for PyTorch; algo_search_s is the search's part (--algo-cache: the persistent
// algorithm cache, so a second run searches nothing it has seen). Both lie outside the timed window.
// --profile-range brackets each cell's last timed iteration with the profiler range (for
// `ncu --profile-from-start off`: that one step's kernels, not cuDNN's search or the warm-up).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "cli/vocabulary.hpp"
#include "core/algo_cache.hpp"
#include "core/errors.hpp"
#include "measure/nvml_probe.hpp"
#include "measure/phase_timer.hpp"
#include "measure/statistics.hpp"
#include "measure/window.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "train/fixed_batch.hpp"
#include "train/precision.hpp"
#include "train/run_config.hpp"
#include "layer_host_clock.hpp"

using namespace cnnergy;
using cnnergy::bench::LayerHostClock;
using cnnergy::bench::LayerHostTime;

namespace {

// The searches' workspace floor the executor applies by default (ExecutorOptions), named in help and output.
const std::size_t kSearchFloorMib = ExecutorOptions{}.search_workspace_floor_bytes >> 20;

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Cell {
  std::string device = "cuda";  // --device: cpu runs the same cells on the CPU reference (a smoke test)
  std::string model;
  std::int64_t batch = 0;
  std::string precision;
  std::string layout;
  std::string algo;  // the convolution algorithm policy (find, graph_find, ...)
  std::int64_t candidates = 10;  // graph_find / auto: engines of cuDNN's ranking timed
  std::string algo_cache_dir;    // the persistent algorithm cache ("" = off)
  bool cuda_graph = false;  // the step replayed as one recorded CUDA graph (phases not separable)
  bool fuse_relu = true;    // batch norms take the ReLU after them (ExecutorOptions::fuse_relu)
  bool fuse_residual = true;  // batch norms take the residual add after them (ExecutorOptions::fuse_residual)
  bool fuse_residual_backward = true;  // and mask its ReLU in backward (ExecutorOptions::fuse_residual_backward)
  bool space_to_depth = true;  // BackendOptions::conv_space_to_depth (a first layer over few channels, NHWC)
  bool fuse_epilogue = true;   // BackendOptions::conv_epilogue_fusion (cuDNN's fused conv + bias + ReLU)
  StatisticsFusion fuse_statistics = StatisticsFusion::kWhereFaster;  // BackendOptions::conv_statistics_fusion
  std::size_t conv_statistics = 0;  // batch norms given their statistics by their convolution
  std::size_t conv_statistics_computed = 0;  // of them, taken from it at the last step (cuDNN's graph ran)
  std::size_t kept_pool_argmaxes = 0;  // max pools keeping their argmax from forward (MemoryReport)
  bool fuse_pool = true;  // a max pool applies the batch norm before it (ExecutorOptions::fuse_batch_norm_pool)
  bool pool_relu_mask = true;  // a max pool takes its convolution's ReLU mask (ExecutorOptions::pool_relu_mask)
  std::size_t relu_mask_pools = 0;  // max pools that did (MemoryReport)
  bool workspace_in_arena = true;  // each convolution's workspace in the arena (ExecutorOptions::conv_workspace_in_arena)
  bool workspace_within_activations = true;  // the searches' workspace cap (ExecutorOptions::workspace_within_activations)
  double search_workspace_limit_mib = 0;     // that cap (MemoryReport::search_workspace_limit_bytes; 0: the configured one)
  std::size_t arena_workspaces = 0;  // convolution calls given their workspace in the arena
  double arena_workspace_mib = 0;    // the largest of them
  std::size_t workspace_overflows = 0;  // calls that asked beyond their interval (MemoryStats::conv_workspace_overflows)
  double workspace_overflow_mib = 0;
  std::size_t normalising_pools = 0;  // max pools that did (MemoryReport)
  bool profile_range = false;  // the last timed iteration ran inside the profiler range
  bool host_layers = false;    // --host-layers: host time per layer category (eager cells)
  int memory_at_peak = 0;      // --memory-at-peak N: the N largest things live at the plan's peak
  std::int64_t workspace_mib = 4096;  // BackendOptions::workspace_limit_bytes, in MiB
  std::optional<std::int64_t> activation_budget_mib;  // ExecutorOptions::activation_budget_bytes (unset: none)
  std::size_t recomputed_outputs = 0;  // batch-norm outputs recomputed in backward to meet it
  double recomputed_mib = 0;
  int windows = 0;             // --windows: energy windows after the timed iterations (0: none)
  double window_s = 3.0;       // --window-s: minimum length of each
  std::string status = "ok";
  std::string error;
  double images_per_s = 0, iter_ms = 0, forward_ms = 0, backward_ms = 0, update_ms = 0, peak_mem_mib = 0;
  // Host (enqueue) time medians: the three phases in eager cells, the whole step in graph cells; 0 otherwise.
  double forward_host_ms = 0, backward_host_ms = 0, update_host_ms = 0, step_host_ms = 0;
  std::vector<LayerHostTime> layer_host;  // --host-layers, eager cells
  double first_step_s = 0;     // cell start to the first timed iteration
  double algo_search_s = 0;    // of which the convolution algorithm search
  std::size_t algo_searched = 0, algo_cached = 0;  // problems searched / decisions from the cache
  double conv_workspace_mib = 0;  // the convolutions' shared workspace after the timed iterations
  double in_use_mib = 0;          // device memory held after the timed iterations (peak_mem_mib: the most at any time)
  // Where the memory in use goes (Executor::memory()): the pooled activations and their gradients
  // (and the most of them live at one step), parameters with their working copies and gradients,
  // layer state (batch-norm statistics, masks, loss buffers); the solver's momentum is the rest's.
  double activation_mib = 0, live_peak_mib = 0, parameter_mib = 0, layer_state_mib = 0;
  // The algorithm searches, before the arena: the peak then and the shared workspace they had grown
  // (given back before the arena is allocated: MemoryReport::search_peak_bytes).
  double search_peak_mib = 0, search_workspace_mib = 0;
  // What else the step holds: the solver's momentum, the input batch (fp32 NCHW, and its copy in the
  // network's precision and layout), and what no owner above names (scratch, argmax buffers, library workspaces).
  double momentum_mib = 0, input_mib = 0, input_copy_mib = 0, other_mib = 0;
  std::string peak_step;                                // where the plan's live peak is reached
  std::vector<MemoryReport::LiveBytes> live_at_peak;    // what is live there, largest first (all of it)
  // --windows: the same step run back to back in windows of >= window_s seconds, metered by NVML's
  // energy counter (measure/window.hpp). Medians over the windows; min and max give the spread.
  std::string energy_source;  // the probe's ("" without a probe: time only)
  double window_images_per_s = 0;
  std::optional<double> joules_per_image, joules_per_image_min, joules_per_image_max, watts;
  double uncertainty_joules_per_image = 0;  // the sensor's granularity, median window
  bool short_window = false;
  std::int64_t window_iterations = 0;  // iterations per window
};

void measure_energy(Cell& cell, Backend& backend, FixedBatchWorkload& work);

void run_cell(Cell& cell, int iters, int warmup, const std::vector<std::int64_t>& image) {
  const auto cell_start = Clock::now();
  // The cell's knobs over the product's settings; each switch the cell sweeps is set by name.
  RunConfig run = RunConfig::from_knobs(
      {{"precision", cell.precision}, {"layout", cell.layout}, {"conv-algo", cell.algo}}, RunConfig{});
  run.device = parse_device(cell.device);
  run.conv_search_candidates = static_cast<std::size_t>(cell.candidates);
  run.algo_cache_dir = cell.algo_cache_dir;
  run.fuse_epilogue = cell.fuse_epilogue;
  run.fuse_statistics = cell.fuse_statistics;
  run.space_to_depth = cell.space_to_depth;
  run.workspace_limit_bytes = static_cast<std::size_t>(cell.workspace_mib) << 20;
  if (cell.activation_budget_mib) run.activation_budget_bytes = static_cast<std::size_t>(*cell.activation_budget_mib) << 20;
  auto backend = create_backend(run.backend_options());
  std::optional<Shape> input;
  if (!image.empty()) input = Shape{3, image[0], image[0]};
  auto graph = build_model(cell.model, input, std::nullopt);
  ExecutorOptions eo;
  eo.batch_size = cell.batch;
  run.apply(eo);  // the activation budget
  eo.fuse_relu = cell.fuse_relu;
  eo.fuse_residual = cell.fuse_residual;
  eo.fuse_residual_backward = cell.fuse_residual && cell.fuse_residual_backward;
  eo.fuse_batch_norm_pool = cell.fuse_pool;
  eo.pool_relu_mask = cell.pool_relu_mask;
  eo.conv_workspace_in_arena = cell.workspace_in_arena;
  eo.workspace_within_activations = cell.workspace_within_activations;
  FixedBatchWorkload work(*graph, *backend, eo, 1234, cell.cuda_graph);
  Executor& exec = work.executor();
  SgdSolver& solver = work.solver();

  PhaseTimer timer(*backend, cell.cuda_graph ? std::vector<std::string>{"step"}
                                             : std::vector<std::string>{"forward", "backward", "update"});
  // Host time per phase and iteration: the calls alone (they return once their work is enqueued).
  std::vector<std::vector<double>> host_ms(timer.phase_names().size());
  auto step = [&]() {
    timer.begin_iteration();
    const auto h0 = Clock::now();
    if (cell.cuda_graph) {
      work.step();
      host_ms[0].push_back(ms_between(h0, Clock::now()));
      timer.end_phase(0);
    } else {
      exec.forward(Phase::kTrain);
      const auto h1 = Clock::now();
      host_ms[0].push_back(ms_between(h0, h1));
      timer.end_phase(0);
      const auto h2 = Clock::now();
      exec.backward(solver.loss_scale());
      const auto h3 = Clock::now();
      host_ms[1].push_back(ms_between(h2, h3));
      timer.end_phase(1);
      const auto h4 = Clock::now();
      solver.step();
      host_ms[2].push_back(ms_between(h4, Clock::now()));
      timer.end_phase(2);
    }
    timer.end_iteration();
  };
  for (int i = 0; i < warmup; ++i) step();
  backend->synchronize();
  timer.clear();
  for (auto& h : host_ms) h.clear();
  std::optional<LayerHostClock> layer_clock;
  if (cell.host_layers && !cell.cuda_graph) layer_clock.emplace(exec);
  const auto t0 = Clock::now();
  cell.first_step_s = ms_between(cell_start, t0) / 1e3;
  const AlgoSearchStats search = backend->algo_search_stats();
  cell.algo_search_s = search.search_ms / 1e3;
  cell.algo_searched = search.searched;
  cell.algo_cached = search.cached;
  for (int i = 0; i < iters; ++i) {
    // Synchronized on both sides, so the range holds exactly this step's kernels.
    const bool profiled = cell.profile_range && i + 1 == iters;
    if (profiled) {
      backend->synchronize();
      backend->profiler_range(true);
    }
    step();
    if (profiled) {
      backend->synchronize();
      backend->profiler_range(false);
    }
  }
  backend->synchronize();
  const double wall_ms = ms_between(t0, Clock::now());
  if (layer_clock) {
    cell.layer_host = layer_clock->summary(iters);
    layer_clock.reset();  // removes the hook
  }
  timer.flush();
  cell.iter_ms = wall_ms / iters;
  cell.images_per_s = static_cast<double>(cell.batch) * iters / (wall_ms / 1e3);
  if (!cell.cuda_graph) {
    cell.forward_ms = summarize(timer.phase_ms()[0]).median;
    cell.backward_ms = summarize(timer.phase_ms()[1]).median;
    cell.update_ms = summarize(timer.phase_ms()[2]).median;
    cell.forward_host_ms = summarize(host_ms[0]).median;
    cell.backward_host_ms = summarize(host_ms[1]).median;
    cell.update_host_ms = summarize(host_ms[2]).median;
  } else {
    cell.step_host_ms = summarize(host_ms[0]).median;
  }
  const MemoryStats mem = backend->memory_stats();
  cell.peak_mem_mib = static_cast<double>(mem.peak_bytes) / (1024.0 * 1024.0);
  cell.conv_workspace_mib = static_cast<double>(mem.conv_workspace_bytes) / (1024.0 * 1024.0);
  cell.in_use_mib = static_cast<double>(mem.in_use_bytes) / (1024.0 * 1024.0);
  cell.workspace_overflows = mem.conv_workspace_overflows;
  cell.workspace_overflow_mib = static_cast<double>(mem.conv_workspace_overflow_bytes) / (1024.0 * 1024.0);
  const MemoryReport& held = exec.memory();
  cell.activation_mib = static_cast<double>(held.activation_bytes) / (1024.0 * 1024.0);
  cell.live_peak_mib = static_cast<double>(held.live_peak_bytes) / (1024.0 * 1024.0);
  cell.parameter_mib = static_cast<double>(held.parameter_bytes) / (1024.0 * 1024.0);
  cell.layer_state_mib = static_cast<double>(held.layer_state_bytes) / (1024.0 * 1024.0);
  cell.search_peak_mib = static_cast<double>(held.search_peak_bytes) / (1024.0 * 1024.0);
  cell.search_workspace_mib = static_cast<double>(held.search_workspace_bytes) / (1024.0 * 1024.0);
  cell.search_workspace_limit_mib = static_cast<double>(held.search_workspace_limit_bytes) / (1024.0 * 1024.0);
  {
    std::size_t momentum = 0;
    for (const Tensor& m : solver.momentum()) momentum += m.size_bytes();
    cell.momentum_mib = static_cast<double>(momentum) / (1024.0 * 1024.0);
    cell.input_mib = static_cast<double>(work.device_images().size_bytes() + work.device_labels().size_bytes()) /
                     (1024.0 * 1024.0);
    cell.input_copy_mib = static_cast<double>(held.input_copy_bytes) / (1024.0 * 1024.0);
    cell.other_mib = cell.in_use_mib - cell.activation_mib - cell.parameter_mib - cell.layer_state_mib -
                     cell.conv_workspace_mib - cell.momentum_mib - cell.input_mib - cell.input_copy_mib;
  }
  cell.peak_step = held.peak_step;
  cell.live_at_peak = held.live_at_peak;
  cell.recomputed_outputs = held.recomputed_outputs;
  cell.arena_workspaces = held.arena_workspaces;
  cell.arena_workspace_mib = static_cast<double>(held.arena_workspace_bytes) / (1024.0 * 1024.0);
  cell.conv_statistics = held.conv_statistics;
  cell.kept_pool_argmaxes = held.kept_pool_argmaxes;
  cell.normalising_pools = held.normalising_pools;
  cell.relu_mask_pools = held.relu_mask_pools;
  cell.conv_statistics_computed = exec.statistics_from_convolutions();
  cell.recomputed_mib = static_cast<double>(held.recomputed_bytes) / (1024.0 * 1024.0);
  if (!std::isfinite(exec.read_loss())) cell.error = "loss is not finite";
  if (cell.windows > 0) measure_energy(cell, *backend, work);
}

// --windows: energy per image over windows of the same step (no phase timer, no profiler range),
// after the timed iterations (the cell is warm). The peer does the same with cnnergy's Python
// windows (bench/peer_pytorch.py --windows), so both are read from the same counter the same way.
void measure_energy(Cell& cell, Backend& backend, FixedBatchWorkload& work) {
  auto probe = open_energy_probe(backend);
  cell.energy_source = probe ? probe->source() : "";
  WindowSpec spec;
  spec.min_seconds = cell.window_s;
  spec.repetitions = cell.windows;
  spec.warmup_iterations = 1;
  Executor& exec = work.executor();
  const WindowResult r = measure_windows(backend, probe.get(), [&] {
    if (cell.cuda_graph) {
      work.step();
    } else {
      exec.forward(Phase::kTrain);
      exec.backward(work.solver().loss_scale());
      work.solver().step();
    }
  }, spec);
  const auto batch = static_cast<double>(cell.batch);
  cell.window_iterations = r.iterations_per_window;
  cell.window_images_per_s = batch / (r.ms_per_iteration.median / 1e3);
  cell.short_window = r.any_short_window;
  if (r.joules_per_iteration) {
    cell.joules_per_image = r.joules_per_iteration->median / batch;
    cell.joules_per_image_min = r.joules_per_iteration->min / batch;
    cell.joules_per_image_max = r.joules_per_iteration->max / batch;
    cell.uncertainty_joules_per_image = r.uncertainty_joules_per_iteration / batch;
  }
  if (r.watts) cell.watts = r.watts->median;
}

// The table's residual column: on (forward and backward), fwd (forward only) or off.
const char* residual_text(const Cell& c) {
  return !c.fuse_residual ? "off" : c.fuse_residual_backward ? "on" : "fwd";
}

// The --fuse-statistics cells a flag value asks for, by statistics_fusion_name.
std::set<std::string> stats_flag_names(const std::string& flag) {
  if (flag == "both") return {"off", "on"};
  return {flag};
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) { o += ' '; continue; }
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cli::ArgParser p("bench-train-throughput", "Training throughput per model, batch and precision on one GPU.");
    p.option("device", "cuda, or cpu (the single-threaded reference: for checking the benchmark itself)", "cuda",
             {"cuda", "cpu"});
    p.option("models", "comma-separated zoo models", "resnet50,resnet34,vgg16,alexnet");
    p.option("batches", "comma-separated batch sizes", "64,128,256");
    p.option("precisions", "comma-separated precisions", "fp32,tf32,bf16");
    p.option("layout",
             "activation layout: auto (NHWC for fp16, bf16 and tf32, NCHW for fp32: the faster one for "
             "each on an H200), nchw or nhwc",
             "auto");
    p.option("algo",
             "comma-separated convolution algorithm policies, a cell each (find, heuristic, graph_find, "
             "graph_heuristic, auto or an algorithm name)",
             "auto");
    p.option("conv-candidates", "graph_find / auto: engines of cuDNN's ranking timed per convolution", "10");
    p.option("algo-cache",
             "persistent convolution algorithm cache: a directory, or off (default: $CNNERGY_ALGO_CACHE, "
             "else $XDG_CACHE_HOME/cnnergy, else ~/.cache/cnnergy)");
    p.option("iters", "timed iterations per cell", "20");
    p.option("warmup", "warm-up iterations per cell", "5");
    p.option("image", "square input size override (0 = model default)", "0");
    p.option("cuda-graph", "replay each step as a recorded CUDA graph: off, on, or both (a cell each)", "off",
             {"off", "on", "both"});
    p.option("fuse-relu", "batch norms take the ReLU after them: on, off, or both (a cell each)", "on",
             {"off", "on", "both"});
    p.option("fuse-residual", "batch norms take the residual add (and its ReLU) after them: on, off, or both (a cell each)",
             "on", {"off", "on", "both"});
    p.option("fuse-residual-backward", "with --fuse-residual on, such a batch norm also does the add's ReLU mask in "
             "its backward pass (ExecutorOptions::fuse_residual_backward): on, off, or both (a cell each)", "on",
             {"off", "on", "both"});
    p.option("fuse-pool", "a max pool that keeps its argmax applies the batch norm (and ReLU) before it as it reads that "
             "batch norm's input, whose output is then never written (ExecutorOptions::fuse_batch_norm_pool): on, off, "
             "or both (a cell each)", "on", {"off", "on", "both"});
    p.option("pool-relu-mask", "a max pool after a convolution's fused ReLU applies that ReLU's mask in its backward, so "
             "the convolution's output dies after the pool's forward (ExecutorOptions::pool_relu_mask; VGG, AlexNet): "
             "on, off, or both (a cell each)", "on", {"off", "on", "both"});
    p.option("workspace-in-arena", "each convolution's workspace is an interval of the activation arena, live during "
             "its call only, instead of one shared workspace held throughout (ExecutorOptions::conv_workspace_in_arena): "
             "on, off, or both (a cell each)", "on", {"off", "on", "both"});
    p.option("workspace-within-activations", "with --workspace-in-arena on, the algorithm searches consider only "
             "workspaces up to the activations and gradients the step holds at its live peak (at least " +
             std::to_string(kSearchFloorMib) + " MiB; ExecutorOptions::workspace_within_activations): on, off, or "
             "both (a cell each)", "on", {"off", "on", "both"});
    p.option("space-to-depth", "a strided first convolution over few channels runs space-to-depth where that times "
             "faster, forward and weight gradient (BackendOptions::conv_space_to_depth, NHWC): on, off, or both "
             "(a cell each)", "on", {"off", "on", "both"});
    p.option("fuse-epilogue", "a convolution with a bias runs as cuDNN's fused conv + bias (+ ReLU) graph where that "
             "times faster (BackendOptions::conv_epilogue_fusion; on by default, as `train` runs)", "on", {"off", "on"});
    p.option("fuse-statistics", "a convolution computes the statistics of the batch norm after it where cuDNN's fused "
             "graph times faster (BackendOptions::conv_statistics_fusion, as train's --fuse-statistics): on, off, "
             "both (a cell each), or always (cuDNN's graph wherever it runs)", "on", {"off", "on", "both", "always"});
    p.flag("profile-range",
           "bracket each cell's last timed iteration with cudaProfilerStart/Stop (for ncu "
           "--profile-from-start off)");
    p.flag("host-layers",
           "eager cells: also time the host per layer call (Executor hook) and print/write it by layer "
           "category and pass; the hook's own cost (two clock reads and a call per layer) inflates the "
           "host times a little");
    p.option("memory-at-peak", "print (and write) the N largest activations, gradients and workspaces live at the "
             "step where the activation plan peaks (MemoryReport::live_at_peak; 0: none)", "0");
    p.option("workspace-mib", "cap on each convolution's workspace, in MiB (BackendOptions::workspace_limit_bytes)",
             "4096");
    p.option("activation-budget-mib",
             "comma list, a cell each: off (nothing recomputed) or MiB, the budget for the activations and their "
             "gradients live at one step, met by recomputing batch-norm and pooling outputs in backward (as "
             "train's --activation-budget-mib; 0 recomputes as many as lower the peak)",
             "off");
    // --windows / --window-s (the commands' vocabulary): energy windows per cell after the timed
    // iterations, the step back to back, metered by NVML's energy counter; 0 windows: none.
    cli::declare_window_flags(p, "0", "3");
    p.epilog("--windows N (> 0): after the timed iterations, N windows of the step back to back, each at least\n"
             "--window-s seconds, metered by NVML's energy counter: joules per image as the median window and\n"
             "the range, watts, and the windows' img/s (0, the default: no energy).");
    p.option("out", "JSON output file", "train_throughput.json");
    if (!p.parse(std::vector<std::string>(argv + 1, argv + argc))) return 0;
    const int iters = static_cast<int>(p.get_int("iters", 1, 100000));
    const int warmup = static_cast<int>(p.get_int("warmup", 0, 100000));
    const auto image = p.get_int("image", 0, 4096);
    const auto workspace_mib = p.get_int("workspace-mib", 1, 1 << 20);
    std::vector<std::optional<std::int64_t>> budgets;
    for (const auto& b : cli::split_list(p.get("activation-budget-mib"), "activation budget")) {
      if (b == "off") {
        budgets.emplace_back();
        continue;
      }
      char* end = nullptr;
      const long long v = std::strtoll(b.c_str(), &end, 10);
      if (end == b.c_str() || *end != '\0' || v < 0)
        throw InvalidArgument("--activation-budget-mib takes off or a MiB count >= 0, got '" + b + "'");
      budgets.emplace_back(v);
    }
    const int windows = static_cast<int>(p.get_int("windows", 0, 1000));
    const double window_s = p.get_double("window-s", 0.1, 3600);
    std::vector<Cell> cells;
    // An on|off|both flag leaves out the cells of the setting it did not name.
    const auto excluded = [&](bool setting, const char* flag) { return p.get(flag) == (setting ? "off" : "on"); };
    // A setting that only means something under another one on: without it, one cell, called off.
    const auto excluded_under = [&](bool setting, bool parent, const char* flag) {
      return setting ? !parent || p.get(flag) == "off" : parent && p.get(flag) == "on";
    };
    for (const auto& m : cli::split_list(p.get("models"), "model"))
      for (const auto& b : cli::split_list(p.get("batches"), "batch"))
        for (const auto& pr : cli::split_list(p.get("precisions"), "precision"))
          for (const auto& algo : cli::split_list(p.get("algo"), "algorithm policy"))
          for (const bool graphed : {false, true})
            for (const bool fused : {true, false})
            for (const bool residual : {true, false})
            for (const bool residual_backward : {true, false})
            for (const bool fuse_pool : {true, false})
            for (const bool relu_mask : {true, false})
            for (const bool in_arena : {true, false})
            for (const bool within : {true, false})
            for (const bool s2d : {true, false})
            for (const StatisticsFusion stats :
                 {StatisticsFusion::kOff, StatisticsFusion::kWhereFaster, StatisticsFusion::kAlways})
            for (const auto& budget : budgets) {
            if (excluded(graphed, "cuda-graph")) continue;
            if (excluded(fused, "fuse-relu")) continue;
            if (excluded(residual, "fuse-residual")) continue;
            // Without the forward fusion there is nothing to fuse backward.
            if (excluded_under(residual_backward, residual, "fuse-residual-backward")) continue;
            if (excluded(s2d, "space-to-depth")) continue;
            if (excluded(fuse_pool, "fuse-pool")) continue;
            if (excluded(relu_mask, "pool-relu-mask")) continue;
            if (excluded(in_arena, "workspace-in-arena")) continue;
            // Without the arena there is no plan to cap by.
            if (excluded_under(within, in_arena, "workspace-within-activations")) continue;
            if (stats_flag_names(p.get("fuse-statistics")).count(statistics_fusion_name(stats)) == 0) continue;
            Cell c;
            c.model = m;
            c.batch = std::stoll(b);
            c.precision = pr;
            c.algo = algo;
            c.candidates = p.get_int("conv-candidates", 1, 100);
            c.algo_cache_dir = resolve_algo_cache_dir(p.get_optional("algo-cache").value_or(""));
            c.layout = p.get("layout") != "auto" ? p.get("layout") : (pr == "fp32" ? "nchw" : "nhwc");
            c.cuda_graph = graphed;
            c.fuse_relu = fused;
            c.fuse_residual = residual;
            c.fuse_residual_backward = residual_backward;
            c.space_to_depth = s2d;
            c.fuse_pool = fuse_pool;
            c.pool_relu_mask = relu_mask;
            c.workspace_in_arena = in_arena;
            c.workspace_within_activations = within;
            c.fuse_epilogue = p.get("fuse-epilogue") == "on";
            c.fuse_statistics = stats;
            c.profile_range = p.get_flag("profile-range");
            c.host_layers = p.get_flag("host-layers");
            c.memory_at_peak = static_cast<int>(p.get_int("memory-at-peak", 0, 100000));
            c.device = p.get("device");
            c.workspace_mib = workspace_mib;
            c.activation_budget_mib = budget;
            c.windows = windows;
            c.window_s = window_s;
            cells.push_back(c);
          }
    // Device phase times, then host (enqueue) times; a CUDA-graph cell has one host time, its step's.
    std::printf("%-10s %5s %-5s %-4s %-10s %-5s %-4s %-4s %-4s %9s %8s %8s %8s %9s %8s %8s %8s\n", "model", "batch", "prec", "lay",
                "algo", "graph", "fuse", "res", "s2d", "img/s", "fwd ms", "bwd ms", "upd ms", "peak MiB", "fwd host", "bwd host", "upd host");
    // The whole file is rewritten after every cell, so a run cut off by a time limit keeps valid JSON.
    auto write_json = [&](std::size_t done) {
      std::ofstream out(p.get("out"));
      out << "{\"framework\": \"cnnergy\", \"results\": [\n";
      for (std::size_t i = 0; i < done; ++i) {
        const Cell& c = cells[i];
        out << "  {\"device\": \"" << c.device << "\", \"model\": \"" << c.model << "\", \"batch\": " << c.batch << ", \"precision\": \"" << c.precision
            << "\", \"layout\": \"" << c.layout << "\", \"algo\": \"" << c.algo << "\", \"conv_candidates\": " << c.candidates << ", \"cuda_graph\": " << (c.cuda_graph ? "true" : "false")
            << ", \"fuse_relu\": " << (c.fuse_relu ? "true" : "false")
            << ", \"fuse_residual\": " << (c.fuse_residual ? "true" : "false")
            << ", \"fuse_residual_backward\": " << (c.fuse_residual_backward ? "true" : "false")
            << ", \"space_to_depth\": " << (c.space_to_depth ? "true" : "false")
            << ", \"fuse_epilogue\": " << (c.fuse_epilogue ? "true" : "false")
            << ", \"fuse_statistics\": \"" << statistics_fusion_name(c.fuse_statistics) << "\""
            << ", \"conv_statistics\": " << c.conv_statistics
            << ", \"conv_statistics_computed\": " << c.conv_statistics_computed
            << ", \"kept_pool_argmaxes\": " << c.kept_pool_argmaxes
            << ", \"fuse_pool\": " << (c.fuse_pool ? "true" : "false")
            << ", \"normalising_pools\": " << c.normalising_pools
            << ", \"pool_relu_mask\": " << (c.pool_relu_mask ? "true" : "false")
            << ", \"relu_mask_pools\": " << c.relu_mask_pools
            << ", \"workspace_in_arena\": " << (c.workspace_in_arena ? "true" : "false")
            << ", \"workspace_within_activations\": " << (c.workspace_within_activations ? "true" : "false")
            << ", \"search_workspace_limit_mib\": " << c.search_workspace_limit_mib
            << ", \"arena_workspaces\": " << c.arena_workspaces
            << ", \"arena_workspace_mib\": " << c.arena_workspace_mib
            << ", \"workspace_overflows\": " << c.workspace_overflows
            << ", \"workspace_overflow_mib\": " << c.workspace_overflow_mib
            << (c.profile_range ? ", \"profile_range\": true" : "")
            << ", \"status\": \"" << c.status << "\", \"error\": \""
            << json_escape(c.error) << "\", \"images_per_s\": " << c.images_per_s << ", \"iter_ms\": " << c.iter_ms
            << ", \"forward_ms\": " << c.forward_ms << ", \"backward_ms\": " << c.backward_ms
            << ", \"update_ms\": " << c.update_ms << ", \"peak_mem_mib\": " << c.peak_mem_mib
            << ", \"forward_host_ms\": " << c.forward_host_ms << ", \"backward_host_ms\": " << c.backward_host_ms
            << ", \"update_host_ms\": " << c.update_host_ms << ", \"step_host_ms\": " << c.step_host_ms
            << ", \"first_step_s\": " << c.first_step_s << ", \"algo_search_s\": " << c.algo_search_s
            << ", \"algo_searched\": " << c.algo_searched << ", \"algo_cached\": " << c.algo_cached
            << ", \"warmup\": " << warmup << ", \"workspace_limit_mib\": " << c.workspace_mib
            << ", \"conv_workspace_mib\": " << c.conv_workspace_mib << ", \"in_use_mib\": " << c.in_use_mib
            << ", \"activation_mib\": " << c.activation_mib
            << ", \"live_peak_mib\": " << c.live_peak_mib << ", \"parameter_mib\": " << c.parameter_mib
            << ", \"layer_state_mib\": " << c.layer_state_mib << ", \"momentum_mib\": " << c.momentum_mib << ", \"input_mib\": " << c.input_mib
            << ", \"input_copy_mib\": " << c.input_copy_mib << ", \"other_mib\": " << c.other_mib
            << ", \"search_peak_mib\": " << c.search_peak_mib
            << ", \"search_workspace_mib\": " << c.search_workspace_mib << ", \"peak_step\": \""
            << json_escape(c.peak_step) << "\", \"live_at_peak\": [";
        for (int k = 0; k < std::min<int>(c.memory_at_peak, static_cast<int>(c.live_at_peak.size())); ++k)
          out << (k ? ", " : "") << "{\"what\": \"" << json_escape(c.live_at_peak[static_cast<std::size_t>(k)].what)
              << "\", \"mib\": " << static_cast<double>(c.live_at_peak[static_cast<std::size_t>(k)].bytes) / (1024.0 * 1024.0) << "}";
        out << "], \"activation_budget_mib\": "
            << (c.activation_budget_mib ? std::to_string(*c.activation_budget_mib) : std::string("null"))
            << ", \"recomputed_outputs\": " << c.recomputed_outputs << ", \"recomputed_mib\": " << c.recomputed_mib;
        if (c.windows > 0 && c.status == "ok") {
          auto opt = [](const std::optional<double>& v) { return v ? std::to_string(*v) : std::string("null"); };
          out << ", \"energy\": {\"source\": \"" << json_escape(c.energy_source) << "\", \"windows\": " << c.windows
              << ", \"window_s\": " << c.window_s << ", \"iterations_per_window\": " << c.window_iterations
              << ", \"images_per_s\": " << c.window_images_per_s << ", \"joules_per_image\": " << opt(c.joules_per_image)
              << ", \"joules_per_image_min\": " << opt(c.joules_per_image_min)
              << ", \"joules_per_image_max\": " << opt(c.joules_per_image_max)
              << ", \"uncertainty_joules_per_image\": " << c.uncertainty_joules_per_image
              << ", \"watts\": " << opt(c.watts) << ", \"short_window\": " << (c.short_window ? "true" : "false") << "}";
        }
        if (!c.layer_host.empty()) {
          out << ", \"host_layers\": [";
          for (std::size_t k = 0; k < c.layer_host.size(); ++k) {
            const LayerHostTime& h = c.layer_host[k];
            out << (k ? ", " : "") << "{\"pass\": \"" << h.pass << "\", \"category\": \"" << h.category
                << "\", \"calls\": " << h.calls << ", \"host_us_per_iter\": " << h.host_us_per_iter << "}";
          }
          out << "]";
        }
        out << "}" << (i + 1 < done ? ",\n" : "\n");
      }
      out << "]}\n";
    };
    for (std::size_t i = 0; i < cells.size(); ++i) {
      Cell& c = cells[i];
      try {
        run_cell(c, iters, warmup, image ? std::vector<std::int64_t>{image} : std::vector<std::int64_t>{});
      } catch (const OutOfMemory& e) {
        c.status = "does_not_fit";
        c.error = e.what();
      } catch (const NotSupported& e) {
        c.status = "not_supported";
        c.error = e.what();
      } catch (const Error& e) {
        c.status = "failed";
        c.error = e.what();
      }
      if (c.status == "ok") {
        std::printf("%-10s %5lld %-5s %-4s %-10s %-5s %-4s %-4s %-4s %9.1f %8.2f %8.2f %8.2f %9.0f", c.model.c_str(),
                    static_cast<long long>(c.batch), c.precision.c_str(), c.layout.c_str(), c.algo.c_str(), c.cuda_graph ? "on" : "off",
                    c.fuse_relu ? "on" : "off", residual_text(c), c.space_to_depth ? "on" : "off", c.images_per_s,
                    c.forward_ms, c.backward_ms, c.update_ms, c.peak_mem_mib);
        if (c.cuda_graph)
          std::printf(" %17s %8.2f\n", "step host", c.step_host_ms);
        else
          std::printf(" %8.2f %8.2f %8.2f\n", c.forward_host_ms, c.backward_host_ms, c.update_host_ms);
        // Its own line: time to first step and the search inside it (outside the timed window).
        std::printf("    first step after %.2f s (convolution algorithm search %.2f s: %zu searched, %zu cached); "
                    "convolution workspace %.0f MiB (cap %lld MiB)\n",
                    c.first_step_s, c.algo_search_s, c.algo_searched, c.algo_cached, c.conv_workspace_mib,
                    static_cast<long long>(c.workspace_mib));
        std::printf("    memory held: activations and their gradients %.0f MiB (at most %.0f live at once), "
                    "parameters %.0f, layer state %.0f, convolution workspace %.0f; held after the step %.0f, "
                    "peak %.0f MiB\n",
                    c.activation_mib, c.live_peak_mib, c.parameter_mib, c.layer_state_mib, c.conv_workspace_mib,
                    c.in_use_mib, c.peak_mem_mib);
        std::printf("    and: optimizer momentum %.0f MiB, input batch %.0f (its copy in the network's precision and "
                    "layout %.0f), other %.0f (scratch, argmax buffers, library workspaces)\n",
                    c.momentum_mib, c.input_mib, c.input_copy_mib, c.other_mib);
        std::printf("    algorithm search (before the arena): peak %.0f MiB, its shared workspace %.1f MiB given back "
                    "before the arena is allocated\n",
                    c.search_peak_mib, c.search_workspace_mib);
        if (c.search_workspace_limit_mib > 0)
          std::printf("    the searches considered workspaces up to %.1f MiB (the activations' live peak, at least %zu MiB, "
                      "at most --workspace-mib; --workspace-within-activations)\n",
                      c.search_workspace_limit_mib, kSearchFloorMib);
        if (c.memory_at_peak > 0) {
          std::printf("    the activation plan peaks at %.1f MiB in the %s; the largest live there:\n", c.live_peak_mib,
                      c.peak_step.c_str());
          std::size_t rest = 0, shown = 0;
          for (const auto& [what, bytes] : c.live_at_peak) {
            if (static_cast<int>(shown) < c.memory_at_peak) {
              std::printf("      %10.1f MiB  %s\n", static_cast<double>(bytes) / (1024.0 * 1024.0), what.c_str());
              ++shown;
            } else {
              rest += bytes;
            }
          }
          if (shown < c.live_at_peak.size())
            std::printf("      %10.1f MiB  %zu more\n", static_cast<double>(rest) / (1024.0 * 1024.0),
                        c.live_at_peak.size() - shown);
        }
        if (c.conv_statistics > 0)
          std::printf("    statistics fusion (%s): %zu batch norms paired with their convolution, %zu took its "
                      "statistics at the last step\n",
                      statistics_fusion_name(c.fuse_statistics), c.conv_statistics, c.conv_statistics_computed);
        if (c.arena_workspaces > 0)
          std::printf("    %zu layer calls take their workspace in the arena (the largest %.1f MiB; "
                      "--workspace-in-arena); %zu asked beyond it (the most %.1f MiB)\n",
                      c.arena_workspaces, c.arena_workspace_mib, c.workspace_overflows, c.workspace_overflow_mib);
        if (c.normalising_pools > 0)
          std::printf("    %zu max pools apply the batch norm before them as they read its input (--fuse-pool)\n",
                      c.normalising_pools);
        if (c.relu_mask_pools > 0)
          std::printf("    %zu max pools apply their convolution's ReLU mask in backward (--pool-relu-mask)\n",
                      c.relu_mask_pools);
        else if (!c.pool_relu_mask)
          std::printf("    max pools leave the ReLU mask to their convolution (--pool-relu-mask off)\n");
        if (c.activation_budget_mib)
          std::printf("    activation budget %lld MiB: %zu batch-norm and pooling outputs (%.0f MiB) recomputed in backward\n",
                      static_cast<long long>(*c.activation_budget_mib), c.recomputed_outputs, c.recomputed_mib);
        if (c.windows > 0) {
          if (c.joules_per_image)
            std::printf("    energy (%s): %.4f J/image [%.4f, %.4f] over %d windows of %lld steps, +/- %.4f sensor; "
                        "%.0f W; %.1f img/s%s\n",
                        c.energy_source.c_str(), *c.joules_per_image, *c.joules_per_image_min, *c.joules_per_image_max,
                        c.windows, static_cast<long long>(c.window_iterations), c.uncertainty_joules_per_image,
                        c.watts.value_or(0.0), c.window_images_per_s, c.short_window ? " (a window below the sensor period)" : "");
          else
            std::printf("    energy: not measured (%s); %.1f img/s over the windows\n",
                        c.energy_source.empty() ? "no energy probe on this machine" : c.energy_source.c_str(),
                        c.window_images_per_s);
        }
        if (!c.layer_host.empty()) std::printf("    %-8s %-8s %5s %12s\n", "pass", "category", "calls", "host us/iter");
        for (const auto& h : c.layer_host)
          std::printf("    %-8s %-8s %5lld %12.1f\n", h.pass.c_str(), h.category.c_str(),
                      static_cast<long long>(h.calls), h.host_us_per_iter);
      } else
        std::printf("%-10s %5lld %-5s %-4s %-10s %-5s %-4s %-4s %-4s %s: %.100s\n", c.model.c_str(), static_cast<long long>(c.batch),
                    c.precision.c_str(), c.layout.c_str(), c.algo.c_str(), c.cuda_graph ? "on" : "off", c.fuse_relu ? "on" : "off",
                    residual_text(c), c.space_to_depth ? "on" : "off",
                    c.status.c_str(), c.error.c_str());
      std::fflush(stdout);
      write_json(i + 1);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench-train-throughput: error: %s\n", e.what());
    return e.exit_code();
  }
}
