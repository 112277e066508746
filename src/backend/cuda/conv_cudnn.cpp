// The cuDNN convolution kernel (conv_cudnn.hpp): descriptors, the three passes, the dispatch of
// each direction by policy and the search keys. The algorithm of each direction comes from the
// layer's choice or the run's policy. Legacy API (conv_cudnn_legacy.cpp): "find" (time them all per
// problem, twice, each by its faster pass), "heuristic" (cuDNN's ranking) or a named algorithm,
// which falls back to the heuristic with a note (or throws) where cuDNN rejects it. Graph API
// (conv_cudnn_graph.cpp, conv_graph_plan.hpp): "graph_find" (time the top-ranked engines) or
// "graph_heuristic" (the top one); "auto" takes the cheaper of find and graph_find. Both APIs see
// symmetric padding only: asymmetric padding runs on an explicitly zero-padded copy.
#include "backend/cuda/conv_cudnn.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <utility>

#include "backend/cuda/kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

constexpr std::array<Dir, 3> kDirs = {Dir::kForward, Dir::kBackwardData, Dir::kBackwardFilter};
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

}  // namespace

bool is_not_supported(cudnnStatus_t s) {
  return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED;
}

CudnnConv::CudnnConv(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& d,
                     const ConvAlgoChoice& choice)
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
  CNNERGY_CUDA_CALL(cudnnSetFilter4dDescriptor(w_desc_, cudnn_dtype(dtype_), cudnn_format(layout_),
                                               to_int(d_.k, "output channels"),
                                               to_int(d_.c / d_.groups, "channels per group"),
                                               to_int(d_.r, "kernel"), to_int(d_.s, "kernel")));
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
    throw InternalError("conv2d " + shape_text() + ": cuDNN computes output " + std::to_string(on) +
                        "x" + std::to_string(oc) + "x" + std::to_string(oh) + "x" +
                        std::to_string(ow) + ", expected " + d_.output_shape().str());

  const std::string* fields[] = {&choice.forward, &choice.backward_data, &choice.backward_filter};
  for (Dir dir : kDirs) policy_[index(dir)] = direction_policy(dir, *fields[index(dir)]);
}

void CudnnConv::forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  ctx_->activate();
  check_device_tensor(x, *ctx_, "conv2d forward", "x", d_.input_shape(), dtype_, layout_);
  check_device_tensor(w, *ctx_, "conv2d forward", "w", d_.weight_shape(), dtype_, layout_);
  check_device_tensor(y, *ctx_, "conv2d forward", "y", d_.output_shape(), dtype_, layout_);
  if (d_.bias) check_device_tensor(b, *ctx_, "conv2d forward", "b", Shape{d_.k}, dtype_, layout_);
  std::shared_ptr<Buffer> padded;
  const void* xin = explicit_pad_ ? (padded = pad_input(x))->data() : x.raw();
  if (d_.residual)
    throw InternalError("conv2d " + shape_text() + ": a convolution made with a residual add runs forward_residual");
  ensure_resolved(Dir::kForward, xin, w.raw(), y.raw());
  if (d_.bias && ctx_->options().conv_epilogue_fusion) {
    if (!epilogue_resolved_) resolve_epilogue(xin, w.raw(), b.raw(), nullptr, y.raw());
    if (epilogue_.ready()) {
      run_epilogue(xin, w.raw(), b.raw(), nullptr, y.raw());
      return;
    }
  }
  run_unfused_forward(xin, w.raw(), d_.bias ? b.raw() : nullptr, nullptr, y.raw());
}

