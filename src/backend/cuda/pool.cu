// The CUDA backend's own pooling kernels, with the CPU reference's semantics: first maximum in scan
// order (a NaN wins and propagates), Caffe window divisors; cuDNN runs pooling where it matches the
// contract (layers_cuda.cpp), these kernels the rest (bf16, Caffe ceil-mode windows). LRN: lrn.cu.
// Templated on the storage type; NHWC tensors whose channels fill 16-byte packs move 8 (fp16/bf16)
// or 4 (fp32) channels per access. Max-pool backward runs in two gather passes: the window argmax of
// every output (one byte each) from x, then for every input the windows that hold it, summing dy
// where it is the argmax: no atomics (deterministic, exact in fp16/bf16), no dependence on a previous
// forward (a training forward may keep the argmax bytes instead: Pool2dDesc::keep_argmax). Stride-2
// windows of at most 3 x 3 gather per 2 x 2 tile of inputs (pool_backward_tile_kernel); global
// average pooling's backward has its own kernel. A max pool's forward may normalise a batch norm's
// input as it reads it (PoolNormalisation), so that the batch norm's output is never written. Index
// math runs in 32-bit ints (division by multiply-shift) where coordinates fit, in 64 bits otherwise.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/cuda/batch_norm_plan.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_utils.cuh"

