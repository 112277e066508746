// The CUDA backend's per-channel reductions (bias gradient, batch-norm statistics) and batch norm.
// Channel-last tensors (NHWC, 2-D) whose channel count fills 16-byte packs take the fast path: a
// block owns up to 32 channel packs x a slice of rows, reads coalesced packs, accumulates in fp32
// registers and writes one partial per (slice, channel), with one full wave of blocks (as many as
// the kernel's occupancy lets every SM hold); a finishing kernel adds the partials in fp64, 32
// lanes per channel and a fixed-order tree (deterministic). Statistics are sums about a per-channel shift (the channel's
// first value), which keeps E[x^2] - E[x]^2 free of cancellation when |mean| >> std. The
// normalisation and dx passes are tiled the same way, so each thread keeps its channels'
// coefficients in registers; the dx pass runs one wave of blocks that stride over the rows, so the
// coefficients are loaded once per block, not once per few rows. Everything else (NCHW, odd channel counts) takes the generic path:
// runtime-dispatched loads and fp64 sums.
// A fused ReLU (BatchNormParams::relu) clamps the stored output at 0; its backward zeroes dy where
// that output was not positive, recomputing it from x with the very coefficients forward used
// (kept per layer, 2 floats a channel), so the recomputation is exact and no activation more is
// kept or read than without the ReLU.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

