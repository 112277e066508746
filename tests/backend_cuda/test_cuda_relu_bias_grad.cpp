// Backend::relu_backward_bias_grad (a convolution's fused ReLU backward and its bias gradient in one
// pass over dy, kernels::relu_backward_bias_grad) on fresh random inputs: the masked gradient equals
// the CPU reference's relu_backward exactly, the bias gradient matches the CPU's sum, and both equal
// the two passes it replaces (kernels::relu_backward then kernels::bias_grad) bit for bit, in every
// dtype, both layouts (NCHW: the plane kernels, batch_norm_planes.cu), channel counts on and off the
// vectorised path, and a misaligned view.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "backend/cuda/cuda_context.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

class CudaReluBiasGrad : public CudaTest {};

// The bias gradient the CPU computes from its own masked gradient: fp64 sums over N, H, W.
Tensor channel_sums(const Tensor& dx_nchw) {
  const Shape& s = dx_nchw.shape();
  Tensor db = Tensor::host({s[1]});
  const float* v = dx_nchw.f32().data();
  for (std::int64_t c = 0; c < s[1]; ++c) {
    double sum = 0.0;
    for (std::int64_t n = 0; n < s[0]; ++n)
      for (std::int64_t i = 0; i < s[2] * s[3]; ++i) sum += v[(n * s[1] + c) * s[2] * s[3] + i];
    db.f32()[c] = static_cast<float>(sum);
  }
  return db;
}

TEST_F(CudaReluBiasGrad, OnePassEqualsTheTwoPassesAndTheCpuReference) {
  // 64 channels: the vectorised path in NHWC for every dtype; 12: fp32's only (bf16 and fp16 pack
  // 8); NCHW the plane kernels' one pass (56x56 planes in packs, 9x11 and 5x7 one element at a time;
  // 2 x 56 x 56 values a channel: two slices). Offset 1: misaligned, NHWC the two passes, NCHW the
  // plane kernels one element at a time.
  const std::vector<Shape> shapes{{8, 64, 9, 11}, {4, 12, 5, 7}, {2, 32, 56, 56}};
  int checked = 0;
  for (const Precision& p : kAllPrecisions) {
    if (p.tf32) continue;
    for (const Layout layout : kAllLayouts)
      for (const Shape& s : shapes)
        for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          auto g = gpu(p, layout);
          if (!g) continue;
          const std::string what = label(p, layout) + " " + s.str() + " offset " + std::to_string(offset);
          // y: a ReLU's output (about half zeros, some exact zeros from the rounding of tiny values).
          Tensor y = random(s, p.dtype, -1.0f, 1.0f);
          for (float& v : y.f32()) v = v > 0.0f ? v : 0.0f;
          const Tensor dy = random(s, p.dtype);
          Tensor dx_r = Tensor::host(s);
          cpu_->relu_backward(y, dy, dx_r, false);
          const Tensor db_r = channel_sums(dx_r);

          const Tensor yd = upload_view(*g, y, p.dtype, layout, offset);
          const Tensor dyd = upload_view(*g, dy, p.dtype, layout, offset);
          const Tensor db = g->alloc({s[1]}, p.dtype, Layout::kNCHW);
          ASSERT_TRUE(g->fuses_relu_bias_grad());
          g->relu_backward_bias_grad(yd, dyd, db);

          // The two passes, on the same inputs, on the default stream after the backend's work.
          const Tensor dy2 = upload_view(*g, dy, p.dtype, layout, offset);
          const Tensor db2 = g->alloc({s[1]}, p.dtype, Layout::kNCHW);
          g->synchronize();
          const cuda::kernels::ChannelView view = cuda::kernels::channel_view(cuda::dims_of(dy2));
          auto scratch = g->alloc_buffer(cuda::kernels::channel_reduce_scratch_bytes(view, p.dtype));
          cuda::kernels::relu_backward(yd.raw(), dy2.raw(), dy2.raw(), p.dtype, dy2.numel(), false, nullptr);
          cuda::kernels::bias_grad(dy2.raw(), p.dtype, view, db2.raw(), p.dtype, scratch->data(), nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

          const Tensor masked = download(*g, dyd), masked2 = download(*g, dy2);
          const Tensor bias = download(*g, db), bias2 = download(*g, db2);
          EXPECT_TRUE(close(masked, dx_r, 0.0, "masked dy against the CPU, " + what));
          EXPECT_TRUE(close(masked, masked2, 0.0, "masked dy against the two passes, " + what));
          EXPECT_TRUE(close(bias, bias2, 0.0, "db against the two passes, " + what));
          // fp32 sums in a different order than the CPU's fp64, then rounded to the dtype.
          EXPECT_TRUE(close(bias, db_r, p.dtype == DType::kF32 ? 1e-5 : p.tol, "db against the CPU, " + what));
          ++checked;
        }
  }
  if (checked == 0) GTEST_SKIP() << "no precision ran";
  EXPECT_EQ(checked, 3 * 2 * 3 * 2);
}

TEST_F(CudaReluBiasGrad, RefusesMismatchedTensors) {
  auto g = gpu(kFp32, Layout::kNHWC);
  if (!g) GTEST_SKIP();
  const Tensor y = g->alloc({2, 8, 3, 3}, DType::kF32, Layout::kNHWC);
  const Tensor dy = g->alloc({2, 8, 3, 3}, DType::kF32, Layout::kNHWC);
  const Tensor db_wrong = g->alloc({7}, DType::kF32, Layout::kNCHW);
  EXPECT_THROW(g->relu_backward_bias_grad(y, dy, db_wrong), InvalidArgument);
  EXPECT_THROW(g->relu_backward_bias_grad(y, dy, Tensor{}), InvalidArgument);
  EXPECT_THROW(cpu_->relu_backward_bias_grad(Tensor::host({2, 8, 3, 3}), Tensor::host({2, 8, 3, 3}),
                                             Tensor::host({8})),
               NotSupported);
  EXPECT_FALSE(cpu_->fuses_relu_bias_grad());
}

}  // namespace
}  // namespace cnnergy::test
