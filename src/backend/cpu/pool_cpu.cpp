// 2-D max and average pooling on the CPU, with the window, divisor and ceil-mode rules that
// Pool2dDesc documents (Caffe / PyTorch semantics); max backward routes to the first maximum. A kernel
// made with Pool2dDesc::keep_argmax keeps each output's argmax from forward (an index per output) and
// its backward reads that instead of x; one made with ::normalised also applies a batch norm's map as
// it reads the batch norm's input (forward_normalised: the values the CPU batch norm would store); one
// made with ::relu_mask applies the ReLU before it in backward: an output's gradient reaches its argmax
// only where the output is positive (the ReLU's own mask there; bit for bit the ReLU's backward after
// this one's, NaN included: NaN > 0 is false both ways).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

namespace {

constexpr std::string_view kOp = "pool2d";

// One output position's window: [h0, h1) x [w0, w1) over real input elements, and the divisor.
struct Window {
  std::int64_t h0, h1, w0, w1;
  float divisor;
};

class PoolCpu final : public PoolKernel {
 public:
  // The kept argmax comes from the backend's tracked host memory, so memory_stats() counts it.
  PoolCpu(const Pool2dDesc& d, HostMemory& memory) : d_(d), oh_(d.out_h()), ow_(d.out_w()) {
    const bool fits = d.h * d.w <= std::numeric_limits<std::int32_t>::max();
    if (d.keep_argmax && d.mode == PoolMode::kMax && fits) {
      argmax_buffer_ = memory.allocate(static_cast<std::size_t>(d.n * d.c * oh_ * ow_) * sizeof(std::int32_t));
      argmax_ = static_cast<std::int32_t*>(argmax_buffer_->data());
    }
    if (d.relu_mask && argmax_ == nullptr)
      throw NotSupported("pool2d: a pool that applies the ReLU's mask keeps its argmax (max pooling with keep_argmax; "
                         "ask pools_relu_mask first)");
    if (d.normalised && argmax_ == nullptr)
      throw NotSupported("pool2d: a pool that applies a batch norm's normalisation keeps its argmax (max pooling with "
                         "keep_argmax; ask fuses_batch_norm_pool first)");
  }

  bool keeps_argmax() const override { return argmax_ != nullptr; }
  bool applies_relu_mask() const override { return d_.relu_mask && keeps_argmax(); }

  void forward(const Tensor& x, const Tensor& y) override {
    check_f32_shape(x, kOp, "x", Shape{d_.n, d_.c, d_.h, d_.w});
    check_f32_shape(y, kOp, "y", d_.output_shape());
    pool(cf32(x), mf32(y), [](const float* xs, std::int64_t, std::int64_t i) { return xs[i]; });
  }

  void forward_normalised(const Tensor& x, const NormalisationMap& map, bool relu, const Tensor& y) override {
    if (!d_.normalised)
      throw InvalidArgument("pool2d: forward_normalised needs a kernel made with Pool2dDesc::normalised");
    if (map.f64 == nullptr) throw InvalidArgument("pool2d: forward_normalised without the batch norm's fp64 map");
    check_f32_shape(x, kOp, "x", Shape{d_.n, d_.c, d_.h, d_.w});
    check_f32_shape(y, kOp, "y", d_.output_shape());
    // The CPU batch norm's stored value (batch_norm_cpu.cpp): rounded to float, then its ReLU.
    pool(cf32(x), mf32(y), [&](const float* xs, std::int64_t c, std::int64_t i) {
      const auto v = static_cast<float>(xs[i] * map.f64[c] + map.f64[d_.c + c]);
      return relu && !(v > 0.0f) ? 0.0f : v;
    });
  }

 private:
  // Forward over the values value(plane's x, channel, index in the plane) gives.
  template <typename Value>
  void pool(const float* xp, float* yp, Value&& value) {
    for (std::int64_t plane = 0; plane < d_.n * d_.c; ++plane) {
      const float* xs = xp + plane * d_.h * d_.w;
      float* ys = yp + plane * oh_ * ow_;
      const std::int64_t c = plane % d_.c;
      auto at = [&](std::int64_t i) { return value(xs, c, i); };
      for (std::int64_t oh = 0; oh < oh_; ++oh)
        for (std::int64_t ow = 0; ow < ow_; ++ow) {
          const Window win = window(oh, ow);
          if (d_.mode == PoolMode::kMax) {
            const std::int64_t i = argmax(at, win);
            ys[oh * ow_ + ow] = at(i);
            if (keeps_argmax()) argmax_[static_cast<std::size_t>(plane * oh_ * ow_ + oh * ow_ + ow)] = static_cast<std::int32_t>(i);
          } else {
            double sum = 0.0;
            for (std::int64_t h = win.h0; h < win.h1; ++h)
              for (std::int64_t w = win.w0; w < win.w1; ++w) sum += at(h * d_.w + w);
            ys[oh * ow_ + ow] = static_cast<float>(sum / win.divisor);
          }
        }
    }
  }

