// The CUDA backend's own element-wise kernels: conversions and copies, fill, add, ReLU, dropout,
// padding, bias and finiteness checks (the SGD step: sgd.cu).
// The hot ones (all that a training step runs per activation or parameter) are templated on the
// storage type and move 16-byte packs (8 fp16/bf16 or 4 fp32 per access, a scalar tail for the
// rest), two packs in flight per thread, so they run at memory bandwidth. Rare paths
// (layout-changing or int32 conversions, padding) keep one runtime-dispatched kernel for every
// dtype, which keeps compile time down.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/map_kernel.cuh"
#include "core/hash.hpp"

namespace cnnergy::cuda::kernels {

namespace {

struct AddOp {
  __device__ float operator()(const float* x) const { return x[0] + x[1]; }
};
struct AddReluOp {  // max(0, a + b) before rounding: the same as rounding, then the ReLU
  __device__ float operator()(const float* x) const {
    const float v = x[0] + x[1];
    return v > 0.0f ? v : 0.0f;
  }
};
struct ReluOp {  // NaN -> 0, as the CPU reference (v > 0 ? v : 0)
  __device__ float operator()(const float* x) const { return x[0] > 0.0f ? x[0] : 0.0f; }
};
template <bool kAccumulate>
struct ReluBackwardOp {  // x = {y, dy[, dx]}
  __device__ float operator()(const float* x) const {
    const float g = x[0] > 0.0f ? x[1] : 0.0f;
    if constexpr (kAccumulate) return g + x[2];
    return g;
  }
};
template <bool kAccumulate>
struct MulOp {  // x = {a, b[, y]}
  __device__ float operator()(const float* x) const {
    const float g = x[0] * x[1];
    if constexpr (kAccumulate) return g + x[2];
    return g;
  }
};

// ---- fill: the value's bit pattern, stored in words of the element size -------------------------
template <typename W>
__global__ void __launch_bounds__(kBlock)
    fill_kernel(W* dst, std::int64_t count, W value, std::int64_t packs) {
  constexpr int K = static_cast<int>(16 / sizeof(W));
  Pack<W, K> v;
#pragma unroll
  for (int k = 0; k < K; ++k) v.v[k] = value;
  const std::int64_t p0 = pack_base(kUnroll);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (p0 + u * kBlock < packs) store_pack<W, K>(dst + (p0 + u * kBlock) * K, v);
  for (std::int64_t i = packs * K + global_thread(); i < count; i += grid_threads()) dst[i] = value;
}

// ---- same-layout conversion / accumulation between floating-point dtypes ------------------------
template <typename S, typename D>
__global__ void __launch_bounds__(kBlock)
    convert_same_layout_kernel(const S* src, D* dst, std::int64_t count, bool accumulate,
                               std::int64_t packs) {
  constexpr int K = static_cast<int>(16 / (sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D)));
  const std::int64_t p0 = pack_base(kUnroll);
  Pack<S, K> s[kUnroll];
  Pack<D, K> d[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const std::int64_t p = p0 + u * kBlock;
    if (p < packs) {
      s[u] = load_pack<S, K>(src + p * K);
      if (accumulate) d[u] = load_pack<D, K>(dst + p * K);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const std::int64_t p = p0 + u * kBlock;
    if (p >= packs) continue;
    Pack<D, K> r;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float v = to_float(s[u].v[k]);
      r.v[k] = from_float<D>(accumulate ? v + to_float(d[u].v[k]) : v);
    }
    store_pack<D, K>(dst + p * K, r);
  }
  for (std::int64_t i = packs * K + global_thread(); i < count; i += grid_threads()) {
    const float v = to_float(src[i]);
    dst[i] = from_float<D>(accumulate ? v + to_float(dst[i]) : v);
  }
}

// Generic conversion (layout changes, int32): one kernel for every dtype pair.
__global__ void convert_generic_kernel(const void* src, DType sdt, bool src_nhwc, void* dst,
                                       DType ddt, Dims d, bool accumulate, std::int64_t count) {
  Dims sd = d;
  sd.nhwc = src_nhwc;
  CNNERGY_GRID_STRIDE(j, count) {
    std::int64_t s = j;
    if (src_nhwc != d.nhwc) {
      const Coord k = coord_of(d, j);
      s = offset_of(sd, k.n, k.c, k.h, k.w);
    }
    if (sdt == DType::kI32 && ddt == DType::kI32) {  // exact: no round trip through float
      const std::int32_t v = static_cast<const std::int32_t*>(src)[s];
      std::int32_t* out = static_cast<std::int32_t*>(dst);
      out[j] = accumulate ? out[j] + v : v;
      continue;
    }
    float v = load(src, sdt, s);
    if (accumulate) v += load(dst, ddt, j);
    store(dst, ddt, j, v);
  }
}

// ---- dropout: element j's mask is drawn for its logical NCHW index
// -------------------------------
template <typename T>
__global__ void __launch_bounds__(kBlock)
    dropout_forward_kernel(const T* x, T* mask, T* y, Dims d, float p, float scale,
                           std::uint64_t seed, std::int64_t count, std::int64_t packs) {
  constexpr int K = kVec<T>;
  auto logical = [&](std::int64_t j) {
    if (!d.nhwc) return j;
    const Coord k = coord_of(d, j);
    return ((k.n * d.c + k.c) * d.h + k.h) * d.w + k.w;
  };
  // In NHWC a pack holds consecutive channels of one pixel (the caller checks C % K == 0):
  // their logical indices are H*W apart.
  const std::int64_t lane_step = d.nhwc ? d.h * d.w : 1;
  for (std::int64_t q = global_thread(); q < packs; q += grid_threads()) {
    const Pack<T, K> xv = load_pack<T, K>(x + q * K);
    const std::int64_t base = logical(q * K);
    Pack<T, K> m, out;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float keep =
          uniform01(seed, static_cast<std::uint64_t>(base + k * lane_step)) >= p ? scale : 0.0f;
      m.v[k] = from_float<T>(keep);
      out.v[k] = from_float<T>(to_float(xv.v[k]) * keep);
    }
    store_pack<T, K>(mask + q * K, m);
    store_pack<T, K>(y + q * K, out);
  }
  for (std::int64_t j = packs * K + global_thread(); j < count; j += grid_threads()) {
    const float keep = uniform01(seed, static_cast<std::uint64_t>(logical(j))) >= p ? scale : 0.0f;
    mask[j] = from_float<T>(keep);
    y[j] = from_float<T>(to_float(x[j]) * keep);
  }
}

