// The statistics half of the CUDA batch norm: per-channel reductions (bias gradient, batch-norm
// statistics, backward's two sums; NCHW ones in batch_norm_planes.cu) and the kernels that finish
// them in fp64; the normalisation and
// dx kernels are in batch_norm.cu. How the reductions are tiled: see batch_norm.cu's opening lines.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/batch_norm_plan.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

using namespace bn;

namespace {

// The finishing kernels run blocks of 32 channels x kFinishLanes threads: lane ty adds splits ty,
// ty + kFinishLanes, ... of its channel in fp64, then a fixed-order tree over the lanes (the sums
// are deterministic). Every thread of the block must call it; lanes of channels >= C add nothing.
constexpr int kFinishLanes = 32;
__device__ __forceinline__ void channel_totals(const Partials& p, std::int64_t c, double& s1,
                                               double& s2) {
  __shared__ double red[2][kFinishLanes][33];
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
  s1 = 0.0;
  s2 = 0.0;
  if (c < p.channels) {
#pragma unroll 4
    for (std::int64_t s = ty; s < p.splits; s += kFinishLanes) {
      if (p.fast != nullptr) {
        s1 += p.fast[(s * 2) * p.channels + c];
        s2 += p.fast[(s * 2 + 1) * p.channels + c];
      } else {
        s1 += p.generic[(s * p.channels + c) * 2];
        s2 += p.generic[(s * p.channels + c) * 2 + 1];
      }
    }
  }
  red[0][ty][tx] = s1;
  red[1][ty][tx] = s2;
  __syncthreads();
  for (unsigned step = kFinishLanes / 2; step > 0; step /= 2) {
    if (ty < step) {
      red[0][ty][tx] += red[0][ty + step][tx];
      red[1][ty][tx] += red[1][ty + step][tx];
    }
    __syncthreads();
  }
  s1 = red[0][0][tx];
  s2 = red[1][0][tx];
}

// ---- generic reductions -------------------------------------------------------------------------
// kBatchNormBackward: a = dy, b = x; with relu, dy counts only where forward's output was positive.
__device__ __forceinline__ void accumulate_term(Reduce mode, const void* a, const void* b, DType dt,
                                                std::int64_t idx, float mean, bool relu,
                                                const Affine& f, double& s1, double& s2) {
  double va = load(a, dt, idx);
  if (mode == Reduce::kBatchNormBackward) {
    const float xb = load(b, dt, idx);
    if (relu && !relu_passes(dt, xb, f)) va = 0.0;
    s1 += va;
    s2 += va * (static_cast<double>(xb) - mean);
    return;
  }
  s1 += va;
  if (mode == Reduce::kSumSquares) s2 += va * va;
}

// NCHW: block (channel, split) walks t over the channel's outer*inner elements, inner fastest.
__global__ void reduce_channel_inner_kernel(const void* a, const void* b, DType dt, ChannelView v,
                                            Reduce mode, const float* mean, ReluMask relu,
                                            double* partial) {
  const std::int64_t c = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const std::int64_t m = v.outer * v.inner;
  const std::int64_t chunk = (m + splits - 1) / splits;
  const std::int64_t t0 = split * chunk, t1 = min(m, t0 + chunk);
  const float mu = mean != nullptr ? mean[c] : 0.0f;
  const bool masked = relu.coef != nullptr;
  const Affine f = masked ? relu.at(c) : Affine{};
  double s1 = 0.0, s2 = 0.0;
  for (std::int64_t t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
    const std::int64_t o = t / v.inner, i = t % v.inner;
    accumulate_term(mode, a, b, dt, (o * v.channels + c) * v.inner + i, mu, masked, f, s1, s2);
  }
  s1 = block_sum(s1);
  s2 = block_sum(s2);
  if (threadIdx.x == 0) {
    partial[(split * v.channels + c) * 2] = s1;
    partial[(split * v.channels + c) * 2 + 1] = s2;
  }
}

// Channel-last, any channel count: block (32 channels, split of rows).
__global__ void reduce_channel_last_kernel(const void* a, const void* b, DType dt, ChannelView v,
                                           Reduce mode, const float* mean, ReluMask relu,
                                           double* partial) {
  __shared__ double sum1[kTileRows][kTile + 1];
  __shared__ double sum2[kTileRows][kTile + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const std::int64_t split = blockIdx.y, splits = gridDim.y;
  const std::int64_t chunk = (v.outer + splits - 1) / splits;
  const std::int64_t r0 = split * chunk, r1 = min(v.outer, r0 + chunk);
  double s1 = 0.0, s2 = 0.0;
  if (c < v.channels) {
    const float mu = mean != nullptr ? mean[c] : 0.0f;
    const bool masked = relu.coef != nullptr;
    const Affine f = masked ? relu.at(c) : Affine{};
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows)
      accumulate_term(mode, a, b, dt, r * v.channels + c, mu, masked, f, s1, s2);
  }
  sum1[threadIdx.y][threadIdx.x] = s1;
  sum2[threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  if (threadIdx.y == 0 && c < v.channels) {
    for (int y = 1; y < kTileRows; ++y) {
      s1 += sum1[y][threadIdx.x];
      s2 += sum2[y][threadIdx.x];
    }
    partial[(split * v.channels + c) * 2] = s1;
    partial[(split * v.channels + c) * 2 + 1] = s2;
  }
}

Partials launch_generic_reduce(const void* a, const void* b, DType dt, const ChannelView& v,
                               Reduce mode, const float* mean, void* scratch, cudaStream_t stream,
                               const ReluMask& relu = {}) {
  const ReducePlan p = plan_for(v);
  auto* partial = static_cast<double*>(scratch);
  if (p.channel_last) {
    const dim3 grid(static_cast<unsigned>((v.channels + kTile - 1) / kTile),
                    static_cast<unsigned>(p.splits));
    reduce_channel_last_kernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(a, b, dt, v, mode, mean,
                                                                            relu, partial);
    CNNERGY_CUDA_LAUNCH_CHECK("reduce_channel_last");
  } else {
    const dim3 grid(static_cast<unsigned>(v.channels), static_cast<unsigned>(p.splits));
    reduce_channel_inner_kernel<<<grid, kBlock, 0, stream>>>(a, b, dt, v, mode, mean, relu,
                                                             partial);
    CNNERGY_CUDA_LAUNCH_CHECK("reduce_channel_inner");
  }
  Partials out;
  out.generic = partial;
  out.splits = p.splits;
  out.channels = v.channels;
  return out;
}

// ---- fast channel-last reductions ---------------------------------------------------------------
// kMode 0: sum of a. 1: sums of (a - shift) and (a - shift)^2, shift = a's first row (written to
// shift_out by the first slice). 2: sums of a (dy) and a * (b - mean) (dy * (x - mean)); with
// kRelu, dy only where forward's output was positive. 3: a (dy) masked where b (a ReLU's output y)
// is not positive, written to masked_out (may be a), and its sum: a fused ReLU's backward and the
// bias gradient of the layer before it in one pass (the second sum stays 0). 4: mode 2 on a (dy)
// masked where c (a fused residual add's ReLU output) is not positive, the masked dy written to
// masked_out (may be a): the add's ReLU backward and the batch norm's reduction in one pass, the
// sums those of relu_backward then mode 2 bit for bit. 5: mode 4 with the mask from `bits` (forward's
// positive_bits of c, a byte per row and pack) instead of c: the same values, 1/16 of c's bytes read.
template <typename T, int kMode, bool kRelu>
__global__ void __launch_bounds__(kBlock)
    tile_reduce_kernel(const T* a, const T* b, std::int64_t rows, std::int64_t channels,
                       const float* mean, ReluMask relu, float* partial, float* shift_out,
                       T* masked_out, const T* c, const std::uint8_t* bits) {
  constexpr int K = kVec<T>;
  constexpr bool kMasking = kMode == 4 || kMode == 5;  // the add's ReLU backward, then mode 2
  // Rows loaded at once. Mode 4 loads three packs a row, mode 5 two and a byte: half the rows, so that
  // neither needs more registers than mode 2 (whose slicing, and so occupancy, they share); bf16's
  // mode 5 fits with all of them (123 registers, as mode 2; fp16 and fp32 would take 92 / 74 against
  // 80 / 64, a block less per SM).
  constexpr int kInFlight =
      kMode == 4 || (kMode == 5 && !std::is_same_v<T, __nv_bfloat16>) ? kRowUnroll / 2 : kRowUnroll;
  const std::int64_t packs = channels / K;
  let_dependents_launch();  // the finishing kernel may be placed (it waits for this grid's partials)
  __shared__ float red[2][kBlock * K];
  const unsigned tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const std::int64_t c0 = (static_cast<std::int64_t>(blockIdx.x) * bx + tx) * K;
  const bool active = c0 < channels;
  // Slices take blocks of kRowUnroll * by rows in turn, from the last block back: the sweep reads
  // first the rows its producer wrote last (still in L2 where the tensor outgrows it) and ends on the
  // first rows, which the ascending apply passes read first.
  const std::int64_t block_rows = static_cast<std::int64_t>(kRowUnroll) * by;
  const std::int64_t row_blocks = (rows + block_rows - 1) / block_rows;
  float center[K], s1[K], s2[K];
  Affine f[kRelu ? K : 1];
#pragma unroll
  for (int k = 0; k < K; ++k) center[k] = s1[k] = s2[k] = 0.0f;
  if (active) {
    if constexpr (kMode == 1) {
      const Pack<T, K> first = load_pack<T, K>(a + c0);
#pragma unroll
      for (int k = 0; k < K; ++k) center[k] = to_float(first.v[k]);
      if (blockIdx.y == 0 && ty == 0)
#pragma unroll
        for (int k = 0; k < K; ++k) shift_out[c0 + k] = center[k];
    }
    if constexpr (kMode == 2 || kMasking) {
#pragma unroll
      for (int k = 0; k < K; ++k) center[k] = mean[c0 + k];
      if constexpr (kRelu)
#pragma unroll
        for (int k = 0; k < K; ++k) f[k] = relu.at(c0 + k);
    }
    for (std::int64_t j = row_blocks - 1 - blockIdx.y; j >= 0; j -= gridDim.y) {
      const std::int64_t r = j * block_rows + ty;
      // Mode 4 loads three packs a row: half the rows at a time, in the same order, so that it
      // needs no more registers than mode 2 (whose slicing it shares).
#pragma unroll
      for (int h = 0; h < kRowUnroll; h += kInFlight) {
        Pack<T, K> va[kInFlight], vb[kInFlight], vc[kMode == 4 ? kInFlight : 1];
        unsigned vm[kMode == 5 ? kInFlight : 1];
#pragma unroll
        for (int i = 0; i < kInFlight; ++i) {
          const std::int64_t row = r + (h + i) * by;
          if (row < rows) {
            va[i] = load_pack<T, K>(a + row * channels + c0);
            if constexpr (kMode >= 2) vb[i] = load_pack<T, K>(b + row * channels + c0);
            if constexpr (kMode == 4) vc[i] = load_pack<T, K>(c + row * channels + c0);
            if constexpr (kMode == 5) vm[i] = bits[row * packs + c0 / K];
          }
        }
#pragma unroll
        for (int i = 0; i < kInFlight; ++i) {
          const std::int64_t row = r + (h + i) * by;
          if (row >= rows) continue;
          if constexpr (kMasking) {
            if constexpr (kMode == 4)
              va[i] = relu_masked(va[i], vc[kMode == 4 ? i : 0]);
            else
              va[i] = bits_masked(va[i], vm[kMode == 5 ? i : 0]);
            store_pack<T, K>(masked_out + row * channels + c0, va[i]);
          }
          if constexpr (kMode == 3) {  // the values relu_backward writes: dy, or +0
            const Pack<T, K> masked = relu_masked(va[i], vb[i]);
#pragma unroll
            for (int k = 0; k < K; ++k) s1[k] += to_float(masked.v[k]);
            store_pack<T, K>(masked_out + row * channels + c0, masked);
          } else {
#pragma unroll
            for (int k = 0; k < K; ++k) {
              const float v = to_float(va[i].v[k]);
              if constexpr (kMode == 0) s1[k] += v;
              if constexpr (kMode == 1) {
                const float d = v - center[k];
                s1[k] += d;
                s2[k] = fmaf(d, d, s2[k]);
              }
              if constexpr (kMode == 2 || kMasking) {
                const float xv = to_float(vb[i].v[k]);
                float g = v;
                if constexpr (kRelu) g = relu_passes<T>(xv, f[kRelu ? k : 0]) ? v : 0.0f;
                s1[k] += g;
                s2[k] = fmaf(g, xv - center[k], s2[k]);
              }
            }
          }
        }
      }
    }
  }
  // Tree over the block's rows (by is a power of two): a fixed order, so results are
  // deterministic.
  const unsigned width = bx * K;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    red[0][ty * width + tx * K + k] = s1[k];
    red[1][ty * width + tx * K + k] = s2[k];
  }
  __syncthreads();
  for (unsigned step = by / 2; step > 0; step /= 2) {
    if (ty < step)
#pragma unroll
      for (int k = 0; k < K; ++k) {
        red[0][ty * width + tx * K + k] += red[0][(ty + step) * width + tx * K + k];
        red[1][ty * width + tx * K + k] += red[1][(ty + step) * width + tx * K + k];
      }
    __syncthreads();
  }
  if (ty == 0 && active) {
    float* out = partial + static_cast<std::int64_t>(blockIdx.y) * 2 * channels;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      out[c0 + k] = red[0][tx * K + k];
      out[channels + c0 + k] = red[1][tx * K + k];
    }
  }
}

