// The cuDNN convolution kernel's legacy API (conv_cudnn.hpp): cudnnFind*AlgorithmEx ("find", two
// timing passes, each algorithm judged by its faster one), cudnnGet*Algorithm_v7 ("heuristic"),
// named algorithms with their fallback, and the launches of the chosen algorithm.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv_cudnn.hpp"
#include "backend/cuda/cuda_raii.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

constexpr int kTimedPasses = 2;         // timed runs per candidate after its warm-up run
constexpr float kClearlySlowerLegacy = 1.5f;

template <class Perf>
std::vector<LegacyCandidate> usable(const std::vector<Perf>& perfs, int returned,
                                    std::size_t offer, bool half) {
  std::vector<LegacyCandidate> out;
  bool tensor = false;
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perfs[static_cast<std::size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > offer) continue;
    bool seen = false;
    for (const LegacyCandidate& c : out) seen = seen || (c.algo == int(p.algo) && c.math == p.mathType);
    if (seen) continue;
    out.push_back(LegacyCandidate{static_cast<int>(p.algo), p.mathType, p.memory});
    tensor = tensor || p.mathType != CUDNN_DEFAULT_MATH;
  }
  // fp16/bf16 without tensor cores runs on CUDA cores: on VGG-16's 224x224 layers such a run took
  // 980 ms against 1.2 ms with tensor cores (H200). Such candidates cannot win where a tensor-core
  // one exists, and are not run at all.
  if (half && tensor)
    out.erase(std::remove_if(out.begin(), out.end(),
                             [](const LegacyCandidate& c) { return c.math == CUDNN_DEFAULT_MATH; }),
              out.end());
  return out;
}

template <typename Perf>
std::vector<Perf> perf_buffer(int count) {
  return std::vector<Perf>(static_cast<std::size_t>(std::max(count, 1)));
}

}  // namespace

// cudnnGet*WorkspaceSize for one algorithm under the descriptor's current math type.
cudnnStatus_t CudnnConv::workspace_size(Dir dir, int algo, std::size_t* bytes) const {
  cudnnConvolutionDescriptor_t cd = conv_desc_[index(dir)];
  switch (dir) {
    case Dir::kForward:
      return cudnnGetConvolutionForwardWorkspaceSize(ctx_->cudnn(), x_desc_, w_desc_, cd, y_desc_,
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                                     bytes);
    case Dir::kBackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(
          ctx_->cudnn(), w_desc_, y_desc_, cd, x_desc_,
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case Dir::kBackwardFilter:
      break;
  }
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(
      ctx_->cudnn(), x_desc_, y_desc_, cd, w_desc_,
      static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
}

void CudnnConv::set_math(Dir dir, cudnnMathType_t math) const {
  // fp32 without TF32 stays on FMA whatever cuDNN reports for an algorithm.
  const cudnnMathType_t m = base_math_ == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : math;
  CNNERGY_CUDA_CALL(cudnnSetConvolutionMathType(conv_desc_[index(dir)], m));
}

void CudnnConv::adopt(Dir dir, int algo, cudnnMathType_t math, bool named) const {
  set_math(dir, math);
  std::size_t ws = 0;
  CNNERGY_CUDA_CALL(workspace_size(dir, algo, &ws));
  Plan& p = plan_[index(dir)];
  p = Plan{true, named, algo, base_math_ == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : math, ws, false, {}};
}

// cuDNN's ranking; the first algorithm that is supported and fits the workspace cap.
void CudnnConv::use_heuristic(Dir dir) const {
  set_math(dir, base_math_);
  const std::size_t limit = ctx_->options().workspace_limit_bytes;
  auto pick = [&](const auto& perfs, int returned) {
    for (int i = 0; i < returned; ++i) {
      const auto& p = perfs[static_cast<std::size_t>(i)];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      set_math(dir, p.mathType);
      std::size_t ws = 0;
      if (workspace_size(dir, static_cast<int>(p.algo), &ws) != CUDNN_STATUS_SUCCESS || ws > limit)
        continue;
      adopt(dir, static_cast<int>(p.algo), p.mathType, false);
      return true;
    }
    return false;
  };
  cudnnHandle_t h = ctx_->cudnn();
  cudnnConvolutionDescriptor_t cd = conv_desc_[index(dir)];
  int max_count = 0, returned = 0;
  bool found = false;
  switch (dir) {
    case Dir::kForward: {
      CNNERGY_CUDA_CALL(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
      auto perfs = perf_buffer<cudnnConvolutionFwdAlgoPerf_t>(max_count);
      CNNERGY_CUDA_CALL(cudnnGetConvolutionForwardAlgorithm_v7(h, x_desc_, w_desc_, cd, y_desc_,
                                                               max_count, &returned, perfs.data()));
      found = pick(perfs, returned);
      break;
    }
    case Dir::kBackwardData: {
      CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
      auto perfs = perf_buffer<cudnnConvolutionBwdDataAlgoPerf_t>(max_count);
      CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          h, w_desc_, y_desc_, cd, x_desc_, max_count, &returned, perfs.data()));
      found = pick(perfs, returned);
      break;
    }
    case Dir::kBackwardFilter: {
      CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
      auto perfs = perf_buffer<cudnnConvolutionBwdFilterAlgoPerf_t>(max_count);
      CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, x_desc_, y_desc_, cd, w_desc_, max_count, &returned, perfs.data()));
      found = pick(perfs, returned);
      break;
    }
  }
  if (!found)
    throw NotSupported("conv2d " + shape_text() + ": no " + direction_name(dir) +
                       " algorithm runs within the workspace limit of " +
                       format_bytes(ctx_->options().workspace_limit_bytes));
}

