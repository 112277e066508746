// CPU element-wise kernels: relu (in place too), dropout (fixed-mask gradient, mask statistics and
// its counter-based definition), add, concat (4-D and 2-D, with gradients), the non-finite check
// and top-k counting with ties.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"
#include "core/hash.hpp"

namespace cnnergy::test {
namespace {

class Elementwise : public CpuBackendTest {};

TEST_F(Elementwise, ReluGradientAndInPlace) {
  const Tensor x = distinct_tensor({3, 4, 2, 3}, rng_, 0.05f), y = Tensor::host(x.shape());
  const Tensor dy = random_tensor(x.shape(), rng_), dx = Tensor::host(x.shape());
  backend_->relu_forward(x, y);
  backend_->relu_backward(y, dy, dx, false);
  GradCheckOptions opt;
  opt.seed = seed_;
  opt.max_elements = 200;
  EXPECT_TRUE(check_gradient(
      "relu dx", x,
      [&] {
        backend_->relu_forward(x, y);
        return dot(dy, y);
      },
      dx, opt));
  const Tensor inplace = clone(x);
  backend_->relu_forward(inplace, inplace);
  EXPECT_TRUE(all_close(inplace, y, 0.0, 0.0));
  for (std::int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.f32()[i], std::max(0.0f, x.f32()[i]));
  const Tensor acc = random_tensor(x.shape(), rng_), expected = clone(acc);
  backend_->relu_backward(y, dy, acc, true);
  for (std::int64_t i = 0; i < x.numel(); ++i) expected.f32()[i] += dx.f32()[i];
  EXPECT_TRUE(all_close(acc, expected, 1e-7, 1e-7));
}

TEST_F(Elementwise, DropoutGradientWithAFixedMask) {
  const Tensor x = random_tensor({4, 50}, rng_), y = Tensor::host(x.shape()),
               mask = Tensor::host(x.shape());
  const Tensor dy = random_tensor(x.shape(), rng_), dx = Tensor::host(x.shape());
  const std::uint64_t mask_seed = seed_ ^ 0x5eedull;
  backend_->dropout_forward(x, 0.4f, mask_seed, mask, y);
  backend_->dropout_backward(dy, mask, dx, false);
  GradCheckOptions opt;
  opt.seed = seed_;
  EXPECT_TRUE(check_gradient(
      "dropout dx", x,
      [&] {
        backend_->dropout_forward(x, 0.4f, mask_seed, mask, y);  // same seed: same mask
        return dot(dy, y);
      },
      dx, opt));
  const Tensor acc = random_tensor(x.shape(), rng_), expected = clone(acc);
  backend_->dropout_backward(dy, mask, acc, true);
  for (std::int64_t i = 0; i < x.numel(); ++i) expected.f32()[i] += dx.f32()[i];
  EXPECT_TRUE(all_close(acc, expected, 1e-7, 1e-7));
}

TEST_F(Elementwise, DropoutMaskStatisticsAndDefinition) {
  const std::int64_t n = 200000;
  const float p = 0.3f;
  const Tensor x = random_tensor({n}, rng_), y = Tensor::host({n}), mask = Tensor::host({n});
  backend_->dropout_forward(x, p, seed_, mask, y);
  const float keep = 1.0f / (1.0f - p);
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float m = mask.f32()[i];
    ASSERT_TRUE(m == 0.0f || m == keep) << "mask value " << m << " at " << i;
    ASSERT_EQ(m == keep, uniform01(seed_, static_cast<std::uint64_t>(i)) >= p) << "element " << i;
    ASSERT_EQ(y.f32()[i], x.f32()[i] * m);
    kept += m == keep ? 1 : 0;
  }
  // Binomial(n, 0.7): 5 standard deviations is about 1025 elements.
  const double sd = std::sqrt(n * 0.3 * 0.7);
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * n, 5 * sd);
  // Another seed gives another mask; p = 0 keeps everything unscaled.
  const Tensor mask2 = Tensor::host({n});
  backend_->dropout_forward(x, p, seed_ + 1, mask2, y);
  EXPECT_FALSE(all_close(mask, mask2, 0.0, 0.0));
  backend_->dropout_forward(x, 0.0f, seed_, mask, y);
  EXPECT_TRUE(all_close(y, x, 0.0, 0.0));
  EXPECT_THROW(backend_->dropout_forward(x, 1.0f, seed_, mask, y), InvalidArgument);
  EXPECT_THROW(backend_->dropout_forward(x, -0.1f, seed_, mask, y), InvalidArgument);
}

TEST_F(Elementwise, Add) {
  const Tensor a = random_tensor({2, 3, 4, 4}, rng_), b = random_tensor({2, 3, 4, 4}, rng_),
               y = Tensor::host(a.shape());
  backend_->add_forward(a, b, y);
  for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(y.f32()[i], a.f32()[i] + b.f32()[i]);
  const Tensor sum = clone(a);
  backend_->add_forward(sum, b, sum);  // in place
  EXPECT_TRUE(all_close(sum, y, 0.0, 0.0));
  EXPECT_THROW(backend_->add_forward(a, Tensor::host({2, 3, 4, 3}), y), ShapeError);
  // Add has no backward kernel: layers pass dy on to both inputs (accumulate). Check that this is
  // the gradient.
  const Tensor dy = random_tensor(a.shape(), rng_);
  const auto objective = [&] {
    backend_->add_forward(a, b, y);
    return dot(dy, y);
  };
  GradCheckOptions opt;
  opt.seed = seed_;
  EXPECT_TRUE(check_gradient("add da", a, objective, dy, opt));
  EXPECT_TRUE(check_gradient("add db", b, objective, dy, opt));
}

