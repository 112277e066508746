// The CUDA backend's per-channel reductions (bias gradient, batch-norm statistics) and batch norm.
// Channel-last tensors (NHWC, 2-D) whose channel count fills 16-byte packs take the fast path: a
// block owns up to 32 channel packs x a slice of rows, reads coalesced packs, accumulates in fp32
// registers and writes one partial per (slice, channel), with one full wave of blocks (as many as
// the kernel's occupancy lets every SM hold); a finishing kernel adds the partials in fp64, 32
// lanes per channel and a fixed-order tree (deterministic). Statistics are sums about a per-channel shift (the channel's
// first value), which keeps E[x^2] - E[x]^2 free of cancellation when |mean| >> std. The
// normalisation and dx passes are tiled the same way, so each thread keeps its channels'
// coefficients in registers; the dx pass runs one wave of blocks that stride over the rows, so the
// coefficients are loaded once per block, not once per few rows. NCHW tensors under 2^31 elements
// take the plane path (batch_norm_planes.cu). Everything else (odd channel counts, misaligned
// channel-last views) takes the generic path: runtime-dispatched loads and fp64 sums.
// A fused ReLU (BatchNormParams::relu) clamps the stored output at 0; its backward zeroes dy where
// that output was not positive, recomputing it from x with the very coefficients forward used
// (kept per layer, 2 floats a channel), so the recomputation is exact and no activation more is
// kept or read than without the ReLU.
// A fused residual add (BatchNormParams::residual) rides the normalisation pass: it reads x and z
// and writes act(round(bn(x)) + z), the very values the batch norm and the add wrote as two passes
// (bn(x) is rounded to the dtype first, as the batch norm stored it), without writing bn(x) and
// reading it back.
// This file: the normalisation and dx kernels and the entry points; the reductions and the kernels
// that finish them are in batch_norm_stats.cu, the plans they share in batch_norm_plan.cuh.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/batch_norm_plan.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

using namespace bn;

namespace {

// ---- normalisation and dx -----------------------------------------------------------------------
// Generic: any view, runtime-dispatched element access.
__global__ void bn_apply_kernel(const void* x, const void* z, void* y, DType dt, ChannelView v,
                                const float* coef, bool relu, std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t c = channel_of(v, j);
    float out = fmaf(load(x, dt, j), coef[c], coef[v.channels + c]);
    if (z != nullptr) out = round_to(dt, out) + load(z, dt, j);  // bn(x) as stored, then the add
    store(y, dt, j, relu ? clamp_relu(out) : out);
  }
}

__global__ void bn_backward_apply_kernel(const void* x, const void* dy, void* dx, DType dt,
                                         ChannelView v, const float* coef, const float* mean,
                                         ReluMask relu, bool accumulate, std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t c = channel_of(v, j);
    const float xv = load(x, dt, j);
    float dyv = load(dy, dt, j);
    if (relu.coef != nullptr && !relu_passes(dt, xv, relu.at(c))) dyv = 0.0f;
    float g = coef[c] * dyv - coef[v.channels + c] - (xv - mean[c]) * coef[2 * v.channels + c];
    if (accumulate) g += load(dx, dt, j);
    store(dx, dt, j, g);
  }
}