void CudnnConv::use_named(Dir dir, const NamedConvAlgo& algo) const {
  set_math(dir, base_math_);
  std::size_t ws = 0;
  const cudnnStatus_t s = workspace_size(dir, algo.value, &ws);
  const std::size_t limit = ctx_->options().workspace_limit_bytes;
  if (s == CUDNN_STATUS_SUCCESS && ws <= limit) {
    adopt(dir, algo.value, base_math_, true);
    return;
  }
  if (s != CUDNN_STATUS_SUCCESS && !is_not_supported(s)) CNNERGY_CUDA_CALL(s);
  const std::string reason =
      s != CUDNN_STATUS_SUCCESS
          ? std::string("cuDNN: ") + cudnnGetErrorString(s)
          : "needs " + format_bytes(ws) + " of workspace, limit " + format_bytes(limit);
  fall_back(dir, algo.name, reason);
}

// A named algorithm cannot run this shape: heuristic + note, or NotSupported when fallback is
// off.
void CudnnConv::fall_back(Dir dir, const std::string& name, const std::string& reason) const {
  if (!ctx_->options().conv_algo_fallback)
    throw NotSupported("conv2d " + shape_text() + ": " + direction_name(dir) + " algorithm '" +
                       name + "' is not supported for this shape (" + reason +
                       "); choose another algorithm or allow fallback");
  use_heuristic(dir);
  notes_.push_back(std::string(direction_name(dir)) + ": " + name + " unsupported for " +
                   shape_text() + " (" + reason + "), fell back to the heuristic's " +
                   conv_algo_name(dir, plan_[index(dir)].algo));
}

