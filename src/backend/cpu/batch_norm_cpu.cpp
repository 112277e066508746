// Batch normalisation on the CPU, per channel of 4-D (N,C,H,W) or per feature of 2-D (N,F) inputs:
// training with batch statistics (biased variance to normalise, unbiased for the running estimate),
// inference with the running statistics, and the backward for dx, dgamma and dbeta; optionally with
// a ReLU fused into the output (BatchNormDesc::relu) and the residual add after it (::residual: the
// output is act(bn(x) + z), the backward the plain batch norm's). Without a residual add, training and
// inference may also hand their map on instead of writing y (training_coefficients,
// inference_coefficients: fp64 scale and shift, the very map y is computed with), for the max pool after
// it to apply (Backend::fuses_batch_norm_pool).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

namespace {

constexpr std::string_view kOp = "batch_norm";

// The per-channel affine map forward applies, from the statistics as saved (fp32), so that a fused
// ReLU's backward recomputes exactly the values forward produced.
struct Affine {
  double scale, shift;
  float apply(float x) const { return static_cast<float>(x * scale + shift); }
};
Affine affine(float gamma, float beta, float mean, float inv_std) {
  const double scale = static_cast<double>(gamma) * inv_std;
  return {scale, beta - static_cast<double>(mean) * scale};
}

class BatchNormCpu final : public BatchNormKernel {
 public:
  explicit BatchNormCpu(const BatchNormDesc& d) : BatchNormKernel(d.residual), d_(d), hw_(d.h * d.w), m_(d.n * d.h * d.w) {}

 protected:
  void training(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta,
                const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor* sums) override {
    if (z != nullptr) check_activation(*z, "z");
    check_activation(y, "y");
    train(x, z, gamma, beta, running_mean, running_var, &y, saved_mean, saved_inv_std, sums);
  }

  void inference(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta,
                 const Tensor& running_mean, const Tensor& running_var, const Tensor& y) override {
    if (z != nullptr) check_activation(*z, "z");
    check_activation(x, "x");
    check_activation(y, "y");
    const float* xp = cf32(x);
    const float* zp = z != nullptr ? cf32(*z) : nullptr;
    float* yp = mf32(y);
    fill_inference_map(gamma, beta, running_mean, running_var);
    for (std::int64_t c = 0; c < d_.c; ++c) {
      const Affine a{map_[static_cast<std::size_t>(c)], map_[static_cast<std::size_t>(d_.c + c)]};
      for_channel(c, [&](std::int64_t i) { yp[i] = output(a.apply(xp[i]), zp, i); });
    }
  }

 public:
  NormalisationMap training_coefficients(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         const Tensor& running_mean, const Tensor& running_var,
                                         const Tensor& saved_mean, const Tensor& saved_inv_std,
                                         const Tensor* sums) override {
    check_hands_on();
    train(x, nullptr, gamma, beta, running_mean, running_var, nullptr, saved_mean, saved_inv_std, sums);
    return {nullptr, map_.data()};
  }
  NormalisationMap inference_coefficients(const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                          const Tensor& running_var) override {
    check_hands_on();
    fill_inference_map(gamma, beta, running_mean, running_var);
    return {nullptr, map_.data()};
  }

