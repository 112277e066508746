// The fused residual add's ReLU mask (kernels::BatchNormParams::relu_mask): the training forward of a
// batch norm with a residual add and a ReLU writes a byte per row and 16-byte pack of channels, bit k
// set where element k of its output was stored positive, and the backward's masking reduction reads
// that mask in place of the output (1/16 of its bytes). On fresh random inputs, in every dtype: the
// mask is exactly the output's signs, and the backward given the mask and an output of zeros (which
// would mask everything were it read) equals the add's ReLU backward followed by the plain batch-norm
// backward on the true output, bit for bit (masked dy, dx, dgamma, dbeta). Views with no tiled path
// get no mask (0 bytes, nothing written).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_context.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

class CudaBatchNormReluMask : public CudaTest {};

TEST_F(CudaBatchNormReluMask, ForwardMaskStandsInForTheOutputInTheBackward) {
  // 64 channels: packs in every dtype; 12: fp32's packs only (4 a pack; bf16 and fp16 pack 8);
  // 2 x 56 x 56 rows: many slices of the reduction.
  const std::vector<Shape> shapes{{8, 64, 9, 11}, {4, 12, 5, 7}, {2, 32, 56, 56}};
  namespace k = cuda::kernels;
  int masked_cases = 0, unmasked_cases = 0;
  for (const Precision& p : {kFp32, kFp16, kBf16}) {
    auto g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    for (const Shape& s : shapes) {
      const std::string what = label(p, Layout::kNHWC) + " " + s.str();
      const std::int64_t c = s[1];
      // x centred off zero with a spread, so that the output has both signs and some exact zeros.
      const Tensor x = random(s, p.dtype, -1.0f, 2.0f), z = random(s, p.dtype), dy = random(s, p.dtype);
      const Tensor gamma = random({c}, DType::kF32, -1.0f, 1.5f), beta = random({c}, DType::kF32);
      auto up32 = [&](const Tensor& t) { return upload(*g, t, DType::kF32, Layout::kNCHW); };
      const Tensor xd = upload(*g, x, p.dtype, Layout::kNHWC), zd = upload(*g, z, p.dtype, Layout::kNHWC);
      const Tensor gd = up32(gamma), bd = up32(beta);
      Tensor rm = g->alloc({c}, DType::kF32), rv = g->alloc({c}, DType::kF32);
      Tensor sm = g->alloc({c}, DType::kF32), sis = g->alloc({c}, DType::kF32);
      g->fill(rm, 0.0f);
      g->fill(rv, 1.0f);
      Tensor yd = g->alloc(s, p.dtype, Layout::kNHWC);
      const k::ChannelView view = k::channel_view(cuda::dims_of(xd));
      const std::size_t mask_bytes = k::batch_norm_relu_mask_bytes(view, p.dtype);
      const std::int64_t per_pack = 16 / static_cast<std::int64_t>(dtype_size_bytes(p.dtype));
      const bool tiled = c % per_pack == 0;
      ASSERT_EQ(mask_bytes, tiled ? static_cast<std::size_t>(x.numel() / per_pack) : 0u) << what;
      auto mask = g->alloc_buffer(std::max<std::size_t>(mask_bytes, 1));
      auto scratch = g->alloc_buffer(k::channel_reduce_scratch_bytes(view, p.dtype));
      g->synchronize();

      k::BatchNormParams bp{1e-5, 0.1, true, zd.raw(), static_cast<std::uint8_t*>(mask->data())};
      const bool written =
          k::batch_norm_forward_training(xd.raw(), yd.raw(), p.dtype, view, static_cast<float*>(gd.raw()),
                                         static_cast<float*>(bd.raw()), static_cast<float*>(rm.raw()),
                                         static_cast<float*>(rv.raw()), static_cast<float*>(sm.raw()),
                                         static_cast<float*>(sis.raw()), bp, scratch->data(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      EXPECT_EQ(written, tiled) << what;
      if (!written) {
        ++unmasked_cases;
        continue;
      }
      // The mask is the output's signs: row (n, h, w), pack j, bit q <-> channel j * per_pack + q.
      const Tensor y = download(*g, yd);
      std::vector<std::uint8_t> bits(mask_bytes);
      ASSERT_EQ(cudaMemcpy(bits.data(), mask->data(), mask_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      const std::int64_t hw = s[2] * s[3], packs = c / per_pack;
      std::int64_t wrong = 0, positive = 0, zero = 0;
      for (std::int64_t n = 0; n < s[0]; ++n)
        for (std::int64_t i = 0; i < hw; ++i)
          for (std::int64_t ch = 0; ch < c; ++ch) {
            const float v = y.f32()[(n * c + ch) * hw + i];
            const bool bit = (bits[(n * hw + i) * packs + ch / per_pack] >> (ch % per_pack)) & 1u;
            wrong += bit != (v > 0.0f);
            positive += v > 0.0f;
            zero += v == 0.0f;
          }
      EXPECT_EQ(wrong, 0) << what;
      EXPECT_GT(positive, 0) << what;
      EXPECT_GT(zero, 0) << what;

      // The add's ReLU backward, then the plain backward, on the true output...
      const Tensor dyr = upload(*g, dy, p.dtype, Layout::kNHWC), dym = upload(*g, dy, p.dtype, Layout::kNHWC);
      Tensor dxr = g->alloc(s, p.dtype, Layout::kNHWC), dxm = g->alloc(s, p.dtype, Layout::kNHWC);
      Tensor dgr = g->alloc({c}, DType::kF32), dbr = g->alloc({c}, DType::kF32);
      Tensor dgm = g->alloc({c}, DType::kF32), dbm = g->alloc({c}, DType::kF32);
      // ...and the masking backward given the mask and an output of zeros.
      Tensor zeros = g->alloc(s, p.dtype, Layout::kNHWC);
      g->fill(zeros, 0.0f);
      g->synchronize();
      auto f32 = [](const Tensor& t) { return static_cast<float*>(t.raw()); };
      k::relu_backward(yd.raw(), dyr.raw(), dyr.raw(), p.dtype, x.numel(), false, nullptr);
      k::batch_norm_backward(xd.raw(), dyr.raw(), dxr.raw(), p.dtype, view, f32(gd), f32(sm), f32(sis), f32(dgr),
                             f32(dbr), nullptr, false, scratch->data(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      auto scratch2 = g->alloc_buffer(k::channel_reduce_scratch_bytes(view, p.dtype));
      k::batch_norm_backward_masking(xd.raw(), zeros.raw(), dym.raw(), dxm.raw(), p.dtype, view, f32(gd), f32(sm),
                                     f32(sis), f32(dgm), f32(dbm), false, scratch2->data(), nullptr,
                                     static_cast<const std::uint8_t*>(mask->data()));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      EXPECT_TRUE(close(download(*g, dym), download(*g, dyr), 0.0, "masked dy, " + what));
      EXPECT_TRUE(close(download(*g, dxm), download(*g, dxr), 0.0, "dx, " + what));
      EXPECT_TRUE(close(download(*g, dgm), download(*g, dgr), 0.0, "dgamma, " + what));
      EXPECT_TRUE(close(download(*g, dbm), download(*g, dbr), 0.0, "dbeta, " + what));
      // Without the mask the same call reads the zeros and masks every gradient: the mask was what
      // the pass above read.
      const Tensor dyz = upload(*g, dy, p.dtype, Layout::kNHWC);
      g->synchronize();
      k::batch_norm_backward_masking(xd.raw(), zeros.raw(), dyz.raw(), dxm.raw(), p.dtype, view, f32(gd), f32(sm),
                                     f32(sis), f32(dgm), f32(dbm), false, scratch2->data(), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      const Tensor unmasked = download(*g, dyz);
      for (const float v : unmasked.f32()) ASSERT_EQ(v, 0.0f) << what;
      ++masked_cases;
    }
  }
  if (masked_cases + unmasked_cases == 0) GTEST_SKIP() << "no precision ran";
  EXPECT_EQ(masked_cases, 3 * 2 + 1);  // 64 and 56x56x32 in every dtype, 12 channels in fp32
  EXPECT_EQ(unmasked_cases, 2);        // 12 channels in fp16 and bf16
}

}  // namespace
}  // namespace cnnergy::test
