// Space-to-depth convolution (conv_space_to_depth.hpp): a strided convolution over few channels run
// as a stride-1 convolution over the rearranged input and weights, against the CPU reference of the
// original convolution on fresh random inputs, in every precision (NHWC), directly and through the
// backend's offer (BackendOptions::conv_space_to_depth).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "backend/cuda/conv_space_to_depth.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

Conv2dDesc desc(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k, std::int64_t r,
                std::int64_t stride, std::int64_t pad, bool relu) {
  Conv2dDesc d;
  d.n = n, d.c = c, d.h = h, d.w = w, d.k = k, d.r = d.s = r;
  d.stride_h = d.stride_w = stride;
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = pad;
  d.bias = true;
  d.relu = relu;
  return d;
}

// AlexNet's first layer (11x11/4, pad 2), ResNet's (7x7/2, pad 3, odd size), a 3x3/2 over 5 channels
// (45 of 48 rearranged channels used), and a 5x5/3 without padding on a non-square image.
const Conv2dDesc kShapes[] = {desc(2, 3, 39, 39, 16, 11, 4, 2, true), desc(3, 3, 29, 29, 8, 7, 2, 3, false),
                              desc(2, 5, 16, 16, 24, 3, 3, 1, true), desc(2, 3, 23, 17, 8, 5, 3, 0, false)};

class CudaConvSpaceToDepth : public CudaTest {
 protected:
  // A backend that offers space-to-depth (NHWC, each convolution's workspace capped at 256 MiB),
  // with cuDNN's fused epilogue where `epilogue`.
  static std::unique_ptr<Backend> s2d_backend(DType dtype, bool epilogue = false) {
    BackendOptions o;
    o.device = Device{DeviceKind::kCuda, 0};
    o.dtype = dtype;
    o.layout = Layout::kNHWC;
    o.conv_space_to_depth = true;
    o.conv_epilogue_fusion = epilogue;
    o.workspace_limit_bytes = std::size_t{256} << 20;
    return create_backend(o);
  }
  Tensor reference(const Conv2dDesc& d, const Tensor& x, const Tensor& w, const Tensor& b) {
    Conv2dDesc plain = d;
    plain.relu = false;
    Tensor y = Tensor::host(d.output_shape());
    cpu_->make_conv(plain, {})->forward(x, w, b, y);
    if (d.relu)
      for (float& v : y.f32()) v = std::max(v, 0.0f);
    return y;
  }
};

// Host-only: runs in CI without a GPU.
TEST(SpaceToDepthGeometry, AppliesOnlyWhereItShould) {
  EXPECT_TRUE(cuda::space_to_depth_geometry(kShapes[0], Layout::kNHWC));
  EXPECT_FALSE(cuda::space_to_depth_geometry(kShapes[0], Layout::kNCHW));
  const auto g = *cuda::space_to_depth_geometry(kShapes[0], Layout::kNHWC);
  EXPECT_EQ(g.cs, 48);  // 3 x 4 x 4
  EXPECT_EQ(g.rs, 3);   // ceil(11 / 4)
  EXPECT_EQ(g.hs, kShapes[0].out_h() + 2);
  EXPECT_EQ(cuda::space_to_depth_geometry(kShapes[1], Layout::kNHWC)->cs, 16);  // 12 padded to 16
  Conv2dDesc wide = kShapes[0];
  wide.c = 8;  // aligned channels: nothing to gain
  EXPECT_FALSE(cuda::space_to_depth_geometry(wide, Layout::kNHWC));
  Conv2dDesc unit = kShapes[0];
  unit.stride_h = unit.stride_w = 1;
  EXPECT_FALSE(cuda::space_to_depth_geometry(unit, Layout::kNHWC));
  Conv2dDesc grouped = kShapes[2];
  grouped.groups = 5, grouped.k = 25;
  EXPECT_FALSE(cuda::space_to_depth_geometry(grouped, Layout::kNHWC));
}