// ---- rows x cols block copy between row-major matrices (concat along channels) ------------------
template <typename T, int K>
__global__ void __launch_bounds__(kBlock)
    copy_2d_kernel(const T* src, std::int64_t src_ld, T* dst, std::int64_t dst_ld,
                   std::int64_t cols, bool accumulate, std::int64_t packs) {
  const std::int64_t per_row = cols / K;
  CNNERGY_GRID_STRIDE(q, packs) {
    const std::int64_t r = q / per_row, c = (q - r * per_row) * K;
    const Pack<T, K> s = load_pack<T, K>(src + r * src_ld + c);
    if (!accumulate) {
      store_pack<T, K>(dst + r * dst_ld + c, s);
      continue;
    }
    const Pack<T, K> d = load_pack<T, K>(dst + r * dst_ld + c);
    Pack<T, K> out;
#pragma unroll
    for (int k = 0; k < K; ++k) out.v[k] = from_float<T>(to_float(s.v[k]) + to_float(d.v[k]));
    store_pack<T, K>(dst + r * dst_ld + c, out);
  }
}

// ---- bias add -----------------------------------------------------------------------------------
// Channel-last (NHWC, 2-D), C % K == 0: thread x owns a fixed pack of channels (its bias stays in
// registers) and walks rows, so there is no index division per element.
template <typename T>
__global__ void __launch_bounds__(kBlock)
    bias_add_rows_kernel(T* y, const T* b, std::int64_t rows, std::int64_t channels, bool relu) {
  constexpr int K = kVec<T>;
  const std::int64_t cp = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (cp * K >= channels) return;
  const Pack<T, K> bias = load_pack<T, K>(b + cp * K);
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows;
       r += static_cast<std::int64_t>(gridDim.y) * blockDim.y) {
    T* at = y + r * channels + cp * K;
    const Pack<T, K> v = load_pack<T, K>(at);
    Pack<T, K> out;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float sum = to_float(v.v[k]) + to_float(bias.v[k]);
      out.v[k] = from_float<T>(relu ? fmaxf(sum, 0.0f) : sum);
    }
    store_pack<T, K>(at, out);
  }
}

