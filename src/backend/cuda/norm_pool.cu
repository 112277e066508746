// The CUDA backend's own per-channel reductions (bias gradient, batch-norm statistics), batch norm,
// pooling and LRN kernels. cuDNN runs these layers where it matches the contract exactly; these
// kernels cover the rest (bf16 batch norm, Caffe ceil-mode pooling, NHWC/bf16 LRN) with the CPU
// reference's semantics: first maximum in scan order, Caffe window divisors, Caffe LRN window.
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

namespace {

// ---- per-channel reductions ---------------------------------------------------------------------
// Each block sums a slice of one channel (or of 32 channels) into a partial; a finishing kernel
// adds the partials in a fixed order, so results are deterministic. Sums are fp64.
enum class Reduce : int { kSum, kSumSquares, kBatchNormBackward };

constexpr int kTile = 32;     // channels per block in the channel-last kernel
constexpr int kTileRows = 8;  // rows per pass in the channel-last kernel
constexpr std::int64_t kMaxSplits = 256;

struct ReducePlan {
  bool channel_last;
  std::int64_t splits;
};

ReducePlan plan_for(const ChannelView& v) {
  if (v.inner == 1) {
    const std::int64_t splits = std::clamp<std::int64_t>((v.outer + 255) / 256, 1, kMaxSplits);
    return {true, splits};
  }
  const std::int64_t splits =
      std::clamp<std::int64_t>((v.per_channel() + 4095) / 4096, 1, kMaxSplits);
  return {false, splits};
}

// Scratch layout: [splits * C * 2 doubles of partials][4 * C floats of per-channel coefficients].
std::size_t partial_bytes(const ChannelView& v, const ReducePlan& p) {
  return static_cast<std::size_t>(p.splits * v.channels * 2) * sizeof(double);
}
float* coefficients(void* scratch, const ChannelView& v, const ReducePlan& p) {
  return reinterpret_cast<float*>(static_cast<char*>(scratch) + partial_bytes(v, p));
}

__device__ __forceinline__ void accumulate_term(Reduce mode, const void* a, const void* b, DType dt,
                                                std::int64_t idx, float mean, double& s1,
                                                double& s2) {
  const double va = load(a, dt, idx);
  s1 += va;
  if (mode == Reduce::kSumSquares) s2 += va * va;
  if (mode == Reduce::kBatchNormBackward) s2 += va * (static_cast<double>(load(b, dt, idx)) - mean);
}

// NCHW: block (channel, split) walks t over the channel's outer*inner elements, inner fastest.
__global__ void reduce_channel_inner_kernel(const void* a, const void* b, DType dt, ChannelView v,
                                            Reduce mode, const float* mean, double* partial) {
  const std::int64_t c = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const std::int64_t m = v.outer * v.inner;
  const std::int64_t chunk = (m + splits - 1) / splits;
  const std::int64_t t0 = split * chunk, t1 = min(m, t0 + chunk);
  const float mu = mean != nullptr ? mean[c] : 0.0f;
  double s1 = 0.0, s2 = 0.0;
  for (std::int64_t t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
    const std::int64_t o = t / v.inner, i = t % v.inner;
    accumulate_term(mode, a, b, dt, (o * v.channels + c) * v.inner + i, mu, s1, s2);
  }
  s1 = block_sum(s1);
  s2 = block_sum(s2);
  if (threadIdx.x == 0) {
    partial[(split * v.channels + c) * 2] = s1;
    partial[(split * v.channels + c) * 2 + 1] = s2;
  }
}

// Channel-last: block (32 channels, split of rows); threads along x read consecutive channels.
__global__ void reduce_channel_last_kernel(const void* a, const void* b, DType dt, ChannelView v,
                                           Reduce mode, const float* mean, double* partial) {
  __shared__ double sum1[kTileRows][kTile + 1];
  __shared__ double sum2[kTileRows][kTile + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const std::int64_t split = blockIdx.y, splits = gridDim.y;
  const std::int64_t chunk = (v.outer + splits - 1) / splits;
  const std::int64_t r0 = split * chunk, r1 = min(v.outer, r0 + chunk);
  double s1 = 0.0, s2 = 0.0;
  if (c < v.channels) {
    const float mu = mean != nullptr ? mean[c] : 0.0f;
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows)
      accumulate_term(mode, a, b, dt, r * v.channels + c, mu, s1, s2);
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

void launch_reduce(const void* a, const void* b, DType dt, const ChannelView& v, Reduce mode,
                   const float* mean, void* scratch, const ReducePlan& p, cudaStream_t stream) {
  auto* partial = static_cast<double*>(scratch);
  if (p.channel_last) {
    const dim3 grid(static_cast<unsigned>((v.channels + kTile - 1) / kTile),
                    static_cast<unsigned>(p.splits));
    reduce_channel_last_kernel<<<grid, dim3(kTile, kTileRows), 0, stream>>>(a, b, dt, v, mode, mean,
                                                                            partial);
    CNNERGY_CUDA_LAUNCH_CHECK("reduce_channel_last");
  } else {
    const dim3 grid(static_cast<unsigned>(v.channels), static_cast<unsigned>(p.splits));
    reduce_channel_inner_kernel<<<grid, kBlock, 0, stream>>>(a, b, dt, v, mode, mean, partial);
    CNNERGY_CUDA_LAUNCH_CHECK("reduce_channel_inner");
  }
}

__device__ __forceinline__ void channel_totals(const double* partial, std::int64_t splits,
                                               std::int64_t channels, std::int64_t c, double& s1,
                                               double& s2) {
  s1 = 0.0;
  s2 = 0.0;
  for (std::int64_t s = 0; s < splits; ++s) {
    s1 += partial[(s * channels + c) * 2];
    s2 += partial[(s * channels + c) * 2 + 1];
  }
}

__global__ void bias_grad_finish_kernel(const double* partial, std::int64_t splits,
                                        std::int64_t channels, void* db, DType db_dtype) {
  CNNERGY_GRID_STRIDE(c, channels) {
    double s1, s2;
    channel_totals(partial, splits, channels, c, s1, s2);
    store(db, db_dtype, c, static_cast<float>(s1));
  }
}

// Batch statistics -> saved mean / inverse std, running estimates (unbiased variance), and the
// per-channel scale/shift that the apply kernel uses (coef[c], coef[C + c]).
__global__ void bn_stats_finish_kernel(const double* partial, std::int64_t splits,
                                       std::int64_t channels, std::int64_t m, const float* gamma,
                                       const float* beta, float* running_mean, float* running_var,
                                       float* saved_mean, float* saved_inv_std, BatchNormParams p,
                                       float* coef) {
  CNNERGY_GRID_STRIDE(c, channels) {
    double s1, s2;
    channel_totals(partial, splits, channels, c, s1, s2);
    const double count = static_cast<double>(m);
    const double mean = s1 / count;
    const double var = fmax(s2 / count - mean * mean, 0.0);
    const double inv_std = 1.0 / sqrt(var + p.eps);
    saved_mean[c] = static_cast<float>(mean);
    saved_inv_std[c] = static_cast<float>(inv_std);
    const double unbiased = m > 1 ? var * count / (count - 1.0) : var;
    running_mean[c] = static_cast<float>((1.0 - p.momentum) * running_mean[c] + p.momentum * mean);
    running_var[c] =
        static_cast<float>((1.0 - p.momentum) * running_var[c] + p.momentum * unbiased);
    const double scale = gamma[c] * inv_std;
    coef[c] = static_cast<float>(scale);
    coef[channels + c] = static_cast<float>(beta[c] - mean * scale);
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

__global__ void bn_apply_kernel(const void* x, void* y, DType dt, ChannelView v, const float* coef,
                                std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t c = channel_of(v, j);
    store(y, dt, j, load(x, dt, j) * coef[c] + coef[v.channels + c]);
  }
}

// With S1 = sum dy, S2 = sum dy (x - mean): dbeta = S1, dgamma = S2 * inv_std and
// dx = gamma inv_std / M (M dy - dbeta - xhat dgamma) = a dy - b - (x - mean) e.
__global__ void bn_backward_finish_kernel(const double* partial, std::int64_t splits,
                                          std::int64_t channels, std::int64_t m, const float* gamma,
                                          const float* saved_inv_std, float* dgamma, float* dbeta,
                                          float* coef) {
  CNNERGY_GRID_STRIDE(c, channels) {
    double s1, s2;
    channel_totals(partial, splits, channels, c, s1, s2);
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

__global__ void bn_backward_apply_kernel(const void* x, const void* dy, void* dx, DType dt,
                                         ChannelView v, const float* coef, const float* mean,
                                         bool accumulate, std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t c = channel_of(v, j);
    float g = coef[c] * load(dy, dt, j) - coef[v.channels + c] -
              (load(x, dt, j) - mean[c]) * coef[2 * v.channels + c];
    if (accumulate) g += load(dx, dt, j);
    store(dx, dt, j, g);
  }
}

// ---- pooling -----------------------------------------------------------------------------------
struct Window {
  std::int64_t h0, h1, w0, w1;
  float divisor;
};

__device__ __forceinline__ Window pool_window(const Dims& d, const PoolParams& p, std::int64_t oh,
                                              std::int64_t ow) {
  const std::int64_t hs = oh * p.stride_h - p.pad_h, ws = ow * p.stride_w - p.pad_w;
  const std::int64_t he_pad = min(hs + p.kernel_h, d.h + p.pad_h);
  const std::int64_t we_pad = min(ws + p.kernel_w, d.w + p.pad_w);
  Window win{max(hs, std::int64_t{0}), min(he_pad, d.h), max(ws, std::int64_t{0}), min(we_pad, d.w),
             1.0f};
  const std::int64_t count =
      p.mode == 1 ? (he_pad - hs) * (we_pad - ws) : (win.h1 - win.h0) * (win.w1 - win.w0);
  win.divisor = static_cast<float>(count);
  return win;
}

// First maximum in scan order; a NaN wins (it propagates), as in the CPU reference. -1 if empty.
__device__ __forceinline__ void window_argmax(const void* x, DType dt, const Dims& d,
                                              std::int64_t n, std::int64_t c, const Window& win,
                                              std::int64_t& best_h, std::int64_t& best_w,
                                              float& best) {
  best_h = -1;
  best_w = -1;
  best = -INFINITY;
  for (std::int64_t h = win.h0; h < win.h1; ++h)
    for (std::int64_t w = win.w0; w < win.w1; ++w) {
      const float v = load(x, dt, offset_of(d, n, c, h, w));
      if (best_h < 0 || v > best || (isnan(v) && !isnan(best))) {
        best = v;
        best_h = h;
        best_w = w;
      }
    }
}

__global__ void pool_forward_kernel(const void* x, Dims xd, void* y, DType dt, PoolParams p,
                                    std::int64_t count) {
  Dims yd = xd;
  yd.h = p.out_h;
  yd.w = p.out_w;
  CNNERGY_GRID_STRIDE(j, count) {
    const Coord k = coord_of(yd, j);
    const Window win = pool_window(xd, p, k.h, k.w);
    float out = 0.0f;
    if (p.mode == 0) {
      std::int64_t bh, bw;
      window_argmax(x, dt, xd, k.n, k.c, win, bh, bw, out);
      if (bh < 0) out = 0.0f;
    } else {
      float sum = 0.0f;
      for (std::int64_t h = win.h0; h < win.h1; ++h)
        for (std::int64_t w = win.w0; w < win.w1; ++w)
          sum += load(x, dt, offset_of(xd, k.n, k.c, h, w));
      out = sum / win.divisor;
    }
    store(y, dt, j, out);
  }
}

// Gather form (one thread per input element, looping over the windows that hold it): deterministic,
// no atomics on fp16/bf16.
__global__ void pool_backward_kernel(const void* x, const void* dy, void* dx, Dims xd, DType dt,
                                     PoolParams p, bool accumulate, std::int64_t count) {
  Dims yd = xd;
  yd.h = p.out_h;
  yd.w = p.out_w;
  CNNERGY_GRID_STRIDE(j, count) {
    const Coord k = coord_of(xd, j);
    // windows with oh*stride - pad <= h < oh*stride - pad + kernel
    const std::int64_t nh = k.h + p.pad_h - p.kernel_h + 1, nw = k.w + p.pad_w - p.kernel_w + 1;
    const std::int64_t oh0 = nh <= 0 ? 0 : (nh + p.stride_h - 1) / p.stride_h;
    const std::int64_t ow0 = nw <= 0 ? 0 : (nw + p.stride_w - 1) / p.stride_w;
    const std::int64_t oh1 = min(p.out_h - 1, (k.h + p.pad_h) / p.stride_h);
    const std::int64_t ow1 = min(p.out_w - 1, (k.w + p.pad_w) / p.stride_w);
    float g = 0.0f;
    for (std::int64_t oh = oh0; oh <= oh1; ++oh)
      for (std::int64_t ow = ow0; ow <= ow1; ++ow) {
        const Window win = pool_window(xd, p, oh, ow);
        const float d = load(dy, dt, offset_of(yd, k.n, k.c, oh, ow));
        if (p.mode == 0) {
          std::int64_t bh, bw;
          float best;
          window_argmax(x, dt, xd, k.n, k.c, win, bh, bw, best);
          if (bh == k.h && bw == k.w) g += d;
        } else {
          g += d / win.divisor;
        }
      }
    if (accumulate) g += load(dx, dt, j);
    store(dx, dt, j, g);
  }
}

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

unsigned grid_for_channels(std::int64_t channels) { return grid_for(channels); }

}  // namespace

std::size_t channel_reduce_scratch_bytes(const ChannelView& view) {
  const ReducePlan p = plan_for(view);
  return partial_bytes(view, p) + static_cast<std::size_t>(4 * view.channels) * sizeof(float);
}

void bias_grad(const void* dy, DType dtype, const ChannelView& view, void* db, DType db_dtype,
               void* scratch, cudaStream_t stream) {
  const ReducePlan p = plan_for(view);
  launch_reduce(dy, nullptr, dtype, view, Reduce::kSum, nullptr, scratch, p, stream);
  bias_grad_finish_kernel<<<grid_for_channels(view.channels), kBlock, 0, stream>>>(
      static_cast<const double*>(scratch), p.splits, view.channels, db, db_dtype);
  CNNERGY_CUDA_LAUNCH_CHECK("bias_grad_finish");
}

void batch_norm_forward_training(const void* x, void* y, DType dtype, const ChannelView& view,
                                 const float* gamma, const float* beta, float* running_mean,
                                 float* running_var, float* saved_mean, float* saved_inv_std,
                                 const BatchNormParams& params, void* scratch,
                                 cudaStream_t stream) {
  const ReducePlan p = plan_for(view);
  float* coef = coefficients(scratch, view, p);
  launch_reduce(x, nullptr, dtype, view, Reduce::kSumSquares, nullptr, scratch, p, stream);
  bn_stats_finish_kernel<<<grid_for_channels(view.channels), kBlock, 0, stream>>>(
      static_cast<const double*>(scratch), p.splits, view.channels, view.per_channel(), gamma, beta,
      running_mean, running_var, saved_mean, saved_inv_std, params, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_stats_finish");
  const std::int64_t count = view.outer * view.channels * view.inner;
  bn_apply_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, y, dtype, view, coef, count);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_apply");
}

void batch_norm_forward_inference(const void* x, void* y, DType dtype, const ChannelView& view,
                                  const float* gamma, const float* beta, const float* running_mean,
                                  const float* running_var, const BatchNormParams& params,
                                  void* scratch, cudaStream_t stream) {
  const ReducePlan p = plan_for(view);
  float* coef = coefficients(scratch, view, p);
  bn_inference_coef_kernel<<<grid_for_channels(view.channels), kBlock, 0, stream>>>(
      view.channels, gamma, beta, running_mean, running_var, params.eps, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_inference_coef");
  const std::int64_t count = view.outer * view.channels * view.inner;
  bn_apply_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, y, dtype, view, coef, count);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_apply");
}

void batch_norm_backward(const void* x, const void* dy, void* dx, DType dtype,
                         const ChannelView& view, const float* gamma, const float* saved_mean,
                         const float* saved_inv_std, float* dgamma, float* dbeta, bool accumulate,
                         void* scratch, cudaStream_t stream) {
  const ReducePlan p = plan_for(view);
  float* coef = coefficients(scratch, view, p);
  launch_reduce(dy, x, dtype, view, Reduce::kBatchNormBackward, saved_mean, scratch, p, stream);
  bn_backward_finish_kernel<<<grid_for_channels(view.channels), kBlock, 0, stream>>>(
      static_cast<const double*>(scratch), p.splits, view.channels, view.per_channel(), gamma,
      saved_inv_std, dgamma, dbeta, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_backward_finish");
  const std::int64_t count = view.outer * view.channels * view.inner;
  bn_backward_apply_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, dy, dx, dtype, view, coef,
                                                                   saved_mean, accumulate, count);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_backward_apply");
}

void pool_forward(const void* x, const Dims& x_dims, void* y, DType dtype, const PoolParams& p,
                  cudaStream_t stream) {
  const std::int64_t count = x_dims.n * x_dims.c * p.out_h * p.out_w;
  if (count == 0) return;
  pool_forward_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, x_dims, y, dtype, p, count);
  CNNERGY_CUDA_LAUNCH_CHECK("pool_forward");
}

void pool_backward(const void* x, const void* dy, void* dx, const Dims& x_dims, DType dtype,
                   const PoolParams& p, bool accumulate, cudaStream_t stream) {
  const std::int64_t count = x_dims.numel();
  if (count == 0) return;
  pool_backward_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, dy, dx, x_dims, dtype, p,
                                                               accumulate, count);
  CNNERGY_CUDA_LAUNCH_CHECK("pool_backward");
}

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