namespace cnnergy::cuda::kernels {

namespace {

constexpr int kNoArgmax = 255;                  // argmax byte of an empty window
constexpr std::int64_t kMaxArgmaxWindow = 255;  // larger windows recompute the argmax in backward

// ---- pooling -----------------------------------------------------------------------------------
// The index math runs in the index type I: int where every coordinate, item index and memory
// offset of the call fits (index_fits_int), std::int64_t otherwise. The GPU has no integer divide:
// a 64-bit division or remainder is a software routine (tens of instructions even on its 32-bit
// fast path, a hundred-odd off it), and these kernels made dozens per item. In 32 bits a division
// by a per-call divisor is a multiply-high, an add and a shift (Divisor<int>), and the backward
// walks its windows with counters instead of dividing a window index.

// Quotients x / d of non-negative x by a divisor fixed per call.
template <typename I>
struct Divisor;

template <>
struct Divisor<std::int64_t> {
  std::int64_t d = 1;
  Divisor() = default;
  explicit Divisor(std::int64_t divisor) : d(divisor) {}
  __device__ __forceinline__ std::int64_t div(std::int64_t x) const { return x / d; }
};

// Round-up multiply-shift division (Granlund-Montgomery), exact for 0 <= x < 2^31 and
// 1 <= d < 2^31: with 2^(shift-1) < d <= 2^shift, x / d = (umulhi(x, magic) + x) >> shift, where
// magic = floor(2^32 (2^shift - d) / d) + 1 < 2^32. The sum cannot wrap (umulhi(x, magic) <= x).
template <>
struct Divisor<int> {
  int d = 1;
  unsigned magic = 1, shift = 0;
  Divisor() = default;
  explicit Divisor(std::int64_t divisor) : d(static_cast<int>(divisor)) {
    while ((std::int64_t{1} << shift) < divisor) ++shift;
    const auto ud = static_cast<std::uint64_t>(divisor);
    magic = static_cast<unsigned>(
        (std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - ud) / ud + 1);
  }
  __device__ __forceinline__ int div(int x) const {
    const auto u = static_cast<unsigned>(x);
    return static_cast<int>((__umulhi(u, magic) + u) >> shift);
  }
};

// A call's geometry (Dims and PoolParams) in the index type, with the divisors the kernels use.
template <typename I>
struct Geometry {
  I n, c, h, w;  // the input
  I out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  int mode;
  bool nhwc;
  // The digits of an item index of the kernel's item tensor (the input or the output, in packs of
  // K channels), fastest first: NHWC channel pack, w, h (then n); NCHW w, h, c (then n).
  Divisor<I> item[3];
  Divisor<I> stride_h_div, stride_w_div;
};

// True when the call's index math fits in int: every element count and offset of the input and
// output, and every window bound, padding included (window starts reach
// (out - 1) * stride - pad, ends start + kernel, and the backward adds a stride to round up).
bool index_fits_int(const Dims& x, const PoolParams& p) {
  constexpr std::int64_t lim = std::numeric_limits<int>::max();
  for (const std::int64_t v : {x.n, x.c, x.h, x.w, p.out_h, p.out_w, p.kernel_h, p.kernel_w,
                               p.stride_h, p.stride_w, p.pad_h, p.pad_w})
    if (v < 0 || v > lim) return false;  // then a product of two values up to lim fits in int64
  const auto fits = [](std::int64_t a, std::int64_t b) { return a * b <= lim; };
  return fits(x.n, x.c) && fits(x.h, x.w) && fits(p.out_h, p.out_w) && fits(x.n * x.c, x.h * x.w) &&
         fits(x.n * x.c, p.out_h * p.out_w) && fits(p.kernel_h, p.kernel_w) &&
         x.h + 2 * p.pad_h + p.kernel_h + (p.out_h + 1) * p.stride_h <= lim &&
         x.w + 2 * p.pad_w + p.kernel_w + (p.out_w + 1) * p.stride_w <= lim;
}

// Items are packs of k channels (k = 1 for single elements) of the output (forward and argmax
// kernels) or of the input (backward).
template <typename I>
Geometry<I> geometry(const Dims& x, const PoolParams& p, int k, bool output_items) {
  Geometry<I> g{};
  const auto cast = [](std::int64_t v) { return static_cast<I>(v); };
  g.n = cast(x.n);
  g.c = cast(x.c);
  g.h = cast(x.h);
  g.w = cast(x.w);
  g.out_h = cast(p.out_h);
  g.out_w = cast(p.out_w);
  g.kernel_h = cast(p.kernel_h);
  g.kernel_w = cast(p.kernel_w);
  g.stride_h = cast(p.stride_h);
  g.stride_w = cast(p.stride_w);
  g.pad_h = cast(p.pad_h);
  g.pad_w = cast(p.pad_w);
  g.mode = p.mode;
  g.nhwc = x.nhwc;
  // An empty dimension leaves no items to divide: divisor 1 keeps the construction defined.
  const auto divisor = [](std::int64_t d) { return Divisor<I>(std::max<std::int64_t>(d, 1)); };
  const std::int64_t h = output_items ? p.out_h : x.h, w = output_items ? p.out_w : x.w;
  if (x.nhwc) {
    g.item[0] = divisor(x.c / k);
    g.item[1] = divisor(w);
    g.item[2] = divisor(h);
  } else {
    g.item[0] = divisor(w);
    g.item[1] = divisor(h);
    g.item[2] = divisor(x.c);
  }
  g.stride_h_div = divisor(p.stride_h);
  g.stride_w_div = divisor(p.stride_w);
  return g;
}

template <typename I>
struct Location {
  I n, c, h, w;
};

// Item q of the kernel's item tensor: (n, first channel, h, w). Item q starts at memory offset
// q * k in either layout.
template <typename I>
__device__ __forceinline__ Location<I> item_location(const Geometry<I>& g, int k, I q) {
  I digit[3];
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const I rest = g.item[i].div(q);
    digit[i] = q - rest * g.item[i].d;
    q = rest;
  }
  return g.nhwc ? Location<I>{q, digit[0] * k, digit[2], digit[1]}
                : Location<I>{q, digit[2], digit[1], digit[0]};
}

// Memory offsets of (n, c, h, w) in the input and the output; with K > 1 (NHWC only) c is the
// first channel of a pack.
template <typename I>
__device__ __forceinline__ I offset(const Geometry<I>& g, I rows, I cols, I n, I c, I h, I w) {
  return g.nhwc ? ((n * rows + h) * cols + w) * g.c + c : ((n * g.c + c) * rows + h) * cols + w;
}
template <typename I>
__device__ __forceinline__ I x_at(const Geometry<I>& g, I n, I c, I h, I w) {
  return offset(g, g.h, g.w, n, c, h, w);
}
template <typename I>
__device__ __forceinline__ I y_at(const Geometry<I>& g, I n, I c, I h, I w) {
  return offset(g, g.out_h, g.out_w, n, c, h, w);
}

template <typename I>
struct Window {
  I hs, ws;          // start, padding included
  I h0, h1, w0, w1;  // clipped to the input
  float divisor;
};

template <typename I>
__device__ __forceinline__ Window<I> pool_window(const Geometry<I>& g, I oh, I ow) {
  const I hs = oh * g.stride_h - g.pad_h, ws = ow * g.stride_w - g.pad_w;
  const I he_pad = min(hs + g.kernel_h, g.h + g.pad_h);
  const I we_pad = min(ws + g.kernel_w, g.w + g.pad_w);
  Window<I> win{hs, ws, max(hs, I{0}), min(he_pad, g.h), max(ws, I{0}), min(we_pad, g.w), 1.0f};
  // In 64 bits: each extent fits in I, their product need not (an empty window's two negative
  // extents).
  const std::int64_t count = g.mode == 1
                                 ? static_cast<std::int64_t>(he_pad - hs) * (we_pad - ws)
                                 : static_cast<std::int64_t>(win.h1 - win.h0) * (win.w1 - win.w0);
  win.divisor = static_cast<float>(count);
  return win;
}

// Packs that a kernel holds while loads are in flight, kept as 32-bit words where they fill them:
// split into its 16-bit or 8-bit lanes, a pack would take a register per lane.
template <int Bytes>
struct alignas(Bytes) Words {
  unsigned w[Bytes / 4];
};
template <typename T, int K>
using Held = std::conditional_t<sizeof(T) * K % 4 == 0, Words<sizeof(T) * K>, Pack<T, K>>;

template <typename T, int K>
__device__ __forceinline__ Held<T, K> load_held(const T* p) {
  return *reinterpret_cast<const Held<T, K>*>(p);
}

// Lane k of a held pack of T: as float, and (argmax bytes) as int.
template <typename T, int K>
__device__ __forceinline__ float lane_float(const Pack<T, K>& p, int k) {
  return to_float(p.v[k]);
}
template <typename T, int Bytes>
__device__ __forceinline__ float lane_float(const Words<Bytes>& p, int k) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(p.w[k]);
  } else {
    const auto bits = static_cast<unsigned short>(p.w[k / 2] >> (16 * (k % 2)));
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      return to_float(__ushort_as_bfloat16(bits));
    else
      return to_float(__ushort_as_half(bits));
  }
}
template <int K>
__device__ __forceinline__ int lane_byte(const Pack<std::uint8_t, K>& p, int k) {
  return p.v[k];
}
template <int Bytes>
__device__ __forceinline__ int lane_byte(const Words<Bytes>& p, int k) {
  return static_cast<int>((p.w[k / 4] >> (8 * (k % 4))) & 0xffu);
}

