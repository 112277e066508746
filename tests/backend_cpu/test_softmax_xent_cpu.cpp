// CPU softmax cross-entropy: the gradient of the mean loss by finite differences, loss scaling,
// known values, numerical stability with huge logits, and labels outside [0, K).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

class SoftmaxXent : public CpuBackendTest {};

SoftmaxXentDesc sx(std::int64_t n, std::int64_t classes) {
  SoftmaxXentDesc d;
  d.n = n, d.classes = classes;
  return d;
}

TEST_F(SoftmaxXent, GradientOfTheMeanLossMatchesFiniteDifferences) {
  const SoftmaxXentDesc d = sx(6, 9);
  auto kernel = backend_->make_softmax_xent(d);
  const Tensor logits = random_tensor({6, 9}, rng_, -3.0f, 3.0f),
               labels = random_labels(6, 9, rng_);
  const Tensor probs = Tensor::host({6, 9}), loss = Tensor::host({1}),
               dlogits = Tensor::host({6, 9});
  kernel->forward(logits, labels, probs, loss);
  kernel->backward(probs, labels, 1.0f, dlogits);
  GradCheckOptions opt;
  opt.seed = seed_;
  EXPECT_TRUE(check_gradient(
      "softmax_xent dlogits", logits,
      [&] {
        kernel->forward(logits, labels, probs, loss);
        return static_cast<double>(loss.f32()[0]);
      },
      dlogits, opt));
  // Loss scaling multiplies the gradient (fp16 training).
  const Tensor scaled = Tensor::host({6, 9});
  kernel->backward(probs, labels, 128.0f, scaled);
  for (std::int64_t i = 0; i < 54; ++i)
    EXPECT_NEAR(scaled.f32()[i], 128.0f * dlogits.f32()[i], 1e-5);
}

TEST_F(SoftmaxXent, KnownValues) {
  auto kernel = backend_->make_softmax_xent(sx(2, 4));
  const Tensor logits = Tensor::host({2, 4}), labels = Tensor::host({2}, DType::kI32);
  // Row 0 uniform: p = 1/4, loss log 4. Row 1: logits (0, ln 3, 0, 0): p(label 1) = 3/6.
  logits.f32()[5] = std::log(3.0f);
  labels.data<std::int32_t>()[0] = 2;
  labels.data<std::int32_t>()[1] = 1;
  const Tensor probs = Tensor::host({2, 4}), loss = Tensor::host({1});
  kernel->forward(logits, labels, probs, loss);
  EXPECT_NEAR(probs.f32()[0], 0.25, 1e-6);
  EXPECT_NEAR(probs.f32()[5], 0.5, 1e-6);
  EXPECT_NEAR(loss.f32()[0], (std::log(4.0) + std::log(2.0)) / 2.0, 1e-6);
  const Tensor d = Tensor::host({2, 4});
  kernel->backward(probs, labels, 1.0f, d);
  EXPECT_NEAR(d.f32()[2], (0.25 - 1.0) / 2.0, 1e-6);
  EXPECT_NEAR(d.f32()[0], 0.25 / 2.0, 1e-6);
  EXPECT_NEAR(d.f32()[5], (0.5 - 1.0) / 2.0, 1e-6);
}

TEST_F(SoftmaxXent, StableForHugeLogits) {
  auto kernel = backend_->make_softmax_xent(sx(1, 3));
  const Tensor logits = Tensor::host({1, 3}), labels = Tensor::host({1}, DType::kI32);
  logits.f32()[0] = 1000.0f, logits.f32()[1] = -1000.0f, logits.f32()[2] = 990.0f;
  labels.data<std::int32_t>()[0] = 1;  // probability underflows to 0: the loss must stay finite
  const Tensor probs = Tensor::host({1, 3}), loss = Tensor::host({1});
  kernel->forward(logits, labels, probs, loss);
  EXPECT_TRUE(std::isfinite(loss.f32()[0]));
  EXPECT_NEAR(loss.f32()[0], 2000.0, 1e-2);
  EXPECT_NEAR(probs.f32()[0], 1.0 / (1.0 + std::exp(-10.0)), 1e-6);
  EXPECT_EQ(probs.f32()[1], 0.0f);
}

TEST_F(SoftmaxXent, LabelsOutsideTheClassesAreRejected) {
  auto kernel = backend_->make_softmax_xent(sx(3, 5));
  const Tensor logits = Tensor::host({3, 5}), probs = Tensor::host({3, 5}),
               loss = Tensor::host({1});
  for (const std::int32_t bad : {5, -1}) {
    const Tensor labels = Tensor::host({3}, DType::kI32);
    labels.data<std::int32_t>()[2] = bad;
    try {
      kernel->forward(logits, labels, probs, loss);
      FAIL() << "label " << bad << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("label " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(kernel->backward(probs, labels, 1.0f, Tensor::host({3, 5})), InvalidArgument);
  }
  EXPECT_THROW(kernel->forward(logits, Tensor::host({3}), probs, loss),
               InvalidArgument);  // fp32 labels
}

}  // namespace
}  // namespace cnnergy::test
