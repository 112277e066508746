// Shared by the two halves of the CUDA batch norm (batch_norm_stats.cu: per-channel reductions and
// the kernels that finish them; batch_norm.cu: normalisation, dx and the entry points): the launch
// plans, the scratch layout, the partial-sum record and the ReLU helpers, plus the host launchers
// the statistics half gives the apply half.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels::bn {

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

inline ReducePlan plan_for(const ChannelView& v) {
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

inline TilePlan tile_plan(const ChannelView& v, DType dtype) {
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

// NCHW path (batch_norm_planes.cu): the tensor under 2^31 elements, a channel in N planes of inner
// = H*W values; packs of 16 bytes where inner divides into them and every operand given (a, b, c, d;
// nullptr counts as aligned) is 16-byte aligned (`vector`), one element at a time otherwise.
// splits: as many slices per channel as the generic reduction's, so the generic scratch layout holds
// the partials.
struct PlanePlan {
  bool usable = false, vector = false;
  std::int64_t splits = 1;
};
PlanePlan plane_plan(const ChannelView& v, DType dtype, const void* a, const void* b = nullptr,
                     const void* c = nullptr, const void* d = nullptr);

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
inline unsigned wave_slices(int resident, const TilePlan& p, std::int64_t most) {
  const std::int64_t blocks = static_cast<std::int64_t>(sm_count()) * resident;
  return static_cast<unsigned>(std::clamp<std::int64_t>((blocks + p.groups - 1) / p.groups, 1,
                                                        std::max<std::int64_t>(most, 1)));
}

// Scratch, generic: [splits * C * 2 doubles of partials][4 * C floats of coefficients].
// Scratch, fast: [splits * 2 * C floats of partials][C floats of shifts][4 * C floats of
// coefficients].
inline std::size_t generic_partial_bytes(const ChannelView& v, const ReducePlan& p) {
  return static_cast<std::size_t>(p.splits * v.channels * 2) * sizeof(double);
}
inline std::size_t fast_partial_bytes(const ChannelView& v, const TilePlan& p) {
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

// What relu_backward writes for a pack: dy where the ReLU's output y is positive, +0 elsewhere.
template <typename T, int K>
__device__ __forceinline__ Pack<T, K> relu_masked(const Pack<T, K>& dy, const Pack<T, K>& y) {
  Pack<T, K> out;
#pragma unroll
  for (int k = 0; k < K; ++k) out.v[k] = to_float(y.v[k]) > 0.0f ? dy.v[k] : from_float<T>(0.0f);
  return out;
}

// A fused residual add's ReLU output mask (BatchNormParams::relu_mask): one byte per row and 16-byte
// pack of channels (8 elements in fp16 / bf16, 4 in fp32), bit k set where the pack's element k was
// stored positive: what relu_masked reads from y, at 1/16 of y's bytes.
template <typename T, int K>
__device__ __forceinline__ std::uint8_t positive_bits(const Pack<T, K>& y) {
  static_assert(K <= 8, "a pack's bits fill one byte");
  unsigned bits = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) bits |= (to_float(y.v[k]) > 0.0f ? 1u : 0u) << k;
  return static_cast<std::uint8_t>(bits);
}
// relu_masked with y's positive_bits: the same values bit for bit.
template <typename T, int K>
__device__ __forceinline__ Pack<T, K> bits_masked(const Pack<T, K>& dy, unsigned bits) {
  Pack<T, K> out;
#pragma unroll
  for (int k = 0; k < K; ++k) out.v[k] = (bits >> k) & 1u ? dy.v[k] : from_float<T>(0.0f);
  return out;
}

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

inline float* coefficients(void* scratch, const ChannelView& v, DType dtype) {
  const TilePlan t = tile_plan(v, dtype);
  const std::size_t generic = generic_partial_bytes(v, plan_for(v));
  const std::size_t fast =
      t.usable ? fast_partial_bytes(v, t) + static_cast<std::size_t>(v.channels) * sizeof(float)
               : 0;
  return reinterpret_cast<float*>(static_cast<char*>(scratch) + std::max(generic, fast));
}

// ---- the statistics half's launchers (batch_norm_stats.cu) ---------------------------------------
// Per-channel partial sums of `mode` over the view: the tiled kernel when `fast` (plan `t`, 16-byte
// aligned operands), the generic one otherwise. a = dy and b = x for kBatchNormBackward; `relu`
// masks dy where forward's output was not positive.
Partials reduce_channels(Reduce mode, bool fast, const void* a, const void* b, DType dt,
                         const ChannelView& v, const TilePlan& t, const float* mean, void* scratch,
                         cudaStream_t stream, const ReluMask& relu = {});
// kBatchNormBackward's sums on the tiled path (plan `t`, 16-byte aligned operands) with dy first
// masked where y (a fused residual add's ReLU output) is not positive; the masked dy is written back
// into dy: the add's ReLU backward in the same pass.
// With `bits` (forward's relu_mask of y; y may then be null) the mask comes from them, y unread.
Partials reduce_masked_by_output(void* dy, const void* x, const void* y, DType dt, const ChannelView& v,
                                 const TilePlan& t, const float* mean, void* scratch, cudaStream_t stream,
                                 const std::uint8_t* bits = nullptr);
// The NCHW path's reductions (a = dy, b = x for kBatchNormBackward), its normalisation (plus z,
// clamped at 0 with relu) and its dx pass, as the channel-last ones; plane_relu_mask_sum zeroes dy
// in place where the ReLU output y is not positive and sums what is left (a fused ReLU backward and
// the bias gradient of the convolution before it, in one pass).
Partials plane_reduce(Reduce mode, const void* a, const void* b, DType dt, const ChannelView& v,
                      const PlanePlan& p, const float* mean, void* scratch, cudaStream_t stream,
                      const ReluMask& relu = {});
Partials plane_relu_mask_sum(void* dy, const void* y, DType dt, const ChannelView& v, const PlanePlan& p,
                             void* scratch, cudaStream_t stream);
// reduce_masked_by_output on the NCHW path (plan p made with dy, x and y).
Partials plane_reduce_masked_by_output(void* dy, const void* x, const void* y, DType dt, const ChannelView& v,
                                       const PlanePlan& p, const float* mean, void* scratch, cudaStream_t stream);
void plane_apply(const void* x, const void* z, void* y, DType dt, const ChannelView& v, const PlanePlan& p,
                 const float* coef, bool relu, cudaStream_t stream);
void plane_backward_apply(const void* x, const void* dy, void* dx, DType dt, const ChannelView& v,
                          const PlanePlan& p, const float* coef, const float* mean, const ReluMask& relu,
                          bool accumulate, cudaStream_t stream);
// Batch statistics -> saved mean / inverse std, running estimates and forward's coefficients.
void finish_batch_stats(const Partials& p, std::int64_t m, const float* gamma, const float* beta,
                        float* running_mean, float* running_var, float* saved_mean,
                        float* saved_inv_std, const BatchNormParams& params, float* coef,
                        cudaStream_t stream);
// Inference: forward's coefficients from the running estimates.
void inference_coefficients(std::int64_t channels, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, double eps,
                            float* coef, cudaStream_t stream);
// Backward: dgamma, dbeta and dx's three coefficients per channel.
void finish_backward_stats(const Partials& p, std::int64_t m, const float* gamma,
                           const float* saved_inv_std, float* dgamma, float* dbeta, float* coef,
                           cudaStream_t stream);

}  // namespace cnnergy::cuda::kernels::bn