// Fast: thread (channel pack, row slice); its coefficients stay in registers. Row blocks of
// kRowUnroll * by rows, grid-strided over gridDim.y (at most 65535).
// With a residual add and a ReLU, `mask` (may be null) takes each stored pack's positive_bits: a byte
// per row and pack, for the backward's reduction to read in place of y.
template <typename T, bool kRelu, bool kResidual>
__global__ void __launch_bounds__(kBlock)
    tile_apply_kernel(const T* x, const T* z, T* y, std::int64_t rows, std::int64_t channels,
                      const float* coef, std::uint8_t* mask) {
  constexpr int K = kVec<T>;
  const std::int64_t c0 = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * K;
  if (c0 >= channels) return;
  wait_for_producer();  // the coefficients (a finishing kernel's)
  float scale[K], shift[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    scale[k] = coef[c0 + k];
    shift[k] = coef[channels + c0 + k];
  }
  const std::int64_t by = blockDim.y;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kRowUnroll * by + threadIdx.y;
       r < rows; r += static_cast<std::int64_t>(gridDim.y) * kRowUnroll * by) {
    Pack<T, K> v[kRowUnroll], vz[kResidual ? kRowUnroll : 1];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (r + u * by < rows) {
        v[u] = load_pack<T, K>(x + (r + u * by) * channels + c0);
        if constexpr (kResidual) vz[u] = load_pack<T, K>(z + (r + u * by) * channels + c0);
      }
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (r + u * by >= rows) continue;
      Pack<T, K> out;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float o = fmaf(to_float(v[u].v[k]), scale[k], shift[k]);
        if constexpr (kResidual) o = to_float(from_float<T>(o)) + to_float(vz[kResidual ? u : 0].v[k]);
        out.v[k] = from_float<T>(kRelu ? clamp_relu(o) : o);
      }
      store_pack<T, K>(y + (r + u * by) * channels + c0, out);
      if constexpr (kRelu && kResidual)
        if (mask != nullptr) mask[(r + u * by) * (channels / K) + c0 / K] = positive_bits(out);
    }
  }
}

// Rows in flight per thread in tile_backward_apply_kernel; two resident blocks per SM keep
// 2 x kBlock x kBackwardRows x 2 packs of loads in flight (3 when accumulating; the coefficients stay
// in registers). bf16's mask recomputation, and its accumulation's third pack, need more registers:
// fewer rows there, so that nothing spills.
template <typename T, bool kRelu, bool kAccumulate>
constexpr int kBackwardRows = std::is_same_v<T, __nv_bfloat16> ? (kRelu ? (kAccumulate ? 2 : 3) : kAccumulate ? 3 : 4) : 4;
template <typename T, bool kRelu, bool kAccumulate>
__global__ void __launch_bounds__(kBlock, 2)
    tile_backward_apply_kernel(const T* x, const T* dy, T* dx, std::int64_t rows,
                               std::int64_t channels, const float* coef, const float* mean,
                               ReluMask relu) {
  constexpr int K = kVec<T>;
  const std::int64_t c0 = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * K;
  if (c0 >= channels) return;
  wait_for_producer();  // the coefficients (a finishing kernel's)
  float a[K], b[K], e[K], mu[K];
  Affine f[kRelu ? K : 1];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    a[k] = coef[c0 + k];
    b[k] = coef[channels + c0 + k];
    e[k] = coef[2 * channels + c0 + k];
    mu[k] = mean[c0 + k];
    if constexpr (kRelu) f[k] = relu.at(c0 + k);
  }
  const std::int64_t by = blockDim.y;
  constexpr int kU = kBackwardRows<T, kRelu, kAccumulate>;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kU * by + threadIdx.y; r < rows;
       r += static_cast<std::int64_t>(gridDim.y) * kU * by) {
    Pack<T, K> vx[kU], vdy[kU], vdx[kAccumulate ? kU : 1];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const std::int64_t row = r + u * by;
      if (row >= rows) continue;
      vx[u] = load_pack<T, K>(x + row * channels + c0);
      vdy[u] = load_pack<T, K>(dy + row * channels + c0);
      if constexpr (kAccumulate) vdx[u] = load_pack<T, K>(dx + row * channels + c0);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const std::int64_t row = r + u * by;
      if (row >= rows) continue;
      Pack<T, K> out;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float xv = to_float(vx[u].v[k]);
        float dyv = to_float(vdy[u].v[k]);
        if constexpr (kRelu) dyv = relu_passes<T>(xv, f[kRelu ? k : 0]) ? dyv : 0.0f;
        float g = a[k] * dyv - b[k] - (xv - mu[k]) * e[k];
        if constexpr (kAccumulate) g += to_float(vdx[u].v[k]);
        out.v[k] = from_float<T>(g);
      }
      store_pack<T, K>(dx + row * channels + c0, out);
    }
  }
}

