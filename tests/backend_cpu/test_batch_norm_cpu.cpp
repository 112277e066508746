// CPU batch normalisation: finite-difference checks of dx, dgamma and dbeta in training mode (4-D
// and 2-D), running statistics (momentum, unbiased variance) and saved statistics against a hand
// computation, inference with running statistics, accumulate semantics, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

class BatchNorm : public CpuBackendTest {};

BatchNormDesc bn(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, double eps = 1e-5,
                 double momentum = 0.1) {
  BatchNormDesc d;
  d.n = n, d.c = c, d.h = h, d.w = w, d.eps = eps, d.momentum = momentum;
  return d;
}

TEST_F(BatchNorm, TrainingGradientsMatchFiniteDifferences) {
  struct Case {
    BatchNormDesc d;
    Shape shape;
  };
  for (const Case& cs : {Case{bn(3, 4, 3, 2), Shape{3, 4, 3, 2}}, Case{bn(5, 6, 1, 1), Shape{5, 6}},
                         Case{bn(2, 3, 1, 1, 0.1), Shape{2, 3}}}) {
    // (The last case: with two samples the output is nearly +-1 and only eps keeps the gradient
    // away from zero; eps = 0.1 keeps the curvature scale sqrt(eps) far above the finite-difference
    // step.)
    const BatchNormDesc& d = cs.d;
    SCOPED_TRACE("x " + cs.shape.str());
    auto kernel = backend_->make_batch_norm(d);
    // Offset, scaled inputs: the gradient must not rely on zero-mean, unit-variance data.
    const Tensor x = random_tensor(cs.shape, rng_, -1.5f, 2.5f);
    const Tensor gamma = random_tensor({d.c}, rng_, 0.5f, 1.5f), beta = random_tensor({d.c}, rng_);
    const Tensor rm = Tensor::host({d.c}), rv = Tensor::host({d.c}), mean = Tensor::host({d.c}),
                 inv_std = Tensor::host({d.c});
    const Tensor y = Tensor::host(cs.shape), dy = random_tensor(cs.shape, rng_);
    kernel->forward_training(x, gamma, beta, rm, rv, y, mean, inv_std);
    const Tensor dx = Tensor::host(cs.shape), dgamma = random_tensor({d.c}, rng_),
                 dbeta = random_tensor({d.c}, rng_);
    kernel->backward(x, dy, gamma, beta, mean, inv_std, dx, dgamma, dbeta,
                     false);  // dgamma/dbeta overwritten
    const auto objective = [&] {
      // running statistics change on every call but do not enter y in training mode
      kernel->forward_training(x, gamma, beta, rm, rv, y, mean, inv_std);
      return dot(dy, y);
    };
    GradCheckOptions opt;
    opt.seed = seed_;
    EXPECT_TRUE(check_gradient("bn dx", x, objective, dx, opt));
    EXPECT_TRUE(check_gradient("bn dgamma", gamma, objective, dgamma, opt));
    EXPECT_TRUE(check_gradient("bn dbeta", beta, objective, dbeta, opt));

    const Tensor acc = random_tensor(cs.shape, rng_), expected = clone(acc);
    kernel->backward(x, dy, gamma, beta, mean, inv_std, acc, dgamma, dbeta, true);
    for (std::int64_t i = 0; i < x.numel(); ++i) expected.f32()[i] += dx.f32()[i];
    EXPECT_TRUE(all_close(acc, expected, 1e-6, 1e-6)) << "accumulate";
  }
}

