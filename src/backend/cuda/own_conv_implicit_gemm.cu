// The own "implicit_gemm" convolution: each direction as a GEMM whose operands are gathered from
// the tensors on the fly (no column buffer). One tiled kernel, 128x64 block tiles, BK = 32, 256
// threads; the next K-slice is loaded into registers while the current one is multiplied out of
// shared memory. fp16/bf16 multiply on tensor cores (nvcuda::wmma 16x16x16, fp32 accumulate);
// fp32 (and tf32, which runs as fp32 here) on CUDA cores, 8x4 outputs per thread. Forward: M =
// N*OH*OW, N = K/g, K = C/g*R*S; backward data: M = N*H*W, N = C/g, K = K/g*R*S; backward filter:
// M = K/g, N = C/g*R*S, K = N*OH*OW, split over blocks and summed with fp32 atomics. The reduction
// index runs channel-fastest in NHWC (coalesced gathers) and tap-fastest in NCHW.
#include <mma.h>

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>

#include "backend/cuda/own_conv_common.cuh"
#include "backend/cuda/own_conv_implicit_gemm_maps.hpp"

namespace cnnergy::cuda {

namespace {

using kernels::from_float;
using kernels::to_float;
using own::BackwardDataMap;
using own::BackwardFilterMap;
using own::ConvGeom;
using own::ForwardMap;

constexpr int kBM = 128, kBN = 64, kBK = 32, kThreads = 256;
constexpr int kALd = kBK + 8, kBLd = kBN + 8, kCLd = 32 + 4;  // padded leading dimensions

// Storage conversions and the atomic sum the maps (own_conv_implicit_gemm_maps.hpp) use on the
// device.
struct DeviceOps {
  template <typename T>
  __device__ static float to(T v) {
    return to_float(v);
  }
  template <typename T>
  __device__ static T from(float v) {
    return from_float<T>(v);
  }
  __device__ static void add(float* p, float v) { atomicAdd(p, v); }
};

// C (M x N) = A (M x K) B (K x N) for group blockIdx.z / splits, over the K-slice of split
// blockIdx.z % splits (k_per_split elements, a multiple of kBK).
template <typename T, class Map>
__global__ void __launch_bounds__(kThreads) implicit_gemm_kernel(Map map, int m_total, int n_total, int k_total,
                                                                 int splits, int k_per_split) {
  constexpr bool kTensorCores = !std::is_same_v<T, float>;
  struct Tiles {
    T a[kBM][kALd];
    T b[kBK][kBLd];
  };
  constexpr std::size_t kTileBytes = sizeof(Tiles);
  constexpr std::size_t kCBytes = kTensorCores ? sizeof(float) * 8 * 32 * kCLd : 0;
  __shared__ __align__(128) unsigned char smem[kTileBytes > kCBytes ? kTileBytes : kCBytes];
  Tiles& tiles = *reinterpret_cast<Tiles*>(smem);

  const int grp = blockIdx.z / splits, split = blockIdx.z % splits;
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN;
  const int k_begin = split * k_per_split, k_end = min(k_total, k_begin + k_per_split);
  const int tid = threadIdx.x;

  T ra[kBM * kBK / kThreads], rb[kBK * kBN / kThreads];
  auto load = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kBM * kBK / kThreads; ++i) {
      const int e = tid + i * kThreads, m = m0 + e / kBK, kk = k0 + e % kBK;
      ra[i] = (m < m_total && kk < k_end) ? map.a(grp, m, kk) : from_float<T>(0.0f);
    }
#pragma unroll
    for (int i = 0; i < kBK * kBN / kThreads; ++i) {
      const int e = tid + i * kThreads, kk = k0 + e / kBN, n = n0 + e % kBN;
      rb[i] = (n < n_total && kk < k_end) ? map.b(grp, kk, n) : from_float<T>(0.0f);
    }
  };

  // Tensor cores: warp (wm, wn) owns rows 32*wm.., columns 32*wn.. (2x2 fragments).
  [[maybe_unused]] const int warp = tid / 32, wm = warp % 4, wn = warp / 4;
  using namespace nvcuda;
  using FragT = std::conditional_t<kTensorCores, T, __half>;  // unused for fp32
  [[maybe_unused]] wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_tc[2][2];
  // CUDA cores: thread (ty, tx) owns rows ty + 16 i, columns tx + 16 j.
  [[maybe_unused]] const int ty = tid / 16, tx = tid % 16;
  [[maybe_unused]] float acc[8][4] = {};
  if constexpr (kTensorCores) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc_tc[i][j], 0.0f);
  }

  if (k_begin < k_end) load(k_begin);
  for (int k0 = k_begin; k0 < k_end; k0 += kBK) {
#pragma unroll
    for (int i = 0; i < kBM * kBK / kThreads; ++i) {
      const int e = tid + i * kThreads;
      tiles.a[e / kBK][e % kBK] = ra[i];
    }
#pragma unroll
    for (int i = 0; i < kBK * kBN / kThreads; ++i) {
      const int e = tid + i * kThreads;
      tiles.b[e / kBN][e % kBN] = rb[i];
    }
    __syncthreads();
    if (k0 + kBK < k_end) load(k0 + kBK);  // in flight while the tile below is multiplied
    if constexpr (kTensorCores) {
#pragma unroll
      for (int kk = 0; kk < kBK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, FragT, wmma::row_major> fa[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, FragT, wmma::row_major> fb[2];
#pragma unroll
        for (int i = 0; i < 2; ++i)
          wmma::load_matrix_sync(fa[i], reinterpret_cast<const FragT*>(&tiles.a[32 * wm + 16 * i][kk]), kALd);
#pragma unroll
        for (int j = 0; j < 2; ++j)
          wmma::load_matrix_sync(fb[j], reinterpret_cast<const FragT*>(&tiles.b[kk][32 * wn + 16 * j]), kBLd);
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 2; ++j) wmma::mma_sync(acc_tc[i][j], fa[i], fb[j], acc_tc[i][j]);
      }
    } else {
#pragma unroll 4
      for (int kk = 0; kk < kBK; ++kk) {
        float av[8], bv[4];
#pragma unroll
        for (int i = 0; i < 8; ++i) av[i] = to_float(tiles.a[ty + 16 * i][kk]);
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = to_float(tiles.b[kk][tx + 16 * j]);
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
      }
    }
    __syncthreads();
  }

  if constexpr (kTensorCores) {
    float* c = reinterpret_cast<float*>(smem) + warp * 32 * kCLd;  // the tiles are no longer read
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(c + 16 * i * kCLd + 16 * j, acc_tc[i][j], kCLd, wmma::mem_row_major);
    __syncwarp();
    const int lane = tid % 32;
    for (int e = lane; e < 32 * 32; e += 32) {
      const int m = m0 + 32 * wm + e / 32, n = n0 + 32 * wn + e % 32;
      if (m < m_total && n < n_total) map.store(grp, m, n, c[(e / 32) * kCLd + e % 32]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
        if (m < m_total && n < n_total) map.store(grp, m, n, acc[i][j]);
      }
  }
}