dim3 apply_grid(const TilePlan& p, std::int64_t rows, std::int64_t rows_per_block) {
  const std::int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  return dim3(p.groups, static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 65535)));
}

// y = x * scale + shift per channel (coef: scale[C], shift[C]), plus z where z is given, clamped
// at 0 with relu.
void launch_apply(const void* x, const void* z, void* y, DType dtype, const ChannelView& view,
                  const TilePlan& t, bool fast, const float* coef, bool relu, cudaStream_t stream,
                  std::uint8_t* mask = nullptr) {
  if (fast) {
    dispatch_float(dtype, "batch_norm apply", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const dim3 grid = apply_grid(t, view.outer, kRowUnroll * t.by), block(t.bx, t.by);
      const auto* xt = static_cast<const T*>(x);
      const auto* zt = static_cast<const T*>(z);
      auto* yt = static_cast<T*>(y);
      auto launch = [&](auto kernel) {
        launch_dependent(kernel, grid, block, stream, xt, zt, yt, view.outer, view.channels, coef, mask);
      };
      if (z != nullptr)
        relu ? launch(tile_apply_kernel<T, true, true>) : launch(tile_apply_kernel<T, false, true>);
      else
        relu ? launch(tile_apply_kernel<T, true, false>) : launch(tile_apply_kernel<T, false, false>);
    });
  } else {
    const std::int64_t count = view.outer * view.channels * view.inner;
    bn_apply_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, z, y, dtype, view, coef, relu, count);
  }
  CNNERGY_CUDA_LAUNCH_CHECK("bn_apply");
}

}  // namespace

std::size_t batch_norm_relu_mask_bytes(const ChannelView& view, DType dtype) {
  const TilePlan t = tile_plan(view, dtype);
  if (!t.usable) return 0;
  return static_cast<std::size_t>(view.outer) * static_cast<std::size_t>(view.channels) * dtype_size_bytes(dtype) / 16;
}

bool batch_norm_forward_training(const void* x, void* y, DType dtype, const ChannelView& view,
                                 const float* gamma, const float* beta, float* running_mean,
                                 float* running_var, float* saved_mean, float* saved_inv_std,
                                 const BatchNormParams& params, void* scratch,
                                 cudaStream_t stream, float* saved_coef, const float* sums) {
  const TilePlan t = tile_plan(view, dtype);
  const void* z = params.residual;
  const bool fast = t.usable && aligned_for(16, x, y) && (z == nullptr || aligned_for(16, z));
  const PlanePlan q = fast ? PlanePlan{} : plane_plan(view, dtype, x, y, z);
  float* coef = saved_coef != nullptr ? saved_coef : coefficients(scratch, view, dtype);
  // The convolution's sums are one split of the fast layout (sum[C] then sum of squares[C]),
  // centred on nothing.
  const Partials p =
      sums != nullptr ? Partials{nullptr, sums, nullptr, 1, view.channels}
      : q.usable      ? plane_reduce(Reduce::kSumSquares, x, nullptr, dtype, view, q, nullptr, scratch, stream)
                      : reduce_channels(Reduce::kSumSquares, fast, x, nullptr, dtype, view, t, nullptr, scratch, stream);
  finish_batch_stats(p, view.per_channel(), gamma, beta, running_mean, running_var, saved_mean, saved_inv_std,
                     params, coef, stream);
  if (y == nullptr) return false;  // the coefficients only: a max pool applies them (PoolNormalisation)
  // The mask where the tiled pass writes it (a residual add and a ReLU): else the backward reads y.
  std::uint8_t* mask = fast && z != nullptr && params.relu ? params.relu_mask : nullptr;
  if (q.usable)
    plane_apply(x, z, y, dtype, view, q, coef, params.relu, stream);
  else
    launch_apply(x, z, y, dtype, view, t, fast, coef, params.relu, stream, mask);
  return mask != nullptr;
}

