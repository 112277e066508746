// Convolution through cuDNN's graph (backend) API: the "graph_heuristic" and "graph_find" policies.
//
// A problem (one direction of one convolution shape, with its beta) becomes an operation graph
// once; cuDNN's heuristics (mode A, then the fallback list) rank engine configurations for it;
// those that keep the run's numerics (no TF32 for fp32 without it, no down-converted inputs, no
// reduced-precision accumulation) and do not compile kernels at run time are finalized into
// execution plans within the workspace cap. graph_heuristic takes the first plan that finalizes;
// graph_find times up to BackendOptions::conv_search_candidates ranked ones (10 by default) and
// kFallbackCandidates from the fallback list (one warm-up run, then the fastest of
// kGraphFindPasses timed runs each) and takes the fastest; "auto" sets that against the legacy
// find's choice. Plans are cached per problem in the
// context, so identical layers share one.
//
// Why: the legacy API re-derives its kernel on every call, which costs host time a small batch
// cannot hide; an execution plan is built once, and each run is one cudnnBackendExecute with a
// variant pack that GraphConvLaunch rebuilds only when an operand's address changes.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv_algos.hpp"
#include "backend/cuda/cudnn_graph.hpp"

namespace cnnergy::cuda {

// One convolution direction in the graph API's terms. Tensors are named by shape role: X is the
// input-shaped tensor (dx for backward data), W the filter-shaped one (dw for backward filter), Y
// the output-shaped one (dy for both backwards). Dimensions are (N, C, H, W) order; `nhwc` picks
// the strides.
struct GraphConvProblem {
  ConvDirection dir = ConvDirection::kForward;
  cudnnDataType_t data_type = CUDNN_DATA_FLOAT;
  bool nhwc = false;
  bool allow_tf32 = false;  // fp32 data only: tensor-core (TF32) engines allowed
  std::int64_t n = 0, c = 0, h = 0, w = 0;            // X as cuDNN sees it
  std::int64_t k = 0, c_per_group = 0, r = 0, s = 0;  // W
  std::int64_t out_h = 0, out_w = 0;                  // Y is (n, k, out_h, out_w)
  std::int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  float beta = 0.0f;  // 0 overwrites the output, 1 accumulates into it

  std::string key() const;  // every field, for the plan cache
};

// A finalized execution plan and the descriptors it was built from.
class GraphConvPlan {
 public:
  struct Parts;  // the operation graph and engine configuration it keeps alive
  GraphConvPlan(std::shared_ptr<const Parts> parts, BackendDescriptor config, BackendDescriptor plan,
                std::string engine);
  ~GraphConvPlan();

  cudnnBackendDescriptor_t get() const { return plan_.get(); }
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  // cudnn-frontend's tag: "eng<global index>" then "_k<knob type>=<value>" per knob choice.
  const std::string& engine() const { return engine_; }

