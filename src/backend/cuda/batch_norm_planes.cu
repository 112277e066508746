// The CUDA batch norm's NCHW path: a channel's values lie in N planes of H*W contiguous elements.
// The kernels here are typed at compile time, index with 32-bit arithmetic (plane_plan admits
// tensors under 2^31 elements), and move packs of 16 bytes where H*W divides into them (one
// element at a time otherwise, e.g. 7x7 planes in fp32). The reductions run a block per (channel,
// slice of the channel's N*H*W values), accumulate in fp32 per thread and combine the threads in a
// fixed order (block_sum), one partial per (slice, channel) in the fast path's layout, which the
// finishing kernels of batch_norm_stats.cu add in fp64; the statistics are centred on the channel's
// first value, as the channel-last kernels' are. The normalisation and dx passes stride over the
// whole tensor. The same fused ReLU and residual add as the channel-last kernels (batch_norm.cu's
// opening lines): forward's output rounded to the element type decides the mask.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/batch_norm_plan.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

using namespace bn;

namespace {

constexpr int kPlaneUnroll = 4;  // packs in flight per thread

// The modes of the channel-last tile_reduce_kernel (batch_norm_stats.cu). kMode 0: sum of a (a bias
// gradient). 1: sums of (a - shift) and (a - shift)^2, shift = the channel's first value (written to
// shift_out by slice 0). 2: sums of a (dy) and a * (b - mean) (dy * (x - mean)); with kRelu, dy only
// where forward's output was positive. 3: a (dy) masked where b (a ReLU's output) is not positive,
// written to masked_out (may be a), and its sum; mode 0 over the masked values adds the same terms in
// the same order, so the one pass gives the two passes' bias gradient bit for bit. 4: mode 2 on a
// (dy) masked where mask_by (a fused residual add's ReLU output) is not positive, the masked dy
// written to masked_out (may be a): the add's ReLU backward in the same pass, the sums those of the
// two passes bit for bit (the slices do not depend on the mode).
template <typename T, int K, int kMode, bool kRelu>
__global__ void __launch_bounds__(kBlock)
    plane_reduce_kernel(const T* a, const T* b, unsigned channels, unsigned inner, unsigned per_channel,
                        unsigned chunk, const float* mean, ReluMask relu, float* partial, float* shift_out,
                        T* masked_out, const T* mask_by) {
  const unsigned c = blockIdx.x, slice = blockIdx.y;
  const unsigned t0 = slice * chunk, t1 = min(per_channel, t0 + chunk);
  float center = 0.0f, s1 = 0.0f, s2 = 0.0f;
  Affine f;
  if constexpr (kMode == 1) {
    center = to_float(a[static_cast<std::size_t>(c) * inner]);
    if (slice == 0 && threadIdx.x == 0) shift_out[c] = center;
  }
  if constexpr (kMode == 2 || kMode == 4) {
    center = mean[c];
    if constexpr (kRelu) f = relu.at(c);
  }
  const unsigned step = blockDim.x * K;
  for (unsigned t = t0 + threadIdx.x * K; t < t1; t += kPlaneUnroll * step) {
    Pack<T, K> va[kPlaneUnroll], vb[kPlaneUnroll], vm[kMode == 4 ? kPlaneUnroll : 1];
    std::size_t at[kPlaneUnroll];
#pragma unroll
    for (int u = 0; u < kPlaneUnroll; ++u) {
      const unsigned tu = t + u * step;
      if (tu < t1) {
        const unsigned o = tu / inner;
        at[u] = (static_cast<std::size_t>(o) * channels + c) * inner + (tu - o * inner);
        va[u] = load_pack<T, K>(a + at[u]);
        if constexpr (kMode >= 2) vb[u] = load_pack<T, K>(b + at[u]);
        if constexpr (kMode == 4) vm[u] = load_pack<T, K>(mask_by + at[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kPlaneUnroll; ++u) {
      if (t + u * step >= t1) continue;
      if constexpr (kMode == 4) {
        va[u] = relu_masked(va[u], vm[kMode == 4 ? u : 0]);
        store_pack<T, K>(masked_out + at[u], va[u]);
      }
      if constexpr (kMode == 3) {  // the values relu_backward writes: dy, or +0
        const Pack<T, K> masked = relu_masked(va[u], vb[u]);
#pragma unroll
        for (int k = 0; k < K; ++k) s1 += to_float(masked.v[k]);
        store_pack<T, K>(masked_out + at[u], masked);
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const float v = to_float(va[u].v[k]);
          if constexpr (kMode == 0) {
            s1 += v;
          } else if constexpr (kMode == 1) {
            const float d = v - center;
            s1 += d;
            s2 = fmaf(d, d, s2);
          } else {
            const float xv = to_float(vb[u].v[k]);
            const float g = (!kRelu || relu_passes<T>(xv, f)) ? v : 0.0f;
            s1 += g;
            s2 = fmaf(g, xv - center, s2);
          }
        }
      }
    }
  }
  s1 = block_sum(s1);
  s2 = block_sum(s2);
  if (threadIdx.x == 0) {
    partial[static_cast<std::size_t>(slice) * 2 * channels + c] = s1;
    partial[(static_cast<std::size_t>(slice) * 2 + 1) * channels + c] = s2;
  }
}

// y = x * scale + shift per channel (coef: scale[C], shift[C]); plus z (after rounding bn(x) to T),
// clamped at 0 with kRelu.
template <typename T, int K, bool kRelu, bool kResidual>
__global__ void __launch_bounds__(kBlock)
    plane_apply_kernel(const T* x, const T* z, T* y, unsigned packs, unsigned channels, unsigned inner,
                       const float* coef) {
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < packs; j += kPlaneUnroll * stride) {
    Pack<T, K> v[kPlaneUnroll], vz[kResidual ? kPlaneUnroll : 1];
#pragma unroll
    for (int u = 0; u < kPlaneUnroll; ++u) {
      const unsigned ju = j + u * stride;
      if (ju >= packs) continue;
      v[u] = load_pack<T, K>(x + static_cast<std::size_t>(ju) * K);
      if constexpr (kResidual) vz[u] = load_pack<T, K>(z + static_cast<std::size_t>(ju) * K);
    }
#pragma unroll
    for (int u = 0; u < kPlaneUnroll; ++u) {
      const unsigned ju = j + u * stride;
      if (ju >= packs) continue;
      const unsigned c = (ju * K / inner) % channels;  // a pack never crosses a plane
      const float scale = coef[c], shift = coef[channels + c];
      Pack<T, K> out;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float o = fmaf(to_float(v[u].v[k]), scale, shift);
        if constexpr (kResidual) o = to_float(from_float<T>(o)) + to_float(vz[kResidual ? u : 0].v[k]);
        out.v[k] = from_float<T>(kRelu ? clamp_relu(o) : o);
      }
      store_pack<T, K>(y + static_cast<std::size_t>(ju) * K, out);
    }
  }
}

// dx (+)= a dy - b - (x - mean) e per channel (coef: a[C], b[C], e[C]); with kRelu, dy = 0 where
// forward's output was not positive.
template <typename T, int K, bool kRelu>
__global__ void __launch_bounds__(kBlock)
    plane_backward_apply_kernel(const T* x, const T* dy, T* dx, unsigned packs, unsigned channels,
                                unsigned inner, const float* coef, const float* mean, ReluMask relu,
                                bool accumulate) {
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < packs; j += kPlaneUnroll * stride) {
    Pack<T, K> vx[kPlaneUnroll], vdy[kPlaneUnroll], vdx[kPlaneUnroll];
#pragma unroll
    for (int u = 0; u < kPlaneUnroll; ++u) {
      const unsigned ju = j + u * stride;
      if (ju >= packs) continue;
      vx[u] = load_pack<T, K>(x + static_cast<std::size_t>(ju) * K);
      vdy[u] = load_pack<T, K>(dy + static_cast<std::size_t>(ju) * K);
      if (accumulate) vdx[u] = load_pack<T, K>(dx + static_cast<std::size_t>(ju) * K);
    }
#pragma unroll
    for (int u = 0; u < kPlaneUnroll; ++u) {
      const unsigned ju = j + u * stride;
      if (ju >= packs) continue;
      const unsigned c = (ju * K / inner) % channels;
      const float a = coef[c], b = coef[channels + c], e = coef[2 * channels + c], mu = mean[c];
      Affine f;
      if constexpr (kRelu) f = relu.at(c);
      Pack<T, K> out;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float xv = to_float(vx[u].v[k]);
        float dyv = to_float(vdy[u].v[k]);
        if constexpr (kRelu) dyv = relu_passes<T>(xv, f) ? dyv : 0.0f;
        float g = a * dyv - b - (xv - mu) * e;
        if (accumulate) g += to_float(vdx[u].v[k]);
        out.v[k] = from_float<T>(g);
      }
      store_pack<T, K>(dx + static_cast<std::size_t>(ju) * K, out);
    }
  }
}