// Bit k set where lane k of y passes the ReLU's mask (y > 0; NaN does not), as the ReLU's backward tests it.
template <typename T, int K>
__device__ __forceinline__ unsigned relu_lanes(const Held<T, K>& y) {
  unsigned bits = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) bits |= (lane_float<T>(y, k) > 0.0f ? 1u : 0u) << k;
  return bits;
}

// Calls f(held pack, h, w) for the window's elements in scan order (rows, then columns), loading
// kWindowLoads elements of a row before using them: a window scan is a chain of dependent
// accumulations, and without loads in flight it would wait out the memory latency per element.
constexpr int kWindowLoads = 4;

template <typename T, int K, typename I, class F>
__device__ __forceinline__ void scan_window(const T* x, const Geometry<I>& g, I n, I c0,
                                            const Window<I>& win, F&& f) {
  for (I h = win.h0; h < win.h1; ++h)
    for (I w0 = win.w0; w0 < win.w1; w0 += kWindowLoads) {
      Held<T, K> v[kWindowLoads];
#pragma unroll
      for (int i = 0; i < kWindowLoads; ++i)
        if (w0 + i < win.w1) v[i] = load_held<T, K>(x + x_at(g, n, c0, h, w0 + i));
#pragma unroll
      for (int i = 0; i < kWindowLoads; ++i)
        if (w0 + i < win.w1) f(v[i], h, w0 + i);
    }
}

// What a max pool sees of an input value: the value itself (kNone), or a batch norm's normalisation
// applied as it is read (PoolNormalisation: the pool reads the batch norm's input), v * scale + shift,
// clamped at 0 (kRelu), rounded to T: exactly the value the batch norm's apply pass stores
// (batch_norm.cu's tile, plane and generic kernels), so each window finds the maximum it would find in
// the batch norm's output.
enum class Seen : int { kNone, kAffine, kRelu };

template <typename T, int K, Seen kSeen>
struct SeenValues {
  float scale[kSeen == Seen::kNone ? 1 : K] = {}, shift[kSeen == Seen::kNone ? 1 : K] = {};