// Times the algorithms cuDNN's v7 ranking offers within the largest workspace any of them needs
// up to the cap (see below), picks the fastest that succeeded, and caches it for identical
// problems.
void CudnnConv::use_find(Dir dir, const void* in1, const void* in2, void* out) const {
  const std::string key = cache_key(dir);
  if (auto hit = ctx_->conv_algo_cache().lookup(key)) {
    adopt(dir, hit->algo, hit->math, false);
    return;
  }
  AlgoCache* persistent = ctx_->algo_cache();
  const ConvProblemKey pkey = problem_key(dir, "find", 0.0f, 0);
  if (persistent)
    if (auto d = persistent->lookup(pkey); d && d->kind == "legacy") {
      if (adopt_persistent_legacy(dir, *d)) {
        ctx_->conv_algo_cache().insert(
            key, CachedConvAlgo{plan_[index(dir)].algo, plan_[index(dir)].math,
                                plan_[index(dir)].workspace_bytes});
        ctx_->search_clock().count_cached();
        return;
      }
      persistent->forget(pkey);  // no longer valid here: searched again below
    }
  ConvSearchClock::Scope timed(ctx_->search_clock(),
                               std::string(direction_name(dir)) + " " + shape_text());
  const std::size_t limit = ctx_->options().workspace_limit_bytes;
  set_math(dir, base_math_);
  std::size_t offer = 0;
  for (const NamedConvAlgo& a : conv_algos(dir)) {
    std::size_t ws = 0;
    if (workspace_size(dir, a.value, &ws) == CUDNN_STATUS_SUCCESS && ws <= limit)
      offer = std::max(offer, ws);
  }
  std::vector<std::shared_ptr<Buffer>> held;
  const std::array<void*, 3> operands = search_operands(dir, in1, in2, out, held);
  void* a = operands[0];
  void* b = operands[1];
  void* c_out = operands[2];
  std::shared_ptr<Buffer> ws;
  while (true) {  // a smaller workspace (fewer candidate algorithms) where memory is short
    try {
      ws = ctx_->search_scratch(offer);
      break;
    } catch (const OutOfMemory&) {
      if (offer == 0) throw;
      offer /= 2;
    }
  }
  // cuDNN's v7 ranking lists the (algorithm, math type) pairs that can run; each is run once to
  // load its kernels (itself timed), those clearly slower than the fastest warm-up even after the
  // loading slack are dropped, and the rest are timed kTimedPasses times, each judged by its
  // fastest run. Against cudnnFind*AlgorithmEx twice, this runs a slow algorithm once instead of
  // up to six times (cuDNN's find times each one several times, every pass).
  const std::string traced = std::string(direction_name(dir)) + " " + shape_text();
  const auto stage = ConvSearchClock::Clock::now();
  const bool half = dtype_ == DType::kF16 || dtype_ == DType::kBF16;
  std::vector<LegacyCandidate> candidates = legacy_candidates(dir, offer, half);
  cudaStream_t stream = ctx_->stream();
  Event start, stop;
  auto timed_run = [&](const LegacyCandidate& c) -> std::optional<float> {
    set_math(dir, c.math);
    CNNERGY_CUDA_CALL(cudaEventRecord(start, stream));
    if (run_algo(dir, c.algo, a, b, c_out, ws->data(), offer) != CUDNN_STATUS_SUCCESS) {
      CNNERGY_CUDA_CALL(cudaStreamSynchronize(stream));
      return std::nullopt;
    }
    CNNERGY_CUDA_CALL(cudaEventRecord(stop, stream));
    CNNERGY_CUDA_CALL(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CNNERGY_CUDA_CALL(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  };
  std::vector<float> best_ms(candidates.size(), std::numeric_limits<float>::infinity());
  std::vector<bool> ran(candidates.size(), false);
  float fastest_warm = std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (auto ms = timed_run(candidates[i])) {
      ran[i] = true;
      best_ms[i] = *ms;
      fastest_warm = std::min(fastest_warm, *ms);
    }
  float fastest = std::numeric_limits<float>::infinity();
  for (int pass = 0; pass < kTimedPasses; ++pass)
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (!ran[i]) continue;
      if (pass == 0 && best_ms[i] > kClearlySlowerLegacy * fastest_warm + kWarmupSlackMs) continue;
      if (pass > 0 && best_ms[i] > kClearlySlowerLegacy * fastest) continue;
      if (auto ms = timed_run(candidates[i])) best_ms[i] = std::min(best_ms[i], *ms);
      fastest = std::min(fastest, best_ms[i]);
    }
  // Second chance, as in the graph API's search (kLoadAllowanceMs): a candidate kept out by its
  // warm-up alone, where loading can explain that warm-up, is timed now that its kernels are loaded.
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const float warm = best_ms[i];
    if (!ran[i] || warm <= kClearlySlowerLegacy * fastest_warm + kWarmupSlackMs) continue;
    if (i != 0 && warm > fastest + kLoadAllowanceMs) continue;  // 0: cuDNN's ranking's first
    for (int pass = 0; pass < kTimedPasses; ++pass) {
      if (pass > 0 && best_ms[i] > kClearlySlowerLegacy * fastest) break;
      if (auto ms = timed_run(candidates[i])) best_ms[i] = std::min(best_ms[i], *ms);
      fastest = std::min(fastest, best_ms[i]);
    }
  }
  set_math(dir, base_math_);
  std::optional<CachedConvAlgo> best;
  float best_ms_all = 0.0f;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (ran[i] && (!best || best_ms[i] < best_ms_all)) {
      best = CachedConvAlgo{candidates[i].algo, candidates[i].math, candidates[i].memory};
      best_ms_all = best_ms[i];
    }
  if (ConvSearchClock::tracing()) {
    std::string detail = std::to_string(candidates.size()) + " candidates, ws " +
                         format_bytes(offer) + ":";
    for (std::size_t i = 0; i < candidates.size(); ++i)
      detail += " " + conv_algo_name(dir, candidates[i].algo) +
                (candidates[i].math == CUDNN_DEFAULT_MATH ? "" : "/tc") + "=" +
                (ran[i] ? std::to_string(best_ms[i]) : std::string("failed")) + "/" +
                format_bytes(candidates[i].memory);
    ConvSearchClock::trace("legacy:find", traced, stage, detail);
  }
  if (!best) {  // nothing ran within the workspace that could be had: cuDNN's ranking instead
    use_heuristic(dir);
    notes_.push_back(std::string(direction_name(dir)) + ": find timed no algorithm within " +
                     format_bytes(offer) + " of workspace; using the heuristic's " +
                     conv_algo_name(dir, plan_[index(dir)].algo));
    return;
  }
  adopt(dir, best->algo, best->math, false);
  ctx_->conv_algo_cache().store(
      key, CachedConvAlgo{best->algo, best->math, plan_[index(dir)].workspace_bytes});
  if (persistent) {
    AlgoDecision d;
    d.kind = "legacy";
    d.algo = best->algo;
    d.math_type = static_cast<int>(plan_[index(dir)].math);
    d.workspace_bytes = plan_[index(dir)].workspace_bytes;
    d.device_ms = best_ms_all;
    d.note = conv_algo_name(dir, best->algo);
    persistent->record(pkey, d);
  }
}

