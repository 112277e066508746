// A strided convolution over few channels run space-to-depth where that measures faster
// (conv_space_to_depth.hpp): the plain kernel and the rearranged one side by side, one chosen per
// layer on its first forward.
#include "backend/cuda/conv_space_to_depth.hpp"

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "backend/cuda/conv_graph_plan.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

std::optional<kernels::SpaceToDepthGeom> space_to_depth_geometry(const Conv2dDesc& d, Layout layout) {
  const std::int64_t stride = d.stride_h;
  if (layout != Layout::kNHWC || d.groups != 1 || d.dilation_h != 1 || d.dilation_w != 1 || d.residual ||
      d.stride_w != stride || stride < 2 || d.c % 8 == 0 || d.c * stride * stride > 64 || d.r < stride ||
      d.s < stride)
    return std::nullopt;
  kernels::SpaceToDepthGeom g;
  g.n = d.n, g.c = d.c, g.h = d.h, g.w = d.w;
  g.k = d.k, g.r = d.r, g.s = d.s;
  g.stride = stride, g.pad_top = d.pad_top, g.pad_left = d.pad_left;
  g.cs = (d.c * stride * stride + 7) / 8 * 8;
  g.rs = (d.r + stride - 1) / stride;
  g.ss = (d.s + stride - 1) / stride;
  // Output row o reads padded rows o*S + r, r < R: blocks o .. o + rs - 1.
  g.hs = d.out_h() + g.rs - 1;
  g.ws = d.out_w() + g.ss - 1;
  return g;
}

Conv2dDesc space_to_depth_desc(const Conv2dDesc& d, const kernels::SpaceToDepthGeom& g) {
  Conv2dDesc r = d;
  r.c = g.cs, r.h = g.hs, r.w = g.ws;
  r.r = g.rs, r.s = g.ss;
  r.stride_h = r.stride_w = 1;
  r.pad_top = r.pad_bottom = r.pad_left = r.pad_right = 0;
  return r;
}

