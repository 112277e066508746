// CPU local response normalisation: forward against the Caffe formula written out independently,
// finite-difference checks of the backward (odd and even window sizes, clipped at the channel
// edges, a strong and the AlexNet-weak nonlinearity), accumulate semantics, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

class Lrn : public CpuBackendTest {};

LrnDesc lrn(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t size,
            double alpha, double beta, double k) {
  LrnDesc d;
  d.n = n, d.c = c, d.h = h, d.w = w, d.size = size, d.alpha = alpha, d.beta = beta, d.k = k;
  return d;
}

TEST_F(Lrn, ForwardIsCaffesFormula) {
  const LrnDesc d = lrn(2, 7, 3, 2, 5, 0.7, 0.75, 2.0);
  const Tensor x = random_tensor({2, 7, 3, 2}, rng_, -2.0f, 2.0f), y = Tensor::host(x.shape());
  backend_->make_lrn(d)->forward(x, y);
  const auto at = [&](std::int64_t n, std::int64_t c, std::int64_t i) {
    return x.f32()[static_cast<std::size_t>((n * 7 + c) * 6 + i)];
  };
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t c = 0; c < 7; ++c)
      for (std::int64_t i = 0; i < 6; ++i) {
        double sum = 0;  // window: channels c-2 .. c+2 that exist
        for (std::int64_t cc = std::max<std::int64_t>(0, c - 2);
             cc <= std::min<std::int64_t>(6, c + 2); ++cc)
          sum += static_cast<double>(at(n, cc, i)) * at(n, cc, i);
        const double expected = at(n, c, i) / std::pow(2.0 + 0.7 / 5.0 * sum, 0.75);
        EXPECT_NEAR(y.f32()[static_cast<std::size_t>((n * 7 + c) * 6 + i)], expected, 1e-6);
      }
}

TEST_F(Lrn, EvenWindowStartsHalfASizeMinusOneBefore) {
  // size 4: pre = (4-1)/2 = 1, window of channel c = c-1 .. c+2.
  const LrnDesc d = lrn(1, 5, 1, 1, 4, 1.0, 1.0, 1.0);
  const Tensor x = Tensor::host({1, 5, 1, 1}), y = Tensor::host({1, 5, 1, 1});
  for (int c = 0; c < 5; ++c) x.f32()[static_cast<std::size_t>(c)] = static_cast<float>(c + 1);
  backend_->make_lrn(d)->forward(x, y);
  // channel 1: window {0,1,2,3} -> x^2 sum 1+4+9+16 = 30 -> y = 2 / (1 + 30/4)
  EXPECT_NEAR(y.f32()[1], 2.0 / (1.0 + 30.0 / 4.0), 1e-6);
  // channel 4: window {3,4} -> 16+25 = 41
  EXPECT_NEAR(y.f32()[4], 5.0 / (1.0 + 41.0 / 4.0), 1e-6);
}

TEST_F(Lrn, BackwardMatchesFiniteDifferences) {
  for (const LrnDesc& d :
       {lrn(2, 7, 3, 4, 5, 1.0, 0.75, 2.0), lrn(1, 6, 2, 3, 4, 2.0, 0.6, 1.0),
        lrn(2, 4, 2, 2, 3, 0.5, 1.3, 1.5), lrn(1, 8, 3, 3, 5, 1e-4, 0.75, 1.0)}) {
    SCOPED_TRACE("C " + std::to_string(d.c) + " size " + std::to_string(d.size) + " alpha " +
                 std::to_string(d.alpha));
    auto kernel = backend_->make_lrn(d);
    const Tensor x = random_tensor({d.n, d.c, d.h, d.w}, rng_, -2.0f, 2.0f),
                 y = Tensor::host(x.shape());
    const Tensor dy = random_tensor(x.shape(), rng_), dx = Tensor::host(x.shape());
    kernel->forward(x, y);
    kernel->backward(x, y, dy, dx, false);
    GradCheckOptions opt;
    opt.seed = seed_;
    opt.max_elements = 96;
    EXPECT_TRUE(check_gradient(
        "lrn dx", x,
        [&] {
          kernel->forward(x, y);
          return dot(dy, y);
        },
        dx, opt));
    const Tensor acc = random_tensor(x.shape(), rng_), expected = clone(acc);
    kernel->backward(x, y, dy, acc, true);
    for (std::int64_t i = 0; i < x.numel(); ++i) expected.f32()[i] += dx.f32()[i];
    EXPECT_TRUE(all_close(acc, expected, 1e-6, 1e-6)) << "accumulate";
  }
}

TEST_F(Lrn, RejectsBadParameters) {
  EXPECT_THROW(backend_->make_lrn(lrn(1, 3, 2, 2, 0, 1e-4, 0.75, 1.0)), InvalidArgument);
  EXPECT_THROW(backend_->make_lrn(lrn(1, 3, 2, 2, 5, 1e-4, 0.75, 0.0)), InvalidArgument);
  EXPECT_THROW(backend_->make_lrn(lrn(1, 3, 2, 2, 5, -1.0, 0.75, 1.0)), InvalidArgument);
  auto kernel = backend_->make_lrn(lrn(1, 3, 2, 2, 5, 1e-4, 0.75, 1.0));
  EXPECT_THROW(kernel->forward(Tensor::host({1, 3, 2, 2}), Tensor::host({1, 3, 2, 1})), ShapeError);
}

}  // namespace
}  // namespace cnnergy::test
