// Space-to-depth rearrangement of a strided convolution's input and weights (conv_space_to_depth.hpp):
// a stride-S convolution over few channels becomes a stride-1 convolution over C*S*S channels.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda::kernels {
namespace {

// xs[n, bh, bw, (sy*S + sx)*C + c] = x[n, bh*S + sy - pad_top, bw*S + sx - pad_left, c], zero outside
// the image and in the channels past C*S*S. Both NHWC. A thread per output element, so a warp's
// writes are consecutive and its reads run along S*C consecutive inputs at a time; unsigned 32-bit
// index math within a sample. AlexNet's batch 256 on an H200: 0.254 ms, still about 4x what its
// memory traffic needs (with 64-bit division 0.354 ms; a thread per row segment, whose writes are
// strided, 0.501 ms).
template <typename T>
__global__ void __launch_bounds__(kBlock)
    space_to_depth_input_kernel(const T* x, T* xs, SpaceToDepthGeom g, unsigned per_sample, unsigned samples) {
  const T zero = from_float<T>(0.0f);
  const unsigned S = static_cast<unsigned>(g.stride), C = static_cast<unsigned>(g.c);
  const unsigned cs = static_cast<unsigned>(g.cs), ws = static_cast<unsigned>(g.ws);
  const unsigned h = static_cast<unsigned>(g.h), w = static_cast<unsigned>(g.w);
  const unsigned used = C * S * S;
  const std::int64_t in_per_sample = g.h * g.w * g.c;
  for (unsigned n = blockIdx.y; n < samples; n += gridDim.y) {
    const T* xn = x + static_cast<std::int64_t>(n) * in_per_sample;
    T* xsn = xs + static_cast<std::int64_t>(n) * per_sample;
    for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < per_sample; j += gridDim.x * blockDim.x) {
      const unsigned c_out = j % cs, pixel = j / cs;
      T v = zero;
      if (c_out < used) {
        const unsigned bw = pixel % ws, bh = pixel / ws;
        const unsigned block = c_out / C, ch = c_out - block * C;
        const unsigned sy = block / S, sx = block - sy * S;
        // Unsigned wrap-around turns a row or column above or left of the image into one past it.
        const unsigned i = bh * S + sy - static_cast<unsigned>(g.pad_top);
        const unsigned k = bw * S + sx - static_cast<unsigned>(g.pad_left);
        if (i < h && k < w) v = xn[(i * w + k) * C + ch];
      }
      xsn[j] = v;
    }
  }
}

// The common first layers, S and C known at compile time (ResNet's and GoogLeNet's 7x7/2 over 3
// channels: S = 2, 16 rearranged channels; AlexNet's 11x11/4: S = 4, 48): a thread per rearranged
// pixel reads its S rows of S * C consecutive inputs and writes its kCs channels as 16-byte packs
// (xs 16-byte aligned; kCs * sizeof(T) a multiple of 16), so a warp's reads and writes are
// contiguous runs and the index arithmetic is once per pixel, not per element.
template <typename T, int S, int C, int kCs>
__global__ void __launch_bounds__(kBlock)
    space_to_depth_pixels_kernel(const T* x, T* xs, SpaceToDepthGeom g, unsigned pixels, unsigned samples) {
  static_assert(C * S * S <= kCs, "the rearranged channels hold every tap");
  constexpr int K = kVec<T>;
  static_assert(kCs % K == 0, "whole packs a pixel");
  const unsigned h = static_cast<unsigned>(g.h), w = static_cast<unsigned>(g.w);
  const unsigned ws = static_cast<unsigned>(g.ws);
  const std::int64_t in_per_sample = g.h * g.w * C;
  for (unsigned n = blockIdx.y; n < samples; n += gridDim.y) {
    const T* xn = x + static_cast<std::int64_t>(n) * in_per_sample;
    T* xsn = xs + static_cast<std::int64_t>(n) * pixels * kCs;
    for (unsigned pixel = blockIdx.x * blockDim.x + threadIdx.x; pixel < pixels; pixel += gridDim.x * blockDim.x) {
      const unsigned bw = pixel % ws, bh = pixel / ws;
      Pack<T, K> out[kCs / K];
#pragma unroll
      for (int q = 0; q < kCs / K; ++q)
#pragma unroll
        for (int e = 0; e < K; ++e) out[q].v[e] = from_float<T>(0.0f);
#pragma unroll
      for (int sy = 0; sy < S; ++sy) {
        // Unsigned wrap-around turns a row or column above or left of the image into one past it.
        const unsigned i = bh * S + sy - static_cast<unsigned>(g.pad_top);
        if (i >= h) continue;
#pragma unroll
        for (int sx = 0; sx < S; ++sx) {
          const unsigned k = bw * S + sx - static_cast<unsigned>(g.pad_left);
          if (k >= w) continue;
          const T* src = xn + (i * w + k) * C;
#pragma unroll
          for (int ch = 0; ch < C; ++ch) {
            const int o = (sy * S + sx) * C + ch;
            out[o / K].v[o % K] = src[ch];
          }
        }
      }
      T* dst = xsn + static_cast<std::int64_t>(pixel) * kCs;
#pragma unroll
      for (int q = 0; q < kCs / K; ++q) store_pack<T, K>(dst + q * K, out[q]);
    }
  }
}