void CudnnConv::forward_residual(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& z,
                                 const Tensor& y) {
  ctx_->activate();
  if (!d_.residual || !d_.bias)
    throw InternalError("conv2d " + shape_text() + ": forward_residual on a convolution made without a residual add and bias");
  check_device_tensor(x, *ctx_, "conv2d forward_residual", "x", d_.input_shape(), dtype_, layout_);
  check_device_tensor(w, *ctx_, "conv2d forward_residual", "w", d_.weight_shape(), dtype_, layout_);
  check_device_tensor(b, *ctx_, "conv2d forward_residual", "b", Shape{d_.k}, dtype_, layout_);
  check_device_tensor(z, *ctx_, "conv2d forward_residual", "z", d_.output_shape(), dtype_, layout_);
  check_device_tensor(y, *ctx_, "conv2d forward_residual", "y", d_.output_shape(), dtype_, layout_);
  std::shared_ptr<Buffer> padded;
  const void* xin = explicit_pad_ ? (padded = pad_input(x))->data() : x.raw();
  ensure_resolved(Dir::kForward, xin, w.raw(), y.raw());
  if (ctx_->options().conv_epilogue_fusion) {
    if (!epilogue_resolved_) resolve_epilogue(xin, w.raw(), b.raw(), z.raw(), y.raw());
    if (epilogue_.ready()) {
      run_epilogue(xin, w.raw(), b.raw(), z.raw(), y.raw());
      return;
    }
  }
  run_unfused_forward(xin, w.raw(), b.raw(), z.raw(), y.raw());
}

void CudnnConv::run_unfused_forward(const void* x, const void* w, const void* b, const void* z,
                                    void* y) const {
  run(Dir::kForward, x, w, y, 0.0f);
  if (d_.bias)
    kernels::bias_add(y, b, dtype_, kernels::channel_view({d_.n, d_.k, d_.out_h(), d_.out_w(), layout_ == Layout::kNHWC}),
                      ctx_->stream(), d_.relu && z == nullptr);
  if (z != nullptr)
    kernels::add(y, z, y, dtype_, d_.n * d_.k * d_.out_h() * d_.out_w(), ctx_->stream(), d_.relu);
}

void CudnnConv::backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                              bool accumulate) {
  ctx_->activate();
  check_device_tensor(dy, *ctx_, "conv2d backward_data", "dy", d_.output_shape(), dtype_, layout_);
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

void CudnnConv::backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                const Tensor& db) {
  ctx_->activate();
  check_device_tensor(x, *ctx_, "conv2d backward_filter", "x", d_.input_shape(), dtype_, layout_);
  check_device_tensor(dy, *ctx_, "conv2d backward_filter", "dy", d_.output_shape(), dtype_,
                      layout_);
  check_device_tensor(dw, *ctx_, "conv2d backward_filter", "dw", d_.weight_shape(), dtype_,
                      layout_);
  const bool bias_grad = d_.bias && db.defined();  // undefined: the caller computed it
  if (bias_grad)
    check_device_tensor(db, *ctx_, "conv2d backward_filter", "db", Shape{d_.k}, dtype_, layout_);
  std::shared_ptr<Buffer> padded;
  const void* xin = explicit_pad_ ? (padded = pad_input(x))->data() : x.raw();
  ensure_resolved(Dir::kBackwardFilter, xin, dy.raw(), dw.raw());
  run(Dir::kBackwardFilter, xin, dy.raw(), dw.raw(), 0.0f);
  if (bias_grad) {
    const kernels::ChannelView view = kernels::channel_view(dims_of(dy));
    auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view, dtype_));
    kernels::bias_grad(dy.raw(), dtype_, view, db.raw(), dtype_, scratch->data(), ctx_->stream());
  }
}

