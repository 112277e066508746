// CPU momentum SGD: two steps against a hand computation (weight decay, gradient unscaling,
// momentum), the skip flag of fp16 loss scaling, the working-copy refresh, and plain SGD.
#include <gtest/gtest.h>

#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

class Sgd : public CpuBackendTest {};

Tensor values(std::initializer_list<float> v) {
  Tensor t = Tensor::host({static_cast<std::int64_t>(v.size())});
  std::size_t i = 0;
  for (float e : v) t.f32()[i++] = e;
  return t;
}

TEST_F(Sgd, TwoStepsMatchAHandComputation) {
  const Tensor w = values({1.0f, -2.0f}), g = values({0.5f, 4.0f}), v = values({0.0f, 0.0f});
  SgdStep step;
  step.learning_rate = 0.1f, step.momentum = 0.9f, step.weight_decay = 0.01f,
  step.inv_grad_scale = 0.5f;
  backend_->sgd_update(w, g, v, Tensor(), step, Tensor());
  // g' = g * 0.5 + 0.01 w = (0.26, 1.98); v = g'; w -= 0.1 v -> (0.974, -2.198)
  EXPECT_FLOAT_EQ(v.f32()[0], 0.26f);
  EXPECT_FLOAT_EQ(v.f32()[1], 1.98f);
  EXPECT_FLOAT_EQ(w.f32()[0], 0.974f);
  EXPECT_FLOAT_EQ(w.f32()[1], -2.198f);
  backend_->sgd_update(w, g, v, Tensor(), step, Tensor());
  // g' = (0.25 + 0.00974, 2 - 0.02198) = (0.25974, 1.97802); v = 0.9 v + g' = (0.49374, 3.76002)
  // w = (0.974 - 0.049374, -2.198 - 0.376002) = (0.924626, -2.574002)
  EXPECT_NEAR(v.f32()[0], 0.49374, 1e-6);
  EXPECT_NEAR(v.f32()[1], 3.76002, 1e-5);
  EXPECT_NEAR(w.f32()[0], 0.924626, 1e-6);
  EXPECT_NEAR(w.f32()[1], -2.574002, 1e-6);
}

TEST_F(Sgd, SkipFlagLeavesEverythingUnchanged) {
  const Tensor w = random_tensor({10}, rng_), g = random_tensor({10}, rng_),
               v = random_tensor({10}, rng_);
  const Tensor w0 = clone(w), v0 = clone(v), flag = Tensor::host({1}, DType::kI32);
  flag.data<std::int32_t>()[0] = 1;
  backend_->sgd_update(w, g, v, Tensor(), SgdStep{}, flag);
  EXPECT_TRUE(all_close(w, w0, 0.0, 0.0));
  EXPECT_TRUE(all_close(v, v0, 0.0, 0.0));
  flag.data<std::int32_t>()[0] = 0;
  backend_->sgd_update(w, g, v, Tensor(), SgdStep{}, flag);
  EXPECT_FALSE(all_close(w, w0, 0.0, 0.0));
}

TEST_F(Sgd, RefreshesTheWorkingCopy) {
  const Tensor w = random_tensor({2, 3, 1, 1}, rng_), g = random_tensor({2, 3, 1, 1}, rng_);
  const Tensor v = Tensor::host(w.shape());
  const Tensor working32 = Tensor::host(w.shape()),
               working16 = Tensor::host(w.shape(), DType::kBF16);
  backend_->sgd_update(w, g, v, working32, SgdStep{}, Tensor());
  EXPECT_TRUE(all_close(working32, w, 0.0, 0.0));
  backend_->sgd_update(w, g, v, working16, SgdStep{}, Tensor());
  EXPECT_TRUE(all_close(working16, w, 0.0, 1e-2));
}

TEST_F(Sgd, PlainSgdWithoutMomentumBuffer) {
  const Tensor w = values({1.0f}), g = values({2.0f});
  SgdStep step;
  step.learning_rate = 0.25f, step.momentum = 0.0f;
  backend_->sgd_update(w, g, Tensor(), Tensor(), step, Tensor());
  EXPECT_FLOAT_EQ(w.f32()[0], 0.5f);
  step.momentum = 0.9f;  // momentum without a buffer is a caller error
  EXPECT_THROW(backend_->sgd_update(w, g, Tensor(), Tensor(), step, Tensor()), InvalidArgument);
  EXPECT_THROW(
      backend_->sgd_update(w, values({1.0f, 2.0f}), values({0.0f}), Tensor(), SgdStep{}, Tensor()),
      ShapeError);
}

}  // namespace
}  // namespace cnnergy::test
