// CPU fully connected layer: finite-difference checks of dx, dw, db; the BLAS path against the
// reference loops; accumulate/overwrite semantics; 4-D inputs read as flattened; errors.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

class Linear : public CpuBackendTest {};

LinearDesc linear(std::int64_t n, std::int64_t in, std::int64_t out, bool bias = true) {
  LinearDesc d;
  d.n = n, d.in_features = in, d.out_features = out, d.bias = bias;
  return d;
}

TEST_F(Linear, GradientsMatchFiniteDifferences) {
  for (const bool bias : {true, false}) {
    const LinearDesc d = linear(3, 7, 5, bias);
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    auto kernel = backend_->make_linear(d);
    const Tensor x = random_tensor({d.n, d.in_features}, rng_),
                 w = random_tensor({d.out_features, d.in_features}, rng_);
    const Tensor b = bias ? random_tensor({d.out_features}, rng_) : Tensor();
    const Tensor y = Tensor::host({d.n, d.out_features}),
                 dy = random_tensor({d.n, d.out_features}, rng_);
    const Tensor dx = Tensor::host(x.shape()), dw = Tensor::host(w.shape());
    const Tensor db = bias ? Tensor::host({d.out_features}) : Tensor();
    kernel->backward_data(dy, w, dx, false);
    kernel->backward_filter(x, dy, dw, db);
    const auto objective = [&] {
      kernel->forward(x, w, b, y);
      return dot(dy, y);
    };
    GradCheckOptions opt;
    opt.seed = seed_;
    EXPECT_TRUE(check_gradient("linear dx", x, objective, dx, opt));
    EXPECT_TRUE(check_gradient("linear dw", w, objective, dw, opt));
    if (bias) {
      EXPECT_TRUE(check_gradient("linear db", b, objective, db, opt));
    }
  }
}

TEST_F(Linear, BlasMatchesReferenceLoops) {
  for (int trial = 0; trial < 6; ++trial) {
    const LinearDesc d = linear(1 + rng_.next_u32() % 9, 1 + rng_.next_u32() % 70,
                                1 + rng_.next_u32() % 40, trial % 2 == 0);
    SCOPED_TRACE("n " + std::to_string(d.n) + " in " + std::to_string(d.in_features) + " out " +
                 std::to_string(d.out_features));
    auto blas = cpu::make_linear_kernel(d, cpu::LinearImpl::kBlas);
    auto ref = cpu::make_linear_kernel(d, cpu::LinearImpl::kReference);
    const Tensor x = random_tensor({d.n, d.in_features}, rng_),
                 w = random_tensor({d.out_features, d.in_features}, rng_);
    const Tensor b = d.bias ? random_tensor({d.out_features}, rng_) : Tensor();
    const Tensor dy = random_tensor({d.n, d.out_features}, rng_);
    const Tensor y1 = Tensor::host(dy.shape()), y2 = Tensor::host(dy.shape());
    blas->forward(x, w, b, y1);
    ref->forward(x, w, b, y2);
    EXPECT_TRUE(all_close(y1, y2, 1e-4, 1e-4)) << "forward";
    const Tensor dx0 = random_tensor(x.shape(), rng_);
    for (const bool acc : {false, true}) {
      const Tensor dx1 = clone(dx0), dx2 = clone(dx0);
      blas->backward_data(dy, w, dx1, acc);
      ref->backward_data(dy, w, dx2, acc);
      EXPECT_TRUE(all_close(dx1, dx2, 1e-4, 1e-4)) << "backward_data accumulate=" << acc;
    }
    const Tensor dw1 = random_tensor(w.shape(), rng_), dw2 = Tensor::host(w.shape());
    const Tensor db1 = d.bias ? random_tensor({d.out_features}, rng_) : Tensor();
    const Tensor db2 = d.bias ? Tensor::host({d.out_features}) : Tensor();
    blas->backward_filter(x, dy, dw1, db1);  // from garbage: must overwrite
    ref->backward_filter(x, dy, dw2, db2);
    EXPECT_TRUE(all_close(dw1, dw2, 1e-4, 1e-4)) << "dw";
    if (d.bias) {
      EXPECT_TRUE(all_close(db1, db2, 1e-4, 1e-4)) << "db";
    }
  }
}

TEST_F(Linear, AccumulateAddsToDx) {
  const LinearDesc d = linear(4, 6, 3);
  auto kernel = backend_->make_linear(d);
  const Tensor w = random_tensor({3, 6}, rng_), dy = random_tensor({4, 3}, rng_),
               dx0 = random_tensor({4, 6}, rng_);
  const Tensor fresh = Tensor::host({4, 6}), acc = clone(dx0);
  kernel->backward_data(dy, w, fresh, false);
  kernel->backward_data(dy, w, acc, true);
  const Tensor expected = clone(dx0);
  for (std::int64_t i = 0; i < expected.numel(); ++i) expected.f32()[i] += fresh.f32()[i];
  EXPECT_TRUE(all_close(acc, expected, 1e-6, 1e-6));
}

TEST_F(Linear, HandComputedAndFlattenedInput) {
  // x (1, 2x1x2 = 4 features) read as flattened; y = x w^T + b.
  const LinearDesc d = linear(1, 4, 2);
  auto kernel = backend_->make_linear(d);
  const Tensor x = Tensor::host({1, 2, 1, 2}), w = Tensor::host({2, 4}), b = Tensor::host({2}),
               y = Tensor::host({1, 2});
  for (int i = 0; i < 4; ++i) x.f32()[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  for (int i = 0; i < 8; ++i)
    w.f32()[static_cast<std::size_t>(i)] = static_cast<float>(i % 4 == i / 4 ? 1 : 0);
  b.f32()[0] = 10, b.f32()[1] = 20;
  kernel->forward(x, w, b, y);
  EXPECT_FLOAT_EQ(y.f32()[0], 11.0f);
  EXPECT_FLOAT_EQ(y.f32()[1], 22.0f);
  EXPECT_THROW(kernel->forward(Tensor::host({2, 2}), w, b, y), ShapeError);
  EXPECT_THROW(backend_->make_linear(linear(0, 4, 2)), InvalidArgument);
}

}  // namespace
}  // namespace cnnergy::test
