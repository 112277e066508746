// Space-to-depth rearrangement of a strided convolution's input and weights (conv_space_to_depth.hpp):
// a stride-S convolution over few channels becomes a stride-1 convolution over C*S*S channels.
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda::kernels {
namespace {

// xs[n, bh, bw, (sy*S + sx)*C + c] = x[n, bh*S + sy - pad_top, bw*S + sx - pad_left, c], zero outside
// the image and in the channels past C*S*S. Both NHWC. A thread per (n, bh, sy, bw) moves the S*C
// values of one input row segment, which lie side by side in x and land side by side in xs; with bw
// fastest a warp reads consecutive segments. 32-bit index math (the caller checks the sizes).
template <typename T>
__global__ void __launch_bounds__(kBlock)
    space_to_depth_input_kernel(const T* x, T* xs, SpaceToDepthGeom g64, int count) {
  const T zero = from_float<T>(0.0f);
  const int S = static_cast<int>(g64.stride), C = static_cast<int>(g64.c), cs = static_cast<int>(g64.cs);
  const int ws = static_cast<int>(g64.ws), hs = static_cast<int>(g64.hs);
  const int h = static_cast<int>(g64.h), w = static_cast<int>(g64.w);
  const int pt = static_cast<int>(g64.pad_top), pl = static_cast<int>(g64.pad_left);
  const int segment = S * C, used = segment * S;
  for (int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); j < count;
       j += static_cast<int>(gridDim.x * blockDim.x)) {
    const int bw = j % ws;
    int rest = j / ws;
    const int sy = rest % S;
    rest /= S;
    const int bh = rest % hs, n = rest / hs;
    T* out = xs + ((static_cast<std::int64_t>(n) * hs + bh) * ws + bw) * cs + sy * segment;
    const int i = bh * S + sy - pt, k0 = bw * S - pl;
    if (i < 0 || i >= h) {
      for (int e = 0; e < segment; ++e) out[e] = zero;
    } else {
      const T* row = x + (static_cast<std::int64_t>(n) * h + i) * w * C;
      for (int sx = 0; sx < S; ++sx) {
        const int k = k0 + sx;
        const bool inside = k >= 0 && k < w;
        for (int ch = 0; ch < C; ++ch) out[sx * C + ch] = inside ? row[k * C + ch] : zero;
      }
    }
    if (sy == S - 1)  // the channels past C*S*S
      for (int e = used - sy * segment; e < cs - sy * segment; ++e) out[e] = zero;
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
  const std::int64_t count = g.n * g.hs * g.ws * g.stride;
  if (count == 0) return;
  // 32-bit offsets within a sample row and for the thread index; the sample offset is 64-bit.
  if (count >= (std::int64_t{1} << 31) || g.h * g.w * g.c >= (std::int64_t{1} << 31) ||
      g.hs * g.ws * g.cs >= (std::int64_t{1} << 31))
    throw InvalidArgument("space_to_depth_input: tensor too large for 32-bit indices");
  dispatch_float(dtype, "space_to_depth_input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    space_to_depth_input_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(xs), g, static_cast<int>(count));
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
