// Local response normalisation across channels on the CPU, Caffe's formula (alpha divided by size,
// window of `size` channels starting (size-1)/2 before the channel), with its analytic backward.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

namespace {

constexpr std::string_view kOp = "lrn";

class LrnCpu final : public LrnKernel {
 public:
  explicit LrnCpu(const LrnDesc& d) : d_(d), hw_(d.h * d.w), pre_((d.size - 1) / 2) {}

  void forward(const Tensor& x, const Tensor& y) override {
    const Shape shape{d_.n, d_.c, d_.h, d_.w};
    check_f32_shape(x, kOp, "x", shape);
    check_f32_shape(y, kOp, "y", shape);
    std::vector<double> scale(static_cast<std::size_t>(d_.c * hw_));
    for (std::int64_t n = 0; n < d_.n; ++n) {
      const float* xs = cf32(x) + n * d_.c * hw_;
      float* ys = mf32(y) + n * d_.c * hw_;
      compute_scale(xs, scale);
      for (std::int64_t i = 0; i < d_.c * hw_; ++i)
        ys[i] = static_cast<float>(xs[i] * std::pow(scale[static_cast<std::size_t>(i)], -d_.beta));
    }
  }

  // dx_c = dy_c scale_c^-beta - 2 alpha beta / size * x_c * sum over c' whose window holds c of
  //        dy_c' y_c' / scale_c'
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                bool accumulate) override {
    const Shape shape{d_.n, d_.c, d_.h, d_.w};
    check_f32_shape(x, kOp, "x", shape);
    check_f32_shape(y, kOp, "y", shape);
    check_f32_shape(dy, kOp, "dy", shape);
    check_f32_shape(dx, kOp, "dx", shape);
    const auto plane = static_cast<std::size_t>(d_.c * hw_);
    std::vector<double> scale(plane), ratio(plane);
    const double coeff = 2.0 * d_.alpha * d_.beta / static_cast<double>(d_.size);
    for (std::int64_t n = 0; n < d_.n; ++n) {
      const float* xs = cf32(x) + n * d_.c * hw_;
      const float* ys = cf32(y) + n * d_.c * hw_;
      const float* dys = cf32(dy) + n * d_.c * hw_;
      float* dxs = mf32(dx) + n * d_.c * hw_;
      compute_scale(xs, scale);
      for (std::size_t i = 0; i < plane; ++i)
        ratio[i] = static_cast<double>(dys[i]) * ys[i] / scale[i];
      for (std::int64_t c = 0; c < d_.c; ++c) {
        // channels c' with c in [c' - pre, c' - pre + size - 1]
        const std::int64_t lo = std::max<std::int64_t>(0, c + pre_ - d_.size + 1);
        const std::int64_t hi = std::min<std::int64_t>(d_.c - 1, c + pre_);
        for (std::int64_t i = 0; i < hw_; ++i) {
          double sum = 0.0;
          for (std::int64_t cc = lo; cc <= hi; ++cc)
            sum += ratio[static_cast<std::size_t>(cc * hw_ + i)];
          const auto idx = static_cast<std::size_t>(c * hw_ + i);
          const double g = dys[idx] * std::pow(scale[idx], -d_.beta) - coeff * xs[idx] * sum;
          dxs[idx] = accumulate ? dxs[idx] + static_cast<float>(g) : static_cast<float>(g);
        }
      }
    }
  }

 private:
  // scale_c = k + alpha / size * sum_{c' in [c - pre, c - pre + size - 1] and [0, C)} x_c'^2, one
  // sample.
  void compute_scale(const float* xs, std::vector<double>& scale) const {
    const double a = d_.alpha / static_cast<double>(d_.size);
    for (std::int64_t c = 0; c < d_.c; ++c) {
      const std::int64_t lo = std::max<std::int64_t>(0, c - pre_);
      const std::int64_t hi = std::min<std::int64_t>(d_.c - 1, c - pre_ + d_.size - 1);
      for (std::int64_t i = 0; i < hw_; ++i) {
        double sum = 0.0;
        for (std::int64_t cc = lo; cc <= hi; ++cc) {
          const double v = xs[cc * hw_ + i];
          sum += v * v;
        }
        scale[static_cast<std::size_t>(c * hw_ + i)] = d_.k + a * sum;
      }
    }
  }

  LrnDesc d_;
  std::int64_t hw_, pre_;
};

}  // namespace

std::unique_ptr<LrnKernel> make_lrn_kernel(const LrnDesc& d) {
  check_at_least(d.n, 1, kOp, "batch size");
  check_at_least(d.c, 1, kOp, "channels");
  check_at_least(d.h, 1, kOp, "height");
  check_at_least(d.w, 1, kOp, "width");
  check_at_least(d.size, 1, kOp, "size");
  // k > 0 and alpha >= 0 keep the scale positive, so its power is defined for every input.
  if (!(d.k > 0.0) || !(d.alpha >= 0.0) || !std::isfinite(d.beta))
    throw InvalidArgument(
        "lrn: needs k > 0, alpha >= 0 and a finite beta (got k=" + std::to_string(d.k) +
        ", alpha=" + std::to_string(d.alpha) + ", beta=" + std::to_string(d.beta) + ")");
  return std::make_unique<LrnCpu>(d);
}

}  // namespace cnnergy::cpu
