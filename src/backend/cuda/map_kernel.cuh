// The n-ary element-wise map shared by the backend's .cu files (elementwise.cu, activation.cu):
// out[i] = f(in_0[i], ..., in_{n-1}[i]) over 16-byte packs with a scalar tail, computed in fp32
// whatever the storage type.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {
namespace {

constexpr int kUnroll = 2;  // packs in flight per thread and loop trip (memory-level parallelism)

// ---- the n-ary map: out[i] = f(i, in_0[i], ..., in_{n-1}[i]) ------------------------------------
// An input may alias the output (in-place ReLU, accumulation into dx): each element is read and
// written by one thread, and a trip's reads come before its writes.
template <typename T, int kIn>
struct MapArgs {
  const T* in[kIn > 0 ? kIn : 1];
  T* out;
};

template <typename T, int kIn, int K, class F>
__device__ __forceinline__ void map_apply(const MapArgs<T, kIn>& a, const F& f, std::int64_t i,
                                          const Pack<T, K> (&v)[kIn > 0 ? kIn : 1]) {
  Pack<T, K> r;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float x[kIn > 0 ? kIn : 1];
#pragma unroll
    for (int j = 0; j < kIn; ++j) x[j] = to_float(v[j].v[k]);
    r.v[k] = from_float<T>(f(x));
  }
  store_pack<T, K>(a.out + i, r);
}

template <typename T, int kIn, class F>
__global__ void __launch_bounds__(kBlock)
    map_kernel(MapArgs<T, kIn> a, F f, std::int64_t count, std::int64_t packs) {
  constexpr int K = kVec<T>;
  constexpr int kSlots = kIn > 0 ? kIn : 1;
  const std::int64_t p0 = pack_base(kUnroll);
  Pack<T, K> v[kUnroll][kSlots];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const std::int64_t p = p0 + u * kBlock;
    if (p < packs) {
#pragma unroll
      for (int j = 0; j < kIn; ++j) v[u][j] = load_pack<T, K>(a.in[j] + p * K);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const std::int64_t p = p0 + u * kBlock;
    if (p < packs) map_apply<T, kIn, K>(a, f, p * K, v[u]);
  }
  for (std::int64_t i = packs * K + global_thread(); i < count; i += grid_threads()) {
    Pack<T, 1> w[kSlots];
#pragma unroll
    for (int j = 0; j < kIn; ++j) w[j] = load_pack<T, 1>(a.in[j] + i);
    map_apply<T, kIn, 1>(a, f, i, w);
  }
}

// Vectorised when every pointer is 16-byte aligned (tensors from the allocator are; views at odd
// offsets take the scalar path).
template <typename T, int kIn, class F>
void launch_map(const MapArgs<T, kIn>& a, const F& f, std::int64_t count, cudaStream_t stream,
                const char* name) {
  if (count == 0) return;
  bool vectorized = aligned_for(16, a.out);
  for (int j = 0; j < kIn; ++j) vectorized = vectorized && aligned_for(16, a.in[j]);
  const std::int64_t packs = vectorized ? count / kVec<T> : 0;
  map_kernel<T, kIn, F>
      <<<pack_grid(packs, count, kUnroll), kBlock, 0, stream>>>(a, f, count, packs);
  check_status(cudaGetLastError(), name, __FILE__, __LINE__);
}

}  // namespace
}  // namespace cnnergy::cuda::kernels