TEST_F(Elementwise, ConcatForwardAndGradient) {
  for (const bool four_d : {true, false}) {
    SCOPED_TRACE(four_d ? "4-D" : "2-D");
    const auto shape = [&](std::int64_t c) { return four_d ? Shape{2, c, 3, 2} : Shape{2, c}; };
    const std::vector<Tensor> xs{random_tensor(shape(1), rng_), random_tensor(shape(3), rng_),
                                 random_tensor(shape(2), rng_)};
    const Tensor y = Tensor::host(shape(6)), dy = random_tensor(shape(6), rng_);
    backend_->concat_forward(xs, y);
    const std::int64_t hw = four_d ? 6 : 1;
    // y[n, 1 + c] comes from xs[1][n, c]
    for (std::int64_t n = 0; n < 2; ++n)
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t i = 0; i < hw; ++i)
          EXPECT_EQ(y.f32()[static_cast<std::size_t>((n * 6 + 1 + c) * hw + i)],
                    xs[1].f32()[static_cast<std::size_t>((n * 3 + c) * hw + i)]);
    const std::vector<Tensor> dxs{Tensor::host(shape(1)), Tensor::host(shape(3)),
                                  Tensor::host(shape(2))};
    backend_->concat_backward(dy, dxs, false);
    GradCheckOptions opt;
    opt.seed = seed_;
    for (std::size_t k = 0; k < xs.size(); ++k)
      EXPECT_TRUE(check_gradient(
          "concat dx" + std::to_string(k), xs[k],
          [&] {
            backend_->concat_forward(xs, y);
            return dot(dy, y);
          },
          dxs[k], opt));
    const Tensor acc = random_tensor(shape(3), rng_), expected = clone(acc);
    const std::vector<Tensor> acc_dxs{clone(dxs[0]), acc, clone(dxs[2])};
    backend_->concat_backward(dy, acc_dxs, true);
    for (std::int64_t i = 0; i < acc.numel(); ++i) expected.f32()[i] += dxs[1].f32()[i];
    EXPECT_TRUE(all_close(acc, expected, 1e-7, 1e-7));
  }
  const std::vector<Tensor> bad{Tensor::host({2, 1, 3, 2}), Tensor::host({2, 2, 3, 3})};
  EXPECT_THROW(backend_->concat_forward(bad, Tensor::host({2, 3, 3, 2})), ShapeError);
  const std::vector<Tensor> short_parts{Tensor::host({2, 1, 3, 2})};
  EXPECT_THROW(backend_->concat_forward(short_parts, Tensor::host({2, 3, 3, 2})), ShapeError);
}

TEST_F(Elementwise, CheckFiniteSetsTheFlag) {
  const Tensor t = random_tensor({100}, rng_), flag = Tensor::host({1}, DType::kI32);
  backend_->check_finite(t, flag);
  EXPECT_EQ(flag.data<std::int32_t>()[0], 0);
  for (const float bad :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()}) {
    const Tensor u = clone(t);
    u.f32()[rng_.next_u32() % 100] = bad;
    backend_->fill(flag, 0.0f);
    backend_->check_finite(u, flag);
    EXPECT_EQ(flag.data<std::int32_t>()[0], 1) << bad;
    backend_->check_finite(t, flag);  // |=: a later finite tensor does not clear it
    EXPECT_EQ(flag.data<std::int32_t>()[0], 1);
  }
}

TEST_F(Elementwise, CountTopkWithTies) {
  const Tensor logits = Tensor::host({4, 4}), labels = Tensor::host({4}, DType::kI32);
  const float rows[4][4] = {
      {0.1f, 0.9f, 0.3f, 0.2f},   // label 1: top-1 hit
      {0.5f, 0.5f, 0.1f, 0.0f},   // label 1: tie with 0 -> no logit strictly greater: hit
      {0.9f, 0.8f, 0.7f, 0.1f},   // label 2: third -> top-3 only
      {0.3f, 0.3f, 0.3f, 0.2f}};  // label 3: three greater -> miss even in top-3
  const std::int32_t lab[4] = {1, 1, 2, 3};
  for (int i = 0; i < 16; ++i) logits.f32()[static_cast<std::size_t>(i)] = rows[i / 4][i % 4];
  for (int i = 0; i < 4; ++i) labels.data<std::int32_t>()[i] = lab[i];
  const Tensor correct = Tensor::host({1}, DType::kI32);
  backend_->count_topk(logits, labels, 1, correct);
  EXPECT_EQ(correct.data<std::int32_t>()[0], 2);
  backend_->count_topk(logits, labels, 3, correct);  // accumulates
  EXPECT_EQ(correct.data<std::int32_t>()[0], 2 + 3);
  backend_->fill(correct, 0.0f);
  backend_->count_topk(logits, labels, 4, correct);
  EXPECT_EQ(correct.data<std::int32_t>()[0], 4);
  labels.data<std::int32_t>()[0] = 4;
  EXPECT_THROW(backend_->count_topk(logits, labels, 1, correct), InvalidArgument);
  EXPECT_THROW(backend_->count_topk(logits, Tensor::host({4}, DType::kI32), 0, correct),
               InvalidArgument);
}

}  // namespace
}  // namespace cnnergy::test
