// The index maps of the own implicit-GEMM convolution (own_conv_implicit_gemm.cu): each direction
// as C (M x N) = A (M x K) B (K x N) with A and B gathered from the tensors and C scattered into
// the result. Host and device (Ops: storage conversions and the sum of backward filter's
// K-slices), so a host test multiplies them out against the CPU reference.
#pragma once

#include "backend/cuda/own_conv_geom.hpp"

// Device functions under nvcc (their Ops are device-only there), plain functions in host tests.
#ifdef __CUDACC__
#define CNNERGY_MAP_FN __device__
#else
#define CNNERGY_MAP_FN
#endif

namespace cnnergy::cuda::own {

// (c, r, s) of a reduction index over C/g*R*S (or K/g*R*S): channel-fastest in NHWC.
struct Tap {
  int c, r, s;
};
CNNERGY_HD inline Tap decode_tap(const ConvGeom& g, int kk, int channels) {
  if (g.nhwc) return {kk % channels, kk / (channels * g.s), (kk / channels) % g.s};
  return {kk / (g.r * g.s), (kk / g.s) % g.r, kk % g.s};
}

template <typename T, class Ops>
struct ForwardMap {
  const T* x;
  const T* w;
  T* y;
  ConvGeom g;
  CNNERGY_MAP_FN T a(int grp, int m, int kk) const {
    const int plane = g.oh * g.ow, n = m / plane, p = m % plane;
    const Tap t = decode_tap(g, kk, g.cg);
    const int iy = (p / g.ow) * g.sh - g.pt + t.r * g.dh, ix = (p % g.ow) * g.sw - g.pl + t.s * g.dw;
    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return Ops::template from<T>(0.0f);
    return x[g.in(n, grp * g.cg + t.c, iy, ix)];
  }
  CNNERGY_MAP_FN T b(int grp, int kk, int col) const {
    const Tap t = decode_tap(g, kk, g.cg);
    return w[g.wt(grp * g.kg + col, t.c, t.r, t.s)];
  }
  CNNERGY_MAP_FN void store(int grp, int m, int col, float v) const {
    const int plane = g.oh * g.ow, n = m / plane, p = m % plane;
    y[g.out(n, grp * g.kg + col, p / g.ow, p % g.ow)] = Ops::template from<T>(v);
  }
};

template <typename T, class Ops>
struct BackwardDataMap {
  const T* dy;
  const T* w;
  T* dx;
  ConvGeom g;
  bool accumulate;
  CNNERGY_MAP_FN T a(int grp, int m, int kk) const {
    const int plane = g.h * g.w, n = m / plane, p = m % plane;
    const Tap t = decode_tap(g, kk, g.kg);  // t.c is the output channel within the group
    const int ty = p / g.w + g.pt - t.r * g.dh, tx = p % g.w + g.pl - t.s * g.dw;
    if (ty < 0 || tx < 0 || ty % g.sh != 0 || tx % g.sw != 0) return Ops::template from<T>(0.0f);
    const int oy = ty / g.sh, ox = tx / g.sw;
    if (oy >= g.oh || ox >= g.ow) return Ops::template from<T>(0.0f);
    return dy[g.out(n, grp * g.kg + t.c, oy, ox)];
  }
  CNNERGY_MAP_FN T b(int grp, int kk, int col) const {
    const Tap t = decode_tap(g, kk, g.kg);
    return w[g.wt(grp * g.kg + t.c, col, t.r, t.s)];
  }
  CNNERGY_MAP_FN void store(int grp, int m, int col, float v) const {
    const int plane = g.h * g.w, n = m / plane, p = m % plane;
    T* o = dx + g.in(n, grp * g.cg + col, p / g.w, p % g.w);
    *o = Ops::template from<T>(accumulate ? v + Ops::to(*o) : v);
  }
};

template <typename T, class Ops>
struct BackwardFilterMap {
  const T* x;
  const T* dy;
  float* dw32;  // zeroed; the weight's layout
  ConvGeom g;
  CNNERGY_MAP_FN T a(int grp, int m, int kk) const {
    const int plane = g.oh * g.ow, n = kk / plane, p = kk % plane;
    return dy[g.out(n, grp * g.kg + m, p / g.ow, p % g.ow)];
  }
  CNNERGY_MAP_FN T b(int grp, int kk, int col) const {
    const int plane = g.oh * g.ow, n = kk / plane, p = kk % plane;
    const Tap t = decode_tap(g, col, g.cg);
    const int iy = (p / g.ow) * g.sh - g.pt + t.r * g.dh, ix = (p % g.ow) * g.sw - g.pl + t.s * g.dw;
    if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return Ops::template from<T>(0.0f);
    return x[g.in(n, grp * g.cg + t.c, iy, ix)];
  }
  CNNERGY_MAP_FN void store(int grp, int m, int col, float v) const {
    const Tap t = decode_tap(g, col, g.cg);
    Ops::add(dw32 + g.wt(grp * g.kg + m, t.c, t.r, t.s), v);
  }
};

}  // namespace cnnergy::cuda::own