namespace {

class SpaceToDepthConv final : public ConvKernel {
 public:
  SpaceToDepthConv(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& d, const kernels::SpaceToDepthGeom& g,
                   std::unique_ptr<ConvKernel> plain, std::unique_ptr<ConvKernel> rearranged)
      : ctx_(std::move(ctx)), d_(d), inner_d_(space_to_depth_desc(d, g)), g_(g), plain_(std::move(plain)),
        rearranged_(std::move(rearranged)) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    ctx_->activate();
    if (!resolved_) resolve(x, w, b, y);
    if (chosen_) {
      run_rearranged(x, w, b, y);
      return;
    }
    plain_->forward(x, w, b, y);
  }
  void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) override {
    plain_->backward_data(dy, w, dx, accumulate);
  }
  void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) override {
    ctx_->activate();
    if (!filter_resolved_) resolve_filter(x, dy, dw, db);
    if (filter_chosen_) {
      run_rearranged_filter(x, dy, dw, db);
      return;
    }
    plain_->backward_filter(x, dy, dw, db);
  }
  // Either convolution may run a call (the rearranged one where it measured faster); the rearranged
  // one's call also holds the rearranged input at the start of its workspace.
  std::size_t workspace_bound() const override {
    return std::max(plain_->workspace_bound(),
                    CudaContext::RegionPrefix::footprint(rearranged_input_bytes()) + rearranged_->workspace_bound());
  }
  ConvAlgoInfo info() const override {
    ConvAlgoInfo i = plain_->info();
    // The rearranged convolution resolves its algorithms here too: a training executor asks before
    // its activation arena exists (net/executor.cpp), so that search's transient workspace never
    // adds to the peak on top of the arena. Inference kernels (held weights) resolve it lazily, at
    // the first forward, as before: nothing of a weight gradient is searched there.
    if (!held_) (void)rearranged_->info();
    if (chosen_ || filter_chosen_) {
      const ConvAlgoInfo r = rearranged_->info();
      if (chosen_) i.forward = "space_to_depth+" + r.forward;
      if (filter_chosen_) i.backward_filter = "space_to_depth+" + r.backward_filter;
      i.workspace_bytes = std::max(i.workspace_bytes, r.workspace_bytes);
    }
    i.notes.insert(i.notes.end(), notes_.begin(), notes_.end());
    return i;
  }
  void hold_weights() override {
    held_ = true;
    weights_current_ = false;  // new values: rearranged again at the next forward
    plain_->hold_weights();
    rearranged_->hold_weights();
  }
  bool epilogue_fused() const override {
    return chosen_ ? rearranged_->epilogue_fused() : plain_->epilogue_fused();
  }

 private:
  void run_rearranged(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
    const DType dt = ctx_->dtype();
    const std::size_t elem = dtype_size_bytes(dt);
    if (!weights_ || !weights_current_) {
      if (!weights_) weights_ = ctx_->scratch(static_cast<std::size_t>(g_.k * g_.cs * g_.rs * g_.ss) * elem);
      kernels::space_to_depth_weights(w.raw(), weights_->data(), dt, /*nhwc=*/true, g_, ctx_->stream());
      weights_current_ = held_;  // training weights change between calls: rearranged every forward
    }
    const CudaContext::RegionPrefix prefix(*ctx_, rearranged_input_bytes());
    const Tensor xs_t = rearranged_input(x, prefix);
    const Tensor ws_t(inner_d_.weight_shape(), dt, Layout::kNHWC, weights_);
    rearranged_->forward(xs_t, ws_t, b, y);
  }

  std::size_t rearranged_input_bytes() const {
    return static_cast<std::size_t>(g_.n * g_.hs * g_.ws * g_.cs) * dtype_size_bytes(ctx_->dtype());
  }
  // x's S x S blocks as channels: at the start of the call's region of the executor's arena where
  // there is one (CudaContext::RegionPrefix), live for this call only, so no buffer of the input's
  // size is held for the run (the arena places the call's interval where nothing else is live, and
  // workspace_bound() counts it); else in the kernel's one buffer, held for its life (per-call scratch
  // would be held once by every recorded graph: an inference session records two).
  Tensor rearranged_input(const Tensor& x, const CudaContext::RegionPrefix& prefix) {
    const DType dt = ctx_->dtype();
    const std::size_t bytes = rearranged_input_bytes();
    std::shared_ptr<Buffer> buffer;
    if (prefix.data() != nullptr) {
      buffer = std::make_shared<Buffer>(prefix.data(), bytes, ctx_->options().device, nullptr);  // not owned
    } else {
      if (!input_) input_ = ctx_->scratch(bytes);
      buffer = input_;
    }
    kernels::space_to_depth_input(x.raw(), buffer->data(), dt, g_, ctx_->stream());
    return Tensor(inner_d_.input_shape(), dt, Layout::kNHWC, std::move(buffer));
  }

  // The rearranged convolution's weight gradient over x rearranged again (backward may follow
  // another forward's rearrangement), mapped back to the original taps; db is the same sum of dy.
  void run_rearranged_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) {
    const DType dt = ctx_->dtype();
    const std::size_t elem = dtype_size_bytes(dt);
    if (!weight_grad_) weight_grad_ = ctx_->scratch(static_cast<std::size_t>(g_.k * g_.cs * g_.rs * g_.ss) * elem);
    const CudaContext::RegionPrefix prefix(*ctx_, rearranged_input_bytes());
    const Tensor xs_t = rearranged_input(x, prefix);
    const Tensor dws_t(inner_d_.weight_shape(), dt, Layout::kNHWC, weight_grad_);
    rearranged_->backward_filter(xs_t, dy, dws_t, db);
    kernels::space_to_depth_weights_grad(weight_grad_->data(), dw.raw(), dt, /*nhwc=*/true, g_, ctx_->stream());
  }

  // The weight gradient's choice, made like the forward's (race()).
  void resolve_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) {
    const auto faster = race("backward_filter", "weight gradient", "",
                             [&] { plain_->backward_filter(x, dy, dw, db); },
                             [&] { run_rearranged_filter(x, dy, dw, db); });
    if (!faster) return;
    filter_resolved_ = true;
    filter_chosen_ = *faster;
  }

  void resolve(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
    const auto faster = race("forward", "convolution",
                             std::to_string(g_.cs) + " channels, " + std::to_string(g_.rs) + "x" +
                                 std::to_string(g_.ss) + " stride 1: ",
                             [&] { plain_->forward(x, w, b, y); }, [&] { run_rearranged(x, w, b, y); });
    if (!faster) return;
    resolved_ = true;
    chosen_ = *faster;
  }

  // Runs the plain and the rearranged variant of one pass once each (each resolves its own
  // algorithm, and fused epilogue, first), then times one call of each and writes the note; true
  // where the rearranged one was faster. Timing cannot run inside a CUDA-graph capture: there it
  // does nothing and returns empty (decided at the first call outside one).
  std::optional<bool> race(const std::string& pass, const std::string& plain_name, const std::string& detail,
                           const std::function<void()>& plain, const std::function<void()>& rearranged) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CNNERGY_CUDA_CALL(cudaStreamIsCapturing(ctx_->stream(), &capture));
    if (capture != cudaStreamCaptureStatusNone) return std::nullopt;
    plain();
    rearranged();
    const LaunchCost plain_cost = launch_cost(ctx_->stream(), [&] {
      plain();
      return CUDNN_STATUS_SUCCESS;
    });
    const LaunchCost rearranged_cost = launch_cost(ctx_->stream(), [&] {
      rearranged();
      return CUDNN_STATUS_SUCCESS;
    });
    const bool faster = rearranged_cost.device_ms < plain_cost.device_ms;
    notes_.push_back(pass + ": " + (faster ? "space-to-depth (" : "plain; space-to-depth slower (") + detail +
                     ms_text(rearranged_cost.device_ms) + " against the plain " + plain_name + "'s " +
                     ms_text(plain_cost.device_ms) + ")");
    return faster;
  }

  std::shared_ptr<CudaContext> ctx_;
  Conv2dDesc d_, inner_d_;
  kernels::SpaceToDepthGeom g_;
  std::unique_ptr<ConvKernel> plain_, rearranged_;
  std::shared_ptr<Buffer> weights_;  // the rearranged weights
  std::shared_ptr<Buffer> input_;    // the rearranged input, where no region holds it (inference)
  std::shared_ptr<Buffer> weight_grad_;  // the rearranged convolution's weight gradient
  bool held_ = false, weights_current_ = false;
  bool resolved_ = false, chosen_ = false;
  bool filter_resolved_ = false, filter_chosen_ = false;
  std::vector<std::string> notes_;
};

}  // namespace

std::unique_ptr<ConvKernel> make_space_to_depth_conv(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& d,
                                                     const kernels::SpaceToDepthGeom& g,
                                                     std::unique_ptr<ConvKernel> plain,
                                                     std::unique_ptr<ConvKernel> rearranged) {
  return std::make_unique<SpaceToDepthConv>(std::move(ctx), d, g, std::move(plain), std::move(rearranged));
}

}  // namespace cnnergy::cuda