// Calls f(TypeTag<T>{}, std::integral_constant<int, K>{}) with the plan's pack width.
template <class F>
void dispatch_plane(DType dt, const PlanePlan& p, const char* op, F&& f) {
  dispatch_float(dt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.vector)
      f(tag, std::integral_constant<int, kVec<T>>{});
    else
      f(tag, std::integral_constant<int, 1>{});
  });
}

unsigned apply_blocks(std::int64_t packs) {
  const std::int64_t per_block = static_cast<std::int64_t>(kBlock) * kPlaneUnroll;
  return static_cast<unsigned>(std::clamp<std::int64_t>((packs + per_block - 1) / per_block, 1,
                                                        static_cast<std::int64_t>(sm_count()) * 16));
}

// One launch of plane_reduce_kernel<kMode>: a block per (channel, slice of whole packs), the
// partials in the fast layout, the shift (mode 1) after them.
template <int kMode, bool kRelu>
Partials launch_plane_reduce(const void* a, const void* b, DType dt, const ChannelView& v, const PlanePlan& p,
                             const float* mean, void* scratch, cudaStream_t stream, const ReluMask& relu,
                             void* masked_out, const void* mask_by = nullptr) {
  auto* partial = static_cast<float*>(scratch);
  float* shift = partial + static_cast<std::size_t>(p.splits) * 2 * v.channels;
  const auto per_channel = static_cast<unsigned>(v.per_channel());
  unsigned splits = 0;
  dispatch_plane(dt, p, "channel reduction", [&](auto tag, auto width) {
    using T = typename decltype(tag)::type;
    constexpr int K = decltype(width)::value;
    // Slices of whole packs: a pack never crosses a plane (H*W divides by K).
    const std::int64_t want = (v.per_channel() + p.splits - 1) / p.splits;
    const auto chunk = static_cast<unsigned>((want + K - 1) / K * K);
    splits = (per_channel + chunk - 1) / chunk;
    plane_reduce_kernel<T, K, kMode, kRelu><<<dim3(static_cast<unsigned>(v.channels), splits), kBlock, 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<unsigned>(v.channels),
        static_cast<unsigned>(v.inner), per_channel, chunk, mean, relu, partial, shift, static_cast<T*>(masked_out),
        static_cast<const T*>(mask_by));
  });
  CNNERGY_CUDA_LAUNCH_CHECK("plane_reduce");
  return Partials{nullptr, partial, kMode == 1 ? shift : nullptr, splits, v.channels};  // the fast layout
}

}  // namespace