 public:
  // y is not needed on the CPU (the argmax is recomputed from x, or kept from forward: then x is not
  // read either and may be undefined) but is checked when given.
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                bool accumulate) override {
    if (!keeps_argmax() || x.defined()) check_f32_shape(x, kOp, "x", Shape{d_.n, d_.c, d_.h, d_.w});
    if (y.defined() || applies_relu_mask()) check_f32_shape(y, kOp, "y", d_.output_shape());
    check_f32_shape(dy, kOp, "dy", d_.output_shape());
    check_f32_shape(dx, kOp, "dx", Shape{d_.n, d_.c, d_.h, d_.w});
    const float* xp = keeps_argmax() ? nullptr : cf32(x);
    const float* dyp = cf32(dy);
    const float* yp = applies_relu_mask() ? cf32(y) : nullptr;
    float* dxp = mf32(dx);
    if (!accumulate) std::fill_n(dxp, dx.numel(), 0.0f);
    for (std::int64_t plane = 0; plane < d_.n * d_.c; ++plane) {
      const float* xs = xp != nullptr ? xp + plane * d_.h * d_.w : nullptr;
      const float* dys = dyp + plane * oh_ * ow_;
      const float* ys = yp != nullptr ? yp + plane * oh_ * ow_ : nullptr;
      float* dxs = dxp + plane * d_.h * d_.w;
      for (std::int64_t oh = 0; oh < oh_; ++oh)
        for (std::int64_t ow = 0; ow < ow_; ++ow) {
          const Window win = window(oh, ow);
          const float g = dys[oh * ow_ + ow];
          if (d_.mode == PoolMode::kMax) {
            if (ys != nullptr && !(ys[oh * ow_ + ow] > 0.0f)) continue;  // the ReLU's mask at the argmax
            const std::int64_t i = keeps_argmax() ? argmax_[static_cast<std::size_t>(plane * oh_ * ow_ + oh * ow_ + ow)]
                                                  : argmax([&](std::int64_t j) { return xs[j]; }, win);
            dxs[i] += g;
          } else {
            const float share = g / win.divisor;
            for (std::int64_t h = win.h0; h < win.h1; ++h)
              for (std::int64_t w = win.w0; w < win.w1; ++w) dxs[h * d_.w + w] += share;
          }
        }
    }
  }

 private:
  Window window(std::int64_t oh, std::int64_t ow) const {
    const std::int64_t hs = oh * d_.stride_h - d_.pad_h, ws = ow * d_.stride_w - d_.pad_w;
    // The padded window is clipped to [-pad, in + pad) (a ceil-mode window may run past it).
    const std::int64_t he_pad = std::min(hs + d_.kernel_h, d_.h + d_.pad_h);
    const std::int64_t we_pad = std::min(ws + d_.kernel_w, d_.w + d_.pad_w);
    Window win{std::max<std::int64_t>(hs, 0), std::min(he_pad, d_.h), std::max<std::int64_t>(ws, 0),
               std::min(we_pad, d_.w), 1.0f};
    const std::int64_t count = d_.mode == PoolMode::kAvgIncludePad
                                   ? (he_pad - hs) * (we_pad - ws)
                                   : (win.h1 - win.h0) * (win.w1 - win.w0);
    win.divisor = static_cast<float>(count);
    return win;
  }

  // Index of the first maximum in scan order of at(index in the plane) (a NaN wins, so that it
  // propagates as in PyTorch).
  template <typename At>
  std::int64_t argmax(At&& at, const Window& win) const {
    std::int64_t best_i = -1;
    float best = -std::numeric_limits<float>::infinity();
    for (std::int64_t h = win.h0; h < win.h1; ++h)
      for (std::int64_t w = win.w0; w < win.w1; ++w) {
        const float v = at(h * d_.w + w);
        if (best_i < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
          best = v;
          best_i = h * d_.w + w;
        }
      }
    return best_i;
  }

  Pool2dDesc d_;
  std::int64_t oh_, ow_;
  std::shared_ptr<Buffer> argmax_buffer_;  // keep_argmax: the latest forward's, per output (index in its plane)
  std::int32_t* argmax_ = nullptr;
};

}  // namespace

std::unique_ptr<PoolKernel> make_pool_kernel(const Pool2dDesc& d, HostMemory& memory) {
  check_at_least(d.n, 1, kOp, "batch size");
  check_at_least(d.c, 1, kOp, "channels");
  check_at_least(d.h, 1, kOp, "input height");
  check_at_least(d.w, 1, kOp, "input width");
  check_at_least(d.kernel_h, 1, kOp, "kernel_h");
  check_at_least(d.kernel_w, 1, kOp, "kernel_w");
  check_at_least(d.stride_h, 1, kOp, "stride_h");
  check_at_least(d.stride_w, 1, kOp, "stride_w");
  check_at_least(d.pad_h, 0, kOp, "pad_h");
  check_at_least(d.pad_w, 0, kOp, "pad_w");
  // Padding smaller than the window keeps at least one real element in every window.
  if (d.pad_h >= d.kernel_h || d.pad_w >= d.kernel_w)
    throw InvalidArgument("pool2d: padding " + std::to_string(d.pad_h) + "x" +
                          std::to_string(d.pad_w) + " must be smaller than the window " +
                          std::to_string(d.kernel_h) + "x" + std::to_string(d.kernel_w));
  if (d.h + 2 * d.pad_h < d.kernel_h || d.w + 2 * d.pad_w < d.kernel_w)
    throw ShapeError("pool2d: the " + std::to_string(d.kernel_h) + "x" +
                     std::to_string(d.kernel_w) + " window does not fit the padded input " +
                     std::to_string(d.h) + "x" + std::to_string(d.w));
  return std::make_unique<PoolCpu>(d, memory);
}

}  // namespace cnnergy::cpu
