// Batch norm on the GPU against the CPU reference, forward and backward, every precision and layout:
// the cuDNN paths, the backend's own vectorised channel-last kernels and channel planes, and the
// fused ReLU, recomputed output and residual add against the unfused pair.
#include "backend_cuda/cuda_layers_fixture.hpp"

namespace cnnergy::test {
namespace {

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

}  // namespace
}  // namespace cnnergy::test
