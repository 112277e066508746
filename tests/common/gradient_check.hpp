// Generic central finite-difference gradient checker (header-only) for every backend's tests.
// The caller supplies a scalar objective, usually sum(dy ⊙ f(x)) with a fixed random dy (see
// dot()), which reads the host fp32 tensor `input`; the checker perturbs elements of `input` in
// place, evaluates the objective, restores them exactly, and compares with the analytic gradient.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/tensor_testing.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace cnnergy::test {

struct GradCheckOptions {
  // Central-difference step. fp32 objectives want 1e-2..1e-3: smaller steps drown in rounding
  // noise.
  double step = 1e-2;
  // An element passes when |numeric - analytic| <= atol * scale + rtol * max(|numeric|,
  // |analytic|), with scale = max(largest |analytic| in the tensor, abs_floor): rounding noise in
  // an fp32 objective is relative to the whole gradient's size, not to each element's.
  double rtol = 1e-2;
  double atol = 5e-3;
  double abs_floor = 1e-3;
  // Tensors with more elements are checked on a random subset of this size (first and last
  // included).
  std::int64_t max_elements = 64;
  std::uint64_t seed = 1;  // picks the subset
};

// Checks d(objective)/d(input) against `analytic` (a host tensor of the same element count, any
// dtype/layout: it is read through to_f32_nchw). `input` must be a host fp32 tensor that the
// objective reads. The objective is called twice per checked element and once more at the end, so
// that whatever it computes (outputs, caches) is left as at the unperturbed input. Objectives with
// side effects on their own inputs (e.g. running statistics) must not feed those back into the
// value they return.
inline ::testing::AssertionResult check_gradient(std::string_view what, const Tensor& input,
                                                 const std::function<double()>& objective,
                                                 const Tensor& analytic,
                                                 const GradCheckOptions& opt = {}) {
  if (!input.defined() || input.dtype() != DType::kF32 || !input.device().is_cpu())
    return ::testing::AssertionFailure()
           << what << ": the perturbed input must be a host fp32 tensor";
  if (analytic.numel() != input.numel())
    return ::testing::AssertionFailure() << what << ": analytic gradient " << analytic.describe()
                                         << " does not match input " << input.describe();
  const Tensor ana_t = to_f32_nchw(analytic);
  const auto ana = ana_t.f32();
  const auto x = input.f32();
  const auto n = static_cast<std::int64_t>(x.size());

  std::vector<std::int64_t> indices;
  if (n <= opt.max_elements) {
    indices.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) indices[static_cast<std::size_t>(i)] = i;
  } else {
    Rng pick(opt.seed);
    std::unordered_set<std::int64_t> chosen{0, n - 1};
    while (static_cast<std::int64_t>(chosen.size()) < opt.max_elements)
      chosen.insert(static_cast<std::int64_t>(pick.engine()() % static_cast<std::uint64_t>(n)));
    indices.assign(chosen.begin(), chosen.end());
    std::sort(indices.begin(), indices.end());
  }

  double scale = opt.abs_floor;
  for (const float g : ana) scale = std::max(scale, static_cast<double>(std::fabs(g)));

  struct Failure {
    std::int64_t index;
    double numeric, analytic, excess;
  };
  std::vector<Failure> failures;
  double max_err = 0.0;
  for (const std::int64_t i : indices) {
    const auto u = static_cast<std::size_t>(i);
    const float orig = x[u];
    const auto plus = static_cast<float>(orig + opt.step),
               minus = static_cast<float>(orig - opt.step);
    x[u] = plus;
    const double f_plus = objective();
    x[u] = minus;
    const double f_minus = objective();
    x[u] = orig;
    // Divide by the step actually taken in fp32, not the one asked for.
    const double numeric =
        (f_plus - f_minus) / (static_cast<double>(plus) - static_cast<double>(minus));
    const double a = ana[u];
    const double err = std::fabs(numeric - a);
    const double allowed = opt.atol * scale + opt.rtol * std::max(std::fabs(numeric), std::fabs(a));
    max_err = std::max(max_err, err);
    if (!(err <= allowed)) failures.push_back({i, numeric, a, err / allowed});
  }
  objective();

  if (failures.empty()) return ::testing::AssertionSuccess();
  std::sort(failures.begin(), failures.end(),
            [](const Failure& p, const Failure& q) { return p.excess > q.excess; });
  ::testing::AssertionResult result = ::testing::AssertionFailure();
  result << what << ": " << failures.size() << " of " << indices.size() << " checked elements of "
         << input.shape().str() << " disagree with finite differences (step " << opt.step
         << ", rtol " << opt.rtol << ", atol " << opt.atol << " x scale " << scale
         << "; max abs err " << max_err << "). Worst:";
  for (std::size_t k = 0; k < failures.size() && k < 5; ++k)
    result << "\n  at " << index_str(input.shape(), failures[k].index) << ": numeric "
           << failures[k].numeric << ", analytic " << failures[k].analytic;
  return result;
}

}  // namespace cnnergy::test
