// CPU reference of the imported networks' operators: every activation's values against its closed
// form and its gradient by finite differences (inputs kept away from the kinks), the same-shape and
// squeeze-and-excitation multiply (both gradients), the constant channel affine map, channel shuffle
// against the explicit reshape-transpose-reshape and its adjoint, and channel slices (overwrite
// zeroes the rest, accumulate adds only the slice).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/activation_kind.hpp"
#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

class ChannelOps : public CpuBackendTest {};

struct ActCase {
  const char* name;
  ActivationDesc desc;
  std::vector<float> kinks;
  double (*f)(double x, double a, double b);
};

const ActCase kActs[] = {
    {"relu6", {ActivationKind::kClip, 0.0f, 6.0f}, {0.0f, 6.0f},
     [](double x, double a, double b) { return std::min(std::max(x, a), b); }},
    {"clip", {ActivationKind::kClip, -0.5f, 0.75f}, {-0.5f, 0.75f},
     [](double x, double a, double b) { return std::min(std::max(x, a), b); }},
    {"leaky_relu", {ActivationKind::kLeakyRelu, 0.1f, 0.0f}, {0.0f},
     [](double x, double a, double) { return x >= 0 ? x : a * x; }},
    {"sigmoid", {ActivationKind::kSigmoid, 0.0f, 0.0f}, {},
     [](double x, double, double) { return 1.0 / (1.0 + std::exp(-x)); }},
    {"hard_sigmoid", {ActivationKind::kHardSigmoid, 1.0f / 6.0f, 0.5f}, {-3.0f, 3.0f},
     [](double x, double a, double b) { return std::min(1.0, std::max(0.0, a * x + b)); }},
    {"hard_sigmoid_onnx_default", {ActivationKind::kHardSigmoid, 0.2f, 0.5f}, {-2.5f, 2.5f},
     [](double x, double a, double b) { return std::min(1.0, std::max(0.0, a * x + b)); }},
    {"hard_swish", {ActivationKind::kHardSwish, 0.0f, 0.0f}, {-3.0f, 3.0f},
     [](double x, double, double) { return x * std::min(1.0, std::max(0.0, x / 6.0 + 0.5)); }},
    {"silu", {ActivationKind::kSilu, 0.0f, 0.0f}, {},
     [](double x, double, double) { return x / (1.0 + std::exp(-x)); }},
};

// Uniform in [-8, 8], each value at least 0.05 from every kink (the step is 1e-2).
Tensor away_from_kinks(const Shape& s, Rng& rng, const std::vector<float>& kinks) {
  Tensor t = random_tensor(s, rng, -8.0f, 8.0f);
  for (float& v : t.f32())
    for (float k : kinks)
      if (std::fabs(v - k) < 0.05f) v = k + (v < k ? -0.1f : 0.1f);
  return t;
}