  SeenValues() = default;  // kNone: nothing to hold
  // The coefficients of channels c0 .. c0 + K - 1 (coef: scale[C] then shift[C]; 16-byte aligned
  // where K fills float4s).
  __device__ __forceinline__ SeenValues(const float* coef, int channels, int c0) {
    if constexpr (kSeen != Seen::kNone) {
      if constexpr (K % 4 == 0) {
#pragma unroll
        for (int k = 0; k < K; k += 4) {
          const float4 a = __ldg(reinterpret_cast<const float4*>(coef + c0 + k));
          const float4 b = __ldg(reinterpret_cast<const float4*>(coef + channels + c0 + k));
          scale[k] = a.x, scale[k + 1] = a.y, scale[k + 2] = a.z, scale[k + 3] = a.w;
          shift[k] = b.x, shift[k + 1] = b.y, shift[k + 2] = b.z, shift[k + 3] = b.w;
        }
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) {
          scale[k] = __ldg(coef + c0 + k);
          shift[k] = __ldg(coef + channels + c0 + k);
        }
      }
    }
  }
  __device__ __forceinline__ float operator()(float v, int k) const {
    if constexpr (kSeen == Seen::kNone) {
      return v;
    } else {
      const float o = fmaf(v, scale[k], shift[k]);
      return to_float(from_float<T>(kSeen == Seen::kRelu ? bn::clamp_relu(o) : o));
    }
  }
};

// Per lane: the window-relative position ((h - hs) * kernel_w + (w - ws)) of the first maximum in
// scan order, a NaN winning; -1 for an empty window. best gets the maximum (0 when empty). seen maps
// each loaded value to the value compared (SeenValues).
template <typename T, int K, typename I, Seen kSeen = Seen::kNone>
__device__ __forceinline__ void window_argmax(const T* x, const Geometry<I>& g, I n, I c0,
                                              const Window<I>& win, float (&best)[K],
                                              int (&pos)[K], const SeenValues<T, K, kSeen>& seen) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    best[k] = 0.0f;
    pos[k] = -1;
  }
  bool first = true;
  scan_window<T, K>(x, g, n, c0, win, [&](const Held<T, K>& v, I h, I w) {
    const int here = static_cast<int>((h - win.hs) * g.kernel_w + (w - win.ws));
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float f = seen(lane_float<T>(v, k), k);
      if (first || f > best[k] || (isnan(f) && !isnan(best[k]))) {
        best[k] = f;
        pos[k] = here;
      }
    }
    first = false;
  });
}

