// Shared fixture for the CUDA backend tests: skips without a GPU, makes GPU backends per precision
// and layout next to the CPU reference, moves fp32 NCHW host tensors to and from the GPU in any
// dtype/layout, and compares with tolerances scaled to the reference's magnitude.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/ops.hpp"
#include "common/tensor_testing.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {

// A precision of the contract and the tolerance GPU results get against the fp32 CPU reference:
// |gpu - cpu| <= tol * max(max |cpu|, 1e-3) + tol * |cpu|. Inputs are rounded to the dtype first,
// so the CPU sees exactly what the GPU sees; what remains is accumulation order, the algorithm
// (cuDNN's FFT/Winograd transforms), TF32 products (10-bit mantissa) and rounding of the outputs
// (fp16: 2^-11, bf16: 2^-8 relative).
struct Precision {
  const char* name;
  DType dtype;
  bool tf32;
  double tol;
};
inline constexpr Precision kFp32{"fp32", DType::kF32, false, 2e-4};
inline constexpr Precision kTf32{"tf32", DType::kF32, true, 1e-2};
inline constexpr Precision kFp16{"fp16", DType::kF16, false, 1e-2};
inline constexpr Precision kBf16{"bf16", DType::kBF16, false, 4e-2};
inline constexpr Precision kAllPrecisions[] = {kFp32, kTf32, kFp16, kBf16};
inline constexpr Layout kAllLayouts[] = {Layout::kNCHW, Layout::kNHWC};

class CudaTest : public SeededTest {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA GPU on this machine";
    cpu_ = create_backend(BackendOptions{});
  }

  // A GPU backend, or nullptr (with a printed note) when this GPU lacks the precision.
  std::unique_ptr<Backend> gpu(const Precision& p, Layout layout,
                               const std::string& policy = "find", bool fallback = true) {
    BackendOptions o;
    o.device = Device{DeviceKind::kCuda, 0};
    o.dtype = p.dtype;
    o.allow_tf32 = p.tf32;
    o.layout = layout;
    o.conv_algo_policy = policy;
    o.conv_algo_fallback = fallback;
    o.conv_epilogue_fusion = false;  // the plain convolutions these tests were written for
    o.conv_space_to_depth = false;   // (the library's default takes each where it times faster)
    o.workspace_limit_bytes = std::size_t{256} << 20;
    try {
      return create_backend(o);
    } catch (const NotSupported& e) {
      std::printf("[  NOTE    ] %s not supported here: %s\n", p.name, e.what());
      return nullptr;
    }
  }

  // Host fp32 NCHW values as the dtype represents them (what both backends then compute on).
  static Tensor rounded(const Tensor& f32_nchw, DType dtype) {
    if (dtype == DType::kF32) return clone(f32_nchw);
    return to_f32_nchw(from_f32_nchw(f32_nchw, dtype, Layout::kNCHW));
  }
  Tensor random(const Shape& shape, DType dtype, float lo = -1.0f, float hi = 1.0f) {
    return rounded(random_tensor(shape, rng_, lo, hi), dtype);
  }

  // Uploads a host fp32 NCHW tensor as `dtype` in `layout` (layout only matters for 4-D).
  static Tensor upload(Backend& b, const Tensor& f32_nchw, DType dtype, Layout layout) {
    const Tensor host = from_f32_nchw(f32_nchw, dtype, layout);
    Tensor dev = b.alloc(f32_nchw.shape(), dtype, layout);
    b.upload(host, dev);
    return dev;
  }
  // As upload, into a view that starts `offset_elements` elements into its buffer: offset 1 makes
  // the data miss the 16-byte alignment that the vectorised kernels need (their scalar path runs).
  static Tensor upload_view(Backend& b, const Tensor& f32_nchw, DType dtype, Layout layout,
                            std::size_t offset_elements) {
    const std::size_t elem = dtype_size_bytes(dtype);
    auto buffer =
        b.alloc_buffer((static_cast<std::size_t>(f32_nchw.numel()) + offset_elements) * elem);
    const Shape& shape = f32_nchw.shape();
    const Tensor dev(shape, dtype, shape.rank() == 4 ? layout : Layout::kNCHW, buffer,
                     offset_elements * elem);
    b.upload(from_f32_nchw(f32_nchw, dtype, layout), dev);
    return dev;
  }
  // Downloads any device tensor and returns it as host fp32 NCHW.
  static Tensor download(Backend& b, const Tensor& dev) {
    const Tensor host = Tensor::host(dev.shape(), dev.dtype(), dev.layout());
    b.download(dev, host);
    return to_f32_nchw(host);
  }

  // The comparison of the Precision comment, with `what` and the precision in the message.
  static ::testing::AssertionResult close(const Tensor& actual, const Tensor& expected, double tol,
                                          const std::string& what) {
    double scale = 1e-3;
    const Tensor e = to_f32_nchw(expected);
    for (const float v : e.f32()) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    ::testing::AssertionResult r = all_close(actual, expected, tol * scale, tol);
    if (!r) r << "\n  in " << what << " (tolerance " << tol << " x max|ref| " << scale << ")";
    return r;
  }

  std::unique_ptr<Backend> cpu_;
};

inline std::string label(const Precision& p, Layout l) {
  return std::string(p.name) + "/" + std::string(layout_name(l));
}

}  // namespace cnnergy::test