template <int kMode, bool kRelu = false>
Partials launch_tile_reduce(const void* a, const void* b, DType dt, const ChannelView& v,
                            const TilePlan& p, const float* mean, void* scratch,
                            cudaStream_t stream, const ReluMask& relu = {}, void* masked_out = nullptr,
                            const void* c = nullptr, const std::uint8_t* bits = nullptr) {
  auto* partial = static_cast<float*>(scratch);
  float* shift = reinterpret_cast<float*>(static_cast<char*>(scratch) + fast_partial_bytes(v, p));
  unsigned splits = 1;
  dispatch_float(dt, "channel reduction", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Mode 3 slices the rows as mode 0 (bias_grad) does, and modes 4 and 5 as mode 2: the same sums in
    // the same order, so each fused pass gives the two passes' results bit for bit.
    // Both halves of each pair launch the wave the less resident of the two fits, so that neither
    // runs a second, part-empty wave.
    constexpr int kSliced = kMode == 3 ? 0 : kMode == 4 || kMode == 5 ? 2 : kMode;
    constexpr int kPartner = kSliced == 0 ? 3 : kSliced == 2 && !kRelu ? 4 : kSliced;
    static const int resident = std::min(resident_blocks(tile_reduce_kernel<T, kSliced, kRelu>),
                                         resident_blocks(tile_reduce_kernel<T, kPartner, kRelu>));
    splits = wave_slices(resident, p, p.splits);  // one full wave: no half-empty second one
    tile_reduce_kernel<T, kMode, kRelu><<<dim3(p.groups, splits), dim3(p.bx, p.by), 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), v.outer, v.channels, mean, relu,
        partial, shift, static_cast<T*>(masked_out), static_cast<const T*>(c), bits);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("tile_reduce");
  return Partials{nullptr, partial, kMode == 1 ? shift : nullptr, splits, v.channels};  // the fast layout
}