 private:
  // Training's statistics, saved values and running averages, then y from the map (y null: the map
  // is kept in map_ for the max pool that applies it).
  void train(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta,
             const Tensor& running_mean, const Tensor& running_var, const Tensor* y,
             const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor* sums) {
    if (sums != nullptr) check_sums(*sums);
    check_activation(x, "x");
    check_param(gamma, "gamma");
    check_param(beta, "beta");
    check_param(running_mean, "running_mean");
    check_param(running_var, "running_var");
    check_param(saved_mean, "saved_mean");
    check_param(saved_inv_std, "saved_inv_std");
    if (m_ < 2)
      throw InvalidArgument("batch_norm: training needs more than one value per channel (batch " +
                            std::to_string(d_.n) + " x " + std::to_string(hw_) + " positions)");
    const float* xp = cf32(x);
    const float* zp = z != nullptr ? cf32(*z) : nullptr;
    float* yp = y != nullptr ? mf32(*y) : nullptr;
    if (yp == nullptr) map_.assign(static_cast<std::size_t>(2 * d_.c), 0.0);
    const double mom = d_.momentum;
    const double m = static_cast<double>(m_);
    for (std::int64_t c = 0; c < d_.c; ++c) {
      double mean = 0.0, sq = 0.0;  // sq: the centred sum of squares
      if (sums != nullptr) {  // the convolution's sums (fp32): E[x^2] - E[x]^2, clamped at 0
        mean = cf32(*sums)[c] / m;
        sq = std::max(0.0, static_cast<double>(cf32(*sums)[d_.c + c]) - m * mean * mean);
      } else {  // two passes in double: the mean first, then the centred sum (no cancellation)
        for_channel(c, [&](std::int64_t i) { mean += xp[i]; });
        mean /= m;
        for_channel(c, [&](std::int64_t i) {
          const double dv = xp[i] - mean;
          sq += dv * dv;
        });
      }
      const double var = sq / m;
      const double inv_std = 1.0 / std::sqrt(var + d_.eps);
      mf32(saved_mean)[c] = static_cast<float>(mean);
      mf32(saved_inv_std)[c] = static_cast<float>(inv_std);
      const Affine a = affine(cf32(gamma)[c], cf32(beta)[c], mf32(saved_mean)[c], mf32(saved_inv_std)[c]);
      if (yp != nullptr) {
        for_channel(c, [&](std::int64_t i) { yp[i] = output(a.apply(xp[i]), zp, i); });
      } else {
        map_[static_cast<std::size_t>(c)] = a.scale;
        map_[static_cast<std::size_t>(d_.c + c)] = a.shift;
      }
      const double unbiased = sq / static_cast<double>(m_ - 1);
      float& rm = mf32(running_mean)[c];
      float& rv = mf32(running_var)[c];
      rm = static_cast<float>((1.0 - mom) * rm + mom * mean);
      rv = static_cast<float>((1.0 - mom) * rv + mom * unbiased);
    }
  }

  // The evaluation map from the running statistics, into map_.
  void fill_inference_map(const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                          const Tensor& running_var) {
    check_param(gamma, "gamma");
    check_param(beta, "beta");
    check_param(running_mean, "running_mean");
    check_param(running_var, "running_var");
    map_.assign(static_cast<std::size_t>(2 * d_.c), 0.0);
    for (std::int64_t c = 0; c < d_.c; ++c) {
      const double inv_std = 1.0 / std::sqrt(static_cast<double>(cf32(running_var)[c]) + d_.eps);
      const double scale = cf32(gamma)[c] * inv_std;
      map_[static_cast<std::size_t>(c)] = scale;
      map_[static_cast<std::size_t>(d_.c + c)] = cf32(beta)[c] - cf32(running_mean)[c] * scale;
    }
  }
  void check_hands_on() const {
    if (d_.residual)
      throw NotSupported("batch_norm: a batch norm with a fused residual add hands no normalisation on");
  }

 protected:
  // forward training's output again: the same Affine from the saved statistics, the same rounding.
  void reapply(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& saved_mean,
               const Tensor& saved_inv_std, const Tensor& y) override {
    check_activation(x, "x");
    check_activation(y, "y");
    check_param(gamma, "gamma");
    check_param(beta, "beta");
    check_param(saved_mean, "saved_mean");
    check_param(saved_inv_std, "saved_inv_std");
    const float* xp = cf32(x);
    float* yp = mf32(y);
    for (std::int64_t c = 0; c < d_.c; ++c) {
      const Affine a = affine(cf32(gamma)[c], cf32(beta)[c], cf32(saved_mean)[c], cf32(saved_inv_std)[c]);
      for_channel(c, [&](std::int64_t i) { yp[i] = output(a.apply(xp[i]), nullptr, i); });
    }
  }

