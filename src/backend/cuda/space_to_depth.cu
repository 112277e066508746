// Space-to-depth rearrangement of a strided convolution's input and weights (conv_space_to_depth.hpp):
// a stride-S convolution over few channels becomes a stride-1 convolution over C*S*S channels.
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.hpp"

namespace cnnergy::cuda::kernels {
namespace {

// xs[n, bh, bw, (sy*S + sx)*C + c] = x[n, bh*S + sy - pad_top, bw*S + sx - pad_left, c], zero outside
// the image and in the channels past C*S*S. Both NHWC; a thread per output element, so writes are
// consecutive and each run of S*C outputs reads consecutive inputs.
template <typename T>
__global__ void __launch_bounds__(kBlock)
    space_to_depth_input_kernel(const T* x, T* xs, SpaceToDepthGeom g, std::int64_t count) {
  const T zero = from_float<T>(0.0f);
  const std::int64_t used = g.c * g.stride * g.stride;
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t cs = j % g.cs, pixel = j / g.cs;
    const std::int64_t bw = pixel % g.ws, rest = pixel / g.ws;
    const std::int64_t bh = rest % g.hs, n = rest / g.hs;
    T v = zero;
    if (cs < used) {
      const std::int64_t block = cs / g.c, ch = cs - block * g.c;
      const std::int64_t i = bh * g.stride + block / g.stride - g.pad_top;
      const std::int64_t k = bw * g.stride + block % g.stride - g.pad_left;
      if (i >= 0 && i < g.h && k >= 0 && k < g.w) v = x[((n * g.h + i) * g.w + k) * g.c + ch];
    }
    xs[j] = v;
  }
}

// ws[k, cs, dy, dx] = w[k, c, dy*S + sy, dx*S + sx] for cs = (sy*S + sx)*C + c, zero where the tap
// falls past the kernel (R x Sk) or cs past C*S*S. Logical KCRS in either layout (NHWC: K R S C).
template <typename T>
__global__ void __launch_bounds__(kBlock)
    space_to_depth_weights_kernel(const T* w, T* ws, SpaceToDepthGeom g, bool nhwc, std::int64_t count) {
  const T zero = from_float<T>(0.0f);
  const std::int64_t used = g.c * g.stride * g.stride;
  CNNERGY_GRID_STRIDE(j, count) {
    std::int64_t k, cs, dy, dx;
    if (nhwc) {  // j = ((k * rs + dy) * ss + dx) * cs_count + cs
      cs = j % g.cs;
      std::int64_t rest = j / g.cs;
      dx = rest % g.ss, rest /= g.ss;
      dy = rest % g.rs, k = rest / g.rs;
    } else {  // j = ((k * cs_count + cs) * rs + dy) * ss + dx
      dx = j % g.ss;
      std::int64_t rest = j / g.ss;
      dy = rest % g.rs, rest /= g.rs;
      cs = rest % g.cs, k = rest / g.cs;
    }
    T v = zero;
    if (cs < used) {
      const std::int64_t block = cs / g.c, ch = cs - block * g.c;
      const std::int64_t ry = dy * g.stride + block / g.stride, rx = dx * g.stride + block % g.stride;
      if (ry < g.r && rx < g.s)
        v = nhwc ? w[((k * g.r + ry) * g.s + rx) * g.c + ch] : w[((k * g.c + ch) * g.r + ry) * g.s + rx];
    }
    ws[j] = v;
  }
}

}  // namespace

void space_to_depth_input(const void* x, void* xs, DType dtype, const SpaceToDepthGeom& g, cudaStream_t stream) {
  const std::int64_t count = g.n * g.hs * g.ws * g.cs;
  if (count == 0) return;
  dispatch_float(dtype, "space_to_depth_input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    space_to_depth_input_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(static_cast<const T*>(x),
                                                                          static_cast<T*>(xs), g, count);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("space_to_depth_input");
}

void space_to_depth_weights(const void* w, void* ws, DType dtype, bool nhwc, const SpaceToDepthGeom& g,
                            cudaStream_t stream) {
  const std::int64_t count = g.k * g.cs * g.rs * g.ss;
  if (count == 0) return;
  dispatch_float(dtype, "space_to_depth_weights", [&](auto tag) {
    using T = typename decltype(tag)::type;
    space_to_depth_weights_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(
        static_cast<const T*>(w), static_cast<T*>(ws), g, nhwc, count);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("space_to_depth_weights");
}

}  // namespace cnnergy::cuda::kernels
