// Fully connected, pooling, LRN, batch norm and softmax cross-entropy on the GPU against the CPU
// reference, forward and backward, every precision and layout. Shapes are chosen so that both the
// cuDNN paths and the backend's own kernels run (ceil-mode pooling, NHWC/bf16 LRN, bf16 batch
// norm), and, with channel counts that fill 16-byte packs, the vectorised channel-last kernels
// (batch norm over many row slices, max/average/global pooling, bias add and gradient).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

class CudaLayers : public CudaTest {
 protected:
  struct BnCase {
    Shape shape;
    float lo, hi;  // x uniform in [lo, hi)
  };
  // One batch-norm case on fresh random inputs in precision p and layout l: training and inference
  // outputs, the running (variance within rv_tol) and saved statistics, and dx (overwritten and
  // accumulated), dgamma, dbeta of the GPU kernel against the CPU reference. With check_own the case
  // must be one the backend's own kernels take (they alone fuse a ReLU). No GPU: nothing checked.
  void expect_batch_norm_case(const BatchNormDesc& d, const Shape& s, const Precision& p, Layout l, float lo,
                              float hi, double rv_tol, bool check_own, const std::string& what) {
    auto g = gpu(p, l);
    if (!g) return;
    if (check_own) {
      BatchNormDesc with_relu = d;
      with_relu.relu = true;
      EXPECT_TRUE(g->fuses_batch_norm_relu(with_relu)) << what << ": cuDNN normalises it, not the own kernels";
    }
    const Tensor x = random(s, p.dtype, lo, hi), dy = random(s, p.dtype), dx0 = random(s, p.dtype);
    const Tensor gamma = random({d.c}, DType::kF32, 0.5f, 1.5f), beta = random({d.c}, DType::kF32);
    const Tensor rm0 = random({d.c}, DType::kF32), rv0 = random({d.c}, DType::kF32, 0.5f, 2.0f);
    auto ref = cpu_->make_batch_norm(d);
    Tensor y_r = Tensor::host(s), rm_r = clone(rm0), rv_r = clone(rv0), sm_r = Tensor::host({d.c}),
           si_r = Tensor::host({d.c}), yi_r = Tensor::host(s);
    ref->forward_training(x, gamma, beta, rm_r, rv_r, y_r, sm_r, si_r);
    ref->forward_inference(x, gamma, beta, rm0, rv0, yi_r);
    Tensor dx_r = Tensor::host(s), dxa_r = clone(dx0), dg_r = Tensor::host({d.c}), db_r = Tensor::host({d.c});
    ref->backward(x, dy, gamma, beta, sm_r, si_r, dx_r, dg_r, db_r, false);
    ref->backward(x, dy, gamma, beta, sm_r, si_r, dxa_r, dg_r, db_r, true);

    auto k = g->make_batch_norm(d);
    auto up32 = [&](const Tensor& t) { return upload(*g, t, DType::kF32, Layout::kNCHW); };
    const Tensor xd = upload(*g, x, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
    const Tensor gd = up32(gamma), bd = up32(beta);
    Tensor rm = up32(rm0), rv = up32(rv0), sm = g->alloc({d.c}, DType::kF32), si = g->alloc({d.c}, DType::kF32);
    Tensor y = g->alloc(s, p.dtype, l), yi = g->alloc(s, p.dtype, l);
    Tensor dx = g->alloc(s, p.dtype, l), dxa = upload(*g, dx0, p.dtype, l);
    Tensor dg = g->alloc({d.c}, DType::kF32), db = g->alloc({d.c}, DType::kF32);
    k->forward_training(xd, gd, bd, rm, rv, y, sm, si);
    k->forward_inference(xd, gd, bd, up32(rm0), up32(rv0), yi);
    k->backward(xd, dyd, gd, bd, sm, si, dx, dg, db, false);
    EXPECT_TRUE(close(download(*g, y), y_r, p.tol, what + " training y"));
    EXPECT_TRUE(close(download(*g, rm), rm_r, 1e-5, what + " running mean"));
    EXPECT_TRUE(close(download(*g, rv), rv_r, rv_tol, what + " running variance (unbiased)"));
    EXPECT_TRUE(close(download(*g, sm), sm_r, 1e-5, what + " saved mean"));
    EXPECT_TRUE(close(download(*g, si), si_r, 1e-4, what + " saved inverse std"));
    EXPECT_TRUE(close(download(*g, yi), yi_r, p.tol, what + " inference y"));
    EXPECT_TRUE(close(download(*g, dx), dx_r, p.tol, what + " dx"));
    EXPECT_TRUE(close(download(*g, dg), dg_r, 1e-4, what + " dgamma"));
    EXPECT_TRUE(close(download(*g, db), db_r, 1e-4, what + " dbeta"));
    k->backward(xd, dyd, gd, bd, sm, si, dxa, dg, db, true);
    EXPECT_TRUE(close(download(*g, dxa), dxa_r, p.tol, what + " dx accumulate"));
  }
  // expect_batch_norm_case for each case in every dtype (fp32, fp16, bf16), one layout.
  void expect_batch_norm_matches_cpu(const std::vector<BnCase>& cases, Layout layout, bool check_own) {
    for (const BnCase& bc : cases) {
      const Shape& s = bc.shape;
      const bool flat = s.rank() == 2;
      BatchNormDesc d;
      d.n = s[0], d.c = s[1], d.h = flat ? 1 : s[2], d.w = flat ? 1 : s[3], d.eps = 1e-5, d.momentum = 0.1;
      for (const Precision& p : {kFp32, kFp16, kBf16})
        expect_batch_norm_case(d, s, p, layout, bc.lo, bc.hi, 1e-4, check_own,
                               "batch_norm " + s.str() + " x in [" + std::to_string(bc.lo) + ", " +
                                   std::to_string(bc.hi) + "] " + p.name);
    }
  }
  // Values distinct within every (n, c) plane and exact in bf16 and fp16 (a shuffled k/16 for
  // k in [-HW/2, HW/2), HW <= 256), so that max-pooling has no ties in any dtype.
  Tensor tie_free(const Shape& shape) {
    Tensor t = Tensor::host(shape);
    const std::int64_t plane = shape.h() * shape.w();
    EXPECT_LE(plane, 256);
    std::vector<std::int64_t> perm(static_cast<std::size_t>(plane));
    for (std::int64_t base = 0; base < t.numel(); base += plane) {
      std::iota(perm.begin(), perm.end(), std::int64_t{0});
      std::shuffle(perm.begin(), perm.end(), rng_.engine());
      for (std::int64_t i = 0; i < plane; ++i)
        t.f32()[static_cast<std::size_t>(base + i)] =
            static_cast<float>(perm[static_cast<std::size_t>(i)] - plane / 2) / 16.0f;
    }
    return t;
  }
};

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

// ---- batch norm --------------------------------------------------------------------------------
TEST_F(CudaLayers, BatchNormMatchesCpu) {
  for (const bool flat : {false, true}) {
    BatchNormDesc d;
    d.n = 6, d.c = 7, d.h = flat ? 1 : 5, d.w = flat ? 1 : 3, d.eps = 1e-5, d.momentum = 0.1;
    const Shape s = flat ? Shape{d.n, d.c} : Shape{d.n, d.c, d.h, d.w};
    for (const Precision& p : kAllPrecisions) {
      if (p.tf32) continue;
      for (const Layout l : kAllLayouts)
        expect_batch_norm_case(d, s, p, l, -1.0f, 3.0f, 1e-5, false,
                               std::string(flat ? "batch_norm 2-D " : "batch_norm 4-D ") + label(p, l));
    }
  }
}

// Channel-last batch norm whose channels fill 16-byte packs: the tiled kernels, with enough rows
// for many row slices (partials finished in fp64), channel counts that leave threads of a block
// idle (24 bf16 channels = 3 packs), a 2-D case, and data whose mean is far from zero relative to
// its spread (the shifted sums must not cancel).
TEST_F(CudaLayers, BatchNormVectorisedChannelLastMatchesCpu) {
  expect_batch_norm_matches_cpu({{Shape{8, 16, 32, 32}, -1.0f, 3.0f},
                                 {Shape{4, 24, 9, 7}, -1.0f, 3.0f},
                                 {Shape{6, 32, 16, 16}, 60.0f, 68.0f},
                                 {Shape{300, 64}, -2.0f, 1.0f}},
                                Layout::kNHWC, false);
}

// Batch norms enqueued back to back, nothing waited for between them: on Hopper each pass's finishing
// kernel and its normalisation or dx pass start before the kernel they read from has ended
// (programmatic dependent launch, device_utils.cuh) and wait inside for its results. Six
// batch norms over inputs whose means lie 10 apart, each writing its coefficients where the one
// before wrote its own (the allocator hands the freed scratch back): a pass that read before its
// producer had finished would use the previous one's statistics, 10 standard deviations off. Each
// output is checked against the CPU's, forward (y, statistics) and backward (dx, dgamma, dbeta).
TEST_F(CudaLayers, BatchNormPassesEnqueuedBackToBackReadTheirOwnStatistics) {
  const Shape s{16, 64, 28, 28};
  BatchNormDesc d;
  d.n = s[0], d.c = s[1], d.h = s[2], d.w = s[3], d.eps = 1e-5, d.momentum = 0.1;
  constexpr int kPasses = 6;
  int checked = 0;
  for (const Precision& p : {kFp32, kBf16}) {
    auto g = gpu(p, Layout::kNHWC);
    if (!g) continue;
    auto ref = cpu_->make_batch_norm(d);
    auto k = g->make_batch_norm(d);
    auto up32 = [&](const Tensor& t) { return upload(*g, t, DType::kF32, Layout::kNCHW); };
    struct Pass {
      Tensor x, dy, y_r, dx_r, sm_r, si_r, dg_r, db_r;          // host
      Tensor xd, dyd, rm, rv, y, sm, si, dx, dg, db;            // device
    };
    std::vector<Pass> passes(kPasses);
    const Tensor gamma = random({d.c}, DType::kF32, 0.5f, 1.5f), beta = random({d.c}, DType::kF32);
    const Tensor gd = up32(gamma), bd = up32(beta);
    for (int i = 0; i < kPasses; ++i) {
      Pass& q = passes[static_cast<std::size_t>(i)];
      const float mean = 10.0f * static_cast<float>(i % 2 == 0 ? i : -i);
      q.x = random(s, p.dtype, mean - 1.0f, mean + 1.0f);
      q.dy = random(s, p.dtype);
      Tensor rm_r = Tensor::host({d.c}), rv_r = Tensor::host({d.c});
      std::fill(rv_r.f32().begin(), rv_r.f32().end(), 1.0f);
      q.y_r = Tensor::host(s), q.dx_r = Tensor::host(s);
      q.sm_r = Tensor::host({d.c}), q.si_r = Tensor::host({d.c}), q.dg_r = Tensor::host({d.c}), q.db_r = Tensor::host({d.c});
      ref->forward_training(q.x, gamma, beta, rm_r, rv_r, q.y_r, q.sm_r, q.si_r);
      ref->backward(q.x, q.dy, gamma, beta, q.sm_r, q.si_r, q.dx_r, q.dg_r, q.db_r, false);
      q.xd = upload(*g, q.x, p.dtype, Layout::kNHWC);
      q.dyd = upload(*g, q.dy, p.dtype, Layout::kNHWC);
      q.rm = g->alloc({d.c}, DType::kF32);
      q.rv = g->alloc({d.c}, DType::kF32);
      g->fill(q.rv, 1.0f);
      for (Tensor* t : {&q.sm, &q.si, &q.dg, &q.db}) *t = g->alloc({d.c}, DType::kF32);
      q.y = g->alloc(s, p.dtype, Layout::kNHWC);
      q.dx = g->alloc(s, p.dtype, Layout::kNHWC);
    }
    g->synchronize();
    for (Pass& q : passes) {
      k->forward_training(q.xd, gd, bd, q.rm, q.rv, q.y, q.sm, q.si);
      k->backward(q.xd, q.dyd, gd, bd, q.sm, q.si, q.dx, q.dg, q.db, false);
    }
    for (int i = 0; i < kPasses; ++i) {
      const Pass& q = passes[static_cast<std::size_t>(i)];
      const std::string what = std::string("pass ") + std::to_string(i) + " " + p.name;
      EXPECT_TRUE(close(download(*g, q.sm), q.sm_r, 1e-5, what + " saved mean"));
      EXPECT_TRUE(close(download(*g, q.si), q.si_r, 1e-4, what + " saved inverse std"));
      EXPECT_TRUE(close(download(*g, q.y), q.y_r, p.tol, what + " y"));
      EXPECT_TRUE(close(download(*g, q.dx), q.dx_r, p.tol, what + " dx"));
      EXPECT_TRUE(close(download(*g, q.dg), q.dg_r, 1e-4, what + " dgamma"));
      EXPECT_TRUE(close(download(*g, q.db), q.db_r, 1e-4, what + " dbeta"));
      ++checked;
    }
  }
  EXPECT_GE(checked, kPasses);
}

// NCHW batch norm: the plane kernels (batch_norm_planes.cu) in every dtype, with planes that take
// 16-byte packs (32x32, 16x16) and planes that do not (35x35, 7x7: one element at a time), channels
// of more than 4,096 values (several slices per channel, partials finished in fp64), and data whose
// mean is far from zero relative to its spread (the shifted sums must not cancel).
TEST_F(CudaLayers, BatchNormChannelPlanesMatchCpu) {
  expect_batch_norm_matches_cpu({{Shape{16, 8, 32, 32}, -1.0f, 3.0f},
                                 {Shape{9, 4, 35, 35}, -1.0f, 3.0f},
                                 {Shape{6, 32, 16, 16}, 60.0f, 68.0f},
                                 {Shape{3, 16, 7, 7}, -2.0f, 1.0f}},
                                Layout::kNCHW, true);
}

// A fused ReLU on the GPU is exactly the GPU's batch norm followed by its ReLU (output, statistics,
// dx overwritten and accumulated, dgamma, dbeta: bit for bit), and matches the CPU's fused kernel,
// on the tiled path (NHWC, packs filled), the plane path (NCHW) and 2-D; where cuDNN normalises
// (NHWC fp32 and fp16 with 6 channels: no whole packs) the backend declines the fusion and making
// such a kernel is refused.
TEST_F(CudaLayers, BatchNormFusedReluIsThePairBitForBit) {
  // The last two: ResNet-34 at 64x64 and batch 8 (stage 1 with many row slices, stage 4 with 4
  // channel groups and 32 rows).
  const Shape shapes[] = {Shape{8, 16, 12, 10}, Shape{5, 24, 7, 9}, Shape{300, 64}, Shape{8, 64, 16, 16},
                          Shape{8, 512, 2, 2}, Shape{4, 6, 5, 5}};
  int fused_cases = 0, declined_cases = 0;
  for (const Shape& s : shapes) {
    const bool flat = s.rank() == 2;
    BatchNormDesc d;
    d.n = s[0], d.c = s[1], d.h = flat ? 1 : s[2], d.w = flat ? 1 : s[3];
    for (const Precision& p : {kFp32, kFp16, kBf16}) {
      for (const Layout l : kAllLayouts) {
        auto g = gpu(p, l);
        if (!g) continue;
        BatchNormDesc df = d;
        df.relu = true;
        const std::string what = "fused batch_norm " + s.str() + " " + label(p, l);
        if (!g->fuses_batch_norm_relu(df)) {
          EXPECT_THROW(g->make_batch_norm(df), NotSupported) << what;
          ++declined_cases;
          continue;
        }
        ++fused_cases;
        const Tensor x = random(s, p.dtype, -1.0f, 2.0f), dy = random(s, p.dtype), dx0 = random(s, p.dtype);
        const Tensor gamma = random({d.c}, DType::kF32, -1.0f, 1.5f), beta = random({d.c}, DType::kF32);
        auto up32 = [&](const Tensor& t) { return upload(*g, t, DType::kF32, Layout::kNCHW); };
        const Tensor xd = upload(*g, x, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
        const Tensor gd = up32(gamma), bd = up32(beta);
        auto plain = g->make_batch_norm(d), fused = g->make_batch_norm(df);
        auto stats = [&] {
          std::vector<Tensor> t;
          for (int i = 0; i < 4; ++i) t.push_back(up32(Tensor::host({d.c})));
          g->fill(t[1], 1.0f);
          return t;
        };
        auto sp = stats(), sf = stats();
        Tensor y = g->alloc(s, p.dtype, l), yf = g->alloc(s, p.dtype, l), dz = g->alloc(s, p.dtype, l);
        plain->forward_training(xd, gd, bd, sp[0], sp[1], y, sp[2], sp[3]);
        fused->forward_training(xd, gd, bd, sf[0], sf[1], yf, sf[2], sf[3]);
        g->relu_forward(y, y);
        g->relu_backward(y, dyd, dz, false);
        EXPECT_TRUE(all_close(download(*g, yf), download(*g, y), 0.0, 0.0)) << what << " y";
        for (int i = 0; i < 4; ++i)
          EXPECT_TRUE(all_close(download(*g, sf[i]), download(*g, sp[i]), 0.0, 0.0)) << what << " statistics " << i;
        for (const bool accumulate : {false, true}) {
          Tensor dxp = upload(*g, dx0, p.dtype, l), dxf = upload(*g, dx0, p.dtype, l);
          Tensor dgp = g->alloc({d.c}, DType::kF32), dbp = g->alloc({d.c}, DType::kF32);
          Tensor dgf = g->alloc({d.c}, DType::kF32), dbf = g->alloc({d.c}, DType::kF32);
          plain->backward(xd, dz, gd, bd, sp[2], sp[3], dxp, dgp, dbp, accumulate);
          fused->backward(xd, dyd, gd, bd, sf[2], sf[3], dxf, dgf, dbf, accumulate);
          const std::string how = what + (accumulate ? " accumulate" : "");
          EXPECT_TRUE(all_close(download(*g, dxf), download(*g, dxp), 0.0, 0.0)) << how << " dx";
          EXPECT_TRUE(all_close(download(*g, dgf), download(*g, dgp), 0.0, 0.0)) << how << " dgamma";
          EXPECT_TRUE(all_close(download(*g, dbf), download(*g, dbp), 0.0, 0.0)) << how << " dbeta";
        }
        // And the CPU's fused kernel on the same data.
        auto ref = cpu_->make_batch_norm(df);
        Tensor y_r = Tensor::host(s), st_r[4] = {Tensor::host({d.c}), Tensor::host({d.c}), Tensor::host({d.c}),
                                                 Tensor::host({d.c})};
        ref->forward_training(x, gamma, beta, st_r[0], st_r[1], y_r, st_r[2], st_r[3]);
        Tensor dx_r = Tensor::host(s), dg_r = Tensor::host({d.c}), db_r = Tensor::host({d.c});
        ref->backward(x, dy, gamma, beta, st_r[2], st_r[3], dx_r, dg_r, db_r, false);
        Tensor dxf = g->alloc(s, p.dtype, l), dgf = g->alloc({d.c}, DType::kF32), dbf = g->alloc({d.c}, DType::kF32);
        fused->backward(xd, dyd, gd, bd, sf[2], sf[3], dxf, dgf, dbf, false);
        EXPECT_TRUE(close(download(*g, yf), y_r, p.tol, what + " y vs cpu"));
        EXPECT_TRUE(close(download(*g, dxf), dx_r, p.tol, what + " dx vs cpu"));
        EXPECT_TRUE(close(download(*g, dgf), dg_r, 1e-3, what + " dgamma vs cpu"));
        EXPECT_TRUE(close(download(*g, dbf), db_r, 1e-3, what + " dbeta vs cpu"));
      }
    }
  }
  if (cuda_device_count() > 0) {
    EXPECT_GE(fused_cases, 6);
    EXPECT_GE(declined_cases, 2);  // NHWC fp32 and fp16 with 6 channels
  }
}

// recompute_output writes forward_training's y again bit for bit (with and without a fused ReLU)
// from the coefficients the kernel kept, on the tiled path (NHWC, packs filled), the plane path
// (NCHW) and 2-D; where cuDNN normalises, the backend says it cannot and the
// kernel refuses; a kernel made with a residual add refuses too.
TEST_F(CudaLayers, BatchNormRecomputesItsTrainingOutputBitForBit) {
  const Shape shapes[] = {Shape{8, 16, 12, 10}, Shape{5, 24, 7, 9}, Shape{300, 64}, Shape{8, 64, 16, 16}};
  int recomputed_cases = 0;
  for (const Shape& s : shapes) {
    const bool flat = s.rank() == 2;
    BatchNormDesc d;
    d.n = s[0], d.c = s[1], d.h = flat ? 1 : s[2], d.w = flat ? 1 : s[3];
    for (const Precision& p : {kFp32, kFp16, kBf16}) {
      for (const Layout l : kAllLayouts) {
        for (const bool relu : {false, true}) {
          auto g = gpu(p, l);
          if (!g) continue;
          BatchNormDesc dr = d;
          dr.relu = relu;
          const std::string what = std::string("batch_norm") + (relu ? " + relu " : " ") + s.str() + " " + label(p, l);
          if (relu && !g->fuses_batch_norm_relu(dr)) continue;
          auto bn = g->make_batch_norm(dr);
          auto up32 = [&](const Tensor& t) { return upload(*g, t, DType::kF32, Layout::kNCHW); };
          const Tensor gd = up32(random({d.c}, DType::kF32, -1.0f, 1.5f)), bd = up32(random({d.c}, DType::kF32));
          std::vector<Tensor> st;
          for (int i = 0; i < 4; ++i) st.push_back(up32(Tensor::host({d.c})));
          g->fill(st[1], 1.0f);
          const Tensor xd = upload(*g, random(s, p.dtype, -1.0f, 2.0f), p.dtype, l);
          Tensor y = g->alloc(s, p.dtype, l), again = g->alloc(s, p.dtype, l);
          bn->forward_training(xd, gd, bd, st[0], st[1], y, st[2], st[3]);
          if (!g->recomputes_batch_norm_output(dr)) {
            EXPECT_THROW(bn->recompute_output(xd, gd, bd, st[2], st[3], again), NotSupported) << what;
            continue;
          }
          ++recomputed_cases;
          g->fill(again, 7.0f);
          bn->recompute_output(xd, gd, bd, st[2], st[3], again);
          EXPECT_TRUE(all_close(download(*g, again), download(*g, y), 0.0, 0.0)) << what;
          // The residual kernel has no output to recompute.
          BatchNormDesc dz = d;
          dz.residual = true;
          EXPECT_FALSE(g->recomputes_batch_norm_output(dz)) << what;
          if (g->fuses_batch_norm_residual(dz)) {
            auto with_add = g->make_batch_norm(dz);
            EXPECT_THROW(with_add->recompute_output(xd, gd, bd, st[2], st[3], again), InvalidArgument) << what;
          }
        }
      }
    }
  }
  if (cuda_device_count() > 0) {
    EXPECT_GE(recomputed_cases, 12);
  }
}

// A fused residual add on the GPU is exactly the GPU's batch norm followed by its add (+ ReLU):
// training and inference outputs and the statistics bit for bit, the backward the plain batch
// norm's bit for bit, and with the add's ReLU mask taken in (backward_masking) the pair's bit for bit;
// and the CPU's fused kernel within the dtype's tolerance. Tiled path (NHWC,
// packs filled), plane path (NCHW), 2-D; where cuDNN normalises the backend declines.
TEST_F(CudaLayers, BatchNormFusedResidualAddIsThePairBitForBit) {
  const Shape shapes[] = {Shape{8, 16, 12, 10}, Shape{5, 24, 7, 9}, Shape{300, 64}, Shape{8, 64, 16, 16},
                          Shape{8, 512, 2, 2}};
  int fused_cases = 0, masking_cases = 0;
  for (const Shape& s : shapes) {
    const bool flat = s.rank() == 2;
    BatchNormDesc d;
    d.n = s[0], d.c = s[1], d.h = flat ? 1 : s[2], d.w = flat ? 1 : s[3];
    for (const Precision& p : {kFp32, kFp16, kBf16}) {
      for (const Layout l : kAllLayouts) {
        for (const bool relu : {false, true}) {
          auto g = gpu(p, l);
          if (!g) continue;
          BatchNormDesc df = d;
          df.residual = true;
          df.relu = relu;
          const std::string what = std::string("batch_norm + add") + (relu ? " + relu " : " ") + s.str() + " " + label(p, l);
          if (!g->fuses_batch_norm_residual(df)) {
            EXPECT_THROW(g->make_batch_norm(df), NotSupported) << what;
            continue;
          }
          ++fused_cases;
          const Tensor x = random(s, p.dtype, -1.0f, 2.0f), z = random(s, p.dtype), dy = random(s, p.dtype);
          const Tensor dx0 = random(s, p.dtype);
          const Tensor gamma = random({d.c}, DType::kF32, -1.0f, 1.5f), beta = random({d.c}, DType::kF32);
          const Tensor rm0 = random({d.c}, DType::kF32), rv0 = random({d.c}, DType::kF32, 0.5f, 2.0f);
          auto up32 = [&](const Tensor& t) { return upload(*g, t, DType::kF32, Layout::kNCHW); };
          const Tensor xd = upload(*g, x, p.dtype, l), zd = upload(*g, z, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
          const Tensor gd = up32(gamma), bd = up32(beta);
          auto plain = g->make_batch_norm(d), fused = g->make_batch_norm(df);
          auto stats = [&] {
            std::vector<Tensor> t;
            for (int i = 0; i < 4; ++i) t.push_back(up32(Tensor::host({d.c})));
            g->fill(t[1], 1.0f);
            return t;
          };
          auto sp = stats(), sf = stats();
          auto pair = [&](const Tensor& t, const Tensor& out) {
            if (relu)
              g->add_relu_forward(t, zd, out);
            else
              g->add_forward(t, zd, out);
          };
          Tensor t = g->alloc(s, p.dtype, l), y = g->alloc(s, p.dtype, l), yf = g->alloc(s, p.dtype, l);
          plain->forward_training(xd, gd, bd, sp[0], sp[1], t, sp[2], sp[3]);
          pair(t, y);
          fused->forward_training_residual(xd, zd, gd, bd, sf[0], sf[1], yf, sf[2], sf[3]);
          EXPECT_TRUE(all_close(download(*g, yf), download(*g, y), 0.0, 0.0)) << what << " training y";
          for (int i = 0; i < 4; ++i)
            EXPECT_TRUE(all_close(download(*g, sf[i]), download(*g, sp[i]), 0.0, 0.0)) << what << " statistics " << i;
          Tensor ti = g->alloc(s, p.dtype, l), yi = g->alloc(s, p.dtype, l), yif = g->alloc(s, p.dtype, l);
          plain->forward_inference(xd, gd, bd, up32(rm0), up32(rv0), ti);
          pair(ti, yi);
          fused->forward_inference_residual(xd, zd, gd, bd, up32(rm0), up32(rv0), yif);
          EXPECT_TRUE(all_close(download(*g, yif), download(*g, yi), 0.0, 0.0)) << what << " inference y";
          // Each entry point refuses the other kind of call.
          EXPECT_THROW(fused->forward_training(xd, gd, bd, sf[0], sf[1], yf, sf[2], sf[3]), InvalidArgument) << what;
          EXPECT_THROW(plain->forward_training_residual(xd, zd, gd, bd, sp[0], sp[1], y, sp[2], sp[3]), InvalidArgument)
              << what;
          // Backward is the plain batch norm's: dy is the gradient of bn(x) (the add masks and hands it on).
          for (const bool accumulate : {false, true}) {
            Tensor dxp = upload(*g, dx0, p.dtype, l), dxf = upload(*g, dx0, p.dtype, l);
            Tensor dgp = g->alloc({d.c}, DType::kF32), dbp = g->alloc({d.c}, DType::kF32);
            Tensor dgf = g->alloc({d.c}, DType::kF32), dbf = g->alloc({d.c}, DType::kF32);
            plain->backward(xd, dyd, gd, bd, sp[2], sp[3], dxp, dgp, dbp, accumulate);
            fused->backward(xd, dyd, gd, bd, sf[2], sf[3], dxf, dgf, dbf, accumulate);
            const std::string how = what + (accumulate ? " accumulate" : "");
            EXPECT_TRUE(all_close(download(*g, dxf), download(*g, dxp), 0.0, 0.0)) << how << " dx";
            EXPECT_TRUE(all_close(download(*g, dgf), download(*g, dgp), 0.0, 0.0)) << how << " dgamma";
            EXPECT_TRUE(all_close(download(*g, dbf), download(*g, dbp), 0.0, 0.0)) << how << " dbeta";
            if (!relu) continue;
            // The add's ReLU backward taken into the batch norm's (backward_masking): the add's
            // in-place mask of dy by its output, then the plain backward, bit for bit, the masked dy
            // included (one pass on the tiled path, the pair elsewhere).
            Tensor dym = upload(*g, dy, p.dtype, l), dyp = upload(*g, dy, p.dtype, l);
            Tensor dxm = upload(*g, dx0, p.dtype, l), dxq = upload(*g, dx0, p.dtype, l);
            Tensor dgm = g->alloc({d.c}, DType::kF32), dbm = g->alloc({d.c}, DType::kF32);
            Tensor dgq = g->alloc({d.c}, DType::kF32), dbq = g->alloc({d.c}, DType::kF32);
            g->relu_backward(yf, dyp, dyp, false);
            plain->backward(xd, dyp, gd, bd, sp[2], sp[3], dxq, dgq, dbq, accumulate);
            ASSERT_TRUE(fused->backward_masking(xd, yf, dym, gd, sf[2], sf[3], dxm, dgm, dbm, accumulate)) << how;
            EXPECT_TRUE(all_close(download(*g, dym), download(*g, dyp), 0.0, 0.0)) << how << " masked dy";
            EXPECT_TRUE(all_close(download(*g, dxm), download(*g, dxq), 0.0, 0.0)) << how << " masking dx";
            EXPECT_TRUE(all_close(download(*g, dgm), download(*g, dgq), 0.0, 0.0)) << how << " masking dgamma";
            EXPECT_TRUE(all_close(download(*g, dbm), download(*g, dbq), 0.0, 0.0)) << how << " masking dbeta";
            ++masking_cases;
            EXPECT_THROW(plain->backward_masking(xd, yf, dym, gd, sp[2], sp[3], dxm, dgm, dbm, accumulate), InvalidArgument);
          }
          // And the CPU's fused kernel on the same data (fp32 reference; x and z hold dtype values).
          auto ref = cpu_->make_batch_norm(df);
          Tensor y_r = Tensor::host(s), st_r[4] = {Tensor::host({d.c}), Tensor::host({d.c}), Tensor::host({d.c}),
                                                   Tensor::host({d.c})};
          cpu_->fill(st_r[1], 1.0f);
          ref->forward_training_residual(x, z, gamma, beta, st_r[0], st_r[1], y_r, st_r[2], st_r[3]);
          EXPECT_TRUE(close(download(*g, yf), y_r, p.tol, what + " y vs cpu"));
        }
      }
    }
  }
  if (cuda_device_count() > 0) {
    EXPECT_GE(fused_cases, 12);
    EXPECT_GE(masking_cases, 12);
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