 private:
  std::shared_ptr<const Parts> parts_;
  BackendDescriptor config_;  // the engine configuration the plan was finalized from
  BackendDescriptor plan_;
  std::string engine_;
  std::size_t workspace_bytes_ = 0;
};

// Besides BackendOptions::conv_search_candidates of the ranking, a search times this many of
// cuDNN's fallback list.
inline constexpr std::size_t kFallbackCandidates = 4;
inline constexpr int kGraphFindPasses = 2;  // timed runs per candidate, after one warm-up run
// A candidate whose first timed run is this many times the fastest so far is not timed again.
inline constexpr float kClearlySlower = 1.5f;
// What a warm-up run may add to a kernel's time (lazy module loading, cold caches), in milliseconds:
// a candidate is left untimed only when its warm-up exceeds kClearlySlower x the fastest warm-up by more.
inline constexpr float kWarmupSlackMs = 2.0f;
// The most loading may add to a first run, in milliseconds: a candidate left untimed for its warm-up
// gets timed runs after the passes (its kernels then loaded) where its warm-up is within this of the
// fastest time, and so does the heuristics' first choice whatever its warm-up (cuDNN predicts it
// fastest: only loading can make its first run slow). Without this a fast engine with a costly first
// run was never timed: ResNet-50's 56x56 fp32 backward data ran eng74 at 1.37 ms, while the
// heuristics' first, eng50, runs it in 0.566 ms after a 47.9 ms first run (H200).
inline constexpr float kLoadAllowanceMs = 25.0f;

// Plans for `p`, best-ranked first, each within `workspace_limit` bytes: up to `ranked` from the
// ranking, then up to `fallback` more from the fallback list. Empty when cuDNN has no engine for
// the problem under these numerics; `skipped` (optional) counts configurations left out for
// numerics, run-time compilation or workspace.
std::vector<std::shared_ptr<const GraphConvPlan>> graph_conv_candidates(
    cudnnHandle_t handle, const GraphConvProblem& p, std::size_t workspace_limit,
    std::size_t ranked, std::size_t fallback, std::size_t* skipped = nullptr,
    bool all_engines = false);

// Every engine configuration of cuDNN's ranking and fallback list that finalizes for `p` within
// the cap and keeps the run's numerics (run-time-compiled ones only where nothing else does),
// CUDA-core ones included where tensor cores serve the run: the rows of a study
// (cnnergy convbench --graph-engines all), each as GraphConvPlan::engine() writes its tag.
std::vector<std::string> graph_conv_engine_tags(cudnnHandle_t handle, const GraphConvProblem& p,
                                                std::size_t workspace_limit);

// The plan of the engine `tag` (as GraphConvPlan::engine() writes it: engine index and knob
// choices) for `p`, rebuilt and re-validated as a search would: null where the engine or a knob no
// longer finalizes, breaks the run's numerics, compiles at run time or exceeds the cap. What the
// persistent algorithm cache loads.
std::shared_ptr<const GraphConvPlan> graph_conv_plan_from_tag(cudnnHandle_t handle,
                                                              const GraphConvProblem& p,
                                                              const std::string& tag,
                                                              std::size_t workspace_limit);

// Operands by shape role (see GraphConvProblem), plus the workspace.
struct GraphConvOperands {
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  void* workspace = nullptr;
};

// A direction's (in1, in2, out) as the convolution kernel passes them (forward (x, w) -> y,
// backward data (w, dy) -> dx, backward filter (x, dy) -> dw) by shape role.
GraphConvOperands operands_by_role(ConvDirection dir, const void* in1, const void* in2, void* out,
                                   void* workspace);

// Device time (events) and host time (the call's own wall time, the stream idle before it) of one
// launch on `stream`: the fastest of three after a warm-up; infinite where a run fails.
struct LaunchCost {
  double device_ms = std::numeric_limits<double>::infinity();
  double host_ms = std::numeric_limits<double>::infinity();
  double total_ms() const { return device_ms + host_ms; }
};
LaunchCost launch_cost(cudaStream_t stream, const std::function<cudnnStatus_t()>& launch_once);
// "0.123 ms": how the searches' verdicts and notes print a timing.
std::string ms_text(double ms);

// The fastest candidate on these operands (which it overwrites or accumulates into), timed on
// `stream`; null when none runs.
std::shared_ptr<const GraphConvPlan> fastest_graph_conv(
    cudnnHandle_t handle, cudaStream_t stream,
    const std::vector<std::shared_ptr<const GraphConvPlan>>& candidates,
    const GraphConvOperands& operands);

// One kernel's use of a plan: the variant pack of its last operands, rebuilt only when an
// address changes (a layer's tensors keep theirs from step to step).
class GraphConvLaunch {
 public:
  GraphConvLaunch() = default;
  explicit GraphConvLaunch(std::shared_ptr<const GraphConvPlan> plan) : plan_(std::move(plan)) {}

  bool ready() const { return plan_ != nullptr; }
  const GraphConvPlan& plan() const { return *plan_; }
  // cudnnBackendExecute on the handle's stream; InternalError for an operand that is not 16-byte
  // aligned (the alignment the plan's tensors declare).
  cudnnStatus_t execute(cudnnHandle_t handle, const GraphConvOperands& operands);

 private:
  std::shared_ptr<const GraphConvPlan> plan_;
  std::unique_ptr<BackendDescriptor> pack_;
  std::array<void*, 4> pack_addresses_{};
};

}  // namespace cnnergy::cuda