void batch_norm_statistics_pass(const void* x, DType dtype, const ChannelView& view, void* scratch,
                                cudaStream_t stream) {
  const TilePlan t = tile_plan(view, dtype);
  const bool fast = t.usable && aligned_for(16, x);
  const PlanePlan q = fast ? PlanePlan{} : plane_plan(view, dtype, x);
  if (q.usable)
    (void)plane_reduce(Reduce::kSumSquares, x, nullptr, dtype, view, q, nullptr, scratch, stream);
  else
    (void)reduce_channels(Reduce::kSumSquares, fast, x, nullptr, dtype, view, t, nullptr, scratch, stream);
}

void batch_norm_reapply(const void* x, void* y, DType dtype, const ChannelView& view, const float* coef,
                        bool relu, cudaStream_t stream) {
  const TilePlan t = tile_plan(view, dtype);
  const bool fast = t.usable && aligned_for(16, x, y);
  const PlanePlan q = fast ? PlanePlan{} : plane_plan(view, dtype, x, y);
  if (q.usable)
    plane_apply(x, nullptr, y, dtype, view, q, coef, relu, stream);
  else
    launch_apply(x, nullptr, y, dtype, view, t, fast, coef, relu, stream);
}

void batch_norm_inference_coefficients(std::int64_t channels, const float* gamma, const float* beta,
                                       const float* running_mean, const float* running_var, double eps,
                                       float* coef, cudaStream_t stream) {
  inference_coefficients(channels, gamma, beta, running_mean, running_var, eps, coef, stream);
}

void batch_norm_forward_inference(const void* x, void* y, DType dtype, const ChannelView& view,
                                  const float* gamma, const float* beta, const float* running_mean,
                                  const float* running_var, const BatchNormParams& params,
                                  void* scratch, cudaStream_t stream) {
  const TilePlan t = tile_plan(view, dtype);
  float* coef = coefficients(scratch, view, dtype);
  inference_coefficients(view.channels, gamma, beta, running_mean, running_var, params.eps, coef, stream);
  const void* z = params.residual;
  const bool fast = t.usable && aligned_for(16, x, y) && (z == nullptr || aligned_for(16, z));
  const PlanePlan q = fast ? PlanePlan{} : plane_plan(view, dtype, x, y, z);
  if (q.usable)
    plane_apply(x, z, y, dtype, view, q, coef, params.relu, stream);
  else
    launch_apply(x, z, y, dtype, view, t, fast, coef, params.relu, stream);
}

namespace {
// dx from the finished backward coefficients, on the path the reduction took.
void backward_apply(const void* x, const void* dy, void* dx, DType dtype, const ChannelView& view,
                    const TilePlan& t, bool fast, const PlanePlan& q, const float* coef,
                    const float* saved_mean, const ReluMask& mask, bool accumulate, cudaStream_t stream) {
  const bool relu = mask.coef != nullptr;
  const std::int64_t count = view.outer * view.channels * view.inner;
  if (q.usable) {
    plane_backward_apply(x, dy, dx, dtype, view, q, coef, saved_mean, mask, accumulate, stream);
    return;
  }
  if (fast) {
    dispatch_float(dtype, "batch_norm_backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      // One wave of blocks that stay and stride over the rows: each loads its coefficients once.
      auto row_blocks = [&](int rows_per_thread) {
        const std::int64_t per_block = static_cast<std::int64_t>(rows_per_thread) * t.by;
        return (view.outer + per_block - 1) / per_block;
      };
      const auto* xt = static_cast<const T*>(x);
      const auto* dyt = static_cast<const T*>(dy);
      auto* dxt = static_cast<T*>(dx);
      const dim3 block(t.bx, t.by);
      auto launch = [&](auto relu_tag, auto accumulate_tag) {
        constexpr bool kRelu = decltype(relu_tag)::value, kAccumulate = decltype(accumulate_tag)::value;
        static const int resident = resident_blocks(tile_backward_apply_kernel<T, kRelu, kAccumulate>);
        launch_dependent(tile_backward_apply_kernel<T, kRelu, kAccumulate>,
                         dim3(t.groups, wave_slices(resident, t, row_blocks(kBackwardRows<T, kRelu, kAccumulate>))),
                         block, stream, xt, dyt, dxt, view.outer, view.channels, coef, saved_mean, mask);
      };
      using On = std::true_type;
      using Off = std::false_type;
      if (relu)
        accumulate ? launch(On{}, On{}) : launch(On{}, Off{});
      else
        accumulate ? launch(Off{}, On{}) : launch(Off{}, Off{});
    });
  } else {
    bn_backward_apply_kernel<<<grid_for(count), kBlock, 0, stream>>>(
        x, dy, dx, dtype, view, coef, saved_mean, mask, accumulate, count);
  }
  CNNERGY_CUDA_LAUNCH_CHECK("bn_backward_apply");
}
}  // namespace

