// Device-side helpers shared by the backend's .cu files: dtype-dispatched loads and stores (fp32 in
// registers whatever the storage type), layout-aware indexing, grid sizing and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/kernels.hpp"
#include "core/dtype.hpp"

namespace cnnergy::cuda::kernels {

constexpr int kBlock = 256;

// Grid for a grid-stride loop over `count` elements: enough blocks to fill any current GPU, no
// more.
inline unsigned grid_for(std::int64_t count) {
  const std::int64_t blocks = (count + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 65536));
}

#define CNNERGY_GRID_STRIDE(i, count)                                                     \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
       i < (count); i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ float load(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kI32:
      return static_cast<float>(static_cast<const std::int32_t*>(p)[i]);
    case DType::kF32:
      break;
  }
  return static_cast<const float*>(p)[i];
}

// Round-to-nearest-even, as the host conversions in core/dtype.cpp.
__device__ __forceinline__ void store(void* p, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      return;
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      return;
    case DType::kI32:
      static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
      return;
    case DType::kF32:
      break;
  }
  static_cast<float*>(p)[i] = v;
}

// Memory offset of logical (n, c, h, w).
__device__ __forceinline__ std::int64_t offset_of(const Dims& d, std::int64_t n, std::int64_t c,
                                                  std::int64_t h, std::int64_t w) {
  return d.nhwc ? ((n * d.h + h) * d.w + w) * d.c + c : ((n * d.c + c) * d.h + h) * d.w + w;
}

struct Coord {
  std::int64_t n, c, h, w;
};
// Logical coordinates of memory offset j.
__device__ __forceinline__ Coord coord_of(const Dims& d, std::int64_t j) {
  Coord k{};
  if (d.nhwc) {
    k.c = j % d.c;
    j /= d.c;
    k.w = j % d.w;
    j /= d.w;
    k.h = j % d.h;
    k.n = j / d.h;
  } else {
    k.w = j % d.w;
    j /= d.w;
    k.h = j % d.h;
    j /= d.h;
    k.c = j % d.c;
    k.n = j / d.c;
  }
  return k;
}

__device__ __forceinline__ std::int64_t channel_of(const ChannelView& v, std::int64_t j) {
  return (j / v.inner) % v.channels;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T partial[32];
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // the shared array may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  v = lane < warps ? partial[lane] : T(0);
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ inline float block_max(float v) {
  __shared__ float partial[32];
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  v = lane < warps ? partial[lane] : -INFINITY;
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

}  // namespace cnnergy::cuda::kernels