// Any view; K > 1 only when a pack never straddles two channels (inner % K == 0).
template <typename T, int K>
__global__ void __launch_bounds__(kBlock)
    bias_add_kernel(T* y, const T* b, ChannelView v, std::int64_t packs, bool relu) {
  CNNERGY_GRID_STRIDE(q, packs) {
    const std::int64_t j = q * K;
    const float bias = to_float(b[channel_of(v, j)]);
    const Pack<T, K> x = load_pack<T, K>(y + j);
    Pack<T, K> out;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float sum = to_float(x.v[k]) + bias;
      out.v[k] = from_float<T>(relu ? fmaxf(sum, 0.0f) : sum);
    }
    store_pack<T, K>(y + j, out);
  }
}

// ---- finiteness ---------------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(kBlock)
    check_finite_kernel(const T* t, std::int64_t count, std::int32_t* flag, std::int64_t packs) {
  constexpr int K = kVec<T>;
  const std::int64_t p0 = pack_base(kUnroll);
  bool bad = false;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (p0 + u * kBlock >= packs) continue;
    const Pack<T, K> v = load_pack<T, K>(t + (p0 + u * kBlock) * K);
#pragma unroll
    for (int k = 0; k < K; ++k) bad = bad || !isfinite(to_float(v.v[k]));
  }
  for (std::int64_t i = packs * K + global_thread(); i < count; i += grid_threads())
    bad = bad || !isfinite(to_float(t[i]));
  if (bad) *flag = 1;  // every writer writes 1: the race is benign
}

// ---- layout-changing conversion of floating tensors: a batched transpose ------------------------
// NCHW -> NHWC is, per sample, the matrix [C][H*W] transposed to [H*W][C]; NHWC -> NCHW the
// reverse. Rows: the source's outer dimension, cols: its inner one.
//
// Few rows (a network's 3-channel input): a thread per column walks the rows, so the reads of a
// warp are consecutive per row and each thread writes its rows side by side.
template <typename S, typename D>
__global__ void __launch_bounds__(kBlock)
    transpose_few_rows_kernel(const S* src, D* dst, std::int64_t samples, int rows, std::int64_t cols,
                              bool accumulate) {
  const std::int64_t count = samples * cols;
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t n = j / cols, col = j - n * cols;
    const S* in = src + n * rows * cols + col;
    D* out = dst + j * rows;
    for (int r = 0; r < rows; ++r) {
      const float v = to_float(in[r * cols]);
      out[r] = from_float<D>(accumulate ? v + to_float(out[r]) : v);
    }
  }
}