// The input's rearrangement itself, exactly: xs[n, bh, bw, (sy*S + sx)*C + c] = x[n, bh*S + sy - pad_top,
// bw*S + sx - pad_left, c], zero outside the image and past C*S*S, in every dtype; on the per-pixel
// kernels (ResNet's and AlexNet's geometries, a batch large enough for several blocks a sample) and
// the per-element one (a 3x3/3 over 5 channels, and ResNet's into a misaligned output).
TEST_F(CudaConvSpaceToDepth, InputRearrangementIsExact) {
  const Conv2dDesc shapes[] = {desc(3, 3, 67, 61, 8, 7, 2, 3, false), desc(2, 3, 75, 75, 16, 11, 4, 2, true),
                               kShapes[2]};
  int checked = 0;
  for (const Precision& p : {kFp32, kFp16, kBf16}) {
    std::unique_ptr<Backend> g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    for (const Conv2dDesc& d : shapes)
      for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
        const auto geom = cuda::space_to_depth_geometry(d, Layout::kNHWC);
        ASSERT_TRUE(geom);
        const Conv2dDesc inner = cuda::space_to_depth_desc(d, *geom);
        const Tensor x = random(d.input_shape(), p.dtype);
        const Tensor xd = upload(*g, x, p.dtype, Layout::kNHWC);
        Tensor xs = upload_view(*g, random(inner.input_shape(), p.dtype, 5.0f, 6.0f), p.dtype, Layout::kNHWC, offset);
        g->synchronize();
        cuda::kernels::space_to_depth_input(xd.raw(), xs.raw(), p.dtype, *geom, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const Tensor got = download(*g, xs);  // NCHW fp32
        const std::int64_t S = geom->stride, C = d.c, cs = geom->cs, hs = geom->hs, ws = geom->ws;
        std::int64_t wrong = 0;
        for (std::int64_t n = 0; n < d.n; ++n)
          for (std::int64_t c = 0; c < cs; ++c)
            for (std::int64_t bh = 0; bh < hs; ++bh)
              for (std::int64_t bw = 0; bw < ws; ++bw) {
                float want = 0.0f;
                if (c < C * S * S) {
                  const std::int64_t block = c / C, ch = c % C, sy = block / S, sx = block % S;
                  const std::int64_t i = bh * S + sy - d.pad_top, k = bw * S + sx - d.pad_left;
                  if (i >= 0 && i < d.h && k >= 0 && k < d.w) want = x.f32()[((n * C + ch) * d.h + i) * d.w + k];
                }
                wrong += got.f32()[((n * cs + c) * hs + bh) * ws + bw] != want;
              }
        EXPECT_EQ(wrong, 0) << p.name << " " << d.input_shape().str() << " " << d.r << "x" << d.s << "/" << S
                            << " offset " << offset;
        ++checked;
      }
  }
  if (checked == 0) GTEST_SKIP() << "no precision ran";
  EXPECT_EQ(checked, 3 * 3 * 2);
}