ConvAlgoInfo CudnnConv::info() const {
  ctx_->activate();
  // The data gradient only where it is wanted (Conv2dDesc::data_gradient): a network's first
  // convolution never runs it, and its search and workspace would count for nothing (AlexNet's first
  // at bf16 b256: 168 MiB, or 1.7 s of search within a smaller cap).
  for (Dir dir : kDirs)
    if (dir != Dir::kBackwardData || d_.data_gradient) ensure_resolved(dir, nullptr, nullptr, nullptr);
  // Graph policies plan the accumulating backward data too (a no-op for legacy ones), so a
  // training executor, which asks before its arena exists, never searches on top of the arena.
  if (d_.data_gradient) ensure_resolved(Dir::kBackwardData, nullptr, nullptr, nullptr, 1.0f);
  // The fused epilogue's verdict too (a forward with a bias, without a residual add, which needs its
  // z), timed on zero-filled scratch operands like find: at the first forward its candidates'
  // timing workspace would sit on top of a training executor's arena (VGG-16 and AlexNet bf16 on an
  // H100: the peak 98 and 106 MiB above what the step holds).
  if (d_.bias && !d_.residual && ctx_->options().conv_epilogue_fusion && !epilogue_resolved_) {
    std::vector<std::shared_ptr<Buffer>> held;
    const std::array<void*, 3> o = search_operands(Dir::kForward, nullptr, nullptr, nullptr, held);
    const std::size_t bias_bytes = static_cast<std::size_t>(d_.k) * dtype_size_bytes(dtype_);
    auto bias = ctx_->scratch(bias_bytes);
    CNNERGY_CUDA_CALL(cudaMemsetAsync(bias->data(), 0, bias_bytes, ctx_->stream()));
    resolve_epilogue(o[0], o[1], bias->data(), nullptr, o[2]);
  }
  if (d_.statistics && !statistics_resolved_) {  // likewise the statistics graph's
    std::vector<std::shared_ptr<Buffer>> held;
    const std::array<void*, 3> o = search_operands(Dir::kForward, nullptr, nullptr, nullptr, held);
    auto sums = ctx_->scratch(static_cast<std::size_t>(2 * d_.k) * sizeof(float));
    resolve_statistics(o[0], o[1], o[2], static_cast<float*>(sums->data()));
  }
  ConvAlgoInfo out;
  out.forward = algo_text(Dir::kForward);
  out.backward_data = plan_[index(Dir::kBackwardData)].resolved ? algo_text(Dir::kBackwardData) : "none (no data gradient)";
  out.backward_filter = algo_text(Dir::kBackwardFilter);
  out.math_type = math_name(ctx_->options());
  for (const Plan& p : plan_)
    out.workspace_bytes = std::max(out.workspace_bytes, p.workspace_bytes);
  out.notes = notes_;
  return out;
}

std::size_t CudnnConv::workspace_bound() const {
  std::size_t bytes = 0;
  for (const Plan& p : plan_) bytes = std::max(bytes, p.workspace_bytes);
  if (epilogue_.ready()) bytes = std::max(bytes, epilogue_.plan().workspace_bytes());
  if (statistics_.ready()) bytes = std::max(bytes, statistics_.plan().workspace_bytes());
  return bytes;
}

// What info() reports: the legacy algorithm's name, or "graph:" and the plan's engine tag.
std::string CudnnConv::algo_text(Dir dir) const {
  const Plan& p = plan_[index(dir)];
  return p.graph ? "graph:" + p.engine : conv_algo_name(dir, p.algo);
}
std::string CudnnConv::shape_text() const {
  std::string s = "x " + d_.input_shape().str() + ", w " + d_.weight_shape().str() + ", stride " +
                  std::to_string(d_.stride_h) + "x" + std::to_string(d_.stride_w) + ", pad " +
                  std::to_string(d_.pad_top) + "/" + std::to_string(d_.pad_bottom) + "/" +
                  std::to_string(d_.pad_left) + "/" + std::to_string(d_.pad_right) + ", dilation " +
                  std::to_string(d_.dilation_h) + "x" + std::to_string(d_.dilation_w);
  if (d_.groups > 1) s += ", groups " + std::to_string(d_.groups);
  return s + ", " + std::string(dtype_name(dtype_)) + " " + std::string(layout_name(layout_));
}