// The kernels take one thread per item (exact_grid); the grid-stride loop runs in 64 bits, the
// item index in I. With argmax (max mode), forward also writes pool_argmax_kernel's bytes. With a
// normalisation (kSeen, max mode only) each window's values are the batch norm's output of x
// (SeenValues; coef as PoolNormalisation's).
template <typename T, int K, typename I, Seen kSeen = Seen::kNone>
__global__ void __launch_bounds__(kBlock)
    pool_forward_kernel(const T* x, T* y, Geometry<I> g, std::int64_t items, std::uint8_t* argmax,
                        const float* coef) {
  CNNERGY_GRID_STRIDE(item, items) {
    const I q = static_cast<I>(item);
    const Location<I> o = item_location(g, K, q);
    const Window<I> win = pool_window(g, o.h, o.w);
    float out[K];
    if (g.mode == 0) {
      int pos[K];
      const SeenValues<T, K, kSeen> seen(coef, static_cast<int>(g.c), static_cast<int>(o.c));
      window_argmax<T, K>(x, g, o.n, o.c, win, out, pos, seen);
      if (argmax != nullptr) {
        Pack<std::uint8_t, K> r;
#pragma unroll
        for (int k = 0; k < K; ++k) r.v[k] = static_cast<std::uint8_t>(pos[k] < 0 ? kNoArgmax : pos[k]);
        store_pack<std::uint8_t, K>(argmax + q * K, r);
      }
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) out[k] = 0.0f;
      scan_window<T, K>(x, g, o.n, o.c, win, [&](const Held<T, K>& v, I, I) {
#pragma unroll
        for (int k = 0; k < K; ++k) out[k] += lane_float<T>(v, k);
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
template <typename T, int K, typename I>
__global__ void __launch_bounds__(kBlock)
    pool_argmax_kernel(const T* x, std::uint8_t* argmax, Geometry<I> g, std::int64_t items) {
  CNNERGY_GRID_STRIDE(item, items) {
    const I q = static_cast<I>(item);
    const Location<I> o = item_location(g, K, q);
    float best[K];
    int pos[K];
    window_argmax<T, K>(x, g, o.n, o.c, pool_window(g, o.h, o.w), best, pos, SeenValues<T, K, Seen::kNone>{});
    Pack<std::uint8_t, K> r;
#pragma unroll
    for (int k = 0; k < K; ++k) r.v[k] = static_cast<std::uint8_t>(pos[k] < 0 ? kNoArgmax : pos[k]);
    store_pack<std::uint8_t, K>(argmax + q * K, r);
  }
}

// Gather: one thread per input item walks the windows that hold it, (oh0, ow0) to (oh1, ow1) in
// scan order, loading kWindowLoads windows' dy (and argmax bytes) before using them. Max mode reads
// the argmax bytes; without them (windows beyond a byte: the host then runs K = 1) it recomputes
// each window's argmax.
template <typename T, int K, typename I>
__global__ void __launch_bounds__(kBlock)
    pool_backward_kernel(const T* x, const T* dy, const std::uint8_t* argmax, const T* relu_y, T* dx, Geometry<I> g,
                         bool accumulate, std::int64_t items) {
  CNNERGY_GRID_STRIDE(item, items) {
    const I q = static_cast<I>(item);
    const Location<I> in = item_location(g, K, q);
    // windows with oh * stride - pad <= h < oh * stride - pad + kernel
    const I nh = in.h + g.pad_h - g.kernel_h + 1, nw = in.w + g.pad_w - g.kernel_w + 1;
    const I oh0 = nh <= 0 ? I{0} : g.stride_h_div.div(nh + g.stride_h - 1);
    const I ow0 = nw <= 0 ? I{0} : g.stride_w_div.div(nw + g.stride_w - 1);
    const I oh1 = min(g.out_h - 1, g.stride_h_div.div(in.h + g.pad_h));
    const I ow1 = min(g.out_w - 1, g.stride_w_div.div(in.w + g.pad_w));
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = 0.0f;
    // (oh, ow): the next window; oh > oh1 once they are all taken (at once without columns).
    I oh = ow0 <= ow1 ? oh0 : oh1 + 1, ow = ow0;
    while (oh <= oh1) {
      I wh[kWindowLoads], ww[kWindowLoads];  // this round's windows; wh > oh1: none
      Held<T, K> d[kWindowLoads];
      Held<std::uint8_t, K> a[kWindowLoads];
      unsigned live[kWindowLoads];  // lane k's bit: the window's output passes the ReLU mask (relu_y)
#pragma unroll
      for (int i = 0; i < kWindowLoads; ++i) {
        wh[i] = oh;
        ww[i] = ow;
        live[i] = ~0u;
        if (oh > oh1) continue;
        const I out = y_at(g, in.n, in.c, oh, ow);
        d[i] = load_held<T, K>(dy + out);
        if (g.mode == 0 && argmax != nullptr) a[i] = load_held<std::uint8_t, K>(argmax + out);
        if (relu_y != nullptr) live[i] = relu_lanes<T, K>(load_held<T, K>(relu_y + out));
        if (ow < ow1) {
          ++ow;
        } else {
          ow = ow0;
          ++oh;
        }
      }
#pragma unroll
      for (int i = 0; i < kWindowLoads; ++i) {
        if (wh[i] > oh1) continue;
        if (g.mode != 0) {
          const float divisor = pool_window(g, wh[i], ww[i]).divisor;
#pragma unroll
          for (int k = 0; k < K; ++k) acc[k] += lane_float<T>(d[i], k) / divisor;
          continue;
        }
        const I hs = wh[i] * g.stride_h - g.pad_h, ws = ww[i] * g.stride_w - g.pad_w;
        const int mine = static_cast<int>((in.h - hs) * g.kernel_w + (in.w - ws));
        int pos[K];
        if constexpr (K == 1) {
          if (argmax == nullptr) {
            float best[K];
            window_argmax<T, K>(x, g, in.n, in.c, pool_window(g, wh[i], ww[i]), best, pos, SeenValues<T, K, Seen::kNone>{});
          } else {
            pos[0] = lane_byte(a[i], 0);
          }
        } else {
#pragma unroll
          for (int k = 0; k < K; ++k) pos[k] = lane_byte(a[i], k);
        }
#pragma unroll
        for (int k = 0; k < K; ++k)
          if (pos[k] == mine && ((live[i] >> k) & 1u)) acc[k] += lane_float<T>(d[i], k);
      }
    }
    Pack<T, K> r;
    if (accumulate) r = load_pack<T, K>(dx + q * K);
#pragma unroll
    for (int k = 0; k < K; ++k)
      r.v[k] = from_float<T>(accumulate ? acc[k] + to_float(r.v[k]) : acc[k]);
    store_pack<T, K>(dx + q * K, r);
  }
}

// Max pooling with stride 2 and windows of at most 3 x 3 (ResNet's stem, VGG's and AlexNet's pools),
// NHWC packs, argmax bytes given: a 2 x 2 tile of inputs lies in at most 2 x 2 windows (per dimension
// the windows holding rows 2i and 2i + 1 span at most floor(kernel / 2) + 1 of them). One thread per
// tile and channel pack loads each of those windows' dy and argmax bytes once for its four inputs,
// where pool_backward_kernel loads them once per input (2.25 times as many for 3 x 3 windows) and
// works out an input's coordinates per input. Each input sums its windows in the same order
// (rows, then columns) as pool_backward_kernel: the same values bit for bit. g's item divisors are
// those of the tiles (packs, tile columns, tile rows).
template <typename T, int K>
__global__ void __launch_bounds__(kBlock)
    pool_backward_tile_kernel(const T* dy, const std::uint8_t* argmax, const T* relu_y, T* dx, Geometry<int> g,
                              bool accumulate, std::int64_t items) {
  CNNERGY_GRID_STRIDE(item, items) {
    const Location<int> t = item_location(g, K, static_cast<int>(item));  // t.h, t.w: the tile
    const int h0 = 2 * t.h, w0 = 2 * t.w;
    // The windows holding rows h0, h0 + 1 and columns w0, w0 + 1 (stride 2).
    const int nh = h0 + g.pad_h - g.kernel_h + 1, nw = w0 + g.pad_w - g.kernel_w + 1;
    const int oh0 = nh <= 0 ? 0 : (nh + 1) >> 1, ow0 = nw <= 0 ? 0 : (nw + 1) >> 1;
    const int oh1 = min(g.out_h - 1, (h0 + 1 + g.pad_h) >> 1);
    const int ow1 = min(g.out_w - 1, (w0 + 1 + g.pad_w) >> 1);
    Held<T, K> d[2][2];
    Held<std::uint8_t, K> a[2][2];
    unsigned live[2][2];  // lane k's bit: the window's output passes the ReLU mask (relu_y)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        live[i][j] = ~0u;
        if (oh0 + i <= oh1 && ow0 + j <= ow1) {
          const int out = y_at(g, t.n, t.c, oh0 + i, ow0 + j);
          d[i][j] = load_held<T, K>(dy + out);
          a[i][j] = load_held<std::uint8_t, K>(argmax + out);
          if (relu_y != nullptr) live[i][j] = relu_lanes<T, K>(load_held<T, K>(relu_y + out));
        }
      }
#pragma unroll
    for (int dh = 0; dh < 2; ++dh)
#pragma unroll
      for (int dw = 0; dw < 2; ++dw) {
        const int h = h0 + dh, w = w0 + dw;
        if (h >= g.h || w >= g.w) continue;
        float acc[K];
#pragma unroll
        for (int k = 0; k < K; ++k) acc[k] = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int hs = (oh0 + i) * 2 - g.pad_h;
          if (oh0 + i > oh1 || h < hs || h >= hs + g.kernel_h) continue;
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int ws = (ow0 + j) * 2 - g.pad_w;
            if (ow0 + j > ow1 || w < ws || w >= ws + g.kernel_w) continue;
            const int mine = (h - hs) * g.kernel_w + (w - ws);
#pragma unroll
            for (int k = 0; k < K; ++k)
              if (lane_byte(a[i][j], k) == mine && ((live[i][j] >> k) & 1u)) acc[k] += lane_float<T>(d[i][j], k);
          }
        }
        T* at = dx + x_at(g, t.n, t.c, h, w);
        Pack<T, K> r;
        if (accumulate) r = load_pack<T, K>(at);
#pragma unroll
        for (int k = 0; k < K; ++k) r.v[k] = from_float<T>(accumulate ? acc[k] + to_float(r.v[k]) : acc[k]);
        store_pack<T, K>(at, r);
      }
  }
}

// Global average pooling's backward (one window, the whole plane: ResNet's and GoogLeNet's heads),
// NHWC packs: a thread per input pack, dy / (H * W) (pool_backward_kernel's value; only a zero's sign
// may differ, where that kernel adds the quotient to +0), without the window walk (twice as fast at
// ResNet-50's head). The forward keeps pool_forward_kernel, which already reads at the memory's pace
// there.
// plane_packs: positions * packs (the packs of one image's input).
template <typename T, int K>
__global__ void __launch_bounds__(kBlock)
    global_avg_backward_kernel(const T* dy, T* dx, Divisor<int> plane_packs, Divisor<int> packs,
                               float divisor, bool accumulate, std::int64_t items) {
  CNNERGY_GRID_STRIDE(item, items) {
    const int q = static_cast<int>(item);
    const int n = plane_packs.div(q);
    const int pack = q - packs.div(q) * packs.d;
    const Held<T, K> d = load_held<T, K>(dy + (static_cast<std::int64_t>(n) * packs.d + pack) * K);
    Pack<T, K> r;
    if (accumulate) r = load_pack<T, K>(dx + item * K);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float g = lane_float<T>(d, k) / divisor;
      r.v[k] = from_float<T>(accumulate ? g + to_float(r.v[k]) : g);
    }
    store_pack<T, K>(dx + item * K, r);
  }
}