 public:
  // With xhat = (x - mean) * inv_std over the M = N*H*W values of a channel:
  // dbeta = sum dy, dgamma = sum dy*xhat, dx = gamma * inv_std / M * (M dy - dbeta - xhat dgamma).
  // With a fused ReLU, dy is first zeroed where forward's normalised value was not positive (not
  // with a fused residual add: the add's own backward masks its output gradient and hands it on).
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor& dx,
                const Tensor& dgamma, const Tensor& dbeta, bool accumulate) override {
    check_activation(x, "x");
    check_activation(dy, "dy");
    check_activation(dx, "dx");
    check_param(gamma, "gamma");
    check_param(saved_mean, "saved_mean");
    check_param(saved_inv_std, "saved_inv_std");
    const bool relu = d_.relu && !d_.residual;
    if (relu) check_param(beta, "beta");
    check_param(dgamma, "dgamma");
    check_param(dbeta, "dbeta");
    const float* xp = cf32(x);
    const float* dyp = cf32(dy);
    float* dxp = mf32(dx);
    const double m = static_cast<double>(m_);
    for (std::int64_t c = 0; c < d_.c; ++c) {
      const double mean = cf32(saved_mean)[c];
      const double inv_std = cf32(saved_inv_std)[c];
      const Affine a = relu ? affine(cf32(gamma)[c], cf32(beta)[c], cf32(saved_mean)[c], cf32(saved_inv_std)[c])
                               : Affine{};
      // The output gradient, through the fused ReLU's mask when there is one.
      auto grad_out = [&](std::int64_t i) { return relu && !(a.apply(xp[i]) > 0.0f) ? 0.0f : dyp[i]; };
      double sum_dy = 0.0, sum_dy_xhat = 0.0;
      for_channel(c, [&](std::int64_t i) {
        const float g = grad_out(i);
        sum_dy += g;
        sum_dy_xhat += g * (xp[i] - mean) * inv_std;
      });
      mf32(dbeta)[c] = static_cast<float>(sum_dy);
      mf32(dgamma)[c] = static_cast<float>(sum_dy_xhat);
      const double k = cf32(gamma)[c] * inv_std / m;
      for_channel(c, [&](std::int64_t i) {
        const double xhat = (xp[i] - mean) * inv_std;
        const auto g = static_cast<float>(k * (m * grad_out(i) - sum_dy - xhat * sum_dy_xhat));
        dxp[i] = accumulate ? dxp[i] + g : g;
      });
    }
  }

 private:
  float activate(float v) const { return d_.relu && !(v > 0.0f) ? 0.0f : v; }
  // The value stored at flat index i: bn(x) there, plus the residual's when fused, then the ReLU.
  float output(float normalised, const float* zp, std::int64_t i) const {
    return activate(zp != nullptr ? normalised + zp[i] : normalised);
  }

  // Calls f(flat index) for every element of channel c.
  template <typename F>
  void for_channel(std::int64_t c, F&& f) const {
    for (std::int64_t n = 0; n < d_.n; ++n) {
      const std::int64_t base = (n * d_.c + c) * hw_;
      for (std::int64_t i = 0; i < hw_; ++i) f(base + i);
    }
  }

  // 4-D (N,C,H,W) or, when H = W = 1, 2-D (N,C).
  void check_activation(const Tensor& t, std::string_view name) const {
    check_f32(t, kOp, name, d_.n * d_.c * hw_);
    if (t.shape()[0] != d_.n || t.shape().c() != d_.c)
      throw ShapeError("batch_norm: " + std::string(name) + " has shape " + t.shape().str() +
                       ", expected " + Shape{d_.n, d_.c, d_.h, d_.w}.str());
  }
  void check_param(const Tensor& t, std::string_view name) const { check_f32(t, kOp, name, d_.c); }
  void check_sums(const Tensor& t) const { check_f32(t, kOp, "sums", 2 * d_.c); }

  BatchNormDesc d_;
  std::int64_t hw_, m_;
  std::vector<double> map_;  // the latest handed-on map: scale[C] then shift[C] (NormalisationMap::f64)
};

}  // namespace

std::unique_ptr<BatchNormKernel> make_batch_norm_kernel(const BatchNormDesc& d) {
  check_at_least(d.n, 1, kOp, "batch size");
  check_at_least(d.c, 1, kOp, "channels");
  check_at_least(d.h, 1, kOp, "height");
  check_at_least(d.w, 1, kOp, "width");
  if (!(d.eps > 0.0) || !(d.momentum >= 0.0 && d.momentum <= 1.0))
    throw InvalidArgument("batch_norm: needs eps > 0 and momentum in [0, 1] (got eps=" +
                          std::to_string(d.eps) + ", momentum=" + std::to_string(d.momentum) + ")");
  return std::make_unique<BatchNormCpu>(d);
}

}  // namespace cnnergy::cpu