// A fused ReLU is exactly batch norm followed by ReLU: the same output bits, and the same gradients
// as batch norm's backward on the ReLU's masked gradient, overwriting and accumulating.
TEST_F(BatchNorm, FusedReluIsExactlyTheBatchNormThenReluPair) {
  for (const Shape& shape : {Shape{4, 5, 3, 2}, Shape{6, 7}}) {
    SCOPED_TRACE("x " + shape.str());
    BatchNormDesc d = bn(shape[0], shape[1], shape.rank() == 4 ? shape[2] : 1, shape.rank() == 4 ? shape[3] : 1);
    auto plain = backend_->make_batch_norm(d);
    d.relu = true;
    auto fused = backend_->make_batch_norm(d);
    const Tensor x = random_tensor(shape, rng_, -1.5f, 2.5f), dy = random_tensor(shape, rng_);
    const Tensor gamma = random_tensor({d.c}, rng_, -1.0f, 1.5f), beta = random_tensor({d.c}, rng_);
    auto stats = [&] { return std::vector<Tensor>{Tensor::host({d.c}), Tensor::host({d.c}), Tensor::host({d.c}), Tensor::host({d.c})}; };
    auto sp = stats(), sf = stats();  // running mean, running var, saved mean, saved inv std
    const Tensor y_plain = Tensor::host(shape), y_fused = Tensor::host(shape);
    plain->forward_training(x, gamma, beta, sp[0], sp[1], y_plain, sp[2], sp[3]);
    fused->forward_training(x, gamma, beta, sf[0], sf[1], y_fused, sf[2], sf[3]);
    const Tensor y_relu = Tensor::host(shape), dz = Tensor::host(shape);
    backend_->relu_forward(y_plain, y_relu);
    backend_->relu_backward(y_relu, dy, dz, false);
    std::int64_t clamped = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_EQ(y_fused.f32()[i], y_relu.f32()[i]) << "element " << i;
      clamped += y_fused.f32()[i] == 0.0f;
    }
    EXPECT_GT(clamped, 0);  // the mask matters in this case
    for (std::size_t k = 0; k < 4; ++k)
      for (std::int64_t c = 0; c < d.c; ++c) ASSERT_EQ(sf[k].f32()[c], sp[k].f32()[c]);
    for (bool accumulate : {false, true}) {
      const Tensor start = random_tensor(shape, rng_);
      const Tensor dx_plain = clone(start), dx_fused = clone(start);
      const Tensor dg_plain = Tensor::host({d.c}), db_plain = Tensor::host({d.c}), dg_fused = Tensor::host({d.c}),
                   db_fused = Tensor::host({d.c});
      plain->backward(x, dz, gamma, beta, sp[2], sp[3], dx_plain, dg_plain, db_plain, accumulate);
      fused->backward(x, dy, gamma, beta, sf[2], sf[3], dx_fused, dg_fused, db_fused, accumulate);
      for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(dx_fused.f32()[i], dx_plain.f32()[i]) << "dx " << i;
      for (std::int64_t c = 0; c < d.c; ++c) {
        ASSERT_EQ(dg_fused.f32()[c], dg_plain.f32()[c]);
        ASSERT_EQ(db_fused.f32()[c], db_plain.f32()[c]);
      }
    }
  }
}

TEST_F(BatchNorm, RunningAndSavedStatistics) {
  const BatchNormDesc d = bn(4, 3, 2, 5, 1e-3, 0.25);
  auto kernel = backend_->make_batch_norm(d);
  const Tensor x = random_tensor({4, 3, 2, 5}, rng_, -1.0f, 3.0f);
  const Tensor gamma = random_tensor({3}, rng_), beta = random_tensor({3}, rng_);
  const Tensor rm = random_tensor({3}, rng_), rv = random_tensor({3}, rng_, 0.5f, 2.0f);
  const Tensor rm0 = clone(rm), rv0 = clone(rv);
  const Tensor y = Tensor::host(x.shape()), mean = Tensor::host({3}), inv_std = Tensor::host({3});
  kernel->forward_training(x, gamma, beta, rm, rv, y, mean, inv_std);
  for (std::int64_t c = 0; c < 3; ++c) {
    std::vector<double> v;
    for (std::int64_t n = 0; n < 4; ++n)
      for (std::int64_t i = 0; i < 10; ++i)
        v.push_back(x.f32()[static_cast<std::size_t>((n * 3 + c) * 10 + i)]);
    double m = 0;
    for (double e : v) m += e;
    m /= 40.0;
    double ss = 0;
    for (double e : v) ss += (e - m) * (e - m);
    const double biased = ss / 40.0, unbiased = ss / 39.0;
    const auto cu = static_cast<std::size_t>(c);
    EXPECT_NEAR(mean.f32()[cu], m, 1e-6);
    EXPECT_NEAR(inv_std.f32()[cu], 1.0 / std::sqrt(biased + 1e-3), 1e-5);
    EXPECT_NEAR(rm.f32()[cu], 0.75 * rm0.f32()[cu] + 0.25 * m, 1e-6);
    EXPECT_NEAR(rv.f32()[cu], 0.75 * rv0.f32()[cu] + 0.25 * unbiased, 1e-6);
    // y normalised with the biased variance
    const double x0 = x.f32()[static_cast<std::size_t>(c * 10)];
    EXPECT_NEAR(y.f32()[static_cast<std::size_t>(c * 10)],
                gamma.f32()[cu] * (x0 - m) / std::sqrt(biased + 1e-3) + beta.f32()[cu], 1e-5);
  }
}