// Few columns (a 3-channel NHWC tensor back to NCHW): a thread per row reads its columns side
// by side and writes each to its own plane.
template <typename S, typename D>
__global__ void __launch_bounds__(kBlock)
    transpose_few_cols_kernel(const S* src, D* dst, std::int64_t samples, std::int64_t rows, int cols,
                              bool accumulate) {
  const std::int64_t count = samples * rows;
  CNNERGY_GRID_STRIDE(j, count) {
    const std::int64_t n = j / rows, row = j - n * rows;
    const S* in = src + j * cols;
    D* out = dst + n * rows * cols + row;
    for (int c = 0; c < cols; ++c) {
      const float v = to_float(in[c]);
      out[c * rows] = from_float<D>(accumulate ? v + to_float(out[c * rows]) : v);
    }
  }
}

// Otherwise 32 x 32 tiles through shared memory (a block of 32 x 8 threads per tile, tiles taken
// grid-stride): reads and writes are both consecutive across a warp.
constexpr int kTile = 32;
template <typename S, typename D>
__global__ void __launch_bounds__(kTile * 8)
    transpose_tiled_kernel(const S* src, D* dst, std::int64_t samples, std::int64_t rows, std::int64_t cols,
                           bool accumulate) {
  __shared__ float tile[kTile][kTile + 1];
  const std::int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const std::int64_t tiles = samples * row_tiles * col_tiles;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t n = t / (row_tiles * col_tiles), rest = t - n * row_tiles * col_tiles;
    const std::int64_t r0 = (rest / col_tiles) * kTile, c0 = (rest % col_tiles) * kTile;
    const S* in = src + n * rows * cols;
    D* out = dst + n * rows * cols;
    for (int k = ty; k < kTile; k += 8) {
      const std::int64_t r = r0 + k, c = c0 + tx;
      if (r < rows && c < cols) tile[k][tx] = to_float(in[r * cols + c]);
    }
    __syncthreads();
    for (int k = ty; k < kTile; k += 8) {
      const std::int64_t c = c0 + k, r = r0 + tx;  // out is [cols][rows]
      if (r < rows && c < cols) {
        const float v = tile[tx][k];
        D* o = out + c * rows + r;
        *o = from_float<D>(accumulate ? v + to_float(*o) : v);
      }
    }
    __syncthreads();
  }
}

template <typename S, typename D>
void launch_transpose(const S* src, D* dst, std::int64_t samples, std::int64_t rows, std::int64_t cols,
                      bool accumulate, cudaStream_t stream) {
  constexpr int kFew = 8;
  if (rows <= kFew) {
    transpose_few_rows_kernel<S, D><<<grid_for(samples * cols), kBlock, 0, stream>>>(
        src, dst, samples, static_cast<int>(rows), cols, accumulate);
  } else if (cols <= kFew) {
    transpose_few_cols_kernel<S, D><<<grid_for(samples * rows), kBlock, 0, stream>>>(
        src, dst, samples, rows, static_cast<int>(cols), accumulate);
  } else {
    const std::int64_t tiles = samples * ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
    const auto grid = static_cast<unsigned>(std::min<std::int64_t>(tiles, std::int64_t{1} << 20));
    transpose_tiled_kernel<S, D><<<grid, dim3(kTile, 8), 0, stream>>>(src, dst, samples, rows, cols, accumulate);
  }
}

// ---- generic kernels of the rare paths ----------------------------------------------------------
__global__ void pad_2d_kernel(const void* x, Dims xd, void* xp, Dims pd, std::int64_t pad_top,
                              std::int64_t pad_left, DType dt, std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const Coord k = coord_of(pd, j);
    const std::int64_t h = k.h - pad_top, w = k.w - pad_left;
    const bool inside = h >= 0 && h < xd.h && w >= 0 && w < xd.w;
    store(xp, dt, j, inside ? load(x, dt, offset_of(xd, k.n, k.c, h, w)) : 0.0f);
  }
}

__global__ void crop_2d_kernel(const void* xp, Dims pd, void* x, Dims xd, std::int64_t pad_top,
                               std::int64_t pad_left, DType dt, bool accumulate,
                               std::int64_t count) {
  CNNERGY_GRID_STRIDE(j, count) {
    const Coord k = coord_of(xd, j);
    float v = load(xp, dt, offset_of(pd, k.n, k.c, k.h + pad_top, k.w + pad_left));
    if (accumulate) v += load(x, dt, j);
    store(x, dt, j, v);
  }
}

}  // namespace

