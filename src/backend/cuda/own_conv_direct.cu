// The own "direct" convolution: the sums of the definition, in fp32 for every storage type.
// Forward and backward data compute one output element per thread over an 8x32 tile of outputs per
// block, with the input (dy) patch and the filter of a chunk of channels staged in shared memory;
// backward filter gives each (k, c) pair a block whose threads split the N*OH*OW reduction for up
// to 16 filter taps at a time. Any stride, padding, dilation and groups; NCHW and NHWC.
#include <algorithm>
#include <memory>
#include <string>

#include "backend/cuda/own_conv_common.cuh"

namespace cnnergy::cuda {

namespace {

using kernels::from_float;
using kernels::to_float;
using own::ConvGeom;

constexpr int kTileH = own::kDirectTileH, kTileW = own::kDirectTileW;  // output / input tile
constexpr int kThreads = kTileH * kTileW;                               // one element per thread
constexpr int kTaps = 16;                   // backward filter: taps accumulated per pass

// Forward. Block: tile (blockIdx.x) of output k = blockIdx.y of image n = blockIdx.z; channels
// of k's group in chunks of `cc`: patch [cc][ph][pw] then filter [cc][R][S] in shared memory.
template <typename T>
__global__ void direct_forward(const T* __restrict__ x, const T* __restrict__ wt, T* __restrict__ y,
                               ConvGeom g, int tiles_w, int ph, int pw, int cc) {
  extern __shared__ float smem[];
  const int k = blockIdx.y, n = blockIdx.z;
  const int oy0 = (blockIdx.x / tiles_w) * kTileH, ox0 = (blockIdx.x % tiles_w) * kTileW;
  const int ty = threadIdx.x / kTileW, tx = threadIdx.x % kTileW;
  const int oy = oy0 + ty, ox = ox0 + tx;
  const int iy0 = oy0 * g.sh - g.pt, ix0 = ox0 * g.sw - g.pl;
  const int c_base = (k / g.kg) * g.cg;
  const int patch = ph * pw, taps = g.r * g.s;
  float* sp = smem;
  float* sf = smem + cc * patch;
  float acc = 0.0f;
  for (int c0 = 0; c0 < g.cg; c0 += cc) {
    const int cn = min(cc, g.cg - c0);
    __syncthreads();
    for (int i = threadIdx.x; i < cn * patch; i += blockDim.x) {
      // NHWC: channel fastest (coalesced); NCHW: column fastest.
      int j, py, px;
      if (g.nhwc) {
        j = i % cn;
        py = (i / cn) / pw;
        px = (i / cn) % pw;
      } else {
        j = i / patch;
        py = (i % patch) / pw;
        px = i % pw;
      }
      const int iy = iy0 + py, ix = ix0 + px;
      float v = 0.0f;
      if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = to_float(x[g.in(n, c_base + c0 + j, iy, ix)]);
      sp[j * patch + py * pw + px] = v;
    }
    for (int i = threadIdx.x; i < cn * taps; i += blockDim.x) {
      const int j = i / taps, t = i % taps;
      sf[i] = to_float(wt[g.wt(k, c0 + j, t / g.s, t % g.s)]);
    }
    __syncthreads();
    if (oy < g.oh && ox < g.ow) {
      for (int j = 0; j < cn; ++j)
        for (int r = 0; r < g.r; ++r) {
          const float* row = sp + j * patch + (ty * g.sh + r * g.dh) * pw + tx * g.sw;
          const float* fr = sf + (j * g.r + r) * g.s;
          for (int s = 0; s < g.s; ++s) acc += row[s * g.dw] * fr[s];
        }
    }
  }
  if (oy < g.oh && ox < g.ow) y[g.out(n, k, oy, ox)] = from_float<T>(acc);
}

// Backward data. Block: tile of input pixels of channel c = blockIdx.y, image n = blockIdx.z;
// outputs of c's group in chunks of `kc`: the dy patch [kc][qh][qw] that the tile's pixels read,
// and w[k][c][R][S], in shared memory.
template <typename T>
__global__ void direct_backward_data(const T* __restrict__ dy, const T* __restrict__ wt,
                                     T* __restrict__ dx, ConvGeom g, int tiles_w, int qh, int qw,
                                     int kc, bool accumulate) {
  extern __shared__ float smem[];
  const int c = blockIdx.y, n = blockIdx.z;
  const int iy0 = (blockIdx.x / tiles_w) * kTileH, ix0 = (blockIdx.x % tiles_w) * kTileW;
  const int ty = threadIdx.x / kTileW, tx = threadIdx.x % kTileW;
  const int iy = iy0 + ty, ix = ix0 + tx;
  // The first output row/column any pixel of the tile reads.
  const int oy_lo = own::ceil_div(iy0 + g.pt - (g.r - 1) * g.dh, g.sh);
  const int ox_lo = own::ceil_div(ix0 + g.pl - (g.s - 1) * g.dw, g.sw);
  const int grp = c / g.cg, cl = c % g.cg, k_base = grp * g.kg;
  const int patch = qh * qw, taps = g.r * g.s;
  float* sp = smem;
  float* sf = smem + kc * patch;
  float acc = 0.0f;
  for (int k0 = 0; k0 < g.kg; k0 += kc) {
    const int kn = min(kc, g.kg - k0);
    __syncthreads();
    for (int i = threadIdx.x; i < kn * patch; i += blockDim.x) {
      int j, qy, qx;
      if (g.nhwc) {
        j = i % kn;
        qy = (i / kn) / qw;
        qx = (i / kn) % qw;
      } else {
        j = i / patch;
        qy = (i % patch) / qw;
        qx = i % qw;
      }
      const int oy = oy_lo + qy, ox = ox_lo + qx;
      float v = 0.0f;
      if (oy >= 0 && oy < g.oh && ox >= 0 && ox < g.ow) v = to_float(dy[g.out(n, k_base + k0 + j, oy, ox)]);
      sp[j * patch + qy * qw + qx] = v;
    }
    for (int i = threadIdx.x; i < kn * taps; i += blockDim.x) {
      const int j = i / taps, t = i % taps;
      sf[i] = to_float(wt[g.wt(k_base + k0 + j, cl, t / g.s, t % g.s)]);
    }
    __syncthreads();
    if (iy < g.h && ix < g.w) {
      for (int r = 0; r < g.r; ++r) {
        const int ty_num = iy + g.pt - r * g.dh;
        if (ty_num < 0 || ty_num % g.sh != 0) continue;
        const int qy = ty_num / g.sh - oy_lo;
        if (qy < 0 || qy >= qh) continue;  // cannot happen for valid rows; kept as a guard
        for (int s = 0; s < g.s; ++s) {
          const int tx_num = ix + g.pl - s * g.dw;
          if (tx_num < 0 || tx_num % g.sw != 0) continue;
          const int qx = tx_num / g.sw - ox_lo;
          if (qx < 0 || qx >= qw) continue;
          for (int j = 0; j < kn; ++j) acc += sp[j * patch + qy * qw + qx] * sf[j * taps + r * g.s + s];
        }
      }
    }
  }
  if (iy < g.h && ix < g.w) {
    const std::int64_t o = g.in(n, c, iy, ix);
    dx[o] = from_float<T>(accumulate ? acc + to_float(dx[o]) : acc);
  }
}

// Backward filter. Block (k = blockIdx.x / cg, c = blockIdx.x % cg): taps [t0, t0 + 16) per pass,
// each thread summing dy * x over its share of (n, oy, ox), then a block reduction.
template <typename T>
__global__ void direct_backward_filter(const T* __restrict__ x, const T* __restrict__ dy,
                                       T* __restrict__ dw, ConvGeom g) {
  __shared__ float partial[kTaps][kThreads / 32];
  const int k = blockIdx.x / g.cg, cl = blockIdx.x % g.cg;
  const int c = (k / g.kg) * g.cg + cl;
  const int taps = g.r * g.s;
  const std::int64_t positions = static_cast<std::int64_t>(g.n) * g.oh * g.ow;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int t0 = 0; t0 < taps; t0 += kTaps) {
    float acc[kTaps];
#pragma unroll
    for (int t = 0; t < kTaps; ++t) acc[t] = 0.0f;
    for (std::int64_t p = threadIdx.x; p < positions; p += blockDim.x) {
      const int ox = static_cast<int>(p % g.ow);
      const int oy = static_cast<int>((p / g.ow) % g.oh);
      const int n = static_cast<int>(p / (static_cast<std::int64_t>(g.ow) * g.oh));
      const float d = to_float(dy[g.out(n, k, oy, ox)]);
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        const int tap = t0 + t;
        if (tap >= taps) break;
        const int iy = oy * g.sh - g.pt + (tap / g.s) * g.dh;
        const int ix = ox * g.sw - g.pl + (tap % g.s) * g.dw;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) acc[t] += d * to_float(x[g.in(n, c, iy, ix)]);
      }
    }
#pragma unroll
    for (int t = 0; t < kTaps; ++t) {
      float v = acc[t];
      for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
      if (lane == 0) partial[t][warp] = v;
    }
    __syncthreads();
    if (threadIdx.x < kTaps && t0 + static_cast<int>(threadIdx.x) < taps) {
      float v = 0.0f;
      for (int i = 0; i < kThreads / 32; ++i) v += partial[threadIdx.x][i];
      const int tap = t0 + threadIdx.x;
      dw[g.wt(k, cl, tap / g.s, tap % g.s)] = from_float<T>(v);
    }
    __syncthreads();
  }
}