// ---- finishing kernels (one thread per channel) -------------------------------------------------
__device__ __forceinline__ std::int64_t finish_channel() {
  return static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
}

__global__ void bias_grad_finish_kernel(Partials p, void* db, DType db_dtype) {
  wait_for_producer();      // the reduction's partials
  let_dependents_launch();  // the pass that reads what this writes may be placed
  const std::int64_t c = finish_channel();
  double s1, s2;
  channel_totals(p, c, s1, s2);
  if (threadIdx.y == 0 && c < p.channels) store(db, db_dtype, c, static_cast<float>(s1));
}

// Batch statistics -> saved mean / inverse std, running estimates (unbiased variance), and the
// per-channel scale/shift that the apply kernels use (coef[c], coef[C + c]).
__global__ void bn_stats_finish_kernel(Partials p, std::int64_t m, const float* gamma,
                                       const float* beta, float* running_mean, float* running_var,
                                       float* saved_mean, float* saved_inv_std, BatchNormParams bp,
                                       float* coef) {
  wait_for_producer();      // the reduction's partials
  let_dependents_launch();  // the pass that reads what this writes may be placed
  const std::int64_t channels = p.channels;
  const std::int64_t c = finish_channel();
  double s1, s2;
  channel_totals(p, c, s1, s2);
  if (threadIdx.y == 0 && c < channels) {
    const double count = static_cast<double>(m);
    const double centred_mean = s1 / count;  // mean - shift
    const double mean = (p.shift != nullptr ? p.shift[c] : 0.0) + centred_mean;
    const double var = fmax(s2 / count - centred_mean * centred_mean, 0.0);
    const double inv_std = 1.0 / sqrt(var + bp.eps);
    saved_mean[c] = static_cast<float>(mean);
    saved_inv_std[c] = static_cast<float>(inv_std);
    const Affine f = forward_affine(gamma, beta, saved_mean, saved_inv_std, c);
    const double unbiased = m > 1 ? var * count / (count - 1.0) : var;
    running_mean[c] =
        static_cast<float>((1.0 - bp.momentum) * running_mean[c] + bp.momentum * mean);
    running_var[c] =
        static_cast<float>((1.0 - bp.momentum) * running_var[c] + bp.momentum * unbiased);
    coef[c] = f.scale;
    coef[channels + c] = f.shift;
  }
}

