// Device-side helpers shared by the backend's .cu files: typed 16-byte packs and conversions for
// the templated (bandwidth-bound) kernels, the host-side dtype dispatch and grid sizing for them,
// and the runtime-dispatched loads/stores, layout-aware indexing and block reductions that the
// rarely used generic kernels keep (one instantiation serves every dtype there).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/dtype.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda::kernels {

constexpr int kBlock = 256;

// Grid for a grid-stride loop over `count` elements: enough blocks to fill any current GPU, no
// more.
inline unsigned grid_for(std::int64_t count) {
  const std::int64_t blocks = (count + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 65536));
}

// ---- templated kernels: typed packs ------------------------------------------------------------
// A pack of K elements that moves as one access: 16 bytes (8 fp16/bf16 or 4 fp32) is the widest
// load a thread can issue, and what makes an element-wise kernel bandwidth-bound on Hopper. The
// alignment lets the compiler emit LDG.128/STG.128; callers check the pointers' alignment on the
// host (aligned_for) and fall back to K = 1 (the scalar tail) otherwise.
template <typename T, int K>
struct alignas(sizeof(T) * K) Pack {
  T v[K];
};

template <typename T>
inline constexpr int kVec = static_cast<int>(16 / sizeof(T));

template <typename T, int K>
__device__ __forceinline__ Pack<T, K> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, K>*>(p);
}
template <typename T, int K>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, K>& v) {
  *reinterpret_cast<Pack<T, K>*>(p) = v;
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Round-to-nearest-even, as the host conversions in core/dtype.cpp.
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// ---- host side of the templated kernels --------------------------------------------------------
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the storage type of a floating-point dtype: the dtype is resolved
// once per launch, not per element.
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kF32:
      f(TypeTag<float>{});
      return;
    case DType::kF16:
      f(TypeTag<__half>{});
      return;
    case DType::kBF16:
      f(TypeTag<__nv_bfloat16>{});
      return;
    case DType::kI32:
      break;
  }
  throw InvalidArgument(std::string(op) + ": needs fp32, fp16 or bf16 tensors, got " +
                        std::string(dtype_name(t)));
}

// True when every pointer (nullptr counts as aligned) is aligned to `bytes`.
inline bool aligned_for(std::size_t bytes, const void* a, const void* b = nullptr,
                        const void* c = nullptr, const void* d = nullptr) {
  for (const void* p : {a, b, c, d})
    if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0) return false;
  return true;
}

// Multiprocessors of the current device (capped grids fill every SM a few times over, no more).
inline int sm_count() {
  int device = 0, sms = 0;
  CNNERGY_CUDA_CALL(cudaGetDevice(&device));
  CNNERGY_CUDA_CALL(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(sms, 1);
}

// Programmatic dependent launch (compute capability 9.0+): a kernel that calls
// let_dependents_launch() lets the next kernel on its stream, when that one is launched with
// launch_dependent(), be launched before it ends (its blocks take what the SMs have free and start);
// the dependent calls wait_for_producer() before it reads anything the kernel before it wrote, and
// that waits for the whole grid before it to finish and its writes to be visible. A CUDA-graph
// capture keeps the pairing (a programmatic edge). Without the attribute (or before 9.0) both
// calls do nothing and the launch is a plain one.
__device__ __forceinline__ void wait_for_producer() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}
__device__ __forceinline__ void let_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}
inline bool dependent_launch_supported() {
  int device = 0, major = 0;
  CNNERGY_CUDA_CALL(cudaGetDevice(&device));
  CNNERGY_CUDA_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9;
}
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = dependent_launch_supported() ? 1 : 0;
  CNNERGY_CUDA_CALL(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// Blocks of kBlock threads for `items` work items (packs), at most `per_sm` resident blocks per SM.
inline unsigned blocks_for(std::int64_t items, int per_sm = 8) {
  const std::int64_t needed = (items + kBlock - 1) / kBlock;
  const std::int64_t cap = static_cast<std::int64_t>(sm_count()) * per_sm;
  return static_cast<unsigned>(std::clamp<std::int64_t>(needed, 1, cap));
}

// One thread per item (the grid-stride loops of these kernels then run once): no partial last wave
// of a capped grid when registers keep few blocks resident.
inline unsigned exact_grid(std::int64_t items) {
  return static_cast<unsigned>(
      std::clamp<std::int64_t>((items + kBlock - 1) / kBlock, 1, std::int64_t{0x7fffffff}));
}

// Grids of the pack kernels: each thread takes `unroll` packs, block b the packs
// [b * kBlock * unroll, (b + 1) * kBlock * unroll), so the grid is sized exactly and the hardware
// balances the blocks. Elements outside whole packs (the tail, or everything when the pointers
// are not aligned for packs) go through a grid-stride loop over the same grid.
__device__ __forceinline__ std::int64_t pack_base(int unroll) {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x * unroll + threadIdx.x;
}
__device__ __forceinline__ std::int64_t global_thread() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_threads() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}
inline unsigned pack_grid(std::int64_t packs, std::int64_t count, int unroll) {
  if (packs == 0) return blocks_for(count);
  const std::int64_t per_block = static_cast<std::int64_t>(kBlock) * unroll;
  return static_cast<unsigned>(
      std::min<std::int64_t>((packs + per_block - 1) / per_block, std::int64_t{0x7fffffff}));
}

// The largest power of two <= v (v >= 1): block widths of the (channel pack x row) tilings.
inline unsigned pow2_floor(std::int64_t v) {
  unsigned p = 1;
  while (static_cast<std::int64_t>(p) * 2 <= v && p < 1024) p *= 2;
  return p;
}

// ---- generic kernels: runtime-dispatched element access -----------------------------------------
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

// v rounded to what store(p, t, ...) would keep, back as a float (fused kernels that must round an
// intermediate exactly as the separate kernels stored it).
__device__ __forceinline__ float round_to(DType t, float v) {
  switch (t) {
    case DType::kF16:
      return __half2float(__float2half_rn(v));
    case DType::kBF16:
      return __bfloat162float(__float2bfloat16_rn(v));
    case DType::kI32:
      return static_cast<float>(static_cast<std::int32_t>(v));
    case DType::kF32:
      break;
  }
  return v;
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