// Whether global_avg_backward_kernel runs a packed call: average mode, one window of the whole plane
// without padding, int index math.
bool pool_global(const Dims& x, const PoolParams& p, bool int_index) {
  return int_index && p.mode != 0 && p.out_h == 1 && p.out_w == 1 && p.kernel_h == x.h &&
         p.kernel_w == x.w && p.pad_h == 0 && p.pad_w == 0 && x.h * x.w > 0;
}

// Whether pool_backward_tile_kernel runs a packed call: max mode with argmax bytes, stride 2 and
// windows of at most 3 in both dimensions, int index math.
bool pool_tiles(const PoolParams& p, bool int_index, bool argmax) {
  return int_index && argmax && p.mode == 0 && p.stride_h == 2 && p.stride_w == 2 &&
         p.kernel_h <= 3 && p.kernel_w <= 3;
}

// The input geometry with the tiles' item divisors (packs, tile columns, tile rows).
Geometry<int> tile_geometry(const Dims& x, const PoolParams& p, int k) {
  Geometry<int> g = geometry<int>(x, p, k, false);
  g.item[1] = Divisor<int>(std::max<std::int64_t>((x.w + 1) / 2, 1));
  g.item[2] = Divisor<int>(std::max<std::int64_t>((x.h + 1) / 2, 1));
  return g;
}

