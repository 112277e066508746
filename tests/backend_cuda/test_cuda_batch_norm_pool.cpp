// The batch-norm apply fusion (Backend::fuses_batch_norm_pool): a max pool made with
// Pool2dDesc::normalised reads the batch norm's input and normalises it as it reads, with the
// coefficients the batch norm's training_coefficients / inference_coefficients return, so that the
// batch norm's output is never written. On fresh random inputs, in every dtype and layout, with and
// without the batch norm's fused ReLU, over windows that reach past both edges (3 x 3 / 2 with padding,
// odd sizes) and 2 x 2 / 2: the pool's output and its backward through the kept argmax, the batch
// norm's statistics, running averages and backward equal the unfused pair's (the batch norm's forward,
// then the pool over its output) bit for bit; the evaluation map likewise. Where the batch norm runs
// cuDNN's kernels the backend declines the pair and the batch norm refuses to hand its map on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

class CudaBatchNormPool : public CudaTest {};

struct PoolCase {
  Shape x;
  std::int64_t kernel, stride, pad;
};

TEST_F(CudaBatchNormPool, NormalisingPoolIsThePairBitForBit) {
  // 16 and 64 channels fill packs in every dtype (NHWC); 6 fill none (and cuDNN normalises them in
  // fp32 and fp16 NHWC: declined).
  const PoolCase cases[] = {{Shape{4, 16, 11, 9}, 3, 2, 1}, {Shape{2, 64, 30, 30}, 3, 2, 1},
                            {Shape{3, 16, 10, 12}, 2, 2, 0}, {Shape{3, 6, 9, 7}, 3, 2, 1}};
  int fused_cases = 0, declined_cases = 0;
  for (const PoolCase& pc : cases) {
    const Shape& s = pc.x;
    for (const Precision& p : {kFp32, kFp16, kBf16}) {
      for (const Layout l : kAllLayouts) {
        auto g = gpu(p, l);
        if (!g) continue;
        for (const bool relu : {true, false}) {
          BatchNormDesc d;
          d.n = s[0], d.c = s[1], d.h = s[2], d.w = s[3], d.relu = relu;
          Pool2dDesc pd;
          pd.n = s[0], pd.c = s[1], pd.h = s[2], pd.w = s[3];
          pd.kernel_h = pd.kernel_w = pc.kernel;
          pd.stride_h = pd.stride_w = pc.stride;
          pd.pad_h = pd.pad_w = pc.pad;
          pd.keep_argmax = true;
          Pool2dDesc pn = pd;
          pn.normalised = true;
          const std::string what = "batch_norm" + std::string(relu ? " + relu" : "") + " -> max_pool " + s.str() +
                                   " " + std::to_string(pc.kernel) + "/" + std::to_string(pc.stride) + " " + label(p, l);
          if (relu && !g->fuses_batch_norm_relu(d)) continue;  // no fused ReLU to hand on
          const Tensor gamma = random({d.c}, DType::kF32, -1.0f, 1.5f), beta = random({d.c}, DType::kF32);
          auto up32 = [&](const Tensor& t) { return upload(*g, t, DType::kF32, Layout::kNCHW); };
          const Tensor gd = up32(gamma), bd = up32(beta);
          auto stats = [&] {
            std::vector<Tensor> t;
            for (int i = 0; i < 4; ++i) t.push_back(up32(Tensor::host({d.c})));
            g->fill(t[1], 1.0f);
            return t;
          };
          if (!g->fuses_batch_norm_pool(d, pn)) {
            ++declined_cases;
            auto bn = g->make_batch_norm(d);
            const Tensor xd = upload(*g, random(s, p.dtype), p.dtype, l);
            auto st = stats();
            EXPECT_THROW((void)bn->training_coefficients(xd, gd, bd, st[0], st[1], st[2], st[3], nullptr), NotSupported)
                << what;
            continue;
          }
          ++fused_cases;
          const Shape out = pd.output_shape();
          // x centred off zero with a spread: the ReLU clamps some windows entirely (ties at 0, where
          // the first position must win in both).
          const Tensor x = random(s, p.dtype, -1.0f, 2.0f), dy = random(out, p.dtype);
          const Tensor xd = upload(*g, x, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
          auto bn_plain = g->make_batch_norm(d), bn_fused = g->make_batch_norm(d);
          auto pool_plain = g->make_pool(pd), pool_fused = g->make_pool(pn);
          ASSERT_TRUE(pool_fused->keeps_argmax()) << what;
          auto sp = stats(), sf = stats();
          Tensor y = g->alloc(s, p.dtype, l), yp = g->alloc(out, p.dtype, l), yf = g->alloc(out, p.dtype, l);
          bn_plain->forward_training(xd, gd, bd, sp[0], sp[1], y, sp[2], sp[3]);
          pool_plain->forward(y, yp);
          NormalisationMap coef = bn_fused->training_coefficients(xd, gd, bd, sf[0], sf[1], sf[2], sf[3], nullptr);
          ASSERT_NE(coef.f32, nullptr) << what;
          pool_fused->forward_normalised(xd, coef, relu, yf);
          EXPECT_TRUE(all_close(download(*g, yf), download(*g, yp), 0.0, 0.0)) << what << " pooled output";
          for (int i = 0; i < 4; ++i)
            EXPECT_TRUE(all_close(download(*g, sf[i]), download(*g, sp[i]), 0.0, 0.0)) << what << " statistics " << i;
          // Backward: the pool through its kept argmax, then the batch norm (its ReLU's mask from x).
          // Where the plain pool runs cuDNN's kernels (fp32 and fp16 NCHW: no argmax kept), the pooled
          // values agree but ties may route elsewhere: the batch norms then both take the fused pool's dx.
          Tensor dzp = g->alloc(s, p.dtype, l), dzf = g->alloc(s, p.dtype, l);
          pool_plain->backward(y, yp, dyd, dzp, false);
          pool_fused->backward(Tensor{}, Tensor{}, dyd, dzf, false);
          if (pool_plain->keeps_argmax())
            EXPECT_TRUE(all_close(download(*g, dzf), download(*g, dzp), 0.0, 0.0)) << what << " pool dx";
          else
            dzp = dzf;
          Tensor dxp = g->alloc(s, p.dtype, l), dxf = g->alloc(s, p.dtype, l);
          Tensor dgp = g->alloc({d.c}, DType::kF32), dbp = g->alloc({d.c}, DType::kF32);
          Tensor dgf = g->alloc({d.c}, DType::kF32), dbf = g->alloc({d.c}, DType::kF32);
          bn_plain->backward(xd, dzp, gd, bd, sp[2], sp[3], dxp, dgp, dbp, false);
          bn_fused->backward(xd, dzf, gd, bd, sf[2], sf[3], dxf, dgf, dbf, false);
          EXPECT_TRUE(all_close(download(*g, dxf), download(*g, dxp), 0.0, 0.0)) << what << " dx";
          EXPECT_TRUE(all_close(download(*g, dgf), download(*g, dgp), 0.0, 0.0)) << what << " dgamma";
          EXPECT_TRUE(all_close(download(*g, dbf), download(*g, dbp), 0.0, 0.0)) << what << " dbeta";
          // Evaluation: the running averages' map.
          bn_plain->forward_inference(xd, gd, bd, sp[0], sp[1], y);
          pool_plain->forward(y, yp);
          coef = bn_fused->inference_coefficients(gd, bd, sf[0], sf[1]);
          pool_fused->forward_normalised(xd, coef, relu, yf);
          EXPECT_TRUE(all_close(download(*g, yf), download(*g, yp), 0.0, 0.0)) << what << " evaluation output";
          // A pool made without Pool2dDesc::normalised applies no map.
          EXPECT_THROW(pool_plain->forward_normalised(xd, coef, relu, yf), InvalidArgument) << what;
        }
      }
    }
  }
  if (cuda_device_count() > 0) {
    EXPECT_GE(fused_cases, 30);
    EXPECT_GE(declined_cases, 2);  // 6 channels, fp32 and fp16 NHWC: cuDNN's batch norm
  }
}

}  // namespace
}  // namespace cnnergy::test