class DirectConv final : public OwnConvAlgo {
 public:
  DirectConv(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p) : ctx_(std::move(ctx)), p_(p) {
    rule_ = own::direct_rule(p_.d);
    if (!rule_.empty()) return;
    g_ = own::geom_of(p_);
    // Forward: the input patch an 8x32 output tile reads, per channel; backward data: the dy patch
    // an 8x32 input tile reads, per output channel (own_conv_rules.hpp).
    ph_ = (kTileH - 1) * g_.sh + (g_.r - 1) * g_.dh + 1;
    pw_ = (kTileW - 1) * g_.sw + (g_.s - 1) * g_.dw + 1;
    cc_ = own::direct_forward_chunk(p_.d);
    qh_ = static_cast<int>(own::direct_dy_patch_h(p_.d));
    qw_ = static_cast<int>(own::direct_dy_patch_w(p_.d));
    kc_ = own::direct_backward_chunk(p_.d);
  }

  std::string unsupported(ConvDirection) const override { return rule_; }
  std::size_t workspace_bytes(ConvDirection) const override { return 0; }

  void forward(const void* x, const void* w, void* y) override {
    const int tiles_w = (g_.ow + kTileW - 1) / kTileW, tiles_h = (g_.oh + kTileH - 1) / kTileH;
    const dim3 grid(static_cast<unsigned>(tiles_w * tiles_h), static_cast<unsigned>(g_.k),
                    static_cast<unsigned>(g_.n));
    const std::size_t smem = static_cast<std::size_t>(cc_) * (ph_ * pw_ + g_.r * g_.s) * sizeof(float);
    kernels::dispatch_float(p_.dtype, "direct conv forward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      direct_forward<T><<<grid, kThreads, smem, ctx_->stream()>>>(
          static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), g_, tiles_w, ph_, pw_, cc_);
    });
    CNNERGY_CUDA_LAUNCH_CHECK("direct_forward");
  }

  void backward_data(const void* dy, const void* w, void* dx, bool accumulate) override {
    const int tiles_w = (g_.w + kTileW - 1) / kTileW, tiles_h = (g_.h + kTileH - 1) / kTileH;
    const dim3 grid(static_cast<unsigned>(tiles_w * tiles_h), static_cast<unsigned>(g_.c),
                    static_cast<unsigned>(g_.n));
    const std::size_t smem = static_cast<std::size_t>(kc_) * (qh_ * qw_ + g_.r * g_.s) * sizeof(float);
    kernels::dispatch_float(p_.dtype, "direct conv backward_data", [&](auto tag) {
      using T = typename decltype(tag)::type;
      direct_backward_data<T><<<grid, kThreads, smem, ctx_->stream()>>>(
          static_cast<const T*>(dy), static_cast<const T*>(w), static_cast<T*>(dx), g_, tiles_w, qh_, qw_,
          kc_, accumulate);
    });
    CNNERGY_CUDA_LAUNCH_CHECK("direct_backward_data");
  }

  void backward_filter(const void* x, const void* dy, void* dw) override {
    const unsigned blocks = static_cast<unsigned>(g_.k) * static_cast<unsigned>(g_.cg);
    kernels::dispatch_float(p_.dtype, "direct conv backward_filter", [&](auto tag) {
      using T = typename decltype(tag)::type;
      direct_backward_filter<T><<<blocks, kThreads, 0, ctx_->stream()>>>(
          static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dw), g_);
    });
    CNNERGY_CUDA_LAUNCH_CHECK("direct_backward_filter");
  }

 private:
  std::shared_ptr<CudaContext> ctx_;
  OwnConvProblem p_;
  std::string rule_;
  ConvGeom g_{};
  int ph_ = 0, pw_ = 0, cc_ = 0, qh_ = 0, qw_ = 0, kc_ = 0;
};

}  // namespace

std::unique_ptr<OwnConvAlgo> make_own_direct(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p) {
  return std::make_unique<DirectConv>(std::move(ctx), p);
}

}  // namespace cnnergy::cuda