TEST_F(ChannelOps, ActivationsMatchTheirFormulasAndGradients) {
  for (const ActCase& c : kActs) {
    SCOPED_TRACE(c.name);
    const Shape s{2, 3, 4, 5};
    const Tensor x = away_from_kinks(s, rng_, c.kinks), y = Tensor::host(s);
    backend_->activation_forward(c.desc, x, y);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double want = c.f(x.f32()[i], c.desc.alpha, c.desc.beta);
      ASSERT_NEAR(y.f32()[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << "x = " << x.f32()[i];
    }
    const Tensor dy = random_tensor(s, rng_), dx = Tensor::host(s);
    backend_->activation_backward(c.desc, x, dy, dx, false);
    GradCheckOptions opt;
    opt.seed = seed_;
    opt.max_elements = 120;
    EXPECT_TRUE(check_gradient(
        std::string(c.name) + " dx", x,
        [&] {
          backend_->activation_forward(c.desc, x, y);
          return dot(dy, y);
        },
        dx, opt));
    // Accumulation adds the same gradient; in place (dx == dy) gives the same values.
    const Tensor acc = random_tensor(s, rng_), expected = clone(acc);
    backend_->activation_backward(c.desc, x, dy, acc, true);
    for (std::int64_t i = 0; i < x.numel(); ++i) expected.f32()[i] += dx.f32()[i];
    EXPECT_TRUE(all_close(acc, expected, 1e-6, 1e-6));
    const Tensor shared = clone(dy);
    backend_->activation_backward(c.desc, x, shared, shared, false);
    EXPECT_TRUE(all_close(shared, dx, 0.0, 0.0));
    const Tensor inplace = clone(x);
    backend_->activation_forward(c.desc, inplace, inplace);
    backend_->activation_forward(c.desc, x, y);
    EXPECT_TRUE(all_close(inplace, y, 0.0, 0.0));
  }
}

TEST_F(ChannelOps, MulSameShapeAndBroadcastGradients) {
  const Shape as{2, 3, 4, 5};
  for (const Shape& bs : {as, Shape{2, 3, 1, 1}}) {
    SCOPED_TRACE(bs.str());
    const Tensor a = random_tensor(as, rng_), b = random_tensor(bs, rng_), y = Tensor::host(as);
    backend_->mul_forward(a, b, y);
    const bool bc = !(bs == as);
    for (std::int64_t i = 0; i < a.numel(); ++i)
      ASSERT_EQ(y.f32()[i], a.f32()[i] * b.f32()[bc ? i / 20 : i]);
    const Tensor dy = random_tensor(as, rng_), da = Tensor::host(as), db = Tensor::host(bs);
    backend_->mul_backward(a, b, dy, da, false, db, false);
    GradCheckOptions opt;
    opt.seed = seed_;
    auto objective = [&] {
      backend_->mul_forward(a, b, y);
      return dot(dy, y);
    };
    EXPECT_TRUE(check_gradient("mul da", a, objective, da, opt));
    EXPECT_TRUE(check_gradient("mul db", b, objective, db, opt));
    // Accumulation into both; da alone (db undefined); da sharing dy's memory.
    const Tensor da_acc = random_tensor(as, rng_), db_acc = random_tensor(bs, rng_);
    const Tensor da_want = clone(da_acc), db_want = clone(db_acc);
    for (std::int64_t i = 0; i < da.numel(); ++i) da_want.f32()[i] += da.f32()[i];
    for (std::int64_t i = 0; i < db.numel(); ++i) db_want.f32()[i] += db.f32()[i];
    backend_->mul_backward(a, b, dy, da_acc, true, db_acc, true);
    EXPECT_TRUE(all_close(da_acc, da_want, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(db_acc, db_want, 1e-5, 1e-5));
    const Tensor shared = clone(dy), db2 = Tensor::host(bs);
    backend_->mul_backward(a, b, shared, shared, false, db2, false);
    EXPECT_TRUE(all_close(shared, da, 0.0, 0.0));
    EXPECT_TRUE(all_close(db2, db, 0.0, 0.0));
  }
  const Tensor a = random_tensor({2, 3, 4, 5}, rng_), bad = random_tensor({2, 3, 4, 1}, rng_);
  EXPECT_THROW(backend_->mul_forward(a, bad, Tensor::host(a.shape())), ShapeError);
}

TEST_F(ChannelOps, ChannelAffineValuesAndGradient) {
  const Shape s{2, 3, 4, 5};
  for (const bool per_channel : {true, false}) {
    const Tensor x = random_tensor(s, rng_), y = Tensor::host(s);
    const Tensor scale = per_channel ? random_tensor({3}, rng_) : random_tensor({1}, rng_);
    const Tensor shift = per_channel ? random_tensor({3}, rng_) : random_tensor({1}, rng_);
    backend_->channel_affine_forward(x, scale, shift, y);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t c = per_channel ? (i / 20) % 3 : 0;
      ASSERT_EQ(y.f32()[i], x.f32()[i] * scale.f32()[c] + shift.f32()[c]);
    }
    const Tensor dy = random_tensor(s, rng_), dx = Tensor::host(s);
    backend_->channel_affine_backward(dy, scale, dx, false);
    GradCheckOptions opt;
    opt.seed = seed_;
    EXPECT_TRUE(check_gradient(
        "channel_affine dx", x,
        [&] {
          backend_->channel_affine_forward(x, scale, shift, y);
          return dot(dy, y);
        },
        dx, opt));
  }
  EXPECT_THROW(backend_->channel_affine_forward(random_tensor(s, rng_), random_tensor({2}, rng_),
                                                random_tensor({3}, rng_), Tensor::host(s)),
               ShapeError);
}

TEST_F(ChannelOps, ChannelShuffleIsReshapeTransposeReshapeAndItsAdjoint) {
  for (const Shape& s : {Shape{2, 12, 3, 4}, Shape{3, 8}}) {
    SCOPED_TRACE(s.str());
    const std::int64_t c = s[1], hw = s.per_sample() / c, groups = 4 % c == 0 ? 4 : 2;
    const Tensor x = random_tensor(s, rng_), y = Tensor::host(s);
    backend_->channel_shuffle(x, groups, y, false);
    // (N, g, C/g, HW) -> (N, C/g, g, HW): y[n, a, b] = x[n, b, a].
    const std::int64_t per = c / groups;
    for (std::int64_t n = 0; n < s[0]; ++n)
      for (std::int64_t a = 0; a < per; ++a)
        for (std::int64_t b = 0; b < groups; ++b)
          for (std::int64_t i = 0; i < hw; ++i)
            ASSERT_EQ(y.f32()[((n * per + a) * groups + b) * hw + i], x.f32()[((n * groups + b) * per + a) * hw + i]);
    // Backward is the shuffle with C/g groups: the adjoint, <dy, S x> = <S^T dy, x>.
    const Tensor dy = random_tensor(s, rng_), dx = Tensor::host(s);
    backend_->channel_shuffle(dy, per, dx, false);
    EXPECT_NEAR(dot(dy, y), dot(dx, x), 1e-4);
    const Tensor back = Tensor::host(s);
    backend_->channel_shuffle(y, per, back, false);
    EXPECT_TRUE(all_close(back, x, 0.0, 0.0));
    const Tensor acc = clone(x);
    backend_->channel_shuffle(y, per, acc, true);
    for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(acc.f32()[i], 2.0f * x.f32()[i]);
  }
  EXPECT_THROW(backend_->channel_shuffle(random_tensor({1, 6, 2, 2}, rng_), 4, Tensor::host({1, 6, 2, 2}), false),
               InvalidArgument);
}

TEST_F(ChannelOps, ChannelSliceForwardBackwardAndAccumulate) {
  for (const bool flat : {false, true}) {
    const Shape xs = flat ? Shape{2, 10} : Shape{2, 10, 3, 2};
    const Shape ys = flat ? Shape{2, 4} : Shape{2, 4, 3, 2};
    const std::int64_t begin = 5, hw = flat ? 1 : 6;
    const Tensor x = random_tensor(xs, rng_), y = Tensor::host(ys);
    backend_->channel_slice_forward(x, begin, y);
    for (std::int64_t n = 0; n < 2; ++n)
      for (std::int64_t c = 0; c < 4; ++c)
        for (std::int64_t i = 0; i < hw; ++i)
          ASSERT_EQ(y.f32()[(n * 4 + c) * hw + i], x.f32()[(n * 10 + begin + c) * hw + i]);
    const Tensor dy = random_tensor(ys, rng_), dx = random_tensor(xs, rng_);  // garbage to overwrite
    backend_->channel_slice_backward(dy, begin, dx, false);
    GradCheckOptions opt;
    opt.seed = seed_;
    EXPECT_TRUE(check_gradient(
        "channel_slice dx", x,
        [&] {
          backend_->channel_slice_forward(x, begin, y);
          return dot(dy, y);
        },
        dx, opt));
    const Tensor acc = random_tensor(xs, rng_), want = clone(acc);
    for (std::int64_t i = 0; i < want.numel(); ++i) want.f32()[i] += dx.f32()[i];
    backend_->channel_slice_backward(dy, begin, acc, true);
    EXPECT_TRUE(all_close(acc, want, 1e-6, 1e-6));
  }
  EXPECT_THROW(backend_->channel_slice_forward(random_tensor({1, 4, 2, 2}, rng_), 2, Tensor::host({1, 3, 2, 2})),
               ShapeError);
}

}  // namespace
}  // namespace cnnergy::test
