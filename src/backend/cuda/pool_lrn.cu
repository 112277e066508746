// The CUDA backend's own pooling and LRN kernels, with the CPU reference's semantics: first maximum
// in scan order (a NaN wins and propagates), Caffe window divisors, Caffe LRN window. cuDNN runs
// pooling where it matches the contract (layers_cuda.cpp); these kernels cover the rest (bf16,
// Caffe ceil-mode windows, NHWC or bf16 LRN).
// Pooling is templated on the storage type; NHWC tensors whose channels fill 16-byte packs move 8
// (fp16/bf16) or 4 (fp32) channels per access. Max-pool backward runs in two gather passes: the
// window argmax of every output (one byte per output) from x, then for every input the windows that
// hold it, summing dy where the input is the argmax. No atomics (deterministic, exact in fp16/bf16)
// and no dependence on a previous forward call.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

namespace {

constexpr int kNoArgmax = 255;                  // argmax byte of an empty window
constexpr std::int64_t kMaxArgmaxWindow = 255;  // larger windows recompute the argmax in backward

// ---- pooling -----------------------------------------------------------------------------------
struct Window {
  std::int64_t hs, ws;          // start, padding included
  std::int64_t h0, h1, w0, w1;  // clipped to the input
  float divisor;
};

__device__ __forceinline__ Window pool_window(const Dims& d, const PoolParams& p, std::int64_t oh,
                                              std::int64_t ow) {
  const std::int64_t hs = oh * p.stride_h - p.pad_h, ws = ow * p.stride_w - p.pad_w;
  const std::int64_t he_pad = min(hs + p.kernel_h, d.h + p.pad_h);
  const std::int64_t we_pad = min(ws + p.kernel_w, d.w + p.pad_w);
  Window win{hs,
             ws,
             max(hs, std::int64_t{0}),
             min(he_pad, d.h),
             max(ws, std::int64_t{0}),
             min(we_pad, d.w),
             1.0f};
  const std::int64_t count =
      p.mode == 1 ? (he_pad - hs) * (we_pad - ws) : (win.h1 - win.h0) * (win.w1 - win.w0);
  win.divisor = static_cast<float>(count);
  return win;
}

// Memory offset of (n, c, h, w); with K > 1 (NHWC only) c is the first channel of a pack.
__device__ __forceinline__ std::int64_t at(const Dims& d, std::int64_t n, std::int64_t c,
                                           std::int64_t h, std::int64_t w) {
  return d.nhwc ? ((n * d.h + h) * d.w + w) * d.c + c : ((n * d.c + c) * d.h + h) * d.w + w;
}

// Item q of a tensor of `d`'s geometry in packs of K channels: (n, first channel, h, w). Item q
// starts at memory offset q * K in either layout.
__device__ __forceinline__ Coord item_coord(const Dims& d, int k, std::int64_t q) {
  Coord r{};
  if (d.nhwc) {
    const std::int64_t packs = d.c / k;
    r.c = (q % packs) * k;
    q /= packs;
    r.w = q % d.w;
    q /= d.w;
    r.h = q % d.h;
    r.n = q / d.h;
  } else {
    r.w = q % d.w;
    q /= d.w;
    r.h = q % d.h;
    q /= d.h;
    r.c = q % d.c;
    r.n = q / d.c;
  }
  return r;
}

__device__ __forceinline__ Dims output_dims(const Dims& x, const PoolParams& p) {
  Dims y = x;
  y.h = p.out_h;
  y.w = p.out_w;
  return y;
}

// Calls f(pack, h, w) for the window's elements in scan order (rows, then columns), loading
// kWindowLoads elements of a row before using them: a window scan is a chain of dependent
// accumulations, and without loads in flight it would wait out the memory latency per element.
constexpr int kWindowLoads = 4;

template <typename T, int K, class F>
__device__ __forceinline__ void scan_window(const T* x, const Dims& d, std::int64_t n,
                                            std::int64_t c0, const Window& win, F&& f) {
  for (std::int64_t h = win.h0; h < win.h1; ++h)
    for (std::int64_t w0 = win.w0; w0 < win.w1; w0 += kWindowLoads) {
      Pack<T, K> v[kWindowLoads];
#pragma unroll
      for (int i = 0; i < kWindowLoads; ++i)
        if (w0 + i < win.w1) v[i] = load_pack<T, K>(x + at(d, n, c0, h, w0 + i));
#pragma unroll
      for (int i = 0; i < kWindowLoads; ++i)
        if (w0 + i < win.w1) f(v[i], h, w0 + i);
    }
}

// Per lane: the window-relative position ((h - hs) * kernel_w + (w - ws)) of the first maximum in
// scan order, a NaN winning; -1 for an empty window. best gets the maximum (0 when empty).
template <typename T, int K>
__device__ __forceinline__ void window_argmax(const T* x, const Dims& d, const PoolParams& p,
                                              std::int64_t n, std::int64_t c0, const Window& win,
                                              float (&best)[K], int (&pos)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    best[k] = 0.0f;
    pos[k] = -1;
  }
  bool first = true;
  scan_window<T, K>(x, d, n, c0, win, [&](const Pack<T, K>& v, std::int64_t h, std::int64_t w) {
    const int here = static_cast<int>((h - win.hs) * p.kernel_w + (w - win.ws));
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float f = to_float(v.v[k]);
      if (first || f > best[k] || (isnan(f) && !isnan(best[k]))) {
        best[k] = f;
        pos[k] = here;
      }
    }
    first = false;
  });
}

