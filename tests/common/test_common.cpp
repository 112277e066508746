// The shared test helpers must catch what they are meant to catch: a wrong gradient, a differing
// element; and their random tensors must have the properties the tests rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "common/gradient_check.hpp"
#include "common/tensor_testing.hpp"

namespace cnnergy::test {
namespace {

class Helpers : public SeededTest {};

// f(x) = sum(dy * sin(x) * x): gradient dy * (cos(x) * x + sin(x)).
struct SinObjective {
  Tensor x, dy;
  double operator()() const {
    double acc = 0.0;
    for (std::int64_t i = 0; i < x.numel(); ++i)
      acc += static_cast<double>(dy.f32()[i]) * std::sin(x.f32()[i]) * x.f32()[i];
    return acc;
  }
  Tensor gradient(double wrong_factor_at_7 = 1.0) const {
    Tensor g = Tensor::host(x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.f32()[i];
      g.f32()[i] = static_cast<float>(dy.f32()[i] * (std::cos(v) * v + std::sin(v)) *
                                      (i == 7 ? wrong_factor_at_7 : 1.0));
    }
    return g;
  }
};

TEST_F(Helpers, GradientCheckAcceptsTheRightGradient) {
  SinObjective f{random_tensor({3, 4, 5}, rng_), random_tensor({3, 4, 5}, rng_)};
  const Tensor before = clone(f.x);
  GradCheckOptions opt;
  opt.max_elements = 1000;
  EXPECT_TRUE(check_gradient("sin(x)*x", f.x, f, f.gradient(), opt));
  EXPECT_EQ(max_abs_diff(before, f.x), 0.0) << "the input must be restored exactly";
}

TEST_F(Helpers, GradientCheckRejectsAWrongElement) {
  SinObjective f{random_tensor({3, 4, 5}, rng_, 0.5f, 1.0f),
                 random_tensor({3, 4, 5}, rng_, 0.5f, 1.0f)};
  GradCheckOptions opt;
  opt.max_elements = 1000;
  const auto result = check_gradient("sin(x)*x", f.x, f, f.gradient(1.1), opt);
  EXPECT_FALSE(result);
  EXPECT_NE(std::string(result.message()).find("(0, 1, 2)"), std::string::npos) << result.message();
}

TEST_F(Helpers, GradientCheckSubsetIncludesEnds) {
  SinObjective f{random_tensor({1000}, rng_, 0.5f, 1.0f), random_tensor({1000}, rng_, 0.5f, 1.0f)};
  Tensor g = f.gradient();
  g.f32()[999] *= 1.5f;  // only the last element is wrong: a subset must still look at it
  GradCheckOptions opt;
  opt.max_elements = 10;
  opt.seed = seed_;
  EXPECT_FALSE(check_gradient("last element", f.x, f, g, opt));
}

TEST_F(Helpers, AllCloseReportsTheWorstElement) {
  const Tensor a = random_tensor({2, 3, 4, 5}, rng_);
  Tensor b = clone(a);
  EXPECT_TRUE(all_close(a, b, 0.0, 0.0));
  b.f32()[((1 * 3 + 2) * 4 + 3) * 5 + 4] += 0.5f;
  b.f32()[0] += 1e-7f;
  const auto result = all_close(b, a, 1e-5, 1e-5);
  ASSERT_FALSE(result);
  EXPECT_NE(std::string(result.message()).find("1 of 120"), std::string::npos) << result.message();
  EXPECT_NE(std::string(result.message()).find("(1, 2, 3, 4)"), std::string::npos)
      << result.message();
  b.f32()[5] = NAN;
  EXPECT_FALSE(all_close(b, a, 1.0, 1.0));
}

TEST_F(Helpers, AllCloseComparesLogicalElementsAcrossLayouts) {
  const Tensor a = random_tensor({2, 3, 4, 5}, rng_);
  const Tensor nhwc = from_f32_nchw(a, DType::kF32, Layout::kNHWC);
  EXPECT_TRUE(all_close(nhwc, a, 0.0, 0.0));
  EXPECT_TRUE(all_close(from_f32_nchw(a, DType::kBF16, Layout::kNCHW), a, 0.0, 1e-2));
}

TEST_F(Helpers, DistinctTensorIsTieFreeAndAwayFromZero) {
  const Tensor t = distinct_tensor({4, 5, 6}, rng_, 0.02f);
  std::set<float> seen;
  for (float v : t.f32()) {
    EXPECT_GE(std::fabs(v), 0.0099f);
    seen.insert(v);
  }
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), t.numel());
  float prev = -1e9f;
  for (float v : seen) {
    EXPECT_GE(v - prev, 0.0199f);
    prev = v;
  }
}

TEST_F(Helpers, RandomLabelsStayInRange) {
  const Tensor labels = random_labels(500, 7, rng_);
  std::set<std::int32_t> seen;
  for (std::int64_t i = 0; i < 500; ++i) {
    const auto v = labels.data<std::int32_t>()[i];
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 7);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 7u);
}

}  // namespace
}  // namespace cnnergy::test