// The logical (k, c, r, s) of flat index j in a K x C x R x S filter: KCRS in NCHW, K R S C in NHWC.
struct FilterIndex {
  std::int64_t k, c, r, s;
};
__device__ __forceinline__ FilterIndex filter_index(std::int64_t j, std::int64_t channels, std::int64_t rows,
                                                    std::int64_t cols, bool nhwc) {
  FilterIndex f;
  if (nhwc) {  // j = ((k * R + r) * S + s) * C + c
    f.c = j % channels;
    std::int64_t rest = j / channels;
    f.s = rest % cols, rest /= cols;
    f.r = rest % rows, f.k = rest / rows;
  } else {  // j = ((k * C + c) * R + r) * S + s
    f.s = j % cols;
    std::int64_t rest = j / cols;
    f.r = rest % rows, rest /= rows;
    f.c = rest % channels, f.k = rest / channels;
  }
  return f;
}

// ws[k, cs, dy, dx] = w[k, c, dy*S + sy, dx*S + sx] for cs = (sy*S + sx)*C + c, zero where the tap
// falls past the kernel (R x Sk) or cs past C*S*S. Logical KCRS in either layout (NHWC: K R S C).
template <typename T>
__global__ void __launch_bounds__(kBlock)
    space_to_depth_weights_kernel(const T* w, T* ws, SpaceToDepthGeom g, bool nhwc, std::int64_t count) {
  const T zero = from_float<T>(0.0f);
  const std::int64_t used = g.c * g.stride * g.stride;
  CNNERGY_GRID_STRIDE(j, count) {
    const FilterIndex f = filter_index(j, g.cs, g.rs, g.ss, nhwc);
    const std::int64_t k = f.k, cs = f.c, dy = f.r, dx = f.s;
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

// The weight gradient back from the rearranged convolution's: dw[k, c, ry, rx] = dws[k, cs, dy, dx]
// with ry = dy*S + sy, rx = dx*S + sx, cs = (sy*S + sx)*C + c: every original tap is one rearranged
// tap (the padded ones, always zero weights, have no original). Logical KCRS in either layout.
template <typename T>
__global__ void __launch_bounds__(kBlock)
    space_to_depth_weights_grad_kernel(const T* dws, T* dw, SpaceToDepthGeom g, bool nhwc, std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const FilterIndex f = filter_index(j, g.c, g.r, g.s, nhwc);
    const std::int64_t k = f.k, c = f.c, ry = f.r, rx = f.s;
    const std::int64_t dy = ry / g.stride, sy = ry % g.stride, dx = rx / g.stride, sx = rx % g.stride;
    const std::int64_t cs = (sy * g.stride + sx) * g.c + c;
    dw[j] = nhwc ? dws[((k * g.rs + dy) * g.ss + dx) * g.cs + cs] : dws[((k * g.cs + cs) * g.rs + dy) * g.ss + dx];
  }
}

}  // namespace

void space_to_depth_weights_grad(const void* dws, void* dw, DType dtype, bool nhwc, const SpaceToDepthGeom& g,
                                 cudaStream_t stream) {
  const std::int64_t count = g.k * g.c * g.r * g.s;
  if (count == 0) return;
  dispatch_float(dtype, "space_to_depth_weights_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    space_to_depth_weights_grad_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(
        static_cast<const T*>(dws), static_cast<T*>(dw), g, nhwc, count);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("space_to_depth_weights_grad");
}

void space_to_depth_input(const void* x, void* xs, DType dtype, const SpaceToDepthGeom& g, cudaStream_t stream) {
  const std::int64_t per_sample = g.hs * g.ws * g.cs;
  if (per_sample == 0 || g.n == 0) return;
  // 32-bit offsets within a sample (input and output) and a sample count for the grid's y.
  if (per_sample >= (std::int64_t{1} << 31) || g.h * g.w * g.c >= (std::int64_t{1} << 31) ||
      g.n >= (std::int64_t{1} << 31))
    throw InvalidArgument("space_to_depth_input: a sample too large for 32-bit indices");
  const auto blocks_y = static_cast<unsigned>(std::min<std::int64_t>(g.n, 65535));
  const std::int64_t pixels = g.hs * g.ws;
  const auto pixel_blocks = static_cast<unsigned>(std::min<std::int64_t>((pixels + kBlock - 1) / kBlock, 4096));
  const bool packs = aligned_for(16, xs);
  dispatch_float(dtype, "space_to_depth_input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto by_pixel = [&](auto kernel) {
      kernel<<<dim3(pixel_blocks, blocks_y), kBlock, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(xs), g,
                                                                 static_cast<unsigned>(pixels),
                                                                 static_cast<unsigned>(g.n));
    };
    if (packs && g.stride == 2 && g.c == 3 && g.cs == 16) {
      by_pixel(space_to_depth_pixels_kernel<T, 2, 3, 16>);
    } else if (packs && g.stride == 4 && g.c == 3 && g.cs == 48) {
      by_pixel(space_to_depth_pixels_kernel<T, 4, 3, 48>);
    } else {
      const auto blocks_x = static_cast<unsigned>(std::min<std::int64_t>((per_sample + kBlock - 1) / kBlock, 4096));
      space_to_depth_input_kernel<T><<<dim3(blocks_x, blocks_y), kBlock, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(xs), g, static_cast<unsigned>(per_sample),
          static_cast<unsigned>(g.n));
    }
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
