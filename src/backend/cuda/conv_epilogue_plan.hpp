// A forward convolution with its epilogue fused, through cuDNN's graph API:
//   y = relu?(conv(x, w) + b? + z?)    and, with statistics, sum[k] and sqsum[k] of y per channel
// one operation graph (the convolution into a virtual fp32 tensor, pointwise add of the per-channel
// bias, optionally the add of a residual z of y's shape, optionally ReLU), so the convolution's
// accumulators get the bias (and the ReLU) before they are rounded and written once: no second pass
// over the output, and one rounding instead of two in bf16/fp16.
// With statistics (a GenStats operation on y: the sums a training batch norm of y needs, as the
// fastest ResNet-50 training computes them, in the convolution's epilogue), the batch norm after
// the convolution need not read y to reduce it. Without a bias and pointwise steps the convolution
// writes y directly.
//
// cuDNN serves such graphs with its runtime-fusion engines (kernels generated and compiled for the
// graph when the plan is finalized: the first plan of a shape costs hundreds of milliseconds to
// seconds) and, for some shapes, pre-compiled fused engines. The CUDA convolution kernel
// (conv_cudnn.cpp) times the fused plan against its unfused pair (its convolution, then the bias
// pass) on the layer's own operands and keeps the faster; BackendOptions::conv_epilogue_fusion
// turns the offer off.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/conv_graph_plan.hpp"
#include "backend/cuda/cudnn_graph.hpp"

namespace cnnergy::cuda {

struct EpilogueConvProblem {
  GraphConvProblem conv;  // the forward convolution (dir kForward, beta 0)
  bool bias = true;       // + b (per channel, y's type)
  bool residual = false;  // + z (y's shape and type)
  bool relu = false;      // max(0, .) last
  bool statistics = false;  // sum and sum of squares of y per channel (fp32, k each)
  // The convolution reads relu(x * scale + shift) (per input channel, y's type) instead of x: the
  // previous batch norm's normalisation folded into this convolution's prologue, as in cuDNN's
  // ConvBNfprop pattern. Studied by bench_conv_statistics; the training executor does not use it.
  bool input_affine_relu = false;

  std::string key() const;
};

class EpilogueConvPlan {
 public:
  struct Parts;  // the operation graph it keeps alive
  EpilogueConvPlan(std::shared_ptr<const Parts> parts, BackendDescriptor config,
                   BackendDescriptor plan, std::string engine, bool compiled, double build_ms);
  ~EpilogueConvPlan();

  cudnnBackendDescriptor_t get() const { return plan_.get(); }
  std::size_t workspace_bytes() const { return workspace_bytes_; }
  const std::string& engine() const { return engine_; }  // as GraphConvPlan::engine()
  bool compiled_at_run_time() const { return compiled_; }
  double build_ms() const { return build_ms_; }  // finalizing the plan (compilation included)
  std::int64_t statistics_channels() const;      // k for a statistics graph (sums to zero), else 0

 private:
  std::shared_ptr<const Parts> parts_;
  BackendDescriptor config_;
  BackendDescriptor plan_;
  std::string engine_;
  bool compiled_ = false;
  double build_ms_ = 0.0;
  std::size_t workspace_bytes_ = 0;
};

// Up to `limit` plans for `p` within `workspace_limit` bytes that keep the run's numerics,
// best-ranked first (cuDNN's heuristics mode A, then its fallback list); run-time-compiled engines
// are included (for most shapes they are the only ones). Empty where cuDNN has no engine for the
// graph; `why` (optional) then says so. Never throws for a graph cuDNN refuses.
std::vector<std::shared_ptr<const EpilogueConvPlan>> epilogue_conv_candidates(
    cudnnHandle_t handle, const EpilogueConvProblem& p, std::size_t workspace_limit,
    std::size_t limit, std::string* why = nullptr);

struct EpilogueConvOperands {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* b = nullptr;  // problems with a bias only
  const void* z = nullptr;  // residual problems only
  void* y = nullptr;
  void* workspace = nullptr;
  float* sum = nullptr;    // statistics problems only: k floats each, zeroed by execute, then written
  float* sqsum = nullptr;
  const void* in_scale = nullptr;  // input_affine_relu problems only: c values each
  const void* in_shift = nullptr;
};

// One kernel's use of a plan, with the variant pack of its last operands (rebuilt only when an
// address changes).
class EpilogueConvLaunch {
 public:
  EpilogueConvLaunch() = default;
  explicit EpilogueConvLaunch(std::shared_ptr<const EpilogueConvPlan> plan)
      : plan_(std::move(plan)) {}

  bool ready() const { return plan_ != nullptr; }
  const EpilogueConvPlan& plan() const { return *plan_; }
  // cudnnBackendExecute on the handle's stream; InternalError for an operand that is not 16-byte
  // aligned.
  cudnnStatus_t execute(cudnnHandle_t handle, const EpilogueConvOperands& operands);

 private:
  std::shared_ptr<const EpilogueConvPlan> plan_;
  std::unique_ptr<BackendDescriptor> pack_;
  std::array<const void*, 10> pack_addresses_{};
};

}  // namespace cnnergy::cuda
