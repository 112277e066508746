// The cuDNN convolution kernel's fused epilogue (conv_cudnn.hpp, conv_epilogue_plan.hpp): a forward
// with a bias runs as one fused graph where that measures faster than the unfused pair.
#include <algorithm>
#include <string>

#include "backend/cuda/conv_cudnn.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {
// Fused candidates timed per problem: each may compile a kernel when its plan is built (hundreds of
// milliseconds), and cuDNN's first choice is nearly always the fastest of them.
constexpr std::size_t kEpilogueCandidates = 2;
}  // namespace

void CudnnConv::run_epilogue(const void* x, const void* w, const void* b, const void* z,
                             void* y) const {
  void* ws = ctx_->conv_workspace(epilogue_.plan().workspace_bytes());
  CNNERGY_CUDA_CALL(epilogue_.execute(ctx_->cudnn(), {x, w, b, z, y, ws}));
}

void CudnnConv::resolve_epilogue(const void* x, const void* w, const void* b, const void* z,
                                 void* y) const {
  // Not on TF32: with TF32 engines a ResNet-50 session's second eager request came out 5 % off the
  // training executor's forward (relative norm; the first request and the replays agreed), H200,
  // cuDNN 9.19, not understood yet. fp32 (FMA engines), fp16 and bf16 pass the same test.
  if (ctx_->options().dtype == DType::kF32 && ctx_->options().allow_tf32) {
    epilogue_resolved_ = true;
    return;
  }
  // Timing cannot run inside a CUDA graph capture: decided at the first forward outside one (the
  // captured forward runs the unfused passes).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CNNERGY_CUDA_CALL(cudaStreamIsCapturing(ctx_->stream(), &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  epilogue_resolved_ = true;
  EpilogueConvProblem problem;
  problem.conv = graph_problem(Dir::kForward, 0.0f);
  problem.residual = z != nullptr;
  problem.relu = d_.relu;
  const std::size_t limit = ctx_->options().workspace_limit_bytes;
  // The verdict depends on what the pair runs too: keyed by the forward's algorithm.
  const std::string key =
      problem.key() + ",pair:" + algo_text(Dir::kForward) + ",ws" + std::to_string(limit);
  const std::string what =
      std::string("conv + bias") + (z ? " + residual" : "") + (d_.relu ? " + relu" : "");
  if (auto hit = ctx_->epilogue_plan_cache().lookup(key)) {
    if (*hit) epilogue_ = EpilogueConvLaunch(*hit);
    return;
  }
  const std::string traced = "forward epilogue " + shape_text();
  ConvSearchClock::Scope timed(ctx_->search_clock(), traced);
  auto stage = ConvSearchClock::Clock::now();
  std::string why;
  auto candidates =
      epilogue_conv_candidates(ctx_->cudnn(), problem, limit, kEpilogueCandidates, &why);
  double build_ms = 0.0;
  for (const auto& c : candidates) build_ms += c->build_ms();
  ConvSearchClock::trace("epilogue:plans", traced + (z ? " +z" : ""), stage,
                         std::to_string(candidates.size()) + " finalized (" + ms_text(build_ms) +
                             " building)" + (candidates.empty() ? ": " + why : ""));
  std::shared_ptr<const EpilogueConvPlan> winner;
  if (candidates.empty()) {
    notes_.push_back("forward: " + what + " stays two passes: " + why);
  } else {
    stage = ConvSearchClock::Clock::now();
    std::size_t need = 0;
    for (const auto& c : candidates) need = std::max(need, c->workspace_bytes());
    std::shared_ptr<Buffer> ws;
    try {
      ws = ctx_->scratch(std::max<std::size_t>(need, 1));
    } catch (const OutOfMemory&) {
      candidates.clear();
      notes_.push_back("forward: " + what + " stays two passes: no memory for the fused plan's " +
                       format_bytes(need) + " workspace");
    }
    LaunchCost best;
    for (const auto& c : candidates) {
      EpilogueConvLaunch launch(c);
      const LaunchCost cost = launch_cost(ctx_->stream(), [&] {
        return launch.execute(ctx_->cudnn(), {x, w, b, z, y, ws->data()});
      });
      if (cost.device_ms < best.device_ms) best = cost, winner = c;
    }
    if (winner) {
      const LaunchCost pair = launch_cost(ctx_->stream(), [&] {
        run_unfused_forward(x, w, b, z, y);
        return CUDNN_STATUS_SUCCESS;
      });
      const std::string verdict = "fused " + winner->engine() + " " + ms_text(best.device_ms) +
                                  " against the pair's " + ms_text(pair.device_ms);
      ConvSearchClock::trace("epilogue:timing", traced, stage, verdict);
      if (best.device_ms < pair.device_ms)
        notes_.push_back("forward: " + what + " fused in one cuDNN graph (" + verdict + ")");
      else
        winner = nullptr;
    } else if (!candidates.empty()) {
      notes_.push_back("forward: " + what + " stays two passes: no fused plan ran");
    }
  }
  ctx_->epilogue_plan_cache().store(key, winner);
  if (winner) epilogue_ = EpilogueConvLaunch(winner);
}

}  // namespace cnnergy::cuda