__global__ void bn_inference_coef_kernel(std::int64_t channels, const float* gamma,
                                         const float* beta, const float* running_mean,
                                         const float* running_var, double eps, float* coef) {
  CNNERGY_GRID_STRIDE(c, channels) {
    const double scale = gamma[c] / sqrt(static_cast<double>(running_var[c]) + eps);
    coef[c] = static_cast<float>(scale);
    coef[channels + c] = static_cast<float>(beta[c] - running_mean[c] * scale);
  }
}

// With S1 = sum dy, S2 = sum dy (x - mean): dbeta = S1, dgamma = S2 * inv_std and
// dx = gamma inv_std / M (M dy - dbeta - xhat dgamma) = a dy - b - (x - mean) e.
__global__ void bn_backward_finish_kernel(Partials p, std::int64_t m, const float* gamma,
                                          const float* saved_inv_std, float* dgamma, float* dbeta,
                                          float* coef) {
  wait_for_producer();      // the reduction's partials
  let_dependents_launch();  // the pass that reads what this writes may be placed
  const std::int64_t channels = p.channels;
  const std::int64_t c = finish_channel();
  double s1, s2;
  channel_totals(p, c, s1, s2);
  if (threadIdx.y == 0 && c < channels) {
    const double inv_std = saved_inv_std[c];
    const double dg = s2 * inv_std;
    dbeta[c] = static_cast<float>(s1);
    dgamma[c] = static_cast<float>(dg);
    const double k = gamma[c] * inv_std / static_cast<double>(m);
    coef[c] = static_cast<float>(gamma[c] * inv_std);
    coef[channels + c] = static_cast<float>(k * s1);
    coef[2 * channels + c] = static_cast<float>(k * inv_std * dg);
  }
}