// Packs of kVec<T> channels for NHWC tensors whose channels fill them; single elements otherwise.
template <typename T>
bool pool_packs(const Dims& d, const void* a, const void* b, const void* c) {
  return d.nhwc && d.c % kVec<T> == 0 && aligned_for(16, a, b, c);
}

// Calls f(I{}) with the call's index type.
template <class F>
void dispatch_index(const Dims& x, const PoolParams& p, F&& f) {
  index_fits_int(x, p) ? f(int{}) : f(std::int64_t{});
}

}  // namespace

std::size_t pool_backward_scratch_bytes(const Dims& x_dims, const PoolParams& p) {
  if (p.mode != 0 || p.kernel_h * p.kernel_w > kMaxArgmaxWindow) return 0;
  return static_cast<std::size_t>(x_dims.n * x_dims.c * p.out_h * p.out_w);
}

void pool_forward(const void* x, const Dims& x_dims, void* y, DType dtype, const PoolParams& p,
                  cudaStream_t stream, std::uint8_t* argmax, const PoolNormalisation& normalise) {
  const std::int64_t count = x_dims.n * x_dims.c * p.out_h * p.out_w;
  if (count == 0) return;
  if (pool_backward_scratch_bytes(x_dims, p) == 0) argmax = nullptr;  // average, or windows beyond a byte
  const float* coef = normalise.coef;
  CNNERGY_CHECK(coef == nullptr || p.mode == 0, "pool_forward: a batch norm's normalisation is applied by max pooling only");
  dispatch_float(dtype, "pool_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int K = kVec<T>;
    const auto* xt = static_cast<const T*>(x);
    auto* yt = static_cast<T*>(y);
    dispatch_index(x_dims, p, [&](auto index) {
      using I = decltype(index);
      auto launch = [&](auto k, auto seen) {
        constexpr int kK = decltype(k)::value;
        pool_forward_kernel<T, kK, I, decltype(seen)::value><<<exact_grid(count / kK), kBlock, 0, stream>>>(
            xt, yt, geometry<I>(x_dims, p, kK, true), count / kK, argmax, coef);
      };
      auto with_seen = [&](auto k) {
        if (coef == nullptr)
          launch(k, std::integral_constant<Seen, Seen::kNone>{});
        else if (normalise.relu)
          launch(k, std::integral_constant<Seen, Seen::kRelu>{});
        else
          launch(k, std::integral_constant<Seen, Seen::kAffine>{});
      };
      // The coefficients' packs are 16-byte aligned where coef is (C is a multiple of K there).
      if (pool_packs<T>(x_dims, x, y, coef))
        with_seen(std::integral_constant<int, K>{});
      else
        with_seen(std::integral_constant<int, 1>{});
    });
  });
  CNNERGY_CUDA_LAUNCH_CHECK("pool_forward");
}

