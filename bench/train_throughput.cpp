// Training-throughput benchmark (issue: CUDA backend): for each model x batch x precision, trains on
// synthetic data already on the device and reports images/s, per-phase time (forward, backward,
// update; device events) and peak device memory. Prints a table and writes JSON (--out).
// The PyTorch peer (bench/peer_pytorch.py) measures the same cells in the same call.
// --profile-range brackets each cell's last timed iteration with the profiler range (for
// `ncu --profile-from-start off`: that one step's kernels, not cuDNN's search or the warm-up).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "core/errors.hpp"
#include "measure/phase_timer.hpp"
#include "measure/statistics.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "train/fixed_batch.hpp"
#include "train/precision.hpp"

using namespace cnnergy;

namespace {

struct Cell {
  std::string model;
  std::int64_t batch = 0;
  std::string precision;
  std::string layout;
  bool cuda_graph = false;  // the step replayed as one recorded CUDA graph (phases not separable)
  bool fuse_relu = true;    // batch norms take the ReLU after them (ExecutorOptions::fuse_relu)
  bool profile_range = false;  // the last timed iteration ran inside the profiler range
  std::string status = "ok";
  std::string error;
  double images_per_s = 0, iter_ms = 0, forward_ms = 0, backward_ms = 0, update_ms = 0, peak_mem_mib = 0;
};

void run_cell(Cell& cell, int iters, int warmup, const std::string& algo_policy, const std::vector<std::int64_t>& image) {
  BackendOptions opt;
  opt.device = parse_device("cuda");
  apply_precision(parse_precision(cell.precision), opt);
  opt.layout = parse_layout(cell.layout);
  opt.conv_algo_policy = algo_policy;
  auto backend = create_backend(opt);
  std::optional<Shape> input;
  if (!image.empty()) input = Shape{3, image[0], image[0]};
  auto graph = build_model(cell.model, input, std::nullopt);
  FixedBatchWorkload work(*graph, *backend, cell.batch, 1234, cell.cuda_graph, cell.fuse_relu);
  Executor& exec = work.executor();
  SgdSolver& solver = work.solver();

  PhaseTimer timer(*backend, cell.cuda_graph ? std::vector<std::string>{"step"}
                                             : std::vector<std::string>{"forward", "backward", "update"});
  auto step = [&]() {
    timer.begin_iteration();
    if (cell.cuda_graph) {
      work.step();
      timer.end_phase(0);
    } else {
      exec.forward(Phase::kTrain);
      timer.end_phase(0);
      exec.backward(solver.loss_scale());
      timer.end_phase(1);
      solver.step();
      timer.end_phase(2);
    }
    timer.end_iteration();
  };
  for (int i = 0; i < warmup; ++i) step();
  backend->synchronize();
  timer.clear();
  const auto t0 = std::chrono::steady_clock::now();
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
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  timer.flush();
  cell.iter_ms = wall_ms / iters;
  cell.images_per_s = static_cast<double>(cell.batch) * iters / (wall_ms / 1e3);
  if (!cell.cuda_graph) {
    cell.forward_ms = summarize(timer.phase_ms()[0]).median;
    cell.backward_ms = summarize(timer.phase_ms()[1]).median;
    cell.update_ms = summarize(timer.phase_ms()[2]).median;
  }
  cell.peak_mem_mib = static_cast<double>(backend->memory_stats().peak_bytes) / (1024.0 * 1024.0);
  if (!std::isfinite(exec.read_loss())) cell.error = "loss is not finite";
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
    p.option("models", "comma-separated zoo models", "resnet50,resnet34,vgg16,alexnet");
    p.option("batches", "comma-separated batch sizes", "64,128,256");
    p.option("precisions", "comma-separated precisions", "fp32,tf32,bf16");
    p.option("layout",
             "activation layout: auto (NHWC for fp16, bf16 and tf32, NCHW for fp32: the faster one for "
             "each on an H200), nchw or nhwc",
             "auto");
    p.option("algo", "convolution algorithm policy", "find");
    p.option("iters", "timed iterations per cell", "20");
    p.option("warmup", "warm-up iterations per cell", "5");
    p.option("image", "square input size override (0 = model default)", "0");
    p.option("cuda-graph", "replay each step as a recorded CUDA graph: off, on, or both (a cell each)", "off",
             {"off", "on", "both"});
    p.option("fuse-relu", "batch norms take the ReLU after them: on, off, or both (a cell each)", "on",
             {"off", "on", "both"});
    p.flag("profile-range",
           "bracket each cell's last timed iteration with cudaProfilerStart/Stop (for ncu "
           "--profile-from-start off)");
    p.option("out", "JSON output file", "train_throughput.json");
    if (!p.parse(std::vector<std::string>(argv + 1, argv + argc))) return 0;
    const int iters = static_cast<int>(p.get_int("iters", 1, 100000));
    const int warmup = static_cast<int>(p.get_int("warmup", 0, 100000));
    const auto image = p.get_int("image", 0, 4096);
    std::vector<Cell> cells;
    for (const auto& m : cli::split_list(p.get("models"), "model"))
      for (const auto& b : cli::split_list(p.get("batches"), "batch"))
        for (const auto& pr : cli::split_list(p.get("precisions"), "precision"))
          for (const bool graphed : {false, true})
            for (const bool fused : {true, false}) {
            if (graphed ? p.get("cuda-graph") == "off" : p.get("cuda-graph") == "on") continue;
            if (fused ? p.get("fuse-relu") == "off" : p.get("fuse-relu") == "on") continue;
            Cell c;
            c.model = m;
            c.batch = std::stoll(b);
            c.precision = pr;
            c.layout = p.get("layout") != "auto" ? p.get("layout") : (pr == "fp32" ? "nchw" : "nhwc");
            c.cuda_graph = graphed;
            c.fuse_relu = fused;
            c.profile_range = p.get_flag("profile-range");
            cells.push_back(c);
          }
    std::printf("%-10s %5s %-5s %-4s %-5s %-4s %9s %8s %8s %8s %9s\n", "model", "batch", "prec", "lay", "graph", "fuse",
                "img/s", "fwd ms", "bwd ms", "upd ms", "peak MiB");
    // The whole file is rewritten after every cell, so a run cut off by a time limit keeps valid JSON.
    auto write_json = [&](std::size_t done) {
      std::ofstream out(p.get("out"));
      out << "{\"framework\": \"cnnergy\", \"results\": [\n";
      for (std::size_t i = 0; i < done; ++i) {
        const Cell& c = cells[i];
        out << "  {\"model\": \"" << c.model << "\", \"batch\": " << c.batch << ", \"precision\": \"" << c.precision
            << "\", \"layout\": \"" << c.layout << "\", \"cuda_graph\": " << (c.cuda_graph ? "true" : "false")
            << ", \"fuse_relu\": " << (c.fuse_relu ? "true" : "false")
            << (c.profile_range ? ", \"profile_range\": true" : "")
            << ", \"status\": \"" << c.status << "\", \"error\": \""
            << json_escape(c.error) << "\", \"images_per_s\": " << c.images_per_s << ", \"iter_ms\": " << c.iter_ms
            << ", \"forward_ms\": " << c.forward_ms << ", \"backward_ms\": " << c.backward_ms
            << ", \"update_ms\": " << c.update_ms << ", \"peak_mem_mib\": " << c.peak_mem_mib << "}"
            << (i + 1 < done ? ",\n" : "\n");
      }
      out << "]}\n";
    };
    for (std::size_t i = 0; i < cells.size(); ++i) {
      Cell& c = cells[i];
      try {
        run_cell(c, iters, warmup, p.get("algo"), image ? std::vector<std::int64_t>{image} : std::vector<std::int64_t>{});
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
      if (c.status == "ok")
        std::printf("%-10s %5lld %-5s %-4s %-5s %-4s %9.1f %8.2f %8.2f %8.2f %9.0f\n", c.model.c_str(),
                    static_cast<long long>(c.batch), c.precision.c_str(), c.layout.c_str(), c.cuda_graph ? "on" : "off",
                    c.fuse_relu ? "on" : "off", c.images_per_s,
                    c.forward_ms, c.backward_ms, c.update_ms, c.peak_mem_mib);
      else
        std::printf("%-10s %5lld %-5s %-4s %-5s %-4s %s: %.100s\n", c.model.c_str(), static_cast<long long>(c.batch),
                    c.precision.c_str(), c.layout.c_str(), c.cuda_graph ? "on" : "off", c.fuse_relu ? "on" : "off",
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
