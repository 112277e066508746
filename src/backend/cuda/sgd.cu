// The SGD step on the GPU: one parameter a launch (sgd_update), or every parameter of a step in one
// launch per dtype pair (sgd_update_many), each element updated by the same code, so both give the
// same values bit for bit. One kernel for all ResNet-50's 161 parameter tensors instead of 161
// kernels of a few microseconds each.
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/map_kernel.cuh"

namespace cnnergy::cuda::kernels {

namespace {

// ---- SGD ----------------------------------------------------------------------------------------
// PyTorch's momentum SGD (the CPU reference's formula): g = grad * inv_scale + wd * w;
// v = momentum * v + g; w -= lr * v. Packs of 4 (16 bytes of fp32 master and momentum).
template <typename G, typename W, int K>
__device__ __forceinline__ void sgd_pack(float* master, const G* grad, float* momentum, W* working,
                                         std::int64_t i, const SgdParams& p) {
  const Pack<float, K> w = load_pack<float, K>(master + i);
  const Pack<G, K> g = load_pack<G, K>(grad + i);
  Pack<float, K> v{};
  if (momentum != nullptr) v = load_pack<float, K>(momentum + i);
  Pack<float, K> updated;
  Pack<W, K> work;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float gk = to_float(g.v[k]) * p.inv_grad_scale + p.weight_decay * w.v[k];
    const float vk = momentum != nullptr ? p.momentum * v.v[k] + gk : gk;
    v.v[k] = vk;
    updated.v[k] = w.v[k] - p.learning_rate * vk;
    work.v[k] = from_float<W>(updated.v[k]);
  }
  store_pack<float, K>(master + i, updated);
  if (momentum != nullptr) store_pack<float, K>(momentum + i, v);
  if (working != nullptr) store_pack<W, K>(working + i, work);
}

template <typename G, typename W>
__global__ void __launch_bounds__(kBlock)
    sgd_kernel(float* master, const G* grad, float* momentum, W* working, std::int64_t count,
               SgdParams p, const std::int32_t* skip, std::int64_t packs) {
  if (skip != nullptr && *skip != 0) return;
  constexpr int K = 4;
  const std::int64_t p0 = pack_base(kUnroll);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (p0 + u * kBlock < packs)
      sgd_pack<G, W, K>(master, grad, momentum, working, (p0 + u * kBlock) * K, p);
  for (std::int64_t i = packs * K + global_thread(); i < count; i += grid_threads())
    sgd_pack<G, W, 1>(master, grad, momentum, working, i, p);
}

// Block b updates chunk b: [begin, end) of one entry, 16-byte packs where the entry's operands
// allow, one element at a time for the rest.
template <typename G, typename W>
__global__ void __launch_bounds__(kBlock)
    sgd_many_kernel(const SgdEntry* entries, const SgdChunk* chunks, SgdParams p, const std::int32_t* skip) {
  if (skip != nullptr && *skip != 0) return;
  const SgdChunk c = chunks[blockIdx.x];
  const SgdEntry e = entries[c.entry];
  p.weight_decay = e.weight_decay;
  const auto* grad = static_cast<const G*>(e.grad);
  auto* working = static_cast<W*>(e.working);
  constexpr int K = 4;
  std::int64_t tail = c.begin;
  if (e.vector != 0) {
    tail = c.begin + (c.end - c.begin) / K * K;
    for (std::int64_t i = c.begin + static_cast<std::int64_t>(threadIdx.x) * K; i < tail; i += kBlock * K)
      sgd_pack<G, W, K>(e.master, grad, e.momentum, working, i, p);
  }
  for (std::int64_t i = tail + threadIdx.x; i < c.end; i += kBlock)
    sgd_pack<G, W, 1>(e.master, grad, e.momentum, working, i, p);
}

}  // namespace

void sgd_update(float* master, const void* grad, DType grad_dtype, float* momentum, void* working,
                DType working_dtype, std::int64_t count, const SgdParams& params,
                const std::int32_t* skip, cudaStream_t stream) {
  if (count == 0) return;
  const bool vectorized = aligned_for(16, master, momentum) &&
                          aligned_for(4 * dtype_size_bytes(grad_dtype), grad) &&
                          aligned_for(4 * dtype_size_bytes(working_dtype), working);
  dispatch_float(grad_dtype, "sgd_update", [&](auto g_tag) {
    using G = typename decltype(g_tag)::type;
    dispatch_float(working_dtype, "sgd_update", [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      const std::int64_t packs = vectorized ? count / 4 : 0;
      sgd_kernel<G, W><<<pack_grid(packs, count, kUnroll), kBlock, 0, stream>>>(
          master, static_cast<const G*>(grad), momentum, static_cast<W*>(working), count, params,
          skip, packs);
    });
  });
  CNNERGY_CUDA_LAUNCH_CHECK("sgd_update");
}

bool sgd_entry_packs(const SgdEntry& e, DType grad_dtype, DType working_dtype) {
  return aligned_for(16, e.master, e.momentum) && aligned_for(4 * dtype_size_bytes(grad_dtype), e.grad) &&
         aligned_for(4 * dtype_size_bytes(working_dtype), e.working);
}

void sgd_update_many(const SgdEntry* entries, const SgdChunk* chunks, std::int64_t num_chunks, DType grad_dtype,
                     DType working_dtype, const SgdParams& params, const std::int32_t* skip, cudaStream_t stream) {
  if (num_chunks == 0) return;
  dispatch_float(grad_dtype, "sgd_update_many", [&](auto g_tag) {
    using G = typename decltype(g_tag)::type;
    dispatch_float(working_dtype, "sgd_update_many", [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      sgd_many_kernel<G, W><<<static_cast<unsigned>(num_chunks), kBlock, 0, stream>>>(entries, chunks, params, skip);
    });
  });
  CNNERGY_CUDA_LAUNCH_CHECK("sgd_update_many");
}

}  // namespace cnnergy::cuda::kernels
