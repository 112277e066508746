// Convolution through cuDNN, forward and both backwards, NCHW and NHWC, fp32 / tf32 / fp16 / bf16.
// The algorithm of each direction comes from the layer's choice or the run's policy. Legacy API:
// "find" (time them all per problem, twice, each by its faster pass; cached in the backend),
// "heuristic" (cuDNN's ranking) or a named algorithm, which falls back to the heuristic with a note
// (or throws) where cuDNN rejects it. Graph API (conv_graph_plan.hpp): "graph_find" (time the
// top-ranked engines) or "graph_heuristic" (the top one), an execution plan cached per problem;
// where the graph API has no engine, the legacy counterpart runs with a note (or it throws). Both
// APIs see symmetric padding only: asymmetric padding runs on an explicitly zero-padded copy.
#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv_algos.hpp"
#include "backend/cuda/conv_graph_plan.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

using Dir = ConvDirection;
constexpr std::array<Dir, 3> kDirs = {Dir::kForward, Dir::kBackwardData, Dir::kBackwardFilter};

bool is_not_supported(cudnnStatus_t s) {
  return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED;
}

int to_int(std::int64_t v, const char* what) {
  if (v > INT_MAX)
    throw NotSupported(std::string("conv2d: ") + what + " " + std::to_string(v) +
                       " exceeds cuDNN's int");
  return static_cast<int>(v);
}

void validate_desc(const Conv2dDesc& d) {
  const std::pair<std::int64_t, const char*> at_least_one[] = {
      {d.n, "batch size"},          {d.c, "input channels"},      {d.h, "input height"},
      {d.w, "input width"},         {d.k, "output channels"},     {d.r, "kernel height"},
      {d.s, "kernel width"},        {d.stride_h, "stride_h"},     {d.stride_w, "stride_w"},
      {d.dilation_h, "dilation_h"}, {d.dilation_w, "dilation_w"}, {d.groups, "groups"}};
  for (const auto& [v, what] : at_least_one)
    if (v < 1)
      throw InvalidArgument(std::string("conv2d: ") + what + " must be at least 1 (got " +
                            std::to_string(v) + ")");
  for (std::int64_t p : {d.pad_top, d.pad_bottom, d.pad_left, d.pad_right})
    if (p < 0)
      throw InvalidArgument("conv2d: padding must not be negative (got " + std::to_string(p) + ")");
  if (d.c % d.groups != 0 || d.k % d.groups != 0)
    throw InvalidArgument("conv2d: groups = " + std::to_string(d.groups) +
                          " must divide both the input channels (" + std::to_string(d.c) +
                          ") and the output channels (" + std::to_string(d.k) + ")");
  if (d.h + d.pad_top + d.pad_bottom < d.dilation_h * (d.r - 1) + 1 ||
      d.w + d.pad_left + d.pad_right < d.dilation_w * (d.s - 1) + 1 || d.out_h() < 1 ||
      d.out_w() < 1)
    throw ShapeError("conv2d: the " + std::to_string(d.r) + "x" + std::to_string(d.s) +
                     " kernel (dilation " + std::to_string(d.dilation_h) + "x" +
                     std::to_string(d.dilation_w) + ") does not fit the padded input " +
                     d.input_shape().str());
}