void convert(const void* src, DType src_dtype, bool src_nhwc, void* dst, DType dst_dtype,
             const Dims& dst_dims, bool accumulate, cudaStream_t stream) {
  const std::int64_t count = dst_dims.numel();
  if (count == 0) return;
  const bool floating = src_dtype != DType::kI32 && dst_dtype != DType::kI32;
  if (floating && src_nhwc == dst_dims.nhwc) {
    dispatch_float(src_dtype, "convert", [&](auto s_tag) {
      using S = typename decltype(s_tag)::type;
      dispatch_float(dst_dtype, "convert", [&](auto d_tag) {
        using D = typename decltype(d_tag)::type;
        constexpr int K = static_cast<int>(16 / (sizeof(S) > sizeof(D) ? sizeof(S) : sizeof(D)));
        const bool vectorized = aligned_for(sizeof(S) * K, src) && aligned_for(sizeof(D) * K, dst);
        const std::int64_t packs = vectorized ? count / K : 0;
        convert_same_layout_kernel<S, D><<<pack_grid(packs, count, kUnroll), kBlock, 0, stream>>>(
            static_cast<const S*>(src), static_cast<D*>(dst), count, accumulate, packs);
      });
    });
    CNNERGY_CUDA_LAUNCH_CHECK("convert");
    return;
  }
  if (floating) {  // a layout change: per sample, [C][H*W] <-> [H*W][C]
    const std::int64_t plane = dst_dims.h * dst_dims.w;
    const std::int64_t rows = src_nhwc ? plane : dst_dims.c, cols = src_nhwc ? dst_dims.c : plane;
    dispatch_float(src_dtype, "convert", [&](auto s_tag) {
      using S = typename decltype(s_tag)::type;
      dispatch_float(dst_dtype, "convert", [&](auto d_tag) {
        using D = typename decltype(d_tag)::type;
        launch_transpose(static_cast<const S*>(src), static_cast<D*>(dst), dst_dims.n, rows, cols, accumulate,
                         stream);
      });
    });
    CNNERGY_CUDA_LAUNCH_CHECK("convert (layout)");
    return;
  }
  convert_generic_kernel<<<grid_for(count), kBlock, 0, stream>>>(
      src, src_dtype, src_nhwc, dst, dst_dtype, dst_dims, accumulate, count);
  CNNERGY_CUDA_LAUNCH_CHECK("convert_generic");
}

void fill(void* dst, DType dtype, std::int64_t count, float value, cudaStream_t stream) {
  if (count == 0) return;
  // The value in the dtype's bits, converted on the host as core/dtype.cpp does (and as the
  // device's round-to-nearest-even conversions do).
  if (dtype == DType::kF16 || dtype == DType::kBF16) {
    const std::uint16_t bits =
        dtype == DType::kF16 ? float_to_half_bits(value) : float_to_bf16_bits(value);
    const std::int64_t packs = aligned_for(16, dst) ? count / 8 : 0;
    fill_kernel<std::uint16_t><<<pack_grid(packs, count, kUnroll), kBlock, 0, stream>>>(
        static_cast<std::uint16_t*>(dst), count, bits, packs);
  } else {
    std::uint32_t bits = 0;
    if (dtype == DType::kI32) {
      const auto i = static_cast<std::int32_t>(value);
      std::memcpy(&bits, &i, sizeof bits);
    } else {
      std::memcpy(&bits, &value, sizeof bits);
    }
    const std::int64_t packs = aligned_for(16, dst) ? count / 4 : 0;
    fill_kernel<std::uint32_t><<<pack_grid(packs, count, kUnroll), kBlock, 0, stream>>>(
        static_cast<std::uint32_t*>(dst), count, bits, packs);
  }
  CNNERGY_CUDA_LAUNCH_CHECK("fill");
}