void batch_norm_backward(const void* x, const void* dy, void* dx, DType dtype,
                         const ChannelView& view, const float* gamma, const float* saved_mean,
                         const float* saved_inv_std, float* dgamma, float* dbeta,
                         const float* relu_coef, bool accumulate, void* scratch,
                         cudaStream_t stream) {
  const TilePlan t = tile_plan(view, dtype);
  const bool fast = t.usable && aligned_for(16, x, dy, dx);
  const PlanePlan q = fast ? PlanePlan{} : plane_plan(view, dtype, x, dy, dx);
  float* coef = coefficients(scratch, view, dtype);
  ReluMask mask;
  if (relu_coef != nullptr) mask = ReluMask{relu_coef, view.channels};
  const Partials p =
      q.usable ? plane_reduce(Reduce::kBatchNormBackward, dy, x, dtype, view, q, saved_mean, scratch, stream, mask)
               : reduce_channels(Reduce::kBatchNormBackward, fast, dy, x, dtype, view, t, saved_mean, scratch, stream,
                                 mask);
  finish_backward_stats(p, view.per_channel(), gamma, saved_inv_std, dgamma, dbeta, coef, stream);
  backward_apply(x, dy, dx, dtype, view, t, fast, q, coef, saved_mean, mask, accumulate, stream);
}

void batch_norm_backward_masking(const void* x, const void* y, void* dy, void* dx, DType dtype,
                                 const ChannelView& view, const float* gamma, const float* saved_mean,
                                 const float* saved_inv_std, float* dgamma, float* dbeta, bool accumulate,
                                 void* scratch, cudaStream_t stream, const std::uint8_t* relu_mask) {
  const TilePlan t = tile_plan(view, dtype);
  const bool fast = t.usable && aligned_for(16, x, dy, dx) && aligned_for(16, y);
  const PlanePlan q = fast ? PlanePlan{} : plane_plan(view, dtype, x, dy, dx, y);
  if (!fast && !q.usable) {  // the two passes
    relu_backward(y, dy, dy, dtype, view.outer * view.channels * view.inner, false, stream);
    batch_norm_backward(x, dy, dx, dtype, view, gamma, saved_mean, saved_inv_std, dgamma, dbeta, nullptr,
                        accumulate, scratch, stream);
    return;
  }
  float* coef = coefficients(scratch, view, dtype);
  const Partials p = fast ? reduce_masked_by_output(dy, x, y, dtype, view, t, saved_mean, scratch, stream, relu_mask)
                          : plane_reduce_masked_by_output(dy, x, y, dtype, view, q, saved_mean, scratch, stream);
  finish_backward_stats(p, view.per_channel(), gamma, saved_inv_std, dgamma, dbeta, coef, stream);
  backward_apply(x, dy, dx, dtype, view, t, fast, q, coef, saved_mean, ReluMask{}, accumulate, stream);
}

}  // namespace cnnergy::cuda::kernels