namespace {

// ---- plans --------------------------------------------------------------------------------------
enum class Reduce : int { kSum, kSumSquares, kBatchNormBackward };

constexpr int kTile = 32;     // channels per block in the generic channel-last kernel
constexpr int kTileRows = 8;  // rows per pass in the generic channel-last kernel
constexpr std::int64_t kMaxSplits = 256;
constexpr int kRowUnroll = 4;  // rows in flight per thread in the fast kernels
constexpr int kMaxBlocksPerSm = 2048 / kBlock;  // the most any kernel here can have resident

struct ReducePlan {  // generic path
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

// Fast path: blocks of bx channel packs x by rows (bx * by = kBlock), `groups` blocks across the
// channels and `splits` across the rows.
struct TilePlan {
  bool usable = false;
  unsigned bx = 1, by = kBlock, groups = 1, splits = 1;
};

TilePlan tile_plan(const ChannelView& v, DType dtype) {
  TilePlan p;
  if (dtype == DType::kI32) return p;
  const auto k = static_cast<std::int64_t>(16 / dtype_size_bytes(dtype));
  if (v.inner != 1 || v.channels % k != 0 || v.outer < 1) return p;
  const std::int64_t packs = v.channels / k;
  p.bx = pow2_floor(std::min<std::int64_t>(packs, 32));
  p.by = kBlock / p.bx;
  const std::int64_t groups = (packs + p.bx - 1) / p.bx;
  if (groups > 0x7fffffff) return p;
  p.groups = static_cast<unsigned>(groups);
  // At most enough row slices to fill every SM with resident blocks (launch_tile_reduce takes one
  // full wave of the kernel's actual occupancy), each thread summing at least kRowUnroll rows.
  const std::int64_t want =
      (static_cast<std::int64_t>(sm_count()) * kMaxBlocksPerSm + groups - 1) / groups;
  const std::int64_t most = std::max<std::int64_t>(1, v.outer / (p.by * kRowUnroll));
  p.splits =
      static_cast<unsigned>(std::clamp<std::int64_t>(want, 1, std::min<std::int64_t>(most, 65535)));
  p.usable = true;
  return p;
}

// Blocks of `kernel` (kBlock threads) that one SM holds at once: its registers and shared memory
// decide. Asked once per kernel (the callers keep it in a static).
template <class Kernel>
int resident_blocks(Kernel kernel) {
  int resident = 0;
  CNNERGY_CUDA_CALL(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kBlock, 0));
  return std::max(resident, 1);
}

// Row slices (grid.y) for one full wave of a kernel with `resident` blocks per SM, spread over the
// plan's channel groups; at least 1, at most `most`.
unsigned wave_slices(int resident, const TilePlan& p, std::int64_t most) {
  const std::int64_t blocks = static_cast<std::int64_t>(sm_count()) * resident;
  return static_cast<unsigned>(std::clamp<std::int64_t>((blocks + p.groups - 1) / p.groups, 1,
                                                        std::max<std::int64_t>(most, 1)));
}

// Scratch, generic: [splits * C * 2 doubles of partials][4 * C floats of coefficients].
// Scratch, fast: [splits * 2 * C floats of partials][C floats of shifts][4 * C floats of
// coefficients].
std::size_t generic_partial_bytes(const ChannelView& v, const ReducePlan& p) {
  return static_cast<std::size_t>(p.splits * v.channels * 2) * sizeof(double);
}
std::size_t fast_partial_bytes(const ChannelView& v, const TilePlan& p) {
  return static_cast<std::size_t>(p.splits) * static_cast<std::size_t>(2 * v.channels) *
         sizeof(float);
}

// The per-split partial sums, as either path wrote them. shift (fast path, statistics only) is
// what the sums are centred on; null means 0.
struct Partials {
  const double* generic = nullptr;  // [(split * C + c) * 2 + j]
  const float* fast = nullptr;      // [(split * 2 + j) * C + c]
  const float* shift = nullptr;
  std::int64_t splits = 1, channels = 1;
};

// Forward's per-channel affine map y = x * scale + shift, from the statistics as saved (fp32).
struct Affine {
  float scale = 1.0f, shift = 0.0f;
};
__device__ __forceinline__ Affine forward_affine(const float* gamma, const float* beta,
                                                 const float* mean, const float* inv_std,
                                                 std::int64_t c) {
  const double s = static_cast<double>(gamma[c]) * inv_std[c];
  return {static_cast<float>(s), static_cast<float>(beta[c] - static_cast<double>(mean[c]) * s)};
}

// Where a fused ReLU's backward finds forward's coefficients: scale[C] then shift[C] (null: no ReLU).
struct ReluMask {
  const float* coef = nullptr;
  std::int64_t channels = 0;
  __device__ Affine at(std::int64_t c) const { return {coef[c], coef[channels + c]}; }
};

__device__ __forceinline__ float clamp_relu(float v) { return v > 0.0f ? v : 0.0f; }  // NaN -> 0

// Whether forward's output (x * scale + shift, rounded to the element type) was positive.
template <typename T>
__device__ __forceinline__ bool relu_passes(float x, const Affine& f) {
  return to_float(from_float<T>(fmaf(x, f.scale, f.shift))) > 0.0f;
}
__device__ __forceinline__ bool relu_passes(DType dt, float x, const Affine& f) {
  const float v = fmaf(x, f.scale, f.shift);
  switch (dt) {
    case DType::kF16: return to_float(from_float<__half>(v)) > 0.0f;
    case DType::kBF16: return to_float(from_float<__nv_bfloat16>(v)) > 0.0f;
    default: return v > 0.0f;
  }
}

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
// kRelu, dy only where forward's output was positive.
template <typename T, int kMode, bool kRelu>
__global__ void __launch_bounds__(kBlock)
    tile_reduce_kernel(const T* a, const T* b, std::int64_t rows, std::int64_t channels,
                       const float* mean, ReluMask relu, float* partial, float* shift_out) {
  constexpr int K = kVec<T>;
  __shared__ float red[2][kBlock * K];
  const unsigned tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const std::int64_t c0 = (static_cast<std::int64_t>(blockIdx.x) * bx + tx) * K;
  const bool active = c0 < channels;
  const std::int64_t chunk = (rows + gridDim.y - 1) / gridDim.y;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * chunk;
  const std::int64_t r1 = min(rows, r0 + chunk);
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
    if constexpr (kMode == 2) {
#pragma unroll
      for (int k = 0; k < K; ++k) center[k] = mean[c0 + k];
      if constexpr (kRelu)
#pragma unroll
        for (int k = 0; k < K; ++k) f[k] = relu.at(c0 + k);
    }
    for (std::int64_t r = r0 + ty; r < r1; r += kRowUnroll * by) {
      Pack<T, K> va[kRowUnroll], vb[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const std::int64_t row = r + u * by;
        if (row < r1) {
          va[u] = load_pack<T, K>(a + row * channels + c0);
          if constexpr (kMode == 2) vb[u] = load_pack<T, K>(b + row * channels + c0);
        }
      }
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        if (r + u * by >= r1) continue;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const float v = to_float(va[u].v[k]);
          if constexpr (kMode == 0) s1[k] += v;
          if constexpr (kMode == 1) {
            const float d = v - center[k];
            s1[k] += d;
            s2[k] = fmaf(d, d, s2[k]);
          }
          if constexpr (kMode == 2) {
            const float xv = to_float(vb[u].v[k]);
            float g = v;
            if constexpr (kRelu) g = relu_passes<T>(xv, f[kRelu ? k : 0]) ? v : 0.0f;
            s1[k] += g;
            s2[k] = fmaf(g, xv - center[k], s2[k]);
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
                            cudaStream_t stream, const ReluMask& relu = {}) {
  auto* partial = static_cast<float*>(scratch);
  float* shift = reinterpret_cast<float*>(static_cast<char*>(scratch) + fast_partial_bytes(v, p));
  unsigned splits = 1;
  dispatch_float(dt, "channel reduction", [&](auto tag) {
    using T = typename decltype(tag)::type;
    static const int resident = resident_blocks(tile_reduce_kernel<T, kMode, kRelu>);
    splits = wave_slices(resident, p, p.splits);  // one full wave: no half-empty second one
    tile_reduce_kernel<T, kMode, kRelu><<<dim3(p.groups, splits), dim3(p.bx, p.by), 0, stream>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), v.outer, v.channels, mean, relu,
        partial, shift);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("tile_reduce");
  Partials out;
  out.fast = partial;
  out.shift = kMode == 1 ? shift : nullptr;
  out.splits = splits;
  out.channels = v.channels;
  return out;
}

// ---- finishing kernels (one thread per channel) -------------------------------------------------
__device__ __forceinline__ std::int64_t finish_channel() {
  return static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
}

__global__ void bias_grad_finish_kernel(Partials p, void* db, DType db_dtype) {
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

// ---- normalisation and dx -----------------------------------------------------------------------
// Generic: any view, runtime-dispatched element access.
__global__ void bn_apply_kernel(const void* x, void* y, DType dt, ChannelView v, const float* coef,
                                bool relu, std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t c = channel_of(v, j);
    const float out = fmaf(load(x, dt, j), coef[c], coef[v.channels + c]);
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
template <typename T, bool kRelu>
__global__ void __launch_bounds__(kBlock)
    tile_apply_kernel(const T* x, T* y, std::int64_t rows, std::int64_t channels,
                      const float* coef) {
  constexpr int K = kVec<T>;
  const std::int64_t c0 = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * K;
  if (c0 >= channels) return;
  float scale[K], shift[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    scale[k] = coef[c0 + k];
    shift[k] = coef[channels + c0 + k];
  }
  const std::int64_t by = blockDim.y;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kRowUnroll * by + threadIdx.y;
       r < rows; r += static_cast<std::int64_t>(gridDim.y) * kRowUnroll * by) {
    Pack<T, K> v[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (r + u * by < rows) v[u] = load_pack<T, K>(x + (r + u * by) * channels + c0);
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (r + u * by >= rows) continue;
      Pack<T, K> out;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float o = fmaf(to_float(v[u].v[k]), scale[k], shift[k]);
        out.v[k] = from_float<T>(kRelu ? clamp_relu(o) : o);
      }
      store_pack<T, K>(y + (r + u * by) * channels + c0, out);
    }
  }
}

// Rows in flight per thread in tile_backward_apply_kernel; two resident blocks per SM keep
// 2 x kBlock x kBackwardRows x 2 packs of loads in flight (the coefficients stay in registers).
// bf16's mask recomputation needs more registers: fewer rows there, so that nothing spills.
template <typename T, bool kRelu>
constexpr int kBackwardRows = std::is_same_v<T, __nv_bfloat16> ? (kRelu ? 2 : 3) : 4;
template <typename T, bool kRelu>
__global__ void __launch_bounds__(kBlock, 2)
    tile_backward_apply_kernel(const T* x, const T* dy, T* dx, std::int64_t rows,
                               std::int64_t channels, const float* coef, const float* mean,
                               ReluMask relu, bool accumulate) {
  constexpr int K = kVec<T>;
  const std::int64_t c0 = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * K;
  if (c0 >= channels) return;
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
  constexpr int kU = kBackwardRows<T, kRelu>;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kU * by + threadIdx.y; r < rows;
       r += static_cast<std::int64_t>(gridDim.y) * kU * by) {
    Pack<T, K> vx[kU], vdy[kU], vdx[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const std::int64_t row = r + u * by;
      if (row >= rows) continue;
      vx[u] = load_pack<T, K>(x + row * channels + c0);
      vdy[u] = load_pack<T, K>(dy + row * channels + c0);
      if (accumulate) vdx[u] = load_pack<T, K>(dx + row * channels + c0);
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
        if (accumulate) g += to_float(vdx[u].v[k]);
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

// Finishing kernels: a block per 32 channels (channel_totals).
unsigned finish_grid(std::int64_t channels) { return static_cast<unsigned>((channels + 31) / 32); }
const dim3 kFinishBlock(32, kFinishLanes);

float* coefficients(void* scratch, const ChannelView& v, DType dtype) {
  const TilePlan t = tile_plan(v, dtype);
  const std::size_t generic = generic_partial_bytes(v, plan_for(v));
  const std::size_t fast =
      t.usable ? fast_partial_bytes(v, t) + static_cast<std::size_t>(v.channels) * sizeof(float)
               : 0;
  return reinterpret_cast<float*>(static_cast<char*>(scratch) + std::max(generic, fast));
}

// y = x * scale + shift per channel (coef: scale[C], shift[C]), clamped at 0 with relu.
void launch_apply(const void* x, void* y, DType dtype, const ChannelView& view, const TilePlan& t,
                  bool fast, const float* coef, bool relu, cudaStream_t stream) {
  if (fast) {
    dispatch_float(dtype, "batch_norm apply", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const dim3 grid = apply_grid(t, view.outer, kRowUnroll * t.by), block(t.bx, t.by);
      if (relu)
        tile_apply_kernel<T, true><<<grid, block, 0, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(y), view.outer, view.channels, coef);
      else
        tile_apply_kernel<T, false><<<grid, block, 0, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(y), view.outer, view.channels, coef);
    });
  } else {
    const std::int64_t count = view.outer * view.channels * view.inner;
    bn_apply_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, y, dtype, view, coef, relu, count);
  }
  CNNERGY_CUDA_LAUNCH_CHECK("bn_apply");
}

}  // namespace

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
  const Partials p =
      t.usable && aligned_for(16, dy)
          ? launch_tile_reduce<0>(dy, nullptr, dtype, view, t, nullptr, scratch, stream)
          : launch_generic_reduce(dy, nullptr, dtype, view, Reduce::kSum, nullptr, scratch, stream);
  bias_grad_finish_kernel<<<finish_grid(view.channels), kFinishBlock, 0, stream>>>(p, db, db_dtype);
  CNNERGY_CUDA_LAUNCH_CHECK("bias_grad_finish");
}