void add(const void* a, const void* b, void* y, DType dtype, std::int64_t count,
         cudaStream_t stream, bool relu) {
  dispatch_float(dtype, "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapArgs<T, 2> args{{static_cast<const T*>(a), static_cast<const T*>(b)},
                             static_cast<T*>(y)};
    if (relu)
      launch_map(args, AddReluOp{}, count, stream, "launch of kernel add_relu");
    else
      launch_map(args, AddOp{}, count, stream, "launch of kernel add");
  });
}

void relu_forward(const void* x, void* y, DType dtype, std::int64_t count, cudaStream_t stream) {
  dispatch_float(dtype, "relu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MapArgs<T, 1> args{{static_cast<const T*>(x)}, static_cast<T*>(y)};
    launch_map(args, ReluOp{}, count, stream, "launch of kernel relu_forward");
  });
}

void relu_backward(const void* y, const void* dy, void* dx, DType dtype, std::int64_t count,
                   bool accumulate, cudaStream_t stream) {
  dispatch_float(dtype, "relu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* yt = static_cast<const T*>(y);
    const T* dyt = static_cast<const T*>(dy);
    T* dxt = static_cast<T*>(dx);
    if (accumulate)
      launch_map(MapArgs<T, 3>{{yt, dyt, dxt}, dxt}, ReluBackwardOp<true>{}, count, stream,
                 "launch of kernel relu_backward");
    else
      launch_map(MapArgs<T, 2>{{yt, dyt}, dxt}, ReluBackwardOp<false>{}, count, stream,
                 "launch of kernel relu_backward");
  });
}

void dropout_forward(const void* x, void* mask, void* y, DType dtype, const Dims& dims, float p,
                     std::uint64_t seed, cudaStream_t stream) {
  const std::int64_t count = dims.numel();
  if (count == 0) return;
  const float scale = 1.0f / (1.0f - p);
  dispatch_float(dtype, "dropout_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vectorized = aligned_for(16, x, mask, y) && (!dims.nhwc || dims.c % kVec<T> == 0);
    const std::int64_t packs = vectorized ? count / kVec<T> : 0;
    dropout_forward_kernel<T><<<pack_grid(packs, count, 1), kBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(mask), static_cast<T*>(y), dims, p, scale, seed,
        count, packs);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("dropout_forward");
}

void dropout_backward(const void* dy, const void* mask, void* dx, DType dtype, std::int64_t count,
                      bool accumulate, cudaStream_t stream) {
  dispatch_float(dtype, "dropout_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dyt = static_cast<const T*>(dy);
    const T* mt = static_cast<const T*>(mask);
    T* dxt = static_cast<T*>(dx);
    if (accumulate)
      launch_map(MapArgs<T, 3>{{dyt, mt, dxt}, dxt}, MulOp<true>{}, count, stream,
                 "launch of kernel dropout_backward");
    else
      launch_map(MapArgs<T, 2>{{dyt, mt}, dxt}, MulOp<false>{}, count, stream,
                 "launch of kernel dropout_backward");
  });
}

