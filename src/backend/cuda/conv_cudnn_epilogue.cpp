// The cuDNN convolution kernel's fused epilogues (conv_cudnn.hpp, conv_epilogue_plan.hpp): a forward
// with a bias, or a training forward that computes its batch norm's statistics, runs as one fused
// graph where that measures faster than the unfused pair.
#include <algorithm>
#include <functional>
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
  const std::string what =
      std::string("conv + bias") + (z ? " + residual" : "") + (d_.relu ? " + relu" : "");
  EpilogueConvOperands operands{x, w, b, z, y, nullptr};
  auto winner = fastest_fused(problem, what, "forward epilogue " + shape_text() + (z ? " +z" : ""), operands,
                              [&] { run_unfused_forward(x, w, b, z, y); }, false);
  if (winner) epilogue_ = EpilogueConvLaunch(std::move(winner));
}

bool CudnnConv::forward_statistics(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& sums) {
  ctx_->activate();
  if (!d_.statistics || d_.bias)
    throw InternalError("conv2d " + shape_text() + ": forward_statistics on a convolution made without statistics");
  check_device_tensor(x, *ctx_, "conv2d forward_statistics", "x", d_.input_shape(), dtype_, layout_);
  check_device_tensor(w, *ctx_, "conv2d forward_statistics", "w", d_.weight_shape(), dtype_, layout_);
  check_device_tensor(y, *ctx_, "conv2d forward_statistics", "y", d_.output_shape(), dtype_, layout_);
  check_device_tensor(sums, *ctx_, "conv2d forward_statistics", "sums", Shape{2 * d_.k}, DType::kF32,
                      Layout::kNCHW);
  std::shared_ptr<Buffer> padded;
  const void* xin = explicit_pad_ ? (padded = pad_input(x))->data() : x.raw();
  ensure_resolved(Dir::kForward, xin, w.raw(), y.raw());
  auto* sum = static_cast<float*>(sums.raw());
  if (!statistics_resolved_) resolve_statistics(xin, w.raw(), y.raw(), sum);
  if (!statistics_.ready()) {
    run_unfused_forward(xin, w.raw(), nullptr, nullptr, y.raw());
    return false;
  }
  void* ws = ctx_->conv_workspace(statistics_.plan().workspace_bytes());
  EpilogueConvOperands o{xin, w.raw(), nullptr, nullptr, y.raw(), ws};
  o.sum = sum;
  o.sqsum = sum + d_.k;
  CNNERGY_CUDA_CALL(statistics_.execute(ctx_->cudnn(), o));
  return true;
}

void CudnnConv::resolve_statistics(const void* x, const void* w, void* y, float* sums) const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CNNERGY_CUDA_CALL(cudaStreamIsCapturing(ctx_->stream(), &capture));
  if (capture != cudaStreamCaptureStatusNone) return;  // as resolve_epilogue: decided outside a capture
  statistics_resolved_ = true;
  EpilogueConvProblem problem;
  problem.conv = graph_problem(Dir::kForward, 0.0f);
  problem.bias = false;
  problem.statistics = true;
  // The unfused pair: this kernel's forward, then the batch norm's statistics pass over y (what the
  // fused graph saves; the batch norm's normalisation pass runs either way).
  const kernels::ChannelView view =
      kernels::channel_view({d_.n, d_.k, d_.out_h(), d_.out_w(), layout_ == Layout::kNHWC});
  auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view, dtype_));
  EpilogueConvOperands operands{x, w, nullptr, nullptr, y, nullptr};
  operands.sum = sums;
  operands.sqsum = sums + d_.k;
  auto winner = fastest_fused(problem, "conv + batch-norm statistics", "forward statistics " + shape_text(),
                              operands, [&] {
                                run_unfused_forward(x, w, nullptr, nullptr, y);
                                kernels::batch_norm_statistics_pass(y, dtype_, view, scratch->data(), ctx_->stream());
                              },
                              ctx_->options().conv_statistics_fusion == StatisticsFusion::kAlways);
  if (winner) statistics_ = EpilogueConvLaunch(std::move(winner));
}

std::shared_ptr<const EpilogueConvPlan> CudnnConv::fastest_fused(const EpilogueConvProblem& problem,
                                                                 const std::string& what,
                                                                 const std::string& traced,
                                                                 EpilogueConvOperands operands,
                                                                 const std::function<void()>& unfused,
                                                                 bool always) const {
  const std::size_t limit = ctx_->options().workspace_limit_bytes;
  // The verdict depends on what the pair runs too: keyed by the forward's algorithm.
  const std::string key = problem.key() + ",pair:" + algo_text(Dir::kForward) + ",ws" + std::to_string(limit) +
                          (always ? ",always" : "");
  if (auto hit = ctx_->epilogue_plan_cache().lookup(key)) return *hit;
  ConvSearchClock::Scope timed(ctx_->search_clock(), traced);
  auto stage = ConvSearchClock::Clock::now();
  std::string why;
  auto candidates =
      epilogue_conv_candidates(ctx_->cudnn(), problem, limit, kEpilogueCandidates, &why);
  double build_ms = 0.0;
  for (const auto& c : candidates) build_ms += c->build_ms();
  ConvSearchClock::trace("epilogue:plans", traced, stage,
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
      ws = ctx_->search_scratch(std::max<std::size_t>(need, 1));
    } catch (const OutOfMemory&) {
      candidates.clear();
      notes_.push_back("forward: " + what + " stays two passes: no memory for the fused plan's " +
                       format_bytes(need) + " workspace");
    }
    LaunchCost best;
    for (const auto& c : candidates) {
      EpilogueConvLaunch launch(c);
      operands.workspace = ws->data();
      const LaunchCost cost =
          launch_cost(ctx_->stream(), [&] { return launch.execute(ctx_->cudnn(), operands); });
      if (cost.device_ms < best.device_ms) best = cost, winner = c;
    }
    if (winner) {
      const LaunchCost pair = launch_cost(ctx_->stream(), [&] {
        unfused();
        return CUDNN_STATUS_SUCCESS;
      });
      const std::string verdict = "fused " + winner->engine() + " " + ms_text(best.device_ms) +
                                  " against the pair's " + ms_text(pair.device_ms);
      ConvSearchClock::trace("epilogue:timing", traced, stage, verdict);
      if (best.device_ms < pair.device_ms)
        notes_.push_back("forward: " + what + " fused in one cuDNN graph (" + verdict + ")");
      else if (always)
        notes_.push_back("forward: " + what + " fused in one cuDNN graph, as asked, though slower (" + verdict + ")");
      else
        winner = nullptr;
    } else if (!candidates.empty()) {
      notes_.push_back("forward: " + what + " stays two passes: no fused plan ran");
    }
  }
  ctx_->epilogue_plan_cache().store(key, winner);
  return winner;
}

}  // namespace cnnergy::cuda