// The math type every descriptor starts from. fp32 without TF32 must stay on FMA kernels (cuDNN's
// default math lets Ampere+ use TF32); TF32 allowed is cuDNN's default math on fp32 data, as in
// PyTorch (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION may also down-convert fp32 to fp16, which is not
// TF32 and overflows above 65504); fp16/bf16 use tensor ops with fp32 accumulation.
cudnnMathType_t base_math(const BackendOptions& o) {
  if (o.dtype != DType::kF32) return CUDNN_TENSOR_OP_MATH;
  return o.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

class CudnnConv final : public ConvKernel {
 public:
  CudnnConv(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& d, const ConvAlgoChoice& choice)
      : ctx_(std::move(ctx)), d_(d), dtype_(ctx_->dtype()), layout_(ctx_->layout()) {
    validate_desc(d_);
    explicit_pad_ = d_.pad_top != d_.pad_bottom || d_.pad_left != d_.pad_right;
    in_h_ = explicit_pad_ ? d_.h + d_.pad_top + d_.pad_bottom : d_.h;
    in_w_ = explicit_pad_ ? d_.w + d_.pad_left + d_.pad_right : d_.w;
    const std::int64_t pad_h = explicit_pad_ ? 0 : d_.pad_top,
                       pad_w = explicit_pad_ ? 0 : d_.pad_left;
    base_math_ = base_math(ctx_->options());

    set_tensor_4d(x_desc_, dtype_, layout_, d_.n, d_.c, in_h_, in_w_);
    set_tensor_4d(y_desc_, dtype_, layout_, d_.n, d_.k, d_.out_h(), d_.out_w());
    CNNERGY_CUDA_CALL(cudnnSetFilter4dDescriptor(
        w_desc_, cudnn_dtype(dtype_), cudnn_format(layout_), to_int(d_.k, "output channels"),
        to_int(d_.c / d_.groups, "channels per group"), to_int(d_.r, "kernel"),
        to_int(d_.s, "kernel")));
    for (Dir dir : kDirs) {
      cudnnConvolutionDescriptor_t cd = conv_desc_[index(dir)];
      // Compute (accumulation) type fp32 for every data type: fp16/bf16 are cuDNN's pseudo-half
      // configs.
      CNNERGY_CUDA_CALL(cudnnSetConvolution2dDescriptor(
          cd, to_int(pad_h, "padding"), to_int(pad_w, "padding"), to_int(d_.stride_h, "stride"),
          to_int(d_.stride_w, "stride"), to_int(d_.dilation_h, "dilation"),
          to_int(d_.dilation_w, "dilation"), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      CNNERGY_CUDA_CALL(cudnnSetConvolutionGroupCount(cd, to_int(d_.groups, "groups")));
      CNNERGY_CUDA_CALL(cudnnSetConvolutionMathType(cd, base_math_));
    }
    int on = 0, oc = 0, oh = 0, ow = 0;
    CNNERGY_CUDA_CALL(
        cudnnGetConvolution2dForwardOutputDim(conv_desc_[0], x_desc_, w_desc_, &on, &oc, &oh, &ow));
    if (on != d_.n || oc != d_.k || oh != d_.out_h() || ow != d_.out_w())
      throw InternalError("conv2d " + shape_text() + ": cuDNN computes output " +
                          std::to_string(on) + "x" + std::to_string(oc) + "x" + std::to_string(oh) +
                          "x" + std::to_string(ow) + ", expected " + d_.output_shape().str());

    const std::string* fields[] = {&choice.forward, &choice.backward_data, &choice.backward_filter};
    for (Dir dir : kDirs) policy_[index(dir)] = direction_policy(dir, *fields[index(dir)]);
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    ctx_->activate();
    check_device_tensor(x, *ctx_, "conv2d forward", "x", d_.input_shape(), dtype_, layout_);
    check_device_tensor(w, *ctx_, "conv2d forward", "w", d_.weight_shape(), dtype_, layout_);
    check_device_tensor(y, *ctx_, "conv2d forward", "y", d_.output_shape(), dtype_, layout_);
    if (d_.bias) check_device_tensor(b, *ctx_, "conv2d forward", "b", Shape{d_.k}, dtype_, layout_);
    std::shared_ptr<Buffer> padded;
    const void* xin = explicit_pad_ ? (padded = pad_input(x))->data() : x.raw();
    ensure_resolved(Dir::kForward, xin, w.raw(), y.raw());
    run(Dir::kForward, xin, w.raw(), y.raw(), 0.0f);
    if (d_.bias)
      kernels::bias_add(y.raw(), b.raw(), dtype_, kernels::channel_view(dims_of(y)),
                        ctx_->stream());
  }

  void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                     bool accumulate) override {
    ctx_->activate();
    check_device_tensor(dy, *ctx_, "conv2d backward_data", "dy", d_.output_shape(), dtype_,
                        layout_);
    check_device_tensor(w, *ctx_, "conv2d backward_data", "w", d_.weight_shape(), dtype_, layout_);
    check_device_tensor(dx, *ctx_, "conv2d backward_data", "dx", d_.input_shape(), dtype_, layout_);
    if (!explicit_pad_) {
      // find may overwrite its output: give it dx only when dx is overwritten anyway
      ensure_resolved(Dir::kBackwardData, w.raw(), dy.raw(), accumulate ? nullptr : dx.raw(),
                      accumulate ? 1.0f : 0.0f);
      run(Dir::kBackwardData, w.raw(), dy.raw(), dx.raw(), accumulate ? 1.0f : 0.0f);
      return;
    }
    auto dxp = ctx_->scratch(padded_bytes());
    ensure_resolved(Dir::kBackwardData, w.raw(), dy.raw(), dxp->data());
    run(Dir::kBackwardData, w.raw(), dy.raw(), dxp->data(), 0.0f);
    kernels::crop_2d(dxp->data(), padded_dims(), dx.raw(), dims_of(dx), d_.pad_top, d_.pad_left,
                     dtype_, accumulate, ctx_->stream());
  }

  void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw,
                       const Tensor& db) override {
    ctx_->activate();
    check_device_tensor(x, *ctx_, "conv2d backward_filter", "x", d_.input_shape(), dtype_, layout_);
    check_device_tensor(dy, *ctx_, "conv2d backward_filter", "dy", d_.output_shape(), dtype_,
                        layout_);
    check_device_tensor(dw, *ctx_, "conv2d backward_filter", "dw", d_.weight_shape(), dtype_,
                        layout_);
    if (d_.bias)
      check_device_tensor(db, *ctx_, "conv2d backward_filter", "db", Shape{d_.k}, dtype_, layout_);
    std::shared_ptr<Buffer> padded;
    const void* xin = explicit_pad_ ? (padded = pad_input(x))->data() : x.raw();
    ensure_resolved(Dir::kBackwardFilter, xin, dy.raw(), dw.raw());
    run(Dir::kBackwardFilter, xin, dy.raw(), dw.raw(), 0.0f);
    if (d_.bias) {
      const kernels::ChannelView view = kernels::channel_view(dims_of(dy));
      auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view, dtype_));
      kernels::bias_grad(dy.raw(), dtype_, view, db.raw(), dtype_, scratch->data(), ctx_->stream());
    }
  }

  ConvAlgoInfo info() const override {
    ctx_->activate();
    for (Dir dir : kDirs) ensure_resolved(dir, nullptr, nullptr, nullptr);
    // Graph policies plan the accumulating backward data too (a no-op for legacy ones), so a
    // training executor, which asks before its arena exists, never searches on top of the arena.
    ensure_resolved(Dir::kBackwardData, nullptr, nullptr, nullptr, 1.0f);
    ConvAlgoInfo out;
    out.forward = algo_text(Dir::kForward);
    out.backward_data = algo_text(Dir::kBackwardData);
    out.backward_filter = algo_text(Dir::kBackwardFilter);
    out.math_type = math_name(ctx_->options());
    for (const Plan& p : plan_)
      out.workspace_bytes = std::max(out.workspace_bytes, p.workspace_bytes);
    out.notes = notes_;
    return out;
  }

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

  // What info() reports: the legacy algorithm's name, or "graph:" and the plan's engine tag.
  std::string algo_text(Dir dir) const {
    const Plan& p = plan_[index(dir)];
    return p.graph ? "graph:" + p.engine : conv_algo_name(dir, p.algo);
  }
  std::string shape_text() const {
    std::string s = "x " + d_.input_shape().str() + ", w " + d_.weight_shape().str() + ", stride " +
                    std::to_string(d_.stride_h) + "x" + std::to_string(d_.stride_w) + ", pad " +
                    std::to_string(d_.pad_top) + "/" + std::to_string(d_.pad_bottom) + "/" +
                    std::to_string(d_.pad_left) + "/" + std::to_string(d_.pad_right) +
                    ", dilation " + std::to_string(d_.dilation_h) + "x" +
                    std::to_string(d_.dilation_w);
    if (d_.groups > 1) s += ", groups " + std::to_string(d_.groups);
    return s + ", " + std::string(dtype_name(dtype_)) + " " + std::string(layout_name(layout_));
  }

  // The policy of one direction: the layer's field when set (validated), else the run's policy; a
  // run-wide algorithm name that this direction lacks (e.g. "gemm" for backward filter) runs the
  // heuristic and says so in the notes.
  std::string direction_policy(Dir dir, const std::string& field) {
    if (!field.empty()) {
      if (is_search_policy(field) || find_conv_algo(dir, field)) return field;
      throw InvalidArgument("conv2d: unknown " + std::string(direction_name(dir)) + " algorithm '" +
                            field + "'; valid: " + valid_conv_algo_names(dir));
    }
    const std::string& run_policy = ctx_->options().conv_algo_policy;
    if (is_search_policy(run_policy) || find_conv_algo(dir, run_policy)) return run_policy;
    notes_.push_back(std::string(direction_name(dir)) + ": '" + run_policy + "' is not a " +
                     direction_name(dir) + " algorithm; using the heuristic");
    return "heuristic";
  }

  kernels::Dims padded_dims() const { return {d_.n, d_.c, in_h_, in_w_, layout_ == Layout::kNHWC}; }
  std::size_t padded_bytes() const {
    return static_cast<std::size_t>(d_.n * d_.c * in_h_ * in_w_) * dtype_size_bytes(dtype_);
  }
  std::shared_ptr<Buffer> pad_input(const Tensor& x) const {
    auto buf = ctx_->scratch(padded_bytes());
    kernels::pad_2d(x.raw(), dims_of(x), buf->data(), padded_dims(), d_.pad_top, d_.pad_left,
                    dtype_, ctx_->stream());
    return buf;
  }

  // cudnnGet*WorkspaceSize for one algorithm under the descriptor's current math type.
  cudnnStatus_t workspace_size(Dir dir, int algo, std::size_t* bytes) const {
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

  void set_math(Dir dir, cudnnMathType_t math) const {
    // fp32 without TF32 stays on FMA whatever cuDNN reports for an algorithm.
    const cudnnMathType_t m = base_math_ == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : math;
    CNNERGY_CUDA_CALL(cudnnSetConvolutionMathType(conv_desc_[index(dir)], m));
  }

  void adopt(Dir dir, int algo, cudnnMathType_t math, bool named) const {
    set_math(dir, math);
    std::size_t ws = 0;
    CNNERGY_CUDA_CALL(workspace_size(dir, algo, &ws));
    Plan& p = plan_[index(dir)];
    p = Plan{true, named, algo, base_math_ == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : math, ws, false, {}};
  }

  // Resolves the direction's algorithm (for graph policies: the plan for this beta) on first use;
  // find times on in1/in2/out where given (out only where it is overwritten anyway).
  void ensure_resolved(Dir dir, const void* in1, const void* in2, void* out,
                       float beta = 0.0f) const {
    const std::string& policy = policy_[index(dir)];
    const Plan& p = plan_[index(dir)];
    if (p.resolved && (!p.graph || graph_[index(dir)][beta != 0.0f].ready())) return;
    if (p.resolved || is_graph_policy(policy)) {  // a graph direction, or its other beta
      use_graph(dir, /*find=*/policy != "graph_heuristic", in1, in2, out, beta);
      return;
    }
    if (policy == "auto") {
      use_auto(dir, in1, in2, out, beta);
    } else if (policy == "find") {
      use_find(dir, in1, in2, out);
    } else if (policy == "heuristic") {
      use_heuristic(dir);
    } else {
      use_named(dir, *find_conv_algo(dir, policy));
    }
  }

  // One algorithm's fastest successful run over find's passes.
  struct FindTiming {
    float ms = 0.0f;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    std::size_t memory = 0;
  };
  static constexpr int kFindPasses = 2;
  template <class Perf>
  static void merge_timings(const std::vector<Perf>& perfs, int returned, std::size_t offer,
                            std::map<std::pair<int, int>, FindTiming>& timings) {
    for (int i = 0; i < returned; ++i) {
      const Perf& p = perfs[static_cast<std::size_t>(i)];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > offer || !(p.time >= 0.0f)) continue;
      const std::pair<int, int> key{static_cast<int>(p.algo), static_cast<int>(p.mathType)};
      auto it = timings.find(key);
      if (it == timings.end() || p.time < it->second.ms)
        timings[key] = FindTiming{p.time, p.mathType, p.memory};
    }
  }

  template <typename Perf>
  static std::vector<Perf> perf_buffer(int count) {
    return std::vector<Perf>(static_cast<std::size_t>(std::max(count, 1)));
  }

  // cuDNN's ranking; the first algorithm that is supported and fits the workspace cap.
  void use_heuristic(Dir dir) const {
    set_math(dir, base_math_);
    const std::size_t limit = ctx_->options().workspace_limit_bytes;
    auto pick = [&](const auto& perfs, int returned) {
      for (int i = 0; i < returned; ++i) {
        const auto& p = perfs[static_cast<std::size_t>(i)];
        if (p.status != CUDNN_STATUS_SUCCESS) continue;
        set_math(dir, p.mathType);
        std::size_t ws = 0;
        if (workspace_size(dir, static_cast<int>(p.algo), &ws) != CUDNN_STATUS_SUCCESS ||
            ws > limit)
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
        CNNERGY_CUDA_CALL(cudnnGetConvolutionForwardAlgorithm_v7(
            h, x_desc_, w_desc_, cd, y_desc_, max_count, &returned, perfs.data()));
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

  void use_named(Dir dir, const NamedConvAlgo& algo) const {
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
  void fall_back(Dir dir, const std::string& name, const std::string& reason) const {
    if (!ctx_->options().conv_algo_fallback)
      throw NotSupported("conv2d " + shape_text() + ": " + direction_name(dir) + " algorithm '" +
                         name + "' is not supported for this shape (" + reason +
                         "); choose another algorithm or allow fallback");
    use_heuristic(dir);
    notes_.push_back(std::string(direction_name(dir)) + ": " + name + " unsupported for " +
                     shape_text() + " (" + reason + "), fell back to the heuristic's " +
                     conv_algo_name(dir, plan_[index(dir)].algo));
  }

  std::string cache_key(Dir dir) const {
    const std::int64_t v[] = {d_.n,
                              d_.c,
                              in_h_,
                              in_w_,
                              d_.k,
                              d_.r,
                              d_.s,
                              d_.stride_h,
                              d_.stride_w,
                              explicit_pad_ ? 0 : d_.pad_top,
                              explicit_pad_ ? 0 : d_.pad_left,
                              d_.dilation_h,
                              d_.dilation_w,
                              d_.groups};
    std::string key = direction_name(dir);
    for (std::int64_t x : v) key += "," + std::to_string(x);
    key += "," + std::string(dtype_name(dtype_)) + "," + std::string(layout_name(layout_)) +
           ",math" + std::to_string(static_cast<int>(base_math_)) + ",ws" +
           std::to_string(ctx_->options().workspace_limit_bytes);
    return key;
  }

  // The operands a search times on, (in1, in2, out) as in run(): the caller's where given (inputs
  // are only read; outputs are overwritten later anyway), zeroed scratch otherwise (info() before
  // any run, or an accumulating backward); `held` keeps the scratch alive.
  std::array<void*, 3> search_operands(Dir dir, const void* in1, const void* in2, void* out,
                                       std::vector<std::shared_ptr<Buffer>>& held) const {
    const std::size_t x_bytes =
        static_cast<std::size_t>(d_.n * d_.c * in_h_ * in_w_) * dtype_size_bytes(dtype_);
    const std::size_t y_bytes =
        static_cast<std::size_t>(d_.output_shape().numel()) * dtype_size_bytes(dtype_);
    const std::size_t w_bytes =
        static_cast<std::size_t>(d_.weight_shape().numel()) * dtype_size_bytes(dtype_);
    // forward (x, w) -> y; backward data (w, dy) -> dx; backward filter (x, dy) -> dw
    const std::size_t in1_bytes = dir == Dir::kBackwardData ? w_bytes : x_bytes;
    const std::size_t in2_bytes = dir == Dir::kForward ? w_bytes : y_bytes;
    const std::size_t out_bytes =
        dir == Dir::kForward ? y_bytes : (dir == Dir::kBackwardData ? x_bytes : w_bytes);
    auto scratch_if_null = [&](const void* p, std::size_t bytes) -> void* {
      if (p) return const_cast<void*>(p);
      held.push_back(ctx_->scratch(bytes));
      CNNERGY_CUDA_CALL(cudaMemsetAsync(held.back()->data(), 0, bytes, ctx_->stream()));
      return held.back()->data();
    };
    return {scratch_if_null(in1, in1_bytes), scratch_if_null(in2, in2_bytes),
            scratch_if_null(out, out_bytes)};
  }

  // Times every algorithm (cudnnFind*AlgorithmEx, kFindPasses times) within the largest workspace
  // any of them needs up to the cap, picks the fastest that succeeded, and caches it for identical problems.
  void use_find(Dir dir, const void* in1, const void* in2, void* out) const {
    const std::string key = cache_key(dir);
    if (auto hit = ctx_->conv_algo_cache().lookup(key)) {
      adopt(dir, hit->algo, hit->math, false);
      return;
    }
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
    void* c = operands[2];
    std::shared_ptr<Buffer> ws;
    while (true) {  // a smaller workspace (fewer candidate algorithms) where memory is short
      try {
        ws = ctx_->scratch(offer);
        break;
      } catch (const OutOfMemory&) {
        if (offer == 0) throw;
        offer /= 2;
      }
    }
    cudnnHandle_t h = ctx_->cudnn();
    cudnnConvolutionDescriptor_t cd = conv_desc_[index(dir)];
    // Two timing passes, each algorithm judged by its faster one: the first pass also pays for
    // loading kernels on first use (CUDA's lazy module loading) and for cold caches, which made
    // single-pass find pick a 17x slower backward-filter kernel for one ResNet-50 layer on an H200.
    std::map<std::pair<int, int>, FindTiming> timings;  // by (algorithm, math type)
    for (int pass = 0; pass < kFindPasses; ++pass) {
      switch (dir) {
        case Dir::kForward: {
          int max_count = 0, returned = 0;
          CNNERGY_CUDA_CALL(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
          auto perfs = perf_buffer<cudnnConvolutionFwdAlgoPerf_t>(max_count);
          CNNERGY_CUDA_CALL(cudnnFindConvolutionForwardAlgorithmEx(h, x_desc_, a, w_desc_, b, cd,
                                                                   y_desc_, c, max_count, &returned,
                                                                   perfs.data(), ws->data(), offer));
          merge_timings(perfs, returned, offer, timings);
          break;
        }
        case Dir::kBackwardData: {
          int max_count = 0, returned = 0;
          CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
          auto perfs = perf_buffer<cudnnConvolutionBwdDataAlgoPerf_t>(max_count);
          CNNERGY_CUDA_CALL(cudnnFindConvolutionBackwardDataAlgorithmEx(
              h, w_desc_, a, y_desc_, b, cd, x_desc_, c, max_count, &returned, perfs.data(),
              ws->data(), offer));
          merge_timings(perfs, returned, offer, timings);
          break;
        }
        case Dir::kBackwardFilter: {
          int max_count = 0, returned = 0;
          CNNERGY_CUDA_CALL(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
          auto perfs = perf_buffer<cudnnConvolutionBwdFilterAlgoPerf_t>(max_count);
          CNNERGY_CUDA_CALL(cudnnFindConvolutionBackwardFilterAlgorithmEx(
              h, x_desc_, a, y_desc_, b, cd, w_desc_, c, max_count, &returned, perfs.data(),
              ws->data(), offer));
          merge_timings(perfs, returned, offer, timings);
          break;
        }
      }
    }
    std::optional<CachedConvAlgo> best;
    float best_ms = 0.0f;
    for (const auto& [algo_math, t] : timings)
      if (!best || t.ms < best_ms) {
        best = CachedConvAlgo{algo_math.first, t.math, t.memory};
        best_ms = t.ms;
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
  }

  // ---- graph API ----
  GraphConvProblem graph_problem(Dir dir, float beta) const {
    GraphConvProblem p;
    p.dir = dir;
    p.data_type = cudnn_dtype(dtype_);
    p.nhwc = layout_ == Layout::kNHWC;
    p.allow_tf32 = ctx_->options().allow_tf32;
    p.n = d_.n, p.c = d_.c, p.h = in_h_, p.w = in_w_;
    p.k = d_.k, p.c_per_group = d_.c / d_.groups, p.r = d_.r, p.s = d_.s;
    p.out_h = d_.out_h(), p.out_w = d_.out_w();
    p.pad_h = explicit_pad_ ? 0 : d_.pad_top, p.pad_w = explicit_pad_ ? 0 : d_.pad_left;
    p.stride_h = d_.stride_h, p.stride_w = d_.stride_w;
    p.dilation_h = d_.dilation_h, p.dilation_w = d_.dilation_w;
    p.beta = beta;
    return p;
  }

  // The graph-API plan of one direction and beta, from the backend's cache or a search (`find`:
  // the fastest of the candidates, for graph_find and auto; otherwise the top-ranked engine, for
  // graph_heuristic). Where the graph API has nothing to run, the legacy counterpart takes the
  // direction over with a note, or NotSupported when fallback is off.
  void use_graph(Dir dir, bool find, const void* in1, const void* in2, void* out,
                 float beta) const {
    std::string why;
    std::shared_ptr<const GraphConvPlan> plan = graph_search(dir, find, in1, in2, out, beta, why);
    if (!plan) {
      const std::string legacy = find ? "find" : "heuristic";
      if (!ctx_->options().conv_algo_fallback)
        throw NotSupported("conv2d " + shape_text() + ": cuDNN's graph API cannot run the " +
                           direction_name(dir) + " (" + why + "); use the " + legacy +
                           " policy or allow fallback");
      notes_.push_back(std::string(direction_name(dir)) + ": graph API unusable for " +
                       shape_text() + " (" + why + "); the legacy " + legacy + " policy runs it");
      policy_[index(dir)] = legacy;
      plan_[index(dir)] = Plan{};
      ensure_resolved(dir, in1, in2, out, beta);
      return;
    }
    adopt_graph(dir, beta, plan);
  }

  void adopt_graph(Dir dir, float beta, std::shared_ptr<const GraphConvPlan> plan) const {
    Plan& p = plan_[index(dir)];
    if (!p.graph || beta == 0.0f) p.engine = plan->engine();
    p.resolved = p.graph = true;
    p.workspace_bytes = std::max(p.workspace_bytes, plan->workspace_bytes());
    graph_[index(dir)][beta != 0.0f] = GraphConvLaunch(std::move(plan));
  }

  // The graph plan from the backend's cache or a search; null (with the reason) where none runs.
  std::shared_ptr<const GraphConvPlan> graph_search(Dir dir, bool find, const void* in1,
                                                    const void* in2, void* out, float beta,
                                                    std::string& why) const {
    const std::size_t limit = ctx_->options().workspace_limit_bytes;
    const GraphConvProblem problem = graph_problem(dir, beta);
    const std::size_t ranked = find ? ctx_->options().conv_search_candidates : 1;
    const std::size_t fallback = find ? kFallbackCandidates : 0;
    const std::string key = problem.key() + ",search" + std::to_string(ranked) + "+" +
                            std::to_string(fallback) + ",ws" + std::to_string(limit);
    std::shared_ptr<const GraphConvPlan> plan;
    if (auto hit = ctx_->graph_plan_cache().lookup(key)) {
      plan = *hit;
    } else {
      std::size_t skipped = 0;
      auto candidates =
          graph_conv_candidates(ctx_->cudnn(), problem, limit, ranked, fallback, &skipped);
      if (candidates.empty())
        why = "no engine within " + format_bytes(limit) + " of workspace keeps the run's numerics (" +
              std::to_string(skipped) + " configurations left out)";
      else if (!find)
        plan = candidates.front();
      else if (!(plan = time_graph_candidates(dir, candidates, in1, in2, out)))
        why = "none of the " + std::to_string(candidates.size()) + " candidate engines ran";
      if (plan) ctx_->graph_plan_cache().store(key, plan);
    }
    return plan;
  }

  // "auto": the legacy find's algorithm against graph_find's plan, each costed as its device time
  // plus the host time of one call (the legacy API re-derives its kernel per call, which a small
  // batch cannot hide), measured on the same operands; the cheaper runs the direction (both
  // betas), and identical problems reuse the decision.
  void use_auto(Dir dir, const void* in1, const void* in2, void* out, float beta) const {
    const std::string key = "auto," + cache_key(dir);
    if (auto graph_won = ctx_->auto_choice_cache().lookup(key)) {
      if (*graph_won)
        use_graph(dir, /*find=*/true, in1, in2, out, beta);
      else
        use_find(dir, in1, in2, out);
      return;
    }
    use_find(dir, in1, in2, out);  // plan_ now holds the legacy algorithm
    std::string why;
    auto plan = graph_search(dir, /*find=*/true, in1, in2, out, beta, why);
    bool graph_won = false;
    if (plan) {
      std::vector<std::shared_ptr<Buffer>> held;
      const std::array<void*, 3> o = search_operands(dir, in1, in2, out, held);
      // Scratch workspace: the shared one grows only for what is adopted.
      const std::size_t legacy_ws = plan_[index(dir)].workspace_bytes;
      auto ws = ctx_->scratch(std::max(legacy_ws, plan->workspace_bytes()));
      const LaunchCost legacy = launch_cost(ctx_->stream(), [&] {
        return launch(dir, o[0], o[1], o[2], beta, ws->data(), legacy_ws);
      });
      GraphConvLaunch g(plan);
      const LaunchCost graph = launch_cost(ctx_->stream(), [&] {
        return g.execute(ctx_->cudnn(), operands_by_role(dir, o[0], o[1], o[2], ws->data()));
      });
      graph_won = graph.total_ms() < legacy.total_ms();
    }
    ctx_->auto_choice_cache().store(key, graph_won);
    if (graph_won) {
      plan_[index(dir)] = Plan{};  // the legacy algorithm's workspace is not the plan's
      adopt_graph(dir, beta, plan);
    }
  }

  // graph_find's timing: on the caller's operands where given (see search_operands), within the
  // largest workspace the candidates need that can be had (the hungriest are dropped otherwise).
  std::shared_ptr<const GraphConvPlan> time_graph_candidates(
      Dir dir, std::vector<std::shared_ptr<const GraphConvPlan>> candidates, const void* in1,
      const void* in2, void* out) const {
    std::vector<std::shared_ptr<Buffer>> held;
    const std::array<void*, 3> operands = search_operands(dir, in1, in2, out, held);
    std::shared_ptr<Buffer> ws;
    while (!candidates.empty()) {
      std::size_t need = 0;
      for (const auto& c : candidates) need = std::max(need, c->workspace_bytes());
      try {
        ws = ctx_->scratch(need);
        break;
      } catch (const OutOfMemory&) {
        candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                        [&](const auto& c) { return c->workspace_bytes() == need; }),
                         candidates.end());
      }
    }
    if (candidates.empty()) return nullptr;
    return fastest_graph_conv(ctx_->cudnn(), ctx_->stream(), candidates,
                              operands_by_role(dir, operands[0], operands[1], operands[2], ws->data()));
  }

  cudnnStatus_t launch(Dir dir, const void* in1, const void* in2, void* out, float beta) const {
    const std::size_t bytes = plan_[index(dir)].workspace_bytes;
    return launch(dir, in1, in2, out, beta, ctx_->conv_workspace(bytes), bytes);
  }
  // The legacy algorithm on an explicit workspace of `ws_bytes`.
  cudnnStatus_t launch(Dir dir, const void* in1, const void* in2, void* out, float beta, void* ws,
                       std::size_t ws_bytes) const {
    const Plan& p = plan_[index(dir)];
    const float alpha = 1.0f;
    cudnnHandle_t h = ctx_->cudnn();
    cudnnConvolutionDescriptor_t cd = conv_desc_[index(dir)];
    switch (dir) {
      case Dir::kForward:
        return cudnnConvolutionForward(h, &alpha, x_desc_, in1, w_desc_, in2, cd,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), ws,
                                       ws_bytes, &beta, y_desc_, out);
      case Dir::kBackwardData:
        return cudnnConvolutionBackwardData(h, &alpha, w_desc_, in1, y_desc_, in2, cd,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo), ws,
                                            ws_bytes, &beta, x_desc_, out);
      case Dir::kBackwardFilter:
        break;
    }
    return cudnnConvolutionBackwardFilter(h, &alpha, x_desc_, in1, y_desc_, in2, cd,
                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo), ws,
                                          ws_bytes, &beta, w_desc_, out);
  }

  // Forward: (x, w) -> y; backward data: (w, dy) -> dx; backward filter: (x, dy) -> dw.
  void run(Dir dir, const void* in1, const void* in2, void* out, float beta) const {
    if (plan_[index(dir)].graph) {
      GraphConvLaunch& g = graph_[index(dir)][beta != 0.0f];
      if (!g.ready()) ensure_resolved(dir, in1, in2, nullptr, beta);  // may fall back to legacy
      if (g.ready()) {
        void* ws = ctx_->conv_workspace(g.plan().workspace_bytes());
        CNNERGY_CUDA_CALL(g.execute(ctx_->cudnn(), operands_by_role(dir, in1, in2, out, ws)));
        return;
      }
    }
    const cudnnStatus_t s = launch(dir, in1, in2, out, beta);
    if (s == CUDNN_STATUS_SUCCESS) return;
    const Plan& p = plan_[index(dir)];
    if (p.named && is_not_supported(s)) {  // cuDNN accepted the workspace query but not the run
      fall_back(dir, conv_algo_name(dir, p.algo),
                std::string("cuDNN at run time: ") + cudnnGetErrorString(s));
      CNNERGY_CUDA_CALL(launch(dir, in1, in2, out, beta));
      return;
    }
    CNNERGY_CUDA_CALL(s);
  }

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
};

}  // namespace

std::unique_ptr<ConvKernel> make_cudnn_conv(std::shared_ptr<CudaContext> ctx,
                                            const Conv2dDesc& desc, const ConvAlgoChoice& choice) {
  return std::make_unique<CudnnConv>(std::move(ctx), desc, choice);
}

}  // namespace cnnergy::cuda
