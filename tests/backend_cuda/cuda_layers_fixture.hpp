// The CudaLayers fixture: a layer's forward and backward on the GPU against the CPU reference, for
// the layer tests split over test_cuda_layers.cpp and test_cuda_batch_norm.cpp (one fixture type for
// both, so that gtest sees one suite).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {

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

}  // namespace cnnergy::test
