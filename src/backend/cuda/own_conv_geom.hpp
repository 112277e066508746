// The geometry of a convolution as the own kernels index it (own_conv_*.cu): sizes as ints and
// layout-aware offsets of activations and weights. Host and device, so the host tests can check
// the index maps the kernels use (own_conv_implicit_gemm_maps.hpp).
#pragma once

#include <cstdint>

#include "backend/ops.hpp"

#ifndef CNNERGY_HD
#ifdef __CUDACC__
#define CNNERGY_HD __host__ __device__
#else
#define CNNERGY_HD
#endif
#endif

namespace cnnergy::cuda::own {

struct ConvGeom {
  int n, c, h, w, k, r, s, oh, ow;
  int sh, sw, pt, pl, dh, dw;
  int groups, cg, kg;  // groups, input and output channels per group
  bool nhwc;

  // Activation (n, c, y, x) of a tensor with `ch` channels and plane hh x ww.
  CNNERGY_HD std::int64_t act(int ni, int ci, int yi, int xi, int ch, int hh, int ww) const {
    return nhwc ? ((static_cast<std::int64_t>(ni) * hh + yi) * ww + xi) * ch + ci
                : ((static_cast<std::int64_t>(ni) * ch + ci) * hh + yi) * ww + xi;
  }
  CNNERGY_HD std::int64_t in(int ni, int ci, int yi, int xi) const { return act(ni, ci, yi, xi, c, h, w); }
  CNNERGY_HD std::int64_t out(int ni, int ki, int yi, int xi) const { return act(ni, ki, yi, xi, k, oh, ow); }
  // Weight (k, c within the group, r, s): K,C/g,R,S in NCHW, K,R,S,C/g in NHWC.
  CNNERGY_HD std::int64_t wt(int ki, int ci, int ri, int si) const {
    return nhwc ? ((static_cast<std::int64_t>(ki) * r + ri) * s + si) * cg + ci
                : ((static_cast<std::int64_t>(ki) * cg + ci) * r + ri) * s + si;
  }
};

// The descriptor's sizes as ints (own_conv_rules.hpp refuses anything beyond).
inline ConvGeom geom_of(const Conv2dDesc& d, bool nhwc) {
  auto i = [](std::int64_t v) { return static_cast<int>(v); };
  return {i(d.n),        i(d.c),        i(d.h),          i(d.w),          i(d.k),
          i(d.r),        i(d.s),        i(d.out_h()),    i(d.out_w()),    i(d.stride_h),
          i(d.stride_w), i(d.pad_top),  i(d.pad_left),   i(d.dilation_h), i(d.dilation_w),
          i(d.groups),   i(d.c / d.groups), i(d.k / d.groups), nhwc};
}

// Floor and ceiling division for any sign of a (b > 0).
CNNERGY_HD inline int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
CNNERGY_HD inline int ceil_div(int a, int b) { return -floor_div(-a, b); }

}  // namespace cnnergy::cuda::own
