// 2-D max and average pooling on the CPU, with the window, divisor and ceil-mode rules that
// Pool2dDesc documents (Caffe / PyTorch semantics); max backward routes to the first maximum.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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
  explicit PoolCpu(const Pool2dDesc& d) : d_(d), oh_(d.out_h()), ow_(d.out_w()) {}

  void forward(const Tensor& x, const Tensor& y) override {
    check_f32_shape(x, kOp, "x", Shape{d_.n, d_.c, d_.h, d_.w});
    check_f32_shape(y, kOp, "y", d_.output_shape());
    const float* xp = cf32(x);
    float* yp = mf32(y);
    for (std::int64_t plane = 0; plane < d_.n * d_.c; ++plane) {
      const float* xs = xp + plane * d_.h * d_.w;
      float* ys = yp + plane * oh_ * ow_;
      for (std::int64_t oh = 0; oh < oh_; ++oh)
        for (std::int64_t ow = 0; ow < ow_; ++ow) {
          const Window win = window(oh, ow);
          if (d_.mode == PoolMode::kMax) {
            ys[oh * ow_ + ow] = xs[argmax(xs, win)];
          } else {
            double sum = 0.0;
            for (std::int64_t h = win.h0; h < win.h1; ++h)
              for (std::int64_t w = win.w0; w < win.w1; ++w) sum += xs[h * d_.w + w];
            ys[oh * ow_ + ow] = static_cast<float>(sum / win.divisor);
          }
        }
    }
  }

  // y is not needed on the CPU (the argmax is recomputed from x) but is checked when given.
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                bool accumulate) override {
    check_f32_shape(x, kOp, "x", Shape{d_.n, d_.c, d_.h, d_.w});
    if (y.defined()) check_f32_shape(y, kOp, "y", d_.output_shape());
    check_f32_shape(dy, kOp, "dy", d_.output_shape());
    check_f32_shape(dx, kOp, "dx", Shape{d_.n, d_.c, d_.h, d_.w});
    const float* xp = cf32(x);
    const float* dyp = cf32(dy);
    float* dxp = mf32(dx);
    if (!accumulate) std::fill_n(dxp, dx.numel(), 0.0f);
    for (std::int64_t plane = 0; plane < d_.n * d_.c; ++plane) {
      const float* xs = xp + plane * d_.h * d_.w;
      const float* dys = dyp + plane * oh_ * ow_;
      float* dxs = dxp + plane * d_.h * d_.w;
      for (std::int64_t oh = 0; oh < oh_; ++oh)
        for (std::int64_t ow = 0; ow < ow_; ++ow) {
          const Window win = window(oh, ow);
          const float g = dys[oh * ow_ + ow];
          if (d_.mode == PoolMode::kMax) {
            dxs[argmax(xs, win)] += g;
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

  // Index of the first maximum in scan order (a NaN wins, so that it propagates as in PyTorch).
  std::int64_t argmax(const float* xs, const Window& win) const {
    std::int64_t best_i = -1;
    float best = -std::numeric_limits<float>::infinity();
    for (std::int64_t h = win.h0; h < win.h1; ++h)
      for (std::int64_t w = win.w0; w < win.w1; ++w) {
        const float v = xs[h * d_.w + w];
        if (best_i < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
          best = v;
          best_i = h * d_.w + w;
        }
      }
    return best_i;
  }

  Pool2dDesc d_;
  std::int64_t oh_, ow_;
};

}  // namespace

std::unique_ptr<PoolKernel> make_pool_kernel(const Pool2dDesc& d) {
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
  return std::make_unique<PoolCpu>(d);
}

}  // namespace cnnergy::cpu