template <typename T, int K>
__global__ void __launch_bounds__(kBlock)
    pool_forward_kernel(const T* x, T* y, Dims xd, PoolParams p, std::int64_t items) {
  const Dims yd = output_dims(xd, p);
  CNNERGY_GRID_STRIDE(q, items) {
    const Coord o = item_coord(yd, K, q);
    const Window win = pool_window(xd, p, o.h, o.w);
    float out[K];
    if (p.mode == 0) {
      int pos[K];
      window_argmax<T, K>(x, xd, p, o.n, o.c, win, out, pos);
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) out[k] = 0.0f;
      scan_window<T, K>(x, xd, o.n, o.c, win, [&](const Pack<T, K>& v, std::int64_t, std::int64_t) {
#pragma unroll
        for (int k = 0; k < K; ++k) out[k] += to_float(v.v[k]);
      });
#pragma unroll
      for (int k = 0; k < K; ++k) out[k] /= win.divisor;
    }
    Pack<T, K> r;
#pragma unroll
    for (int k = 0; k < K; ++k) r.v[k] = from_float<T>(out[k]);
    store_pack<T, K>(y + q * K, r);
  }
}

// One byte per output: the window-relative argmax position (kNoArgmax for an empty window).
template <typename T, int K>
__global__ void __launch_bounds__(kBlock)
    pool_argmax_kernel(const T* x, std::uint8_t* argmax, Dims xd, PoolParams p,
                       std::int64_t items) {
  const Dims yd = output_dims(xd, p);
  CNNERGY_GRID_STRIDE(q, items) {
    const Coord o = item_coord(yd, K, q);
    float best[K];
    int pos[K];
    window_argmax<T, K>(x, xd, p, o.n, o.c, pool_window(xd, p, o.h, o.w), best, pos);
    Pack<std::uint8_t, K> r;
#pragma unroll
    for (int k = 0; k < K; ++k) r.v[k] = static_cast<std::uint8_t>(pos[k] < 0 ? kNoArgmax : pos[k]);
    store_pack<std::uint8_t, K>(argmax + q * K, r);
  }
}

// Gather: one thread per input item loops over the windows that hold it, loading kWindowLoads
// windows' dy (and argmax bytes) before using them. Max mode reads the argmax bytes; without them
// (windows beyond a byte: the host then runs K = 1) it recomputes each window's argmax.
template <typename T, int K>
__global__ void __launch_bounds__(kBlock)
    pool_backward_kernel(const T* x, const T* dy, const std::uint8_t* argmax, T* dx, Dims xd,
                         PoolParams p, bool accumulate, std::int64_t items) {
  const Dims yd = output_dims(xd, p);
  CNNERGY_GRID_STRIDE(q, items) {
    const Coord in = item_coord(xd, K, q);
    // windows with oh*stride - pad <= h < oh*stride - pad + kernel
    const std::int64_t nh = in.h + p.pad_h - p.kernel_h + 1, nw = in.w + p.pad_w - p.kernel_w + 1;
    const std::int64_t oh0 = nh <= 0 ? 0 : (nh + p.stride_h - 1) / p.stride_h;
    const std::int64_t ow0 = nw <= 0 ? 0 : (nw + p.stride_w - 1) / p.stride_w;
    const std::int64_t oh1 = min(p.out_h - 1, (in.h + p.pad_h) / p.stride_h);
    const std::int64_t ow1 = min(p.out_w - 1, (in.w + p.pad_w) / p.stride_w);
    const std::int64_t rows = max(oh1 - oh0 + 1, std::int64_t{0});
    const std::int64_t cols = max(ow1 - ow0 + 1, std::int64_t{0}), windows = rows * cols;
    float g[K];
#pragma unroll
    for (int k = 0; k < K; ++k) g[k] = 0.0f;
    for (std::int64_t t0 = 0; t0 < windows; t0 += kWindowLoads) {
      Pack<T, K> d[kWindowLoads];
      Pack<std::uint8_t, K> a[kWindowLoads];
#pragma unroll
      for (int i = 0; i < kWindowLoads; ++i) {
        if (t0 + i >= windows) continue;
        const std::int64_t out = at(yd, in.n, in.c, oh0 + (t0 + i) / cols, ow0 + (t0 + i) % cols);
        d[i] = load_pack<T, K>(dy + out);
        if (p.mode == 0 && argmax != nullptr) a[i] = load_pack<std::uint8_t, K>(argmax + out);
      }
#pragma unroll
      for (int i = 0; i < kWindowLoads; ++i) {
        if (t0 + i >= windows) continue;
        const Window win = pool_window(xd, p, oh0 + (t0 + i) / cols, ow0 + (t0 + i) % cols);
        if (p.mode != 0) {
#pragma unroll
          for (int k = 0; k < K; ++k) g[k] += to_float(d[i].v[k]) / win.divisor;
          continue;
        }
        const int mine = static_cast<int>((in.h - win.hs) * p.kernel_w + (in.w - win.ws));
        int pos[K];
        if constexpr (K == 1) {
          if (argmax == nullptr) {
            float best[K];
            window_argmax<T, K>(x, xd, p, in.n, in.c, win, best, pos);
          } else {
            pos[0] = a[i].v[0];
          }
        } else {
#pragma unroll
          for (int k = 0; k < K; ++k) pos[k] = a[i].v[k];
        }
#pragma unroll
        for (int k = 0; k < K; ++k)
          if (pos[k] == mine) g[k] += to_float(d[i].v[k]);
      }
    }
    Pack<T, K> r;
    if (accumulate) r = load_pack<T, K>(dx + q * K);
#pragma unroll
    for (int k = 0; k < K; ++k) r.v[k] = from_float<T>(accumulate ? g[k] + to_float(r.v[k]) : g[k]);
    store_pack<T, K>(dx + q * K, r);
  }
}