TEST_F(BatchNorm, InferenceUsesRunningStatistics) {
  const BatchNormDesc d = bn(3, 2, 1, 1);
  auto kernel = backend_->make_batch_norm(d);
  const Tensor x = random_tensor({3, 2}, rng_), gamma = random_tensor({2}, rng_),
               beta = random_tensor({2}, rng_);
  const Tensor rm = random_tensor({2}, rng_), rv = random_tensor({2}, rng_, 0.1f, 3.0f),
               y = Tensor::host({3, 2});
  kernel->forward_inference(x, gamma, beta, rm, rv, y);
  for (std::size_t n = 0; n < 3; ++n)
    for (std::size_t c = 0; c < 2; ++c)
      EXPECT_NEAR(
          y.f32()[n * 2 + c],
          gamma.f32()[c] * (x.f32()[n * 2 + c] - rm.f32()[c]) / std::sqrt(rv.f32()[c] + 1e-5) +
              beta.f32()[c],
          1e-5);
}

TEST_F(BatchNorm, RejectsBadInput) {
  EXPECT_THROW(backend_->make_batch_norm(bn(2, 3, 1, 1, 0.0)), InvalidArgument);
  EXPECT_THROW(backend_->make_batch_norm(bn(2, 3, 1, 1, 1e-5, 1.5)), InvalidArgument);
  auto one =
      backend_->make_batch_norm(bn(1, 2, 1, 1));  // one value per channel: no batch statistics
  const Tensor p = Tensor::host({2});
  EXPECT_THROW(one->forward_training(Tensor::host({1, 2}), p, p, p, p, Tensor::host({1, 2}), p, p),
               InvalidArgument);
  auto kernel = backend_->make_batch_norm(bn(2, 3, 2, 2));
  const Tensor q = Tensor::host({3});
  EXPECT_THROW(kernel->forward_inference(Tensor::host({2, 3, 2, 2}), q, q, q, Tensor::host({2}),
                                         Tensor::host({2, 3, 2, 2})),
               ShapeError);
  EXPECT_THROW(
      kernel->forward_inference(Tensor::host({2, 4, 3, 1}), q, q, q, q, Tensor::host({2, 3, 2, 2})),
      ShapeError);
}

