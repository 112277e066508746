// Fully connected, pooling, LRN and softmax cross-entropy on the GPU against the CPU reference,
// forward and backward, every precision and layout. Shapes are chosen so that both the cuDNN paths
// and the backend's own kernels run (ceil-mode pooling, NHWC/bf16 LRN), and, with channel counts that
// fill 16-byte packs, the vectorised channel-last kernels (max/average/global pooling, bias add and
// gradient). Batch norm is in test_cuda_batch_norm.cpp.
#include "backend_cuda/cuda_layers_fixture.hpp"

namespace cnnergy::test {
namespace {

// ---- fully connected ---------------------------------------------------------------------------
TEST_F(CudaLayers, LinearMatchesCpu) {
  // 11 outputs: element-wise bias kernels; 24: channel-packed bias add and gradient (3 packs of 8,
  // or 6 of 4, so some threads of a block have no channels).
  for (const auto& [n, in, out] : {std::tuple{5, 37, 11}, std::tuple{300, 8, 24}})
    for (const bool bias : {true, false})
      for (const Precision& p : kAllPrecisions) {
        auto g = gpu(p, Layout::kNCHW);
        if (!g) continue;
        LinearDesc d;
        d.n = n, d.in_features = in, d.out_features = out, d.bias = bias;
        const Tensor x = random({d.n, d.in_features}, p.dtype),
                     w = random({d.out_features, d.in_features}, p.dtype);
        const Tensor b = random({d.out_features}, p.dtype),
                     dy = random({d.n, d.out_features}, p.dtype);
        const Tensor dx0 = random({d.n, d.in_features}, p.dtype);
        auto ref = cpu_->make_linear(d);
        Tensor y_r = Tensor::host({d.n, d.out_features}), dx_r = Tensor::host({d.n, d.in_features});
        Tensor dxa_r = clone(dx0), dw_r = Tensor::host({d.out_features, d.in_features}),
               db_r = Tensor::host({d.out_features});
        ref->forward(x, w, bias ? b : Tensor{}, y_r);
        ref->backward_data(dy, w, dx_r, false);
        ref->backward_data(dy, w, dxa_r, true);
        ref->backward_filter(x, dy, dw_r, bias ? db_r : Tensor{});

        auto k = g->make_linear(d);
        const Tensor xd = upload(*g, x, p.dtype, Layout::kNCHW),
                     wd = upload(*g, w, p.dtype, Layout::kNCHW);
        const Tensor bd = upload(*g, b, p.dtype, Layout::kNCHW),
                     dyd = upload(*g, dy, p.dtype, Layout::kNCHW);
        Tensor y = g->alloc({d.n, d.out_features}, p.dtype),
               dx = g->alloc({d.n, d.in_features}, p.dtype);
        Tensor dxa = upload(*g, dx0, p.dtype, Layout::kNCHW);
        Tensor dw = g->alloc({d.out_features, d.in_features}, p.dtype),
               db = g->alloc({d.out_features}, p.dtype);
        k->forward(xd, wd, bias ? bd : Tensor{}, y);
        k->backward_data(dyd, wd, dx, false);
        k->backward_data(dyd, wd, dxa, true);
        k->backward_filter(xd, dyd, dw, bias ? db : Tensor{});
        const std::string what = std::string("linear ") + p.name + (bias ? " bias" : " no bias") +
                                 " " + std::to_string(out) + " outputs";
        EXPECT_TRUE(close(download(*g, y), y_r, p.tol, what + " forward"));
        EXPECT_TRUE(close(download(*g, dx), dx_r, p.tol, what + " backward_data"));
        EXPECT_TRUE(close(download(*g, dxa), dxa_r, p.tol, what + " backward_data accumulate"));
        EXPECT_TRUE(close(download(*g, dw), dw_r, p.tol, what + " dw"));
        if (bias) {
          EXPECT_TRUE(close(download(*g, db), db_r, p.tol, what + " db"));
        }
      }
}

// ---- pooling -----------------------------------------------------------------------------------
struct PoolCase {
  const char* name;
  Pool2dDesc desc;
};

Pool2dDesc pool_desc(std::int64_t kh, std::int64_t kw, std::int64_t sh, std::int64_t sw,
                     std::int64_t ph, std::int64_t pw, bool ceil_mode, PoolMode mode,
                     std::int64_t channels = 5) {
  Pool2dDesc d;
  d.n = 2, d.c = channels, d.h = 11, d.w = 8;
  d.kernel_h = kh, d.kernel_w = kw, d.stride_h = sh, d.stride_w = sw, d.pad_h = ph, d.pad_w = pw;
  d.ceil_mode = ceil_mode;
  d.mode = mode;
  return d;
}

// 5 channels: cuDNN (fp32/fp16 floor sizes) or the own kernels element by element. 16 channels in
// NHWC: the own kernels in 16-byte packs for every dtype.
std::vector<PoolCase> pool_cases(std::int64_t channels) {
  std::vector<PoolCase> cases;
  const std::pair<PoolMode, const char*> modes[] = {{PoolMode::kMax, "max"},
                                                    {PoolMode::kAvgIncludePad, "avg_include_pad"},
                                                    {PoolMode::kAvgExcludePad, "avg_exclude_pad"}};
  for (const auto& [mode, name] : modes) {
    // floor sizes: cuDNN (fp32/fp16); AlexNet-style 3x3/2 ceil with a partial last window: own
    // kernels
    cases.push_back({name, pool_desc(2, 2, 2, 2, 0, 0, false, mode, channels)});
    cases.push_back({name, pool_desc(3, 3, 2, 2, 1, 1, false, mode, channels)});
    cases.push_back({name, pool_desc(3, 3, 2, 2, 0, 0, true, mode, channels)});
    cases.push_back({name, pool_desc(3, 2, 2, 3, 1, 1, true, mode, channels)});
  }
  // Global average pooling (the whole plane is the window), as global_avg_pool builds it.
  cases.push_back(
      {"global_avg", pool_desc(11, 8, 11, 8, 0, 0, false, PoolMode::kAvgExcludePad, channels)});
  return cases;
}

// And a max pool made to keep its argmax (Pool2dDesc::keep_argmax, training): where it keeps it, its
// backward given undefined x and y (which the executor then frees) is the plain kernel's bit for bit.
TEST_F(CudaLayers, PoolingMatchesCpu) {
  int kept_cases = 0;
  std::vector<PoolCase> cases = pool_cases(5);
  for (PoolCase& c : pool_cases(16)) cases.push_back(c);
  // Stride 2, 3x3 max windows over an odd width and height: the last 2x2 tiles of inputs of the
  // tiled backward (pool_backward_tile_kernel) reach past both edges.
  Pool2dDesc odd = pool_desc(3, 3, 2, 2, 1, 1, false, PoolMode::kMax, 16);
  odd.w = 9;
  cases.push_back({"max_odd_width", odd});
  // A 16x16 max window (256 elements, more than the one-byte argmax holds): the backward
  // recomputes each window's argmax, in packs and element by element.
  for (const std::int64_t channels : {8, 3}) {
    Pool2dDesc big = pool_desc(16, 16, 2, 2, 1, 1, false, PoolMode::kMax, channels);
    big.h = big.w = 16;
    cases.push_back({"max_window_256", big});
  }
  for (const PoolCase& c : cases) {
    const Pool2dDesc& d = c.desc;
    const Shape xs{d.n, d.c, d.h, d.w};
    const std::string shape = std::string(c.name) + " c" + std::to_string(d.c) + " k" +
                              std::to_string(d.kernel_h) + "x" + std::to_string(d.kernel_w) + " s" +
                              std::to_string(d.stride_h) + "x" + std::to_string(d.stride_w) + " p" +
                              std::to_string(d.pad_h) + (d.ceil_mode ? " ceil" : " floor") +
                              " out " + d.output_shape().str();
    const Tensor x = tie_free(xs);
    auto ref = cpu_->make_pool(d);
    Tensor y_r = Tensor::host(d.output_shape());
    ref->forward(x, y_r);
    for (const Precision& p : kAllPrecisions) {
      if (p.tf32) continue;  // no products: same as fp32
      const Tensor dy = random(d.output_shape(), p.dtype), dx0 = random(xs, p.dtype);
      Tensor dx_r = Tensor::host(xs), dxa_r = clone(dx0);
      ref->backward(x, y_r, dy, dx_r, false);
      ref->backward(x, y_r, dy, dxa_r, true);
      for (const Layout l : kAllLayouts) {
        auto g = gpu(p, l);
        if (!g) continue;
        auto k = g->make_pool(d);
        const Tensor xd = upload(*g, x, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
        Tensor y = g->alloc(d.output_shape(), p.dtype, l), dx = g->alloc(xs, p.dtype, l);
        Tensor dxa = upload(*g, dx0, p.dtype, l);
        k->forward(xd, y);
        k->backward(xd, y, dyd, dx, false);
        k->backward(xd, y, dyd, dxa, true);
        const std::string what = "pool " + shape + " " + label(p, l);
        EXPECT_TRUE(close(download(*g, y), y_r, p.tol, what + " forward"));
        EXPECT_TRUE(close(download(*g, dx), dx_r, p.tol, what + " backward"));
        EXPECT_TRUE(close(download(*g, dxa), dxa_r, p.tol, what + " backward accumulate"));
        Pool2dDesc dk = d;
        dk.keep_argmax = true;
        auto kk = g->make_pool(dk);
        EXPECT_FALSE(k->keeps_argmax()) << what;
        if (d.mode != PoolMode::kMax) {
          EXPECT_FALSE(kk->keeps_argmax()) << what;
        }
        if (!kk->keeps_argmax()) continue;
        ++kept_cases;
        Tensor yk = g->alloc(d.output_shape(), p.dtype, l), dxk = g->alloc(xs, p.dtype, l);
        Tensor dxak = upload(*g, dx0, p.dtype, l);
        kk->forward(xd, yk);
        kk->backward(Tensor{}, Tensor{}, dyd, dxk, false);
        kk->backward(Tensor{}, Tensor{}, dyd, dxak, true);
        EXPECT_TRUE(close(download(*g, yk), download(*g, y), 0.0, what + " forward, argmax kept"));
        EXPECT_TRUE(close(download(*g, dxk), download(*g, dx), 0.0, what + " backward from the kept argmax"));
        EXPECT_TRUE(close(download(*g, dxak), download(*g, dxa), 0.0, what + " accumulate from the kept argmax"));
      }
    }
  }
  if (cuda_device_count() > 0) {
    EXPECT_GE(kept_cases, 12);
  }
}

// ---- LRN ---------------------------------------------------------------------------------------
TEST_F(CudaLayers, LrnMatchesCpu) {
  for (const std::int64_t size : {5, 4}) {
    LrnDesc d;
    d.n = 2, d.c = 13, d.h = 5, d.w = 6, d.size = size, d.alpha = 0.3, d.beta = 0.75, d.k = 2.0;
    const Shape s{d.n, d.c, d.h, d.w};
    for (const Precision& p : kAllPrecisions) {
      if (p.tf32) continue;
      const Tensor x = random(s, p.dtype, -2.0f, 2.0f), dy = random(s, p.dtype),
                   dx0 = random(s, p.dtype);
      auto ref = cpu_->make_lrn(d);
      Tensor y_r = Tensor::host(s), dx_r = Tensor::host(s), dxa_r = clone(dx0);
      ref->forward(x, y_r);
      // The backward reads y: give the CPU the y the GPU will have (rounded to the dtype).
      const Tensor y_in = rounded(y_r, p.dtype);
      ref->backward(x, y_in, dy, dx_r, false);
      ref->backward(x, y_in, dy, dxa_r, true);
      for (const Layout l : kAllLayouts) {
        auto g = gpu(p, l);
        if (!g) continue;
        auto k = g->make_lrn(d);
        const Tensor xd = upload(*g, x, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
        Tensor y = g->alloc(s, p.dtype, l), dx = g->alloc(s, p.dtype, l),
               dxa = upload(*g, dx0, p.dtype, l);
        k->forward(xd, y);
        k->backward(xd, y, dyd, dx, false);
        k->backward(xd, y, dyd, dxa, true);
        const std::string what = "lrn size " + std::to_string(size) + " " + label(p, l);
        EXPECT_TRUE(close(download(*g, y), y_r, p.tol, what + " forward"));
        EXPECT_TRUE(close(download(*g, dx), dx_r, p.tol, what + " backward"));
        EXPECT_TRUE(close(download(*g, dxa), dxa_r, p.tol, what + " backward accumulate"));
      }
    }
  }
}

// ---- softmax cross-entropy ---------------------------------------------------------------------
TEST_F(CudaLayers, SoftmaxCrossEntropyMatchesCpu) {
  for (const std::int64_t classes : {10, 1000}) {
    SoftmaxXentDesc d;
    d.n = 9, d.classes = classes;
    for (const Precision& p : kAllPrecisions) {
      if (p.tf32) continue;
      auto g = gpu(p, Layout::kNCHW);
      if (!g) continue;
      const Tensor logits = random({d.n, d.classes}, p.dtype, -6.0f, 6.0f);
      const Tensor labels = random_labels(d.n, d.classes, rng_);
      auto ref = cpu_->make_softmax_xent(d);
      Tensor probs_r = Tensor::host({d.n, d.classes}), loss_r = Tensor::host({1}),
             dl_r = Tensor::host({d.n, d.classes});
      ref->forward(logits, labels, probs_r, loss_r);
      ref->backward(probs_r, labels, 128.0f, dl_r);

      auto k = g->make_softmax_xent(d);
      const Tensor ld = upload(*g, logits, p.dtype, Layout::kNCHW);
      Tensor lab = g->alloc({d.n}, DType::kI32);
      g->upload(labels, lab);
      Tensor probs = g->alloc({d.n, d.classes}, DType::kF32), loss = g->alloc({1}, DType::kF32);
      Tensor dl = g->alloc({d.n, d.classes}, p.dtype);
      k->forward(ld, lab, probs, loss);
      k->backward(probs, lab, 128.0f, dl);
      const std::string what = "softmax_xent " + std::to_string(classes) + " classes " + p.name;
      EXPECT_TRUE(close(download(*g, probs), probs_r, 1e-5, what + " probs"));
      EXPECT_TRUE(close(download(*g, loss), loss_r, 1e-5, what + " loss"));
      EXPECT_TRUE(
          close(download(*g, dl), dl_r, p.dtype == DType::kF32 ? 1e-5 : p.tol, what + " dlogits"));
    }
  }
}

TEST_F(CudaLayers, SoftmaxCrossEntropyBadLabelGivesNanLoss) {
  auto g = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(g);
  SoftmaxXentDesc d;
  d.n = 3, d.classes = 4;
  auto k = g->make_softmax_xent(d);
  Tensor labels = Tensor::host({3}, DType::kI32);
  labels.data<std::int32_t>()[0] = 1, labels.data<std::int32_t>()[1] = 4,
  labels.data<std::int32_t>()[2] = 0;
  Tensor lab = g->alloc({3}, DType::kI32);
  g->upload(labels, lab);
  Tensor probs = g->alloc({3, 4}, DType::kF32), loss = g->alloc({1}, DType::kF32);
  k->forward(upload(*g, random({3, 4}, DType::kF32), DType::kF32, Layout::kNCHW), lab, probs, loss);
  EXPECT_TRUE(std::isnan(download(*g, loss).f32()[0]));
}

}  // namespace
}  // namespace cnnergy::test
