// Which shapes, precisions and layouts each own convolution implementation runs (own_conv.hpp):
// host-only, header-only rules, so the CPU-only build tests them too. Each returns "" when the
// implementation runs the direction, else the rule that excludes it.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "backend/ops.hpp"

namespace cnnergy::cuda::own {

enum class Direction { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

// Tile sizes the rules depend on (own_conv_direct.cu).
inline constexpr int kDirectTileH = 8, kDirectTileW = 32;
inline constexpr int kDirectSmemFloats = 48 * 1024 / 4;  // default dynamic shared memory limit

inline std::string size_rule(const Conv2dDesc& d) {
  const std::int64_t biggest =
      std::max({d.n * d.c * d.h * d.w, d.n * d.k * d.out_h() * d.out_w(), d.k * (d.c / d.groups) * d.r * d.s});
  if (biggest > INT_MAX) return "tensors must have fewer than 2^31 elements";
  return {};
}

// Channels of a chunk the direct kernels stage in shared memory (forward: input channels of a
// group; backward data: output channels of a group); 0 when one channel does not fit.
inline int direct_forward_chunk(const Conv2dDesc& d) {
  const std::int64_t ph = (kDirectTileH - 1) * d.stride_h + (d.r - 1) * d.dilation_h + 1;
  const std::int64_t pw = (kDirectTileW - 1) * d.stride_w + (d.s - 1) * d.dilation_w + 1;
  return static_cast<int>(std::min<std::int64_t>(d.c / d.groups, kDirectSmemFloats / (ph * pw + d.r * d.s)));
}
inline std::int64_t direct_dy_patch_h(const Conv2dDesc& d) {
  return (kDirectTileH - 1 + (d.r - 1) * d.dilation_h) / d.stride_h + 2;
}
inline std::int64_t direct_dy_patch_w(const Conv2dDesc& d) {
  return (kDirectTileW - 1 + (d.s - 1) * d.dilation_w) / d.stride_w + 2;
}
inline int direct_backward_chunk(const Conv2dDesc& d) {
  const std::int64_t patch = direct_dy_patch_h(d) * direct_dy_patch_w(d);
  return static_cast<int>(std::min<std::int64_t>(d.k / d.groups, kDirectSmemFloats / (patch + d.r * d.s)));
}

inline std::string direct_rule(const Conv2dDesc& d) {
  if (auto r = size_rule(d); !r.empty()) return "direct: " + r;
  if (std::max({d.n, d.c, d.k}) > 65535) return "direct: at most 65535 images and channels (grid limits)";
  if (direct_forward_chunk(d) < 1 || direct_backward_chunk(d) < 1)
    return "direct: the input patch of one channel for an 8x32 tile must fit 48 KiB of shared memory "
           "(smaller stride x dilation x kernel)";
  return {};
}

inline std::string im2col_gemm_rule(const Conv2dDesc& d, bool nhwc) {
  if (auto r = size_rule(d); !r.empty()) return "im2col_gemm: " + r;
  if (nhwc) return "im2col_gemm: NCHW only (NHWC runs own:direct or cuDNN)";
  return {};
}

inline std::string implicit_gemm_rule(const Conv2dDesc& d) {
  if (auto r = size_rule(d); !r.empty()) return "implicit_gemm: " + r;
  if (d.groups > 65535) return "implicit_gemm: at most 65535 groups (grid limits)";
  return {};
}

inline std::string fft_rule(const Conv2dDesc& d, bool nhwc, Direction dir) {
  if (auto r = size_rule(d); !r.empty()) return "fft: " + r;
  if (d.dilation_h != 1 || d.dilation_w != 1 || d.groups != 1) return "fft: dilation 1 and groups 1 only";
  if (nhwc) return "fft: NCHW only";
  if (dir != Direction::kForward && (d.stride_h != 1 || d.stride_w != 1))
    return "fft: backward directions need stride 1 (forward subsamples any stride)";
  return {};
}

// tile_m: 4 for F(4x4,3x3), 2 for F(2x2,3x3).
inline std::string winograd_rule(const Conv2dDesc& d, bool nhwc, int tile_m, Direction dir) {
  const std::string name = tile_m == 4 ? "winograd F(4x4,3x3)" : "winograd F(2x2,3x3)";
  if (auto r = size_rule(d); !r.empty()) return name + ": " + r;
  if (d.r != 3 || d.s != 3 || d.stride_h != 1 || d.stride_w != 1 || d.dilation_h != 1 || d.dilation_w != 1 ||
      d.groups != 1)
    return name + ": only 3x3 stride 1 dilation 1 groups 1";
  if (nhwc) return name + ": NCHW only";
  (void)dir;  // all three directions
  return {};
}

// Winograd tiles of m x m outputs covering an out_h x out_w plane.
inline std::int64_t winograd_tiles(std::int64_t out_h, std::int64_t out_w, int tile_m) {
  return ((out_h + tile_m - 1) / tile_m) * ((out_w + tile_m - 1) / tile_m);
}

}  // namespace cnnergy::cuda::own
