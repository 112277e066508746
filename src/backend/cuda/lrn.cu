// The CUDA backend's own LRN across channels, with the CPU reference's semantics (Caffe's window and
// alpha divided by the window size): what cuDNN does not run (NHWC or bf16 LRN, layers_cuda.cpp).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

namespace {

// ---- LRN across channels (Caffe: window [c - pre, c - pre + size - 1], alpha divided by size) ---
__device__ __forceinline__ float lrn_scale(const void* x, DType dt, const Dims& d,
                                           const LrnParams& p, std::int64_t n, std::int64_t c,
                                           std::int64_t h, std::int64_t w) {
  const std::int64_t pre = (p.size - 1) / 2;
  const std::int64_t lo = max(std::int64_t{0}, c - pre), hi = min(d.c - 1, c - pre + p.size - 1);
  float sum = 0.0f;
  for (std::int64_t cc = lo; cc <= hi; ++cc) {
    const float v = load(x, dt, offset_of(d, n, cc, h, w));
    sum += v * v;
  }
  return static_cast<float>(p.k + p.alpha / static_cast<double>(p.size) * sum);
}

__global__ void lrn_forward_kernel(const void* x, void* y, Dims d, DType dt, LrnParams p,
                                   std::int64_t count) {
  const float neg_beta = static_cast<float>(-p.beta);
  CNNERGY_GRID_STRIDE(j, count) {
    const Coord k = coord_of(d, j);
    store(y, dt, j, load(x, dt, j) * powf(lrn_scale(x, dt, d, p, k.n, k.c, k.h, k.w), neg_beta));
  }
}

// dx_c = dy_c scale_c^-beta - 2 alpha beta / size * x_c * sum over c' whose window holds c of
//        dy_c' y_c' / scale_c'
__global__ void lrn_backward_kernel(const void* x, const void* y, const void* dy, void* dx, Dims d,
                                    DType dt, LrnParams p, bool accumulate, std::int64_t count) {
  const float neg_beta = static_cast<float>(-p.beta);
  const float coeff = static_cast<float>(2.0 * p.alpha * p.beta / static_cast<double>(p.size));
  const std::int64_t pre = (p.size - 1) / 2;
  CNNERGY_GRID_STRIDE(j, count) {
    const Coord k = coord_of(d, j);
    const std::int64_t lo = max(std::int64_t{0}, k.c + pre - p.size + 1),
                       hi = min(d.c - 1, k.c + pre);
    float sum = 0.0f;
    for (std::int64_t cc = lo; cc <= hi; ++cc) {
      const std::int64_t o = offset_of(d, k.n, cc, k.h, k.w);
      sum += load(dy, dt, o) * load(y, dt, o) / lrn_scale(x, dt, d, p, k.n, cc, k.h, k.w);
    }
    const float scale = lrn_scale(x, dt, d, p, k.n, k.c, k.h, k.w);
    float g = load(dy, dt, j) * powf(scale, neg_beta) - coeff * load(x, dt, j) * sum;
    if (accumulate) g += load(dx, dt, j);
    store(dx, dt, j, g);
  }
}

}  // namespace

void lrn_forward(const void* x, void* y, const Dims& dims, DType dtype, const LrnParams& p,
                 cudaStream_t stream) {
  const std::int64_t count = dims.numel();
  if (count == 0) return;
  lrn_forward_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, y, dims, dtype, p, count);
  CNNERGY_CUDA_LAUNCH_CHECK("lrn_forward");
}

void lrn_backward(const void* x, const void* y, const void* dy, void* dx, const Dims& dims,
                  DType dtype, const LrnParams& p, bool accumulate, cudaStream_t stream) {
  const std::int64_t count = dims.numel();
  if (count == 0) return;
  lrn_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, y, dy, dx, dims, dtype, p,
                                                              accumulate, count);
  CNNERGY_CUDA_LAUNCH_CHECK("lrn_backward");
}

}  // namespace cnnergy::cuda::kernels