namespace bn {

PlanePlan plane_plan(const ChannelView& v, DType dtype, const void* a, const void* b, const void* c,
                     const void* d) {
  PlanePlan p;
  if (!plane_path_takes(v, dtype)) return p;
  p.vector = v.inner % (16 / static_cast<std::int64_t>(dtype_size_bytes(dtype))) == 0 && aligned_for(16, a, b, c, d);
  p.splits = plan_for(v).splits;  // the generic reduction's: its scratch holds these partials
  p.usable = true;
  return p;
}

Partials plane_reduce(Reduce mode, const void* a, const void* b, DType dt, const ChannelView& v,
                      const PlanePlan& p, const float* mean, void* scratch, cudaStream_t stream,
                      const ReluMask& relu) {
  switch (mode) {
    case Reduce::kSum: return launch_plane_reduce<0, false>(a, b, dt, v, p, mean, scratch, stream, relu, nullptr);
    case Reduce::kSumSquares: return launch_plane_reduce<1, false>(a, b, dt, v, p, mean, scratch, stream, relu, nullptr);
    case Reduce::kBatchNormBackward: break;
  }
  return relu.coef != nullptr ? launch_plane_reduce<2, true>(a, b, dt, v, p, mean, scratch, stream, relu, nullptr)
                              : launch_plane_reduce<2, false>(a, b, dt, v, p, mean, scratch, stream, relu, nullptr);
}

Partials plane_reduce_masked_by_output(void* dy, const void* x, const void* y, DType dt, const ChannelView& v,
                                       const PlanePlan& p, const float* mean, void* scratch, cudaStream_t stream) {
  return launch_plane_reduce<4, false>(dy, x, dt, v, p, mean, scratch, stream, {}, dy, y);
}

Partials plane_relu_mask_sum(void* dy, const void* y, DType dt, const ChannelView& v, const PlanePlan& p,
                             void* scratch, cudaStream_t stream) {
  return launch_plane_reduce<3, false>(dy, y, dt, v, p, nullptr, scratch, stream, {}, dy);
}

void plane_apply(const void* x, const void* z, void* y, DType dt, const ChannelView& v, const PlanePlan& p,
                 const float* coef, bool relu, cudaStream_t stream) {
  dispatch_plane(dt, p, "batch_norm apply", [&](auto tag, auto width) {
    using T = typename decltype(tag)::type;
    constexpr int K = decltype(width)::value;
    const auto packs = static_cast<unsigned>(v.outer * v.channels * v.inner / K);
    const auto* xt = static_cast<const T*>(x);
    const auto* zt = static_cast<const T*>(z);
    auto* yt = static_cast<T*>(y);
    const auto c = static_cast<unsigned>(v.channels), in = static_cast<unsigned>(v.inner);
    auto launch = [&](auto kernel) { kernel<<<apply_blocks(packs), kBlock, 0, stream>>>(xt, zt, yt, packs, c, in, coef); };
    if (z != nullptr)
      relu ? launch(plane_apply_kernel<T, K, true, true>) : launch(plane_apply_kernel<T, K, false, true>);
    else
      relu ? launch(plane_apply_kernel<T, K, true, false>) : launch(plane_apply_kernel<T, K, false, false>);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("plane_apply");
}

void plane_backward_apply(const void* x, const void* dy, void* dx, DType dt, const ChannelView& v,
                          const PlanePlan& p, const float* coef, const float* mean, const ReluMask& relu,
                          bool accumulate, cudaStream_t stream) {
  dispatch_plane(dt, p, "batch_norm_backward", [&](auto tag, auto width) {
    using T = typename decltype(tag)::type;
    constexpr int K = decltype(width)::value;
    const auto packs = static_cast<unsigned>(v.outer * v.channels * v.inner / K);
    const auto* xt = static_cast<const T*>(x);
    const auto* dyt = static_cast<const T*>(dy);
    auto* dxt = static_cast<T*>(dx);
    const auto c = static_cast<unsigned>(v.channels), in = static_cast<unsigned>(v.inner);
    auto launch = [&](auto kernel) {
      kernel<<<apply_blocks(packs), kBlock, 0, stream>>>(xt, dyt, dxt, packs, c, in, coef, mean, relu, accumulate);
    };
    relu.coef != nullptr ? launch(plane_backward_apply_kernel<T, K, true>)
                         : launch(plane_backward_apply_kernel<T, K, false>);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("plane_backward_apply");
}

}  // namespace bn
}  // namespace cnnergy::cuda::kernels
