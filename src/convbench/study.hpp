// The convolution study (Li et al. 2016's comparison): every implementation x direction x
// precision x layout of every problem is one cell with a status, its median time and spread (device
// events), TFLOP/s and % of peak, extra memory, energy per call (isolation windows) and the largest
// batch that fits; plus CPU-GPU transfer costs per problem and, for a model, its hotspot layers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "convbench/kernel_metrics.hpp"
#include "convbench/peaks.hpp"
#include "convbench/problem.hpp"
#include "measure/statistics.hpp"

namespace cnnergy::convbench {

inline constexpr const char* kStatusOk = "ok";
inline constexpr const char* kStatusUnsupported = "unsupported";
inline constexpr const char* kStatusDoesNotFit = "does_not_fit";
inline constexpr const char* kStatusFailed = "failed";

const std::vector<std::string>& direction_names();  // forward, backward_data, backward_filter

struct StudyOptions {
  Device device;
  // Names given to make_conv in the direction's field. Empty: every name the backend lists for each
  // direction (Backend::conv_algorithm_names), then on CUDA the graph API policies (graph_find,
  // graph_heuristic: one row each, the engine they pick) and the project's own convolutions (own:*).
  std::vector<std::string> implementations;
  // Also one row per cuDNN graph-API engine configuration that runs the problem ("graph:eng..."),
  // after the implementations above (CUDA only; Backend::conv_engine_names).
  bool graph_engines = false;
  std::vector<std::string> directions = direction_names();
  std::vector<std::string> precisions = {"fp32"};
  std::vector<Layout> layouts = {Layout::kNCHW};
  int repetitions = 10;      // timed calls per cell (median and spread)
  int warmup = 2;            // untimed calls first (the first one also resolves cuDNN's plan)
  double window_s = 1.0;     // energy: each isolation window lasts at least this long; 0: no energy
  int windows = 3;           // isolation windows per cell
  std::size_t workspace_limit_bytes = std::size_t{4} << 30;
  bool transfers = true;
  MetricsLevel metrics = MetricsLevel::kOff;
  std::uint64_t seed = 1;
};

struct Cell {
  std::size_t problem = 0;  // index into StudyResult::problems
  std::string implementation, direction, precision, layout;
  std::string status = kStatusFailed;
  std::string detail;            // the rule, the bytes needed, the error; "" when ok
  std::string ran;               // what the backend says it ran (ConvAlgoInfo), e.g. a graph engine
  std::string math_type;
  Summary time_ms;               // per call, over the repetitions
  double tflops = 0;             // flops / median time
  std::optional<double> percent_of_peak;
  std::size_t workspace_bytes = 0;   // ConvKernel::info().workspace_bytes
  std::size_t tensor_bytes = 0;      // x, w, y at the precision's element size
  double arithmetic_intensity = 0;   // flops / tensor_bytes (compulsory traffic)
  std::optional<Summary> joules_per_call;
  std::optional<double> average_watts;
  std::string energy_note;           // source, or why not measured
  std::optional<std::int64_t> max_batch;  // largest batch fitting the device memory (see max_batch_note)
  std::string max_batch_note;
  std::optional<KernelReport> kernels;    // --metrics kernels|full
};

struct TransferRow {
  std::size_t problem = 0;
  std::string what;          // "input batch" | "layer tensors (x, w, y)"
  std::string precision;
  std::size_t bytes = 0;
  std::string memory;        // "pageable" | "pinned"
  std::string direction;     // "h2d" | "d2h"
  Summary time_ms;
  double gb_per_s = 0;
  std::optional<double> conv_forward_ms;  // fastest ok forward cell of the problem at that precision
  std::optional<double> share_of_total;   // transfer / (transfer + convolution)
};

struct Hotspot {
  std::size_t problem = 0;
  std::size_t layer_count = 0;
  double total_ms = 0;       // (fastest forward + backward cells) x layers sharing the problem
  double share = 0;          // of the model's convolution time
  std::vector<std::pair<std::string, std::string>> winners;  // direction -> fastest implementation
};

struct StudyResult {
  std::string backend, device_name, cuda_runtime, cudnn;
  std::optional<DevicePeaks> peaks;
  std::size_t device_memory_bytes = 0;
  std::string energy_source;  // "" when no energy
  std::string timing_note;
  std::vector<ConvProblem> problems;
  std::vector<Cell> cells;
  std::vector<TransferRow> transfers;
  std::vector<Hotspot> hotspots;  // model source only; descending total_ms
  std::vector<std::string> notes;
};

// Runs the study. Problems that cannot run, names a backend rejects, out-of-memory and failures
// become cell statuses and the study goes on; only bad options throw (InvalidArgument). `progress`
// (may be empty) is told each cell before it runs.
StudyResult run_study(const std::vector<ConvProblem>& problems, const StudyOptions& options,
                      const std::function<void(const std::string&)>& progress = {});

// Hotspots of a model study: per problem, the fastest ok cell per direction times the layers that
// share it, ranked (Li et al. 2016, Section 4.A).
std::vector<Hotspot> compute_hotspots(const StudyResult& result, const std::string& precision, const std::string& layout);

}  // namespace cnnergy::convbench