// Statistics from the convolution (Conv2dDesc::statistics, BackendOptions::conv_statistics_fusion):
// the CPU convolution's forward_statistics writes y and its per-channel sums, and a batch norm given
// those sums trains as with its own reduction (within the fp32 sums' rounding); sums of other data
// are what it uses (the saved mean moves with them), so the path cannot silently fall back.
TEST_F(BatchNorm, TrainingFromTheConvolutionsSums) {
  BackendOptions o;
  o.conv_statistics_fusion = StatisticsFusion::kWhereFaster;
  auto backend = create_backend(o);
  Conv2dDesc cd;
  cd.n = 7, cd.c = 4, cd.h = cd.w = 6, cd.k = 5, cd.r = cd.s = 3, cd.pad_top = cd.pad_bottom = cd.pad_left = cd.pad_right = 1;
  cd.bias = false;
  EXPECT_FALSE(backend->fuses_conv_statistics(cd));  // 252 values per channel: fewer than the sums keep exact
  cd.n = 8;
  ASSERT_TRUE(backend_->fuses_conv_statistics(cd));  // on by default
  {
    BackendOptions off;
    off.conv_statistics_fusion = StatisticsFusion::kOff;
    ASSERT_FALSE(create_backend(off)->fuses_conv_statistics(cd));
  }
  ASSERT_TRUE(backend->fuses_conv_statistics(cd));
  cd.statistics = true;
  auto conv = backend->make_conv(cd, {});
  const Tensor x = random_tensor(cd.input_shape(), rng_), w = random_tensor(cd.weight_shape(), rng_, -0.5f, 0.5f);
  const Tensor y = Tensor::host(cd.output_shape()), sums = Tensor::host(Shape{2 * cd.k});
  ASSERT_TRUE(conv->forward_statistics(x, w, y, sums));
  const std::int64_t per = cd.out_h() * cd.out_w();
  for (std::int64_t k = 0; k < cd.k; ++k) {
    double s1 = 0, s2 = 0;
    for (std::int64_t n = 0; n < cd.n; ++n)
      for (std::int64_t i = 0; i < per; ++i) {
        const double v = y.f32()[static_cast<std::size_t>((n * cd.k + k) * per + i)];
        s1 += v, s2 += v * v;
      }
    EXPECT_FLOAT_EQ(sums.f32()[static_cast<std::size_t>(k)], static_cast<float>(s1));
    EXPECT_FLOAT_EQ(sums.f32()[static_cast<std::size_t>(cd.k + k)], static_cast<float>(s2));
  }
  const BatchNormDesc d = bn(cd.n, cd.k, cd.out_h(), cd.out_w());
  auto kernel = backend->make_batch_norm(d);
  const Tensor gamma = random_tensor({d.c}, rng_, 0.5f, 1.5f), beta = random_tensor({d.c}, rng_);
  auto stats = [&] { return std::vector<Tensor>{Tensor::host({d.c}), Tensor::host({d.c}), Tensor::host({d.c}), Tensor::host({d.c})}; };
  auto own = stats(), given = stats(), shifted = stats();
  const Tensor y_own = Tensor::host(cd.output_shape()), y_given = Tensor::host(cd.output_shape());
  kernel->forward_training(y, gamma, beta, own[0], own[1], y_own, own[2], own[3]);
  kernel->forward_training(y, gamma, beta, given[0], given[1], y_given, given[2], given[3], &sums);
  EXPECT_TRUE(all_close(y_given, y_own, 1e-5, 1e-5));
  for (std::size_t i = 0; i < 4; ++i) EXPECT_TRUE(all_close(given[i], own[i], 1e-5, 1e-5)) << "statistic " << i;
  // The sums of y + 1 in every channel: the mean the batch norm saves moves by 1, the deviation not.
  const Tensor moved = clone(sums);
  const double m = static_cast<double>(cd.n * per);
  for (std::int64_t k = 0; k < cd.k; ++k) {
    const double s1 = sums.f32()[static_cast<std::size_t>(k)], s2 = sums.f32()[static_cast<std::size_t>(cd.k + k)];
    moved.f32()[static_cast<std::size_t>(k)] = static_cast<float>(s1 + m);
    moved.f32()[static_cast<std::size_t>(cd.k + k)] = static_cast<float>(s2 + 2 * s1 + m);
  }
  kernel->forward_training(y, gamma, beta, shifted[0], shifted[1], y_given, shifted[2], shifted[3], &moved);
  for (std::int64_t k = 0; k < d.c; ++k) {
    EXPECT_NEAR(shifted[2].f32()[static_cast<std::size_t>(k)], own[2].f32()[static_cast<std::size_t>(k)] + 1.0f, 1e-4);
    EXPECT_NEAR(shifted[3].f32()[static_cast<std::size_t>(k)], own[3].f32()[static_cast<std::size_t>(k)],
                1e-3 * own[3].f32()[static_cast<std::size_t>(k)]);
  }
  // Sums of the wrong size are refused.
  EXPECT_THROW(kernel->forward_training(y, gamma, beta, given[0], given[1], y_given, given[2], given[3], &gamma),
               ShapeError);
}

}  // namespace
}  // namespace cnnergy::test