// The policy of one direction: the layer's field when set (validated), else the run's policy; a
// run-wide algorithm name that this direction lacks (e.g. "gemm" for backward filter) runs the
// heuristic and says so in the notes.
std::string CudnnConv::direction_policy(Dir dir, const std::string& field) {
  if (!field.empty()) {
    if (is_search_policy(field) || is_graph_engine_policy(field) || find_conv_algo(dir, field))
      return field;
    throw InvalidArgument("conv2d: unknown " + std::string(direction_name(dir)) + " algorithm '" +
                          field + "'; valid: " + valid_conv_algo_names(dir));
  }
  const std::string& run_policy = ctx_->options().conv_algo_policy;
  if (is_search_policy(run_policy) || find_conv_algo(dir, run_policy)) return run_policy;
  notes_.push_back(std::string(direction_name(dir)) + ": '" + run_policy + "' is not a " +
                   direction_name(dir) + " algorithm; using the heuristic");
  return "heuristic";
}

std::shared_ptr<Buffer> CudnnConv::pad_input(const Tensor& x) const {
  auto buf = ctx_->scratch(padded_bytes());
  kernels::pad_2d(x.raw(), dims_of(x), buf->data(), padded_dims(), d_.pad_top, d_.pad_left, dtype_,
                  ctx_->stream());
  return buf;
}

// Resolves the direction's algorithm (for graph policies: the plan for this beta) on first use;
// find times on in1/in2/out where given (out only where it is overwritten anyway).
void CudnnConv::ensure_resolved(Dir dir, const void* in1, const void* in2, void* out,
                                float beta) const {
  const std::string& policy = policy_[index(dir)];
  const Plan& p = plan_[index(dir)];
  if (p.resolved && (!p.graph || graph_[index(dir)][beta != 0.0f].ready())) return;
  if (is_graph_engine_policy(policy)) {  // one named engine, for either beta
    use_graph_engine(dir, policy.substr(std::string(kGraphEnginePrefix).size()), beta);
    return;
  }
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

std::string CudnnConv::cache_key(Dir dir) const {
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
  key += "," + std::string(dtype_name(dtype_)) + "," + std::string(layout_name(layout_)) + ",math" +
         std::to_string(static_cast<int>(base_math_)) + ",ws" +
         std::to_string(ctx_->options().workspace_limit_bytes);
  return key;
}

ConvProblemKey CudnnConv::problem_key(Dir dir, const std::string& policy, float beta,
                                      std::int64_t candidates) const {
  ConvProblemKey k;
  k.direction = direction_name(dir);
  k.n = d_.n, k.c = d_.c, k.h = in_h_, k.w = in_w_;
  k.k = d_.k, k.r = d_.r, k.s = d_.s, k.groups = d_.groups;
  k.stride_h = d_.stride_h, k.stride_w = d_.stride_w;
  k.pad_h = explicit_pad_ ? 0 : d_.pad_top, k.pad_w = explicit_pad_ ? 0 : d_.pad_left;
  k.dilation_h = d_.dilation_h, k.dilation_w = d_.dilation_w;
  k.dtype = dtype_name(dtype_);
  k.layout = layout_name(layout_);
  k.math = math_name(ctx_->options());
  k.beta = beta;
  k.policy = policy;
  k.workspace_limit_bytes = ctx_->options().workspace_limit_bytes;
  k.candidates = candidates;
  return k;
}

// The operands a search times on, (in1, in2, out) as in run(): the caller's where given (inputs
// are only read; outputs are overwritten later anyway), zeroed scratch otherwise (info() before
// any run, or an accumulating backward); `held` keeps the scratch alive.
std::array<void*, 3> CudnnConv::search_operands(Dir dir, const void* in1, const void* in2,
                                                void* out,
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

// Forward: (x, w) -> y; backward data: (w, dy) -> dx; backward filter: (x, dy) -> dw.
void CudnnConv::run(Dir dir, const void* in1, const void* in2, void* out, float beta) const {
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

std::unique_ptr<ConvKernel> make_cudnn_conv(std::shared_ptr<CudaContext> ctx,
                                            const Conv2dDesc& desc, const ConvAlgoChoice& choice) {
  return std::make_unique<CudnnConv>(std::move(ctx), desc, choice);
}

}  // namespace cnnergy::cuda