void batch_norm_forward_training(const void* x, void* y, DType dtype, const ChannelView& view,
                                 const float* gamma, const float* beta, float* running_mean,
                                 float* running_var, float* saved_mean, float* saved_inv_std,
                                 const BatchNormParams& params, void* scratch,
                                 cudaStream_t stream, float* saved_coef) {
  const TilePlan t = tile_plan(view, dtype);
  const bool fast = t.usable && aligned_for(16, x, y);
  float* coef = saved_coef != nullptr ? saved_coef : coefficients(scratch, view, dtype);
  const Partials p =
      fast ? launch_tile_reduce<1>(x, nullptr, dtype, view, t, nullptr, scratch, stream)
           : launch_generic_reduce(x, nullptr, dtype, view, Reduce::kSumSquares, nullptr, scratch,
                                   stream);
  bn_stats_finish_kernel<<<finish_grid(view.channels), kFinishBlock, 0, stream>>>(
      p, view.per_channel(), gamma, beta, running_mean, running_var, saved_mean, saved_inv_std,
      params, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_stats_finish");
  launch_apply(x, y, dtype, view, t, fast, coef, params.relu, stream);
}

void batch_norm_forward_inference(const void* x, void* y, DType dtype, const ChannelView& view,
                                  const float* gamma, const float* beta, const float* running_mean,
                                  const float* running_var, const BatchNormParams& params,
                                  void* scratch, cudaStream_t stream) {
  const TilePlan t = tile_plan(view, dtype);
  float* coef = coefficients(scratch, view, dtype);
  bn_inference_coef_kernel<<<grid_for(view.channels), kBlock, 0, stream>>>(
      view.channels, gamma, beta, running_mean, running_var, params.eps, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_inference_coef");
  launch_apply(x, y, dtype, view, t, t.usable && aligned_for(16, x, y), coef, params.relu, stream);
}

void batch_norm_backward(const void* x, const void* dy, void* dx, DType dtype,
                         const ChannelView& view, const float* gamma, const float* saved_mean,
                         const float* saved_inv_std, float* dgamma, float* dbeta,
                         const float* relu_coef, bool accumulate, void* scratch,
                         cudaStream_t stream) {
  const TilePlan t = tile_plan(view, dtype);
  const bool fast = t.usable && aligned_for(16, x, dy, dx);
  float* coef = coefficients(scratch, view, dtype);
  const bool relu = relu_coef != nullptr;
  ReluMask mask;
  if (relu) mask = ReluMask{relu_coef, view.channels};
  const Partials p =
      !fast  ? launch_generic_reduce(dy, x, dtype, view, Reduce::kBatchNormBackward, saved_mean,
                                     scratch, stream, mask)
      : relu ? launch_tile_reduce<2, true>(dy, x, dtype, view, t, saved_mean, scratch, stream, mask)
             : launch_tile_reduce<2, false>(dy, x, dtype, view, t, saved_mean, scratch, stream);
  bn_backward_finish_kernel<<<finish_grid(view.channels), kFinishBlock, 0, stream>>>(
      p, view.per_channel(), gamma, saved_inv_std, dgamma, dbeta, coef);
  CNNERGY_CUDA_LAUNCH_CHECK("bn_backward_finish");
  const std::int64_t count = view.outer * view.channels * view.inner;
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
      if (relu) {
        static const int resident = resident_blocks(tile_backward_apply_kernel<T, true>);
        tile_backward_apply_kernel<T, true><<<dim3(t.groups, wave_slices(resident, t, row_blocks(kBackwardRows<T, true>))), block, 0, stream>>>(
            xt, dyt, dxt, view.outer, view.channels, coef, saved_mean, mask, accumulate);
      } else {
        static const int resident = resident_blocks(tile_backward_apply_kernel<T, false>);
        tile_backward_apply_kernel<T, false><<<dim3(t.groups, wave_slices(resident, t, row_blocks(kBackwardRows<T, false>))), block, 0, stream>>>(
            xt, dyt, dxt, view.outer, view.channels, coef, saved_mean, mask, accumulate);
      }
    });
  } else {
    bn_backward_apply_kernel<<<grid_for(count), kBlock, 0, stream>>>(
        x, dy, dx, dtype, view, coef, saved_mean, mask, accumulate, count);
  }
  CNNERGY_CUDA_LAUNCH_CHECK("bn_backward_apply");
}

}  // namespace cnnergy::cuda::kernels
