// Fully connected layer on the CPU: y = x w^T + b through sgemm (cpu_common.hpp: oneDNN's or OpenBLAS's), and a plain-loop variant
// (double accumulation) that tests use to cross-check the BLAS path.
#include <algorithm>

#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

namespace {

constexpr std::string_view kOp = "linear";

// x may arrive as (N, F) or as a 4-D (N, C, H, W) activation with C*H*W = F (a flatten is free).
void check_activation(const Tensor& t, std::string_view name, std::int64_t n,
                      std::int64_t features) {
  check_f32(t, kOp, name, n * features);
  if (t.shape()[0] != n)
    throw ShapeError("linear: " + std::string(name) + " has shape " + t.shape().str() +
                     ", expected batch " + std::to_string(n) + " x " + std::to_string(features) +
                     " features");
}

class LinearCpu final : public LinearKernel {
 public:
  LinearCpu(const LinearDesc& d, LinearImpl impl) : d_(d), impl_(impl) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    check_activation(x, "x", d_.n, d_.in_features);
    check_f32(w, kOp, "w", d_.out_features * d_.in_features);
    if (d_.bias) check_f32(b, kOp, "bias", d_.out_features);
    check_activation(y, "y", d_.n, d_.out_features);
    const float* xp = cf32(x);
    const float* wp = cf32(w);
    const float* bp = d_.bias ? cf32(b) : nullptr;
    float* yp = mf32(y);
    const std::int64_t n = d_.n, in = d_.in_features, out = d_.out_features;
    if (impl_ == LinearImpl::kReference) {
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t o = 0; o < out; ++o) {
          double acc = bp ? bp[o] : 0.0;
          for (std::int64_t f = 0; f < in; ++f)
            acc += static_cast<double>(xp[i * in + f]) * wp[o * in + f];
          yp[i * out + o] = static_cast<float>(acc);
        }
      return;
    }
    if (bp) {
      for (std::int64_t i = 0; i < n; ++i) std::copy(bp, bp + out, yp + i * out);
    }
    sgemm(false, true, blas(n), blas(out), blas(in), 1.0f, xp,
                blas(in), wp, blas(in), bp ? 1.0f : 0.0f, yp, blas(out));
  }

  void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                     bool accumulate) override {
    check_activation(dy, "dy", d_.n, d_.out_features);
    check_f32(w, kOp, "w", d_.out_features * d_.in_features);
    check_activation(dx, "dx", d_.n, d_.in_features);
    const float* dyp = cf32(dy);
    const float* wp = cf32(w);
    float* dxp = mf32(dx);
    const std::int64_t n = d_.n, in = d_.in_features, out = d_.out_features;
    if (impl_ == LinearImpl::kReference) {
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t f = 0; f < in; ++f) {
          double acc = 0.0;
          for (std::int64_t o = 0; o < out; ++o)
            acc += static_cast<double>(dyp[i * out + o]) * wp[o * in + f];
          float& dst = dxp[i * in + f];
          dst = accumulate ? dst + static_cast<float>(acc) : static_cast<float>(acc);
        }
      return;
    }
    // dx (N, in) = dy (N, out) * w (out, in)
    sgemm(false, false, blas(n), blas(in), blas(out), 1.0f, dyp,
                blas(out), wp, blas(in), accumulate ? 1.0f : 0.0f, dxp, blas(in));
  }

  void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw,
                       const Tensor& db) override {
    check_activation(x, "x", d_.n, d_.in_features);
    check_activation(dy, "dy", d_.n, d_.out_features);
    check_f32(dw, kOp, "dw", d_.out_features * d_.in_features);
    if (d_.bias) check_f32(db, kOp, "dbias", d_.out_features);
    const float* xp = cf32(x);
    const float* dyp = cf32(dy);
    float* dwp = mf32(dw);
    const std::int64_t n = d_.n, in = d_.in_features, out = d_.out_features;
    if (d_.bias) {
      float* dbp = mf32(db);
      for (std::int64_t o = 0; o < out; ++o) {
        double acc = 0.0;
        for (std::int64_t i = 0; i < n; ++i) acc += dyp[i * out + o];
        dbp[o] = static_cast<float>(acc);
      }
    }
    if (impl_ == LinearImpl::kReference) {
      for (std::int64_t o = 0; o < out; ++o)
        for (std::int64_t f = 0; f < in; ++f) {
          double acc = 0.0;
          for (std::int64_t i = 0; i < n; ++i)
            acc += static_cast<double>(dyp[i * out + o]) * xp[i * in + f];
          dwp[o * in + f] = static_cast<float>(acc);
        }
      return;
    }
    // dw (out, in) = dy^T (out, N) * x (N, in)
    sgemm(true, false, blas(out), blas(in), blas(n), 1.0f, dyp,
                blas(out), xp, blas(in), 0.0f, dwp, blas(in));
  }

 private:
  static int blas(std::int64_t v) { return static_cast<int>(v); }
  LinearDesc d_;
  LinearImpl impl_;
};

}  // namespace

std::unique_ptr<LinearKernel> make_linear_kernel(const LinearDesc& desc, LinearImpl impl) {
  check_at_least(desc.n, 1, kOp, "batch size");
  check_at_least(desc.in_features, 1, kOp, "in_features");
  check_at_least(desc.out_features, 1, kOp, "out_features");
  check_blas_dim(desc.n, kOp, "batch size");
  check_blas_dim(desc.in_features, kOp, "in_features");
  check_blas_dim(desc.out_features, kOp, "out_features");
  return std::make_unique<LinearCpu>(desc, impl);
}

}  // namespace cnnergy::cpu