// Packs of kVec<T> channels for NHWC tensors whose channels fill them; single elements otherwise.
template <typename T>
bool pool_packs(const Dims& d, const void* a, const void* b, const void* c) {
  return d.nhwc && d.c % kVec<T> == 0 && aligned_for(16, a, b, c);
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

}  // namespace

std::size_t pool_backward_scratch_bytes(const Dims& x_dims, const PoolParams& p) {
  if (p.mode != 0 || p.kernel_h * p.kernel_w > kMaxArgmaxWindow) return 0;
  return static_cast<std::size_t>(x_dims.n * x_dims.c * p.out_h * p.out_w);
}

void pool_forward(const void* x, const Dims& x_dims, void* y, DType dtype, const PoolParams& p,
                  cudaStream_t stream) {
  const std::int64_t count = x_dims.n * x_dims.c * p.out_h * p.out_w;
  if (count == 0) return;
  dispatch_float(dtype, "pool_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int K = kVec<T>;
    const auto* xt = static_cast<const T*>(x);
    auto* yt = static_cast<T*>(y);
    if (pool_packs<T>(x_dims, x, y, nullptr))
      pool_forward_kernel<T, K>
          <<<exact_grid(count / K), kBlock, 0, stream>>>(xt, yt, x_dims, p, count / K);
    else
      pool_forward_kernel<T, 1><<<exact_grid(count), kBlock, 0, stream>>>(xt, yt, x_dims, p, count);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("pool_forward");
}

void pool_backward(const void* x, const void* dy, void* dx, const Dims& x_dims, DType dtype,
                   const PoolParams& p, bool accumulate, void* scratch, cudaStream_t stream) {
  const std::int64_t count = x_dims.numel();
  const std::int64_t out_count = x_dims.n * x_dims.c * p.out_h * p.out_w;
  if (count == 0) return;
  // The argmax pass needs the scratch of pool_backward_scratch_bytes; without it (or for windows
  // beyond a byte) the gather pass recomputes each window's argmax.
  auto* argmax =
      pool_backward_scratch_bytes(x_dims, p) > 0 ? static_cast<std::uint8_t*>(scratch) : nullptr;
  dispatch_float(dtype, "pool_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int K = kVec<T>;
    const auto* xt = static_cast<const T*>(x);
    const auto* dyt = static_cast<const T*>(dy);
    auto* dxt = static_cast<T*>(dx);
    // Max windows beyond a byte recompute their argmax: element by element (rare; it keeps the
    // packed kernel's registers down).
    const bool recompute = p.mode == 0 && argmax == nullptr;
    if (!recompute && pool_packs<T>(x_dims, x, dy, dx)) {
      if (argmax != nullptr && out_count > 0)
        pool_argmax_kernel<T, K><<<exact_grid(out_count / K), kBlock, 0, stream>>>(
            xt, argmax, x_dims, p, out_count / K);
      pool_backward_kernel<T, K><<<exact_grid(count / K), kBlock, 0, stream>>>(
          xt, dyt, argmax, dxt, x_dims, p, accumulate, count / K);
    } else {
      if (argmax != nullptr && out_count > 0)
        pool_argmax_kernel<T, 1>
            <<<exact_grid(out_count), kBlock, 0, stream>>>(xt, argmax, x_dims, p, out_count);
      pool_backward_kernel<T, 1><<<exact_grid(count), kBlock, 0, stream>>>(
          xt, dyt, argmax, dxt, x_dims, p, accumulate, count);
    }
  });
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