void pool_backward(const void* x, const void* dy, void* dx, const Dims& x_dims, DType dtype,
                   const PoolParams& p, bool accumulate, void* scratch, cudaStream_t stream,
                   const std::uint8_t* kept_argmax, const void* relu_y) {
  CNNERGY_CHECK(relu_y == nullptr || (p.mode == 0 && kept_argmax != nullptr),
                "pool_backward: the ReLU mask needs max pooling with a kept argmax");
  const std::int64_t count = x_dims.numel();
  const std::int64_t out_count = x_dims.n * x_dims.c * p.out_h * p.out_w;
  if (count == 0) return;
  // The argmax pass writes into the scratch of pool_backward_scratch_bytes; a kept argmax needs no
  // pass; without either (average pooling, windows beyond a byte) the gather pass recomputes each
  // window's argmax.
  const bool has_argmax = pool_backward_scratch_bytes(x_dims, p) > 0;
  std::uint8_t* argmax_out = has_argmax && kept_argmax == nullptr ? static_cast<std::uint8_t*>(scratch) : nullptr;
  const std::uint8_t* argmax = has_argmax && kept_argmax != nullptr ? kept_argmax : argmax_out;
  dispatch_float(dtype, "pool_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int K = kVec<T>;
    const auto* xt = static_cast<const T*>(x);
    const auto* dyt = static_cast<const T*>(dy);
    const auto* ryt = static_cast<const T*>(relu_y);
    auto* dxt = static_cast<T*>(dx);
    // Max windows beyond a byte recompute their argmax: element by element (rare; it keeps the
    // packed kernel's registers down).
    const bool recompute = p.mode == 0 && argmax == nullptr;
    const int k = !recompute && pool_packs<T>(x_dims, x, dy, dx) && aligned_for(16, relu_y) ? K : 1;
    dispatch_index(x_dims, p, [&](auto index) {
      using I = decltype(index);
      const Geometry<I> outputs = geometry<I>(x_dims, p, k, true);
      const Geometry<I> inputs = geometry<I>(x_dims, p, k, false);
      if (k == K) {
        if (argmax_out != nullptr && out_count > 0)
          pool_argmax_kernel<T, K, I><<<exact_grid(out_count / K), kBlock, 0, stream>>>(
              xt, argmax_out, outputs, out_count / K);
        if (pool_global(x_dims, p, std::is_same_v<I, int>)) {
          const std::int64_t packs_per_image = x_dims.c / K;
          global_avg_backward_kernel<T, K><<<exact_grid(count / K), kBlock, 0, stream>>>(
              dyt, dxt, Divisor<int>(x_dims.h * x_dims.w * packs_per_image), Divisor<int>(packs_per_image),
              static_cast<float>(x_dims.h * x_dims.w), accumulate, count / K);
        } else if (pool_tiles(p, std::is_same_v<I, int>, argmax != nullptr)) {
          const std::int64_t tiles = x_dims.n * ((x_dims.h + 1) / 2) * ((x_dims.w + 1) / 2) * (x_dims.c / K);
          pool_backward_tile_kernel<T, K><<<exact_grid(tiles), kBlock, 0, stream>>>(
              dyt, argmax, ryt, dxt, tile_geometry(x_dims, p, K), accumulate, tiles);
        } else {
          pool_backward_kernel<T, K, I><<<exact_grid(count / K), kBlock, 0, stream>>>(
              xt, dyt, argmax, ryt, dxt, inputs, accumulate, count / K);
        }
      } else {
        if (argmax_out != nullptr && out_count > 0)
          pool_argmax_kernel<T, 1, I>
              <<<exact_grid(out_count), kBlock, 0, stream>>>(xt, argmax_out, outputs, out_count);
        pool_backward_kernel<T, 1, I><<<exact_grid(count), kBlock, 0, stream>>>(
            xt, dyt, argmax, ryt, dxt, inputs, accumulate, count);
      }
    });
  });
  CNNERGY_CUDA_LAUNCH_CHECK("pool_backward");
}

}  // namespace cnnergy::cuda::kernels