// Finishing kernels: a block per 32 channels (channel_totals).
unsigned finish_grid(std::int64_t channels) { return static_cast<unsigned>((channels + 31) / 32); }
const dim3 kFinishBlock(32, kFinishLanes);

}  // namespace

namespace bn {

Partials reduce_channels(Reduce mode, bool fast, const void* a, const void* b, DType dt,
                         const ChannelView& v, const TilePlan& t, const float* mean, void* scratch,
                         cudaStream_t stream, const ReluMask& relu) {
  if (!fast) return launch_generic_reduce(a, b, dt, v, mode, mean, scratch, stream, relu);
  switch (mode) {
    case Reduce::kSum: return launch_tile_reduce<0>(a, b, dt, v, t, mean, scratch, stream);
    case Reduce::kSumSquares: return launch_tile_reduce<1>(a, b, dt, v, t, mean, scratch, stream);
    case Reduce::kBatchNormBackward: break;
  }
  return relu.coef != nullptr ? launch_tile_reduce<2, true>(a, b, dt, v, t, mean, scratch, stream, relu)
                              : launch_tile_reduce<2, false>(a, b, dt, v, t, mean, scratch, stream);
}

Partials reduce_masked_by_output(void* dy, const void* x, const void* y, DType dt, const ChannelView& v,
                                 const TilePlan& t, const float* mean, void* scratch, cudaStream_t stream,
                                 const std::uint8_t* bits) {
  if (bits != nullptr) return launch_tile_reduce<5>(dy, x, dt, v, t, mean, scratch, stream, {}, dy, nullptr, bits);
  return launch_tile_reduce<4>(dy, x, dt, v, t, mean, scratch, stream, {}, dy, y);
}

void finish_batch_stats(const Partials& p, std::int64_t m, const float* gamma, const float* beta,
                        float* running_mean, float* running_var, float* saved_mean,
                        float* saved_inv_std, const BatchNormParams& params, float* coef,
                        cudaStream_t stream) {
  launch_dependent(bn_stats_finish_kernel, finish_grid(p.channels), kFinishBlock, stream, p, m, gamma, beta,
                   running_mean, running_var, saved_mean, saved_inv_std, params, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_stats_finish");
}

void inference_coefficients(std::int64_t channels, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, double eps,
                            float* coef, cudaStream_t stream) {
  bn_inference_coef_kernel<<<grid_for(channels), kBlock, 0, stream>>>(channels, gamma, beta, running_mean,
                                                                        running_var, eps, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_inference_coef");
}

void finish_backward_stats(const Partials& p, std::int64_t m, const float* gamma,
                           const float* saved_inv_std, float* dgamma, float* dbeta, float* coef,
                           cudaStream_t stream) {
  launch_dependent(bn_backward_finish_kernel, finish_grid(p.channels), kFinishBlock, stream, p, m, gamma,
                   saved_inv_std, dgamma, dbeta, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_backward_finish");
}

}  // namespace bn

std::size_t channel_reduce_scratch_bytes(const ChannelView& view, DType dtype) {
  const TilePlan t = tile_plan(view, dtype);
  const std::size_t generic = generic_partial_bytes(view, plan_for(view));
  const std::size_t fast = t.usable ? fast_partial_bytes(view, t) +
                                          static_cast<std::size_t>(view.channels) * sizeof(float)
                                    : 0;
  return std::max(generic, fast) + static_cast<std::size_t>(4 * view.channels) * sizeof(float);
}

void bias_grad(const void* dy, DType dtype, const ChannelView& view, void* db, DType db_dtype,
               void* scratch, cudaStream_t stream) {
  if (view.channels == 0) return;
  const TilePlan t = tile_plan(view, dtype);
  const bool fast = t.usable && aligned_for(16, dy);
  const PlanePlan q = fast ? PlanePlan{} : plane_plan(view, dtype, dy);
  const Partials p =
      fast        ? launch_tile_reduce<0>(dy, nullptr, dtype, view, t, nullptr, scratch, stream)
      : q.usable  ? plane_reduce(Reduce::kSum, dy, nullptr, dtype, view, q, nullptr, scratch, stream)
                  : launch_generic_reduce(dy, nullptr, dtype, view, Reduce::kSum, nullptr, scratch, stream);
  launch_dependent(bias_grad_finish_kernel, finish_grid(view.channels), kFinishBlock, stream, p, db, db_dtype);
  CNNERGY_CUDA_LAUNCH_CHECK("bias_grad_finish");
}

void relu_backward_bias_grad(const void* y, void* dy, DType dtype, const ChannelView& view, void* db,
                             DType db_dtype, void* scratch, cudaStream_t stream) {
  const TilePlan t = tile_plan(view, dtype);
  if (!(t.usable && aligned_for(16, dy) && aligned_for(16, y))) {
    const PlanePlan q = plane_plan(view, dtype, dy, y);
    if (q.usable && view.channels > 0) {  // NCHW: one pass over the planes
      const Partials p = plane_relu_mask_sum(dy, y, dtype, view, q, scratch, stream);
      launch_dependent(bias_grad_finish_kernel, finish_grid(view.channels), kFinishBlock, stream, p, db, db_dtype);
      CNNERGY_CUDA_LAUNCH_CHECK("relu_backward_bias_grad_finish");
      return;
    }
    // The two passes.
    relu_backward(y, dy, dy, dtype, view.outer * view.channels * view.inner, false, stream);
    bias_grad(dy, dtype, view, db, db_dtype, scratch, stream);
    return;
  }
  if (view.channels == 0) return;
  const Partials p = launch_tile_reduce<3>(dy, y, dtype, view, t, nullptr, scratch, stream, {}, dy);
  launch_dependent(bias_grad_finish_kernel, finish_grid(view.channels), kFinishBlock, stream, p, db, db_dtype);
  CNNERGY_CUDA_LAUNCH_CHECK("relu_backward_bias_grad_finish");
}

}  // namespace cnnergy::cuda::kernels