void copy_2d(const void* src, std::int64_t src_ld, void* dst, std::int64_t dst_ld,
             std::int64_t rows, std::int64_t cols, DType dtype, bool accumulate,
             cudaStream_t stream) {
  const std::int64_t count = rows * cols;
  if (count == 0) return;
  dispatch_float(dtype, "copy_2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int K = kVec<T>;
    const auto* s = static_cast<const T*>(src);
    auto* d = static_cast<T*>(dst);
    if (cols % K == 0 && src_ld % K == 0 && dst_ld % K == 0 && aligned_for(16, src, dst))
      copy_2d_kernel<T, K><<<exact_grid(count / K), kBlock, 0, stream>>>(s, src_ld, d, dst_ld, cols,
                                                                         accumulate, count / K);
    else
      copy_2d_kernel<T, 1>
          <<<exact_grid(count), kBlock, 0, stream>>>(s, src_ld, d, dst_ld, cols, accumulate, count);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("copy_2d");
}

void pad_2d(const void* x, const Dims& x_dims, void* xp, const Dims& xp_dims, std::int64_t pad_top,
            std::int64_t pad_left, DType dtype, cudaStream_t stream) {
  const std::int64_t count = xp_dims.numel();
  if (count == 0) return;
  pad_2d_kernel<<<grid_for(count), kBlock, 0, stream>>>(x, x_dims, xp, xp_dims, pad_top, pad_left,
                                                        dtype, count);
  CNNERGY_CUDA_LAUNCH_CHECK("pad_2d");
}

void crop_2d(const void* xp, const Dims& xp_dims, void* x, const Dims& x_dims, std::int64_t pad_top,
             std::int64_t pad_left, DType dtype, bool accumulate, cudaStream_t stream) {
  const std::int64_t count = x_dims.numel();
  if (count == 0) return;
  crop_2d_kernel<<<grid_for(count), kBlock, 0, stream>>>(xp, xp_dims, x, x_dims, pad_top, pad_left,
                                                         dtype, accumulate, count);
  CNNERGY_CUDA_LAUNCH_CHECK("crop_2d");
}

void bias_add(void* y, const void* b, DType dtype, const ChannelView& view, cudaStream_t stream, bool relu) {
  const std::int64_t count = view.outer * view.channels * view.inner;
  if (count == 0) return;
  dispatch_float(dtype, "bias_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int K = kVec<T>;
    auto* yt = static_cast<T*>(y);
    const auto* bt = static_cast<const T*>(b);
    const bool aligned = aligned_for(16, y, b);
    if (view.inner == 1 && view.channels % K == 0 && aligned) {
      // Blocks of (32 channel packs or fewer) x (rows): 256 threads.
      const std::int64_t packs = view.channels / K;
      const unsigned bx = pow2_floor(std::min<std::int64_t>(packs, 32));
      const dim3 block(bx, kBlock / bx);
      const auto gx = static_cast<unsigned>((packs + bx - 1) / bx);
      const std::int64_t want_y = (view.outer + block.y - 1) / block.y;
      const std::int64_t cap_y = std::max<std::int64_t>(1, sm_count() * 8 / gx);
      const dim3 grid(gx, static_cast<unsigned>(std::clamp<std::int64_t>(
                              want_y, 1, std::min<std::int64_t>(cap_y, 65535))));
      bias_add_rows_kernel<T><<<grid, block, 0, stream>>>(yt, bt, view.outer, view.channels, relu);
    } else if (view.inner % K == 0 && aligned) {
      bias_add_kernel<T, K><<<exact_grid(count / K), kBlock, 0, stream>>>(yt, bt, view, count / K, relu);
    } else {
      bias_add_kernel<T, 1><<<exact_grid(count), kBlock, 0, stream>>>(yt, bt, view, count, relu);
    }
  });
  CNNERGY_CUDA_LAUNCH_CHECK("bias_add");
}

void check_finite(const void* t, DType dtype, std::int64_t count, std::int32_t* flag,
                  cudaStream_t stream) {
  if (count == 0 || dtype == DType::kI32) return;  // integers are always finite
  dispatch_float(dtype, "check_finite", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::int64_t packs = aligned_for(16, t) ? count / kVec<T> : 0;
    check_finite_kernel<T><<<pack_grid(packs, count, kUnroll), kBlock, 0, stream>>>(
        static_cast<const T*>(t), count, flag, packs);
  });
  CNNERGY_CUDA_LAUNCH_CHECK("check_finite");
}

}  // namespace cnnergy::cuda::kernels