// The (algorithm, math type) pairs cuDNN's v7 ranking says can run within `offer` bytes of
// workspace, best ranked first (see usable() for what is left out).
std::vector<LegacyCandidate> CudnnConv::legacy_candidates(Dir dir, std::size_t offer,
                                                          bool half) const {
  cudnnHandle_t h = ctx_->cudnn();
  cudnnConvolutionDescriptor_t cd = conv_desc_[index(dir)];
  set_math(dir, base_math_);
  int max_count = 0, returned = 0;
  switch (dir) {
    case Dir::kForward: {
      CNNERGY_CUDA_CALL(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
      auto perfs = perf_buffer<cudnnConvolutionFwdAlgoPerf_t>(max_count);
      CNNERGY_CUDA_CALL(cudnnGetConvolutionForwardAlgorithm_v7(
          h, x_desc_, w_desc_, cd, y_desc_, max_count, &returned, perfs.data()));
      return usable(perfs, returned, offer, half);
    }
    case Dir::kBackwardData: {
      CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
      auto perfs = perf_buffer<cudnnConvolutionBwdDataAlgoPerf_t>(max_count);
      CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          h, w_desc_, y_desc_, cd, x_desc_, max_count, &returned, perfs.data()));
      return usable(perfs, returned, offer, half);
    }
    case Dir::kBackwardFilter:
      break;
  }
  CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
  auto perfs = perf_buffer<cudnnConvolutionBwdFilterAlgoPerf_t>(max_count);
  CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, x_desc_, y_desc_, cd, w_desc_, max_count, &returned, perfs.data()));
  return usable(perfs, returned, offer, half);
}

bool CudnnConv::adopt_persistent_legacy(Dir dir, const AlgoDecision& d) const {
  bool known = false;
  for (const NamedConvAlgo& a : conv_algos(dir)) known = known || a.value == d.algo;
  const auto math = static_cast<cudnnMathType_t>(d.math_type);
  if (!known || (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH &&
                 math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && math != CUDNN_FMA_MATH))
    return false;
  // Numerics are the key's; cuDNN must still accept the algorithm for this problem within the cap.
  set_math(dir, math);
  std::size_t ws = 0;
  if (workspace_size(dir, d.algo, &ws) != CUDNN_STATUS_SUCCESS ||
      ws > ctx_->options().workspace_limit_bytes) {
    set_math(dir, base_math_);
    return false;
  }
  adopt(dir, d.algo, math, false);
  return true;
}

cudnnStatus_t CudnnConv::launch(Dir dir, const void* in1, const void* in2, void* out,
                                float beta) const {
  const std::size_t bytes = plan_[index(dir)].workspace_bytes;
  return launch(dir, in1, in2, out, beta, ctx_->conv_workspace(bytes), bytes);
}
// The legacy algorithm on an explicit workspace of `ws_bytes`.
cudnnStatus_t CudnnConv::launch(Dir dir, const void* in1, const void* in2, void* out, float beta,
                                void* ws, std::size_t ws_bytes) const {
  return run_algo(dir, plan_[index(dir)].algo, in1, in2, out, ws, ws_bytes, beta);
}

// Algorithm `algo` under the descriptor's current math type.
cudnnStatus_t CudnnConv::run_algo(Dir dir, int algo, const void* in1, const void* in2, void* out,
                                  void* ws, std::size_t ws_bytes, float beta) const {
  const float alpha = 1.0f;
  cudnnHandle_t h = ctx_->cudnn();
  cudnnConvolutionDescriptor_t cd = conv_desc_[index(dir)];
  switch (dir) {
    case Dir::kForward:
      return cudnnConvolutionForward(h, &alpha, x_desc_, in1, w_desc_, in2, cd,
                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, ws_bytes,
                                     &beta, y_desc_, out);
    case Dir::kBackwardData:
      return cudnnConvolutionBackwardData(h, &alpha, w_desc_, in1, y_desc_, in2, cd,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws,
                                          ws_bytes, &beta, x_desc_, out);
    case Dir::kBackwardFilter:
      break;
  }
  return cudnnConvolutionBackwardFilter(h, &alpha, x_desc_, in1, y_desc_, in2, cd,
                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws,
                                        ws_bytes, &beta, w_desc_, out);
}

}  // namespace cnnergy::cuda