// The rearranged input and weights through a plain stride-1 convolution give the original's values.
TEST_F(CudaConvSpaceToDepth, RearrangedConvolutionMatchesTheCpuReference) {
  for (const Precision& p : kAllPrecisions) {
    std::unique_ptr<Backend> g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    for (const Conv2dDesc& d : kShapes) {
      const auto geom = cuda::space_to_depth_geometry(d, Layout::kNHWC);
      ASSERT_TRUE(geom);
      const Conv2dDesc inner = cuda::space_to_depth_desc(d, *geom);
      ASSERT_EQ(inner.output_shape(), d.output_shape());
      const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
      const Tensor b = random(Shape{d.k}, p.dtype);
      const Tensor xd = upload(*g, x, p.dtype, Layout::kNHWC), wd = upload(*g, w, p.dtype, Layout::kNHWC);
      Tensor xs = g->alloc(inner.input_shape(), p.dtype, Layout::kNHWC);
      Tensor ws = g->alloc(inner.weight_shape(), p.dtype, Layout::kNHWC);
      g->synchronize();
      cuda::kernels::space_to_depth_input(xd.raw(), xs.raw(), p.dtype, *geom, nullptr);
      cuda::kernels::space_to_depth_weights(wd.raw(), ws.raw(), p.dtype, true, *geom, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      Tensor y = g->alloc(d.output_shape(), p.dtype, Layout::kNHWC);
      g->make_conv(inner, {})->forward(xs, ws, upload(*g, b, p.dtype, Layout::kNHWC), y);
      const std::string what = std::string(p.name) + " " + d.input_shape().str() + " " + std::to_string(d.r) +
                               "x" + std::to_string(d.s) + "/" + std::to_string(d.stride_h);
      EXPECT_TRUE(close(download(*g, y), reference(d, x, w, b), p.tol, what));
    }
  }
}

// The weight gradient back from the rearranged convolution's (over the rearranged input) is the
// original convolution's, the bias gradient too.
TEST_F(CudaConvSpaceToDepth, RearrangedWeightGradientMatchesTheCpuReference) {
  for (const Precision& p : kAllPrecisions) {
    std::unique_ptr<Backend> g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    for (const Conv2dDesc& d0 : kShapes) {
      Conv2dDesc d = d0;
      d.relu = false;
      const auto geom = cuda::space_to_depth_geometry(d, Layout::kNHWC);
      ASSERT_TRUE(geom);
      const Conv2dDesc inner = cuda::space_to_depth_desc(d, *geom);
      const Tensor x = random(d.input_shape(), p.dtype), dy = random(d.output_shape(), p.dtype);
      const Tensor xd = upload(*g, x, p.dtype, Layout::kNHWC), dyd = upload(*g, dy, p.dtype, Layout::kNHWC);
      Tensor xs = g->alloc(inner.input_shape(), p.dtype, Layout::kNHWC);
      Tensor dws = g->alloc(inner.weight_shape(), p.dtype, Layout::kNHWC);
      Tensor dw = g->alloc(d.weight_shape(), p.dtype, Layout::kNHWC), db = g->alloc(Shape{d.k}, p.dtype);
      g->synchronize();
      cuda::kernels::space_to_depth_input(xd.raw(), xs.raw(), p.dtype, *geom, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      g->make_conv(inner, {})->backward_filter(xs, dyd, dws, db);
      g->synchronize();
      cuda::kernels::space_to_depth_weights_grad(dws.raw(), dw.raw(), p.dtype, true, *geom, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      Tensor dw_r = Tensor::host(d.weight_shape()), db_r = Tensor::host(Shape{d.k});
      cpu_->make_conv(d, {})->backward_filter(x, dy, dw_r, db_r);
      const std::string what = std::string(p.name) + " " + d.input_shape().str() + " " + std::to_string(d.r) +
                               "x" + std::to_string(d.s) + "/" + std::to_string(d.stride_h);
      EXPECT_TRUE(close(download(*g, dw), dw_r, p.tol, what + " dw"));
      EXPECT_TRUE(close(download(*g, db), db_r, p.tol, what + " db"));
    }
  }
}

// Training through the backend: weights that change between forwards (never held) are rearranged
// every forward, and the weight gradient, whichever way its timing went, is the reference's; the
// kernel says which way each went.
TEST_F(CudaConvSpaceToDepth, BackendOfferTrainsWithTheReferenceGradients) {
  for (const Precision& p : {kBf16, kFp32}) {
    std::unique_ptr<Backend> g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    g = s2d_backend(p.dtype);
    Conv2dDesc d = desc(32, 3, 64, 64, 64, 7, 2, 3, false);  // ResNet's first layer at 64x64
    d.bias = false;
    const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
    const Tensor w2 = random(d.weight_shape(), p.dtype), dy = random(d.output_shape(), p.dtype);
    auto conv = g->make_conv(d, {});
    const Tensor xd = upload(*g, x, p.dtype, Layout::kNHWC), dyd = upload(*g, dy, p.dtype, Layout::kNHWC);
    Tensor wd = upload(*g, w, p.dtype, Layout::kNHWC);
    Tensor y = g->alloc(d.output_shape(), p.dtype, Layout::kNHWC);
    Tensor dw = g->alloc(d.weight_shape(), p.dtype, Layout::kNHWC);
    conv->forward(xd, wd, Tensor{}, y);
    EXPECT_TRUE(close(download(*g, y), reference(d, x, w, Tensor{}), p.tol, std::string(p.name) + " forward"));
    Tensor dw_r = Tensor::host(d.weight_shape());
    cpu_->make_conv(d, {})->backward_filter(x, dy, dw_r, Tensor{});
    for (int call = 0; call < 2; ++call) {  // the first call decides, the second runs the choice
      conv->backward_filter(xd, dyd, dw, Tensor{});
      EXPECT_TRUE(close(download(*g, dw), dw_r, p.tol, std::string(p.name) + " dw, call " + std::to_string(call)));
    }
    g->upload(from_f32_nchw(w2, p.dtype, Layout::kNHWC), wd);  // an SGD step: new values, not held
    conv->forward(xd, wd, Tensor{}, y);
    EXPECT_TRUE(close(download(*g, y), reference(d, x, w2, Tensor{}), p.tol, std::string(p.name) + " new weights"));
    const ConvAlgoInfo info = conv->info();
    const bool said = std::any_of(info.notes.begin(), info.notes.end(), [](const std::string& n) {
      return n.rfind("backward_filter: ", 0) == 0 && n.find("space-to-depth") != std::string::npos;
    });
    EXPECT_TRUE(said) << "no note on the weight gradient's space-to-depth verdict";
    std::printf("[  NOTE    ] %s: forward %s, backward_filter %s\n", p.name, info.forward.c_str(),
                info.backward_filter.c_str());
  }
}

// In training the executor hands each call a region of its arena (Backend::set_conv_workspace): the
// rearranged input then lives at the region's start for that call only (CudaContext::RegionPrefix),
// the rearranged convolution's own workspace after it. The region is filled with NaN bytes first, so a
// read of what no call wrote, or a workspace laid over the rearranged input, shows in the values:
// forward and weight gradient are the reference's, no call asks beyond the region (which
// workspace_bound() sized), and no buffer of the rearranged input's size is held after the calls.
TEST_F(CudaConvSpaceToDepth, RearrangedInputLivesInTheCallersRegion) {
  for (const Precision& p : {kBf16, kFp32}) {
    std::unique_ptr<Backend> g = s2d_backend(p.dtype);
    Conv2dDesc d = desc(32, 3, 128, 128, 64, 7, 2, 3, false);  // ResNet's first layer at 128x128
    d.bias = false;
    const auto geom = cuda::space_to_depth_geometry(d, Layout::kNHWC);
    ASSERT_TRUE(geom);
    const std::size_t rearranged =
        static_cast<std::size_t>(geom->n * geom->hs * geom->ws * geom->cs) * dtype_size_bytes(p.dtype);
    const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
    const Tensor dy = random(d.output_shape(), p.dtype);
    auto conv = g->make_conv(d, {});
    (void)conv->info();  // both convolutions' algorithms, as a training executor resolves them before planning
    const std::size_t bound = conv->workspace_bound();
    EXPECT_GE(bound, rearranged) << p.name;
    const Tensor xd = upload(*g, x, p.dtype, Layout::kNHWC), dyd = upload(*g, dy, p.dtype, Layout::kNHWC);
    const Tensor wd = upload(*g, w, p.dtype, Layout::kNHWC);
    Tensor y = g->alloc(d.output_shape(), p.dtype, Layout::kNHWC);
    Tensor dw = g->alloc(d.weight_shape(), p.dtype, Layout::kNHWC);
    Tensor region = g->alloc(Shape{static_cast<std::int64_t>((bound + 3) / 4)}, DType::kF32);
    ASSERT_EQ(cudaMemset(region.raw(), 0xFF, bound), cudaSuccess);  // NaN in every dtype
    g->synchronize();
    const std::size_t before = g->memory_stats().in_use_bytes;
    const std::size_t overflows = g->memory_stats().conv_workspace_overflows;
    auto in_region = [&](const std::function<void()>& call) {
      g->set_conv_workspace(region.raw(), bound);
      call();
      g->set_conv_workspace(nullptr, 0);
    };
    in_region([&] { conv->forward(xd, wd, Tensor{}, y); });
    EXPECT_TRUE(close(download(*g, y), reference(d, x, w, Tensor{}), p.tol, std::string(p.name) + " forward"));
    Tensor dw_r = Tensor::host(d.weight_shape());
    cpu_->make_conv(d, {})->backward_filter(x, dy, dw_r, Tensor{});
    for (int call = 0; call < 2; ++call) {  // the first call decides, the second runs the choice
      in_region([&] { conv->backward_filter(xd, dyd, dw, Tensor{}); });
      EXPECT_TRUE(close(download(*g, dw), dw_r, p.tol, std::string(p.name) + " dw, call " + std::to_string(call)));
    }
    g->synchronize();
    EXPECT_EQ(g->memory_stats().conv_workspace_overflows, overflows) << p.name << ": a call asked beyond its region";
    EXPECT_LT(g->memory_stats().in_use_bytes - before, rearranged)
        << p.name << ": a buffer of the rearranged input's size (" << rearranged << " bytes) is held";
    const ConvAlgoInfo info = conv->info();
    std::printf("[  NOTE    ] %s: forward %s, backward_filter %s, workspace bound %zu bytes\n", p.name,
                info.forward.c_str(), info.backward_filter.c_str(), bound);
  }
}

// Through the backend: whichever way the timing went the values are the reference's, the kernel
// says which way it went, and weights held and then changed are rearranged again.
TEST_F(CudaConvSpaceToDepth, BackendOfferKeepsTheValues) {
  for (const Precision& p : {kBf16, kFp32}) {
    std::unique_ptr<Backend> g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    g = s2d_backend(p.dtype, /*epilogue=*/true);
    const Conv2dDesc d = desc(16, 3, 111, 111, 64, 11, 4, 2, true);
    const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
    const Tensor b = random(Shape{d.k}, p.dtype), w2 = random(d.weight_shape(), p.dtype);
    auto conv = g->make_conv(d, {});
    const Tensor xd = upload(*g, x, p.dtype, Layout::kNHWC), bd = upload(*g, b, p.dtype, Layout::kNHWC);
    Tensor wd = upload(*g, w, p.dtype, Layout::kNHWC);
    conv->hold_weights();
    Tensor y = g->alloc(d.output_shape(), p.dtype, Layout::kNHWC);
    conv->forward(xd, wd, bd, y);
    const Tensor want = reference(d, x, w, b);
    EXPECT_TRUE(close(download(*g, y), want, p.tol, std::string(p.name) + " first"));
    const ConvAlgoInfo info = conv->info();
    const bool said = std::any_of(info.notes.begin(), info.notes.end(),
                                  [](const std::string& n) { return n.find("space-to-depth") != std::string::npos; });
    EXPECT_TRUE(said) << "no note on the space-to-depth verdict";
    std::printf("[  NOTE    ] %s: forward %s\n", p.name, info.forward.c_str());
    conv->forward(xd, wd, bd, y);
    EXPECT_TRUE(close(download(*g, y), want, p.tol, std::string(p.name) + " again"));
    g->upload(from_f32_nchw(w2, p.dtype, Layout::kNHWC), wd);  // new values, held again (a refold)
    conv->hold_weights();
    conv->forward(xd, wd, bd, y);
    EXPECT_TRUE(close(download(*g, y), reference(d, x, w2, b), p.tol, std::string(p.name) + " new weights"));
  }
}

}  // namespace
}  // namespace cnnergy::test
