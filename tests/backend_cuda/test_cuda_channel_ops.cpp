// The imported networks' operators on the GPU against the CPU reference, in every precision (fp32,
// tf32, fp16, bf16) and both layouts: the six activations forward and backward (overwrite,
// accumulate, a tail and a misaligned view for the scalar path), the same-shape and (N, C, 1, 1)
// multiply with both gradients, the constant channel affine map, channel shuffle and channel slices.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/activation_kind.hpp"
#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

class CudaChannelOps : public CudaTest {};

const std::pair<const char*, ActivationDesc> kActivations[] = {
    {"relu6", {ActivationKind::kClip, 0.0f, 6.0f}},
    {"leaky_relu", {ActivationKind::kLeakyRelu, 0.01f, 0.0f}},
    {"sigmoid", {ActivationKind::kSigmoid, 0.0f, 0.0f}},
    {"hard_sigmoid", {ActivationKind::kHardSigmoid, 1.0f / 6.0f, 0.5f}},
    {"hard_swish", {ActivationKind::kHardSwish, 0.0f, 0.0f}},
    {"silu", {ActivationKind::kSilu, 0.0f, 0.0f}},
};

TEST_F(CudaChannelOps, ActivationsMatchCpu) {
  const Shape s{3, 5, 4, 7};  // 420 elements: packs and a tail
  for (const Precision& p : kAllPrecisions) {
    for (const Layout l : kAllLayouts) {
      auto g = gpu(p, l);
      if (!g) continue;
      for (const auto& [name, d] : kActivations) {
        const std::string what = std::string(name) + " " + label(p, l);
        const Tensor x = random(s, p.dtype, -8.0f, 8.0f), dy = random(s, p.dtype), dx0 = random(s, p.dtype);
        Tensor y_r = Tensor::host(s), dx_r = Tensor::host(s), dxa_r = clone(dx0);
        cpu_->activation_forward(d, x, y_r);
        cpu_->activation_backward(d, x, dy, dx_r, false);
        cpu_->activation_backward(d, x, dy, dxa_r, true);
        const Tensor xd = upload(*g, x, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
        Tensor y = g->alloc(s, p.dtype, l), dx = g->alloc(s, p.dtype, l), dxa = upload(*g, dx0, p.dtype, l);
        g->activation_forward(d, xd, y);
        g->activation_backward(d, xd, dyd, dx, false);
        g->activation_backward(d, xd, dyd, dxa, true);
        EXPECT_TRUE(close(download(*g, y), y_r, p.tol, what + " forward"));
        EXPECT_TRUE(close(download(*g, dx), dx_r, p.tol, what + " backward"));
        EXPECT_TRUE(close(download(*g, dxa), dxa_r, p.tol, what + " backward accumulate"));
        // Misaligned views (the scalar path) and in place (y over x, dx over dy).
        const Tensor xv = upload_view(*g, x, p.dtype, l, 1), dyv = upload_view(*g, dy, p.dtype, l, 1);
        g->activation_backward(d, xv, dyv, dyv, false);
        g->activation_forward(d, xv, xv);
        EXPECT_TRUE(close(download(*g, xv), y_r, p.tol, what + " forward misaligned in place"));
        EXPECT_TRUE(close(download(*g, dyv), dx_r, p.tol, what + " backward misaligned in place"));
      }
    }
  }
}

TEST_F(CudaChannelOps, MulSameShapeAndBroadcastMatchCpu) {
  const Shape as{2, 6, 5, 3};
  for (const Precision& p : kAllPrecisions) {
    for (const Layout l : kAllLayouts) {
      auto g = gpu(p, l);
      if (!g) continue;
      for (const Shape& bs : {as, Shape{2, 6, 1, 1}}) {
        const std::string what = "mul by " + bs.str() + " " + label(p, l);
        const Tensor a = random(as, p.dtype), b = random(bs, p.dtype), dy = random(as, p.dtype);
        const Tensor da0 = random(as, p.dtype), db0 = random(bs, p.dtype);
        Tensor y_r = Tensor::host(as), da_r = Tensor::host(as), db_r = Tensor::host(bs);
        Tensor daa_r = clone(da0), dba_r = clone(db0);
        cpu_->mul_forward(a, b, y_r);
        cpu_->mul_backward(a, b, dy, da_r, false, db_r, false);
        cpu_->mul_backward(a, b, dy, daa_r, true, dba_r, true);
        const Tensor ad = upload(*g, a, p.dtype, l), bd = upload(*g, b, p.dtype, l), dyd = upload(*g, dy, p.dtype, l);
        Tensor y = g->alloc(as, p.dtype, l), da = g->alloc(as, p.dtype, l), db = g->alloc(bs, p.dtype, l);
        Tensor daa = upload(*g, da0, p.dtype, l), dba = upload(*g, db0, p.dtype, l);
        g->mul_forward(ad, bd, y);
        g->mul_backward(ad, bd, dyd, da, false, db, false);
        g->mul_backward(ad, bd, dyd, daa, true, dba, true);
        EXPECT_TRUE(close(download(*g, y), y_r, p.tol, what + " forward"));
        EXPECT_TRUE(close(download(*g, da), da_r, p.tol, what + " da"));
        EXPECT_TRUE(close(download(*g, db), db_r, p.tol, what + " db"));
        EXPECT_TRUE(close(download(*g, daa), daa_r, p.tol, what + " da accumulate"));
        EXPECT_TRUE(close(download(*g, dba), dba_r, p.tol, what + " db accumulate"));
        // da sharing dy's memory, no db.
        Tensor shared = upload(*g, dy, p.dtype, l);
        g->mul_backward(ad, bd, shared, shared, false, Tensor{}, false);
        EXPECT_TRUE(close(download(*g, shared), da_r, p.tol, what + " da over dy"));
      }
    }
  }
}

TEST_F(CudaChannelOps, ChannelAffineMatchesCpu) {
  for (const Shape& s : {Shape{2, 5, 3, 4}, Shape{4, 9}}) {
    for (const Precision& p : kAllPrecisions) {
      for (const Layout l : kAllLayouts) {
        auto g = gpu(p, l);
        if (!g) continue;
        for (const std::int64_t n : {s[1], std::int64_t{1}}) {
          const std::string what = "channel_affine " + s.str() + " constants " + std::to_string(n) + " " + label(p, l);
          const Tensor x = random(s, p.dtype), dy = random(s, p.dtype), dx0 = random(s, p.dtype);
          const Tensor scale = random_tensor({n}, rng_), shift = random_tensor({n}, rng_);
          Tensor y_r = Tensor::host(s), dx_r = clone(dx0);
          cpu_->channel_affine_forward(x, scale, shift, y_r);
          cpu_->channel_affine_backward(dy, scale, dx_r, true);
          const Tensor sd = upload(*g, scale, DType::kF32, l), bd = upload(*g, shift, DType::kF32, l);
          Tensor y = g->alloc(s, p.dtype, l), dx = upload(*g, dx0, p.dtype, l);
          g->channel_affine_forward(upload(*g, x, p.dtype, l), sd, bd, y);
          g->channel_affine_backward(upload(*g, dy, p.dtype, l), sd, dx, true);
          EXPECT_TRUE(close(download(*g, y), y_r, p.tol, what + " forward"));
          EXPECT_TRUE(close(download(*g, dx), dx_r, p.tol, what + " backward accumulate"));
        }
      }
    }
  }
}

TEST_F(CudaChannelOps, ChannelShuffleAndSliceMatchCpu) {
  for (const bool flat : {false, true}) {
    const Shape s = flat ? Shape{3, 24} : Shape{2, 24, 3, 5};
    const Shape part = flat ? Shape{3, 10} : Shape{2, 10, 3, 5};
    for (const Precision& p : kAllPrecisions) {
      for (const Layout l : kAllLayouts) {
        auto g = gpu(p, l);
        if (!g) continue;
        const std::string what = std::string(flat ? "2-D " : "4-D ") + label(p, l);
        const Tensor x = random(s, p.dtype), x0 = random(s, p.dtype), xd = upload(*g, x, p.dtype, l);
        for (const std::int64_t groups : {2, 3, 8}) {
          for (const bool acc : {false, true}) {
            Tensor y_r = clone(x0);
            cpu_->channel_shuffle(x, groups, y_r, acc);
            Tensor y = upload(*g, x0, p.dtype, l);
            g->channel_shuffle(xd, groups, y, acc);
            EXPECT_TRUE(close(download(*g, y), y_r, acc ? p.tol : 0.0,
                              "channel_shuffle " + std::to_string(groups) + " groups " + what));
          }
        }
        const std::int64_t begin = 7;
        Tensor sl_r = Tensor::host(part);
        cpu_->channel_slice_forward(x, begin, sl_r);
        Tensor sl = g->alloc(part, p.dtype, l);
        g->channel_slice_forward(xd, begin, sl);
        EXPECT_TRUE(close(download(*g, sl), sl_r, 0.0, "channel_slice forward " + what));
        const Tensor dy = random(part, p.dtype), dyd = upload(*g, dy, p.dtype, l);
        for (const bool acc : {false, true}) {
          Tensor dx_r = clone(x0);
          cpu_->channel_slice_backward(dy, begin, dx_r, acc);
          Tensor dx = upload(*g, x0, p.dtype, l);
          g->channel_slice_backward(dyd, begin, dx, acc);
          EXPECT_TRUE(close(download(*g, dx), dx_r, acc ? p.tol : 0.0,
                            std::string("channel_slice backward ") + (acc ? "accumulate " : "") + what));
        }
      }
    }
  }
}

}  // namespace
}  // namespace cnnergy::test
