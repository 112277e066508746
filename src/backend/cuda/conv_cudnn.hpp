// The cuDNN convolution kernel (internal to the CUDA backend), declared here and defined in three
// files along the seam of its two cuDNN APIs: conv_cudnn.cpp (descriptors, the passes, dispatch by
// policy, the search keys), conv_cudnn_legacy.cpp (the legacy API: find, heuristic, named
// algorithms, launches) and conv_cudnn_graph.cpp (the graph API's plans and the `auto` policy).
// Every search consults the backend's caches, then the persistent algorithm cache
// (core/algo_cache.hpp; a loaded decision is re-validated before it runs), and records what it
// decided in both.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/conv_algos.hpp"
#include "backend/cuda/conv_epilogue_plan.hpp"
#include "backend/cuda/conv_graph_plan.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "core/algo_cache.hpp"

namespace cnnergy::cuda {

using Dir = ConvDirection;

// One candidate of the legacy search: an algorithm under a math type, as cuDNN's v7 ranking
// (cudnnGet*Algorithm_v7) lists it, with the workspace it needs.
struct LegacyCandidate {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t memory = 0;
};

class CudnnConv final : public ConvKernel {
 public:
  CudnnConv(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& d, const ConvAlgoChoice& choice);

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) override;
  void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw,
                       const Tensor& db) override;
  ConvAlgoInfo info() const override;
  // The largest of the chosen plans' workspaces: the three directions (the accumulating backward
  // data's graph plan included) and the fused forward graphs that resolved.
  std::size_t workspace_bound() const override;
  bool epilogue_fused() const override { return epilogue_.ready(); }
  // desc.residual: relu?(conv + b + z), fused in one cuDNN graph where that is faster, else the
  // convolution, the bias pass and the add (+ ReLU) pass.
  void forward_residual(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& z,
                        const Tensor& y) override;
  // desc.statistics: cuDNN's convolution + GenStats graph where it measures faster than this
  // kernel's forward and the batch norm's statistics pass (true: the sums written), else the forward.
  bool forward_statistics(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& sums) override;
  // The graph-API engine configurations that run this convolution's direction here, each as a
  // field value ("graph:" and the engine tag) this kernel's ConvAlgoChoice accepts.
  std::vector<std::string> graph_engine_names(Dir dir) const;

 private:
  struct Plan {
    bool resolved = false;
    bool named = false;  // a user-named algorithm (may still fail at run time)
    int algo = 0;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    std::size_t workspace_bytes = 0;
    bool graph = false;  // runs graph-API plans (graph_) instead of the legacy algorithm
    std::string engine;  // graph: the overwriting plan's engine tag
  };

  static std::size_t index(Dir d) { return static_cast<std::size_t>(d); }

  // ---- conv_cudnn.cpp ----
  // What info() reports: the legacy algorithm's name, or "graph:" and the plan's engine tag.
  std::string algo_text(Dir dir) const;
  std::string shape_text() const;
  // The policy of one direction: the layer's field when set (validated), else the run's policy; a
  // run-wide algorithm name that this direction lacks (e.g. "gemm" for backward filter) runs the
  // heuristic and says so in the notes.
  std::string direction_policy(Dir dir, const std::string& field);
  kernels::Dims padded_dims() const { return {d_.n, d_.c, in_h_, in_w_, layout_ == Layout::kNHWC}; }
  std::size_t padded_bytes() const {
    return static_cast<std::size_t>(d_.n * d_.c * in_h_ * in_w_) * dtype_size_bytes(dtype_);
  }
  std::shared_ptr<Buffer> pad_input(const Tensor& x) const;
  // Resolves the direction's algorithm (for graph policies: the plan for this beta) on first use;
  // find times on in1/in2/out where given (out only where it is overwritten anyway).
  void ensure_resolved(Dir dir, const void* in1, const void* in2, void* out,
                       float beta = 0.0f) const;
  // The backend cache's key of a legacy problem.
  std::string cache_key(Dir dir) const;
  // The persistent cache's key: the full problem as cuDNN sees it, the numerics, the deciding
  // policy, the workspace cap and the candidate count.
  ConvProblemKey problem_key(Dir dir, const std::string& policy, float beta,
                             std::int64_t candidates) const;
  // The operands a search times on, (in1, in2, out) as in run(): the caller's where given (inputs
  // are only read; outputs are overwritten later anyway), zeroed scratch otherwise (info() before
  // any run, or an accumulating backward); `held` keeps the scratch alive.
  std::array<void*, 3> search_operands(Dir dir, const void* in1, const void* in2, void* out,
                                       std::vector<std::shared_ptr<Buffer>>& held) const;
  // Forward: (x, w) -> y; backward data: (w, dy) -> dx; backward filter: (x, dy) -> dw.
  void run(Dir dir, const void* in1, const void* in2, void* out, float beta) const;

  // ---- conv_cudnn_legacy.cpp ----
  // cudnnGet*WorkspaceSize for one algorithm under the descriptor's current math type.
  cudnnStatus_t workspace_size(Dir dir, int algo, std::size_t* bytes) const;
  std::vector<LegacyCandidate> legacy_candidates(Dir dir, std::size_t offer,
                                                        bool half) const;
  cudnnStatus_t run_algo(Dir dir, int algo, const void* in1, const void* in2, void* out, void* ws,
                         std::size_t ws_bytes, float beta = 0.0f) const;
  void set_math(Dir dir, cudnnMathType_t math) const;
  void adopt(Dir dir, int algo, cudnnMathType_t math, bool named) const;
  // cuDNN's ranking; the first algorithm that is supported and fits the workspace cap.
  void use_heuristic(Dir dir) const;
  void use_named(Dir dir, const NamedConvAlgo& algo) const;
  // A named algorithm cannot run this shape: heuristic + note, or NotSupported when fallback is
  // off.
  void fall_back(Dir dir, const std::string& name, const std::string& reason) const;
  // Times every algorithm (cudnnFind*AlgorithmEx, twice) within the largest workspace any of them
  // needs up to the cap, picks the fastest that succeeded, and caches it for identical problems
  // (in the backend and, where enabled, on disk).
  void use_find(Dir dir, const void* in1, const void* in2, void* out) const;
  // A persistent decision for the legacy API, adopted where cuDNN still accepts the algorithm
  // under its math type within the cap; false (the entry dropped) otherwise.
  bool adopt_persistent_legacy(Dir dir, const AlgoDecision& d) const;
  cudnnStatus_t launch(Dir dir, const void* in1, const void* in2, void* out, float beta) const;
  // The legacy algorithm on an explicit workspace of `ws_bytes`.
  cudnnStatus_t launch(Dir dir, const void* in1, const void* in2, void* out, float beta, void* ws,
                       std::size_t ws_bytes) const;

  // ---- conv_cudnn_graph.cpp ----
  GraphConvProblem graph_problem(Dir dir, float beta) const;
  // The graph-API plan of one direction and beta, from the caches or a search (`find`: the
  // fastest of the candidates, for graph_find and auto; otherwise the top-ranked engine, for
  // graph_heuristic). Where the graph API has nothing to run, the legacy counterpart takes the
  // direction over with a note, or NotSupported when fallback is off.
  void use_graph(Dir dir, bool find, const void* in1, const void* in2, void* out, float beta) const;
  void adopt_graph(Dir dir, float beta, std::shared_ptr<const GraphConvPlan> plan) const;
  // A direction named to one engine ("graph:TAG"): its plan for this beta, rebuilt from the tag;
  // NotSupported where it does not run this problem (no fallback: a study asked for this engine).
  void use_graph_engine(Dir dir, const std::string& tag, float beta) const;
  // The graph plan from the caches or a search; null (with the reason) where none runs.
  std::shared_ptr<const GraphConvPlan> graph_search(Dir dir, bool find, const void* in1,
                                                    const void* in2, void* out, float beta,
                                                    std::string& why) const;
  // "auto": the legacy find's algorithm against graph_find's plan, each costed as its device time
  // plus the host time of one call (the legacy API re-derives its kernel per call, which a small
  // batch cannot hide), measured on the same operands; the cheaper runs the direction (both
  // betas), and identical problems reuse the decision.
  void use_auto(Dir dir, const void* in1, const void* in2, void* out, float beta) const;
  // graph_find's timing: on the caller's operands where given (see search_operands), within the
  // largest workspace the candidates need that can be had (the hungriest are dropped otherwise).
  std::shared_ptr<const GraphConvPlan> time_graph_candidates(
      Dir dir, std::vector<std::shared_ptr<const GraphConvPlan>> candidates, const void* in1,
      const void* in2, void* out) const;

  // ---- conv_cudnn_epilogue.cpp ----
  // A forward with a bias (BackendOptions::conv_epilogue_fusion): whether cuDNN's fused graph
  // (conv + bias, + ReLU where desc.relu) runs it, decided on first use by timing its fastest
  // candidate against the unfused pair (this kernel's forward, then the bias pass) on the caller's
  // operands, and reused for identical problems. Leaves epilogue_ empty where the pair is faster or
  // no engine runs the graph (with a note).
  // z: the residual (desc.residual), else null.
  void resolve_epilogue(const void* x, const void* w, const void* b, const void* z, void* y) const;
  void run_epilogue(const void* x, const void* w, const void* b, const void* z, void* y) const;
  // desc.statistics: the same decision for the convolution + statistics graph, against the forward
  // and the batch norm's statistics pass over y; leaves statistics_ empty where the pair wins (but
  // with StatisticsFusion::kAlways, where a plan runs at all).
  void resolve_statistics(const void* x, const void* w, void* y, float* sums) const;
  // The fastest of cuDNN's plans for a fused problem, timed on `operands` (their workspace filled in
  // here) against `unfused`, the passes it replaces: null where those are faster or nothing runs
  // (with a note); `always`: the fastest plan even where the pair is faster. Cached per problem, the
  // forward's algorithm, the workspace cap and `always`.
  std::shared_ptr<const EpilogueConvPlan> fastest_fused(const EpilogueConvProblem& problem,
                                                        const std::string& what, const std::string& traced,
                                                        EpilogueConvOperands operands,
                                                        const std::function<void()>& unfused,
                                                        bool always) const;
  // The unfused passes: the resolved forward, the bias pass (with the ReLU where desc.relu and no
  // residual), and with a residual the add (+ ReLU) pass.
  void run_unfused_forward(const void* x, const void* w, const void* b, const void* z, void* y) const;

  std::shared_ptr<CudaContext> ctx_;
  Conv2dDesc d_;
  DType dtype_;
  Layout layout_;
  bool explicit_pad_ = false;
  std::int64_t in_h_ = 0, in_w_ = 0;  // the input cuDNN sees (padded when padding is asymmetric)
  cudnnMathType_t base_math_ = CUDNN_DEFAULT_MATH;
  TensorDescriptor x_desc_, y_desc_;
  FilterDescriptor w_desc_;
  std::array<ConvolutionDescriptor, 3> conv_desc_;
  // A graph policy becomes its legacy counterpart where the graph API cannot run the direction.
  mutable std::array<std::string, 3> policy_;
  // Resolved lazily (on first use of a direction, or by info()): a logically-const cache.
  mutable std::array<Plan, 3> plan_;
  mutable std::array<std::array<GraphConvLaunch, 2>, 3> graph_;  // graph policies: by beta 0 / 1
  mutable std::vector<std::string> notes_;
  mutable bool epilogue_resolved_ = false;
  mutable EpilogueConvLaunch epilogue_;  // ready where the fused plan runs the forward
  mutable bool statistics_resolved_ = false;
  mutable EpilogueConvLaunch statistics_;  // ready where the statistics graph runs the forward
};

// Whether a cuDNN status is in the NOT_SUPPORTED category (a shape or algorithm cuDNN refuses).
bool is_not_supported(cudnnStatus_t s);

}  // namespace cnnergy::cuda