class ImplicitGemmConv final : public OwnConvAlgo {
 public:
  ImplicitGemmConv(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p) : ctx_(std::move(ctx)), p_(p) {
    rule_ = own::implicit_gemm_rule(p_.d);
    if (!rule_.empty()) return;
    g_ = own::geom_of(p_);
  }

  std::string unsupported(ConvDirection) const override { return rule_; }
  // Backward filter sums its K-slices in an fp32 copy of the weight gradient.
  std::size_t workspace_bytes(ConvDirection dir) const override {
    if (!rule_.empty() || dir != ConvDirection::kBackwardFilter) return 0;
    return static_cast<std::size_t>(p_.d.k) * g_.cg * g_.r * g_.s * sizeof(float);
  }

  void forward(const void* x, const void* w, void* y) override {
    kernels::dispatch_float(p_.dtype, "implicit_gemm forward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch<T>(ForwardMap<T, DeviceOps>{static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), g_},
                g_.n * g_.oh * g_.ow, g_.kg, g_.cg * g_.r * g_.s, 1);
    });
  }

  void backward_data(const void* dy, const void* w, void* dx, bool accumulate) override {
    kernels::dispatch_float(p_.dtype, "implicit_gemm backward_data", [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch<T>(BackwardDataMap<T, DeviceOps>{static_cast<const T*>(dy), static_cast<const T*>(w), static_cast<T*>(dx), g_,
                                   accumulate},
                g_.n * g_.h * g_.w, g_.cg, g_.kg * g_.r * g_.s, 1);
    });
  }

  void backward_filter(const void* x, const void* dy, void* dw) override {
    const std::size_t bytes = workspace_bytes(ConvDirection::kBackwardFilter);
    auto dw32 = ctx_->scratch(bytes);
    CNNERGY_CUDA_CALL(cudaMemsetAsync(dw32->data(), 0, bytes, ctx_->stream()));
    const int m = g_.kg, n = g_.cg * g_.r * g_.s, k = g_.n * g_.oh * g_.ow;
    // Enough K-slices for about two blocks per multiprocessor, each at least 8 tiles of kBK.
    const std::int64_t tiles = static_cast<std::int64_t>((m + kBM - 1) / kBM) * ((n + kBN - 1) / kBN) * g_.groups;
    const std::int64_t want = std::max<std::int64_t>(1, 2 * kernels::sm_count() / std::max<std::int64_t>(tiles, 1));
    const std::int64_t most = std::max<std::int64_t>(1, k / (8 * kBK));
    const int splits = static_cast<int>(std::min({want, most, std::int64_t{65535} / g_.groups}));
    kernels::dispatch_float(p_.dtype, "implicit_gemm backward_filter", [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch<T>(BackwardFilterMap<T, DeviceOps>{static_cast<const T*>(x), static_cast<const T*>(dy),
                                     static_cast<float*>(dw32->data()), g_},
                m, n, k, std::max(splits, 1));
    });
    const kernels::Dims dims{static_cast<std::int64_t>(bytes / sizeof(float)), 1, 1, 1, false};
    kernels::convert(dw32->data(), DType::kF32, false, dw, p_.dtype, dims, false, ctx_->stream());
  }

 private:
  template <typename T, class Map>
  void launch(const Map& map, int m, int n, int k, int splits) {
    const int slices = (k + kBK - 1) / kBK;
    const int k_per_split = ((slices + splits - 1) / splits) * kBK;
    const dim3 grid(static_cast<unsigned>((m + kBM - 1) / kBM), static_cast<unsigned>((n + kBN - 1) / kBN),
                    static_cast<unsigned>(g_.groups * splits));
    implicit_gemm_kernel<T, Map><<<grid, kThreads, 0, ctx_->stream()>>>(map, m, n, k, splits, k_per_split);
    CNNERGY_CUDA_LAUNCH_CHECK("implicit_gemm_kernel");
  }

  std::shared_ptr<CudaContext> ctx_;
  OwnConvProblem p_;
  std::string rule_;
  ConvGeom g_{};
};

}  // namespace

std::unique_ptr<OwnConvAlgo> make_own_implicit_gemm(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p) {
  return std::make_unique<ImplicitGemmConv>(std::move(ctx), p);
}

}  // namespace cnnergy::cuda
