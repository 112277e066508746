// Shared test helpers (header-only): a seeded fixture whose seed shows in every failure message,
// random host tensors (uniform, tie-free, labels), double-precision dot products, and tensor
// comparison with a message that names the worst element. Works on host tensors of any dtype/layout
// (GPU tests download first), comparing logical N,C,H,W elements.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace cnnergy::test {

// Base fixture: seed_ from CNNERGY_SEED or fresh, rng_ seeded with it, and a trace that prints
// "seed S (replay with CNNERGY_SEED=S)" with any failure of the test.
class SeededTest : public ::testing::Test {
 protected:
  SeededTest()
      : seed_(default_seed()),
        rng_(seed_),
        trace_(__FILE__, __LINE__,
               "seed " + std::to_string(seed_) +
                   " (replay with CNNERGY_SEED=" + std::to_string(seed_) + ")") {}
  std::uint64_t seed_;
  Rng rng_;

 private:
  ::testing::ScopedTrace trace_;
};

// ---- random host tensors (fp32, NCHW)
// --------------------------------------------------------------

inline void fill_uniform(const Tensor& t, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  rng.fill_uniform(t.f32(), lo, hi);
}

inline Tensor random_tensor(const Shape& shape, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::host(shape);
  fill_uniform(t, rng, lo, hi);
  return t;
}

// Values are a random permutation of (i - n/2 + 1/2) * spacing: all distinct by at least `spacing`
// and at least spacing/2 away from zero, so that max-pooling argmaxes and relu kinks stay put under
// finite-difference steps smaller than spacing/2.
inline Tensor distinct_tensor(const Shape& shape, Rng& rng, float spacing = 0.05f) {
  Tensor t = Tensor::host(shape);
  const auto n = static_cast<std::size_t>(t.numel());
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  std::shuffle(perm.begin(), perm.end(), rng.engine());
  auto data = t.f32();
  for (std::size_t i = 0; i < n; ++i)
    data[i] = (static_cast<float>(perm[i]) - static_cast<float>(n) / 2.0f + 0.5f) * spacing;
  return t;
}

// int32 labels in [0, classes).
inline Tensor random_labels(std::int64_t n, std::int64_t classes, Rng& rng) {
  Tensor t = Tensor::host({n}, DType::kI32);
  for (std::int64_t i = 0; i < n; ++i)
    t.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(rng.next_u32() % static_cast<std::uint32_t>(classes));
  return t;
}

// A host copy with its own memory (same dtype, layout and shape).
inline Tensor clone(const Tensor& t) {
  Tensor out = Tensor::host(t.shape(), t.dtype(), t.layout());
  std::copy_n(static_cast<const char*>(t.raw()), t.size_bytes(), static_cast<char*>(out.raw()));
  return out;
}

// sum(a * b) accumulated in double (host fp32 tensors with the same element count).
inline double dot(const Tensor& a, const Tensor& b) {
  const auto x = a.f32();
  const auto y = b.f32();
  double acc = 0.0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
    acc += static_cast<double>(x[i]) * y[i];
  return acc;
}

// ---- comparison ---------------------------------------------------------------------------------

// "(n, c, h, w)" for a flat NCHW index of `shape` (or the flat index for other ranks).
inline std::string index_str(const Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> idx(shape.rank());
  std::int64_t rest = flat;
  for (std::size_t d = shape.rank(); d-- > 0;) {
    idx[d] = rest % shape[d];
    rest /= shape[d];
  }
  std::ostringstream os;
  os << "(";
  for (std::size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << ")";
  return os.str();
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor x = to_f32_nchw(a), y = to_f32_nchw(b);
  double m = 0.0;
  for (std::int64_t i = 0; i < x.numel() && i < y.numel(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(x.f32()[i]) - y.f32()[i]));
  return m;
}

// Element-wise |actual - expected| <= atol + rtol * |expected| (NaN matches only NaN). On failure
// the message gives the number of bad elements, the worst one with its index and both values, and
// the largest absolute and relative errors.
inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                            double atol = 1e-5, double rtol = 1e-4) {
  if (actual.numel() != expected.numel())
    return ::testing::AssertionFailure() << "element counts differ: actual " << actual.describe()
                                         << ", expected " << expected.describe();
  const Tensor a = to_f32_nchw(actual), e = to_f32_nchw(expected);
  const auto av = a.f32(), ev = e.f32();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::int64_t bad = 0, worst = -1;
  double worst_excess = -1.0, max_abs = 0.0, max_rel = 0.0;
  for (std::size_t i = 0; i < av.size(); ++i) {
    const double x = av[i], y = ev[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) && std::isnan(y)) continue;
      ++bad;
      if (worst_excess < kInf) {
        worst = static_cast<std::int64_t>(i);
        worst_excess = kInf;
      }
      continue;
    }
    const double diff = x == y ? 0.0 : std::fabs(x - y);  // equal infinities match
    const double allowed = atol + rtol * std::fabs(y);
    max_abs = std::max(max_abs, diff);
    if (y != 0.0) max_rel = std::max(max_rel, diff / std::fabs(y));
    if (!(diff <= allowed)) {
      ++bad;
      const double excess = diff / allowed;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = static_cast<std::int64_t>(i);
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const auto w = static_cast<std::size_t>(worst);
  return ::testing::AssertionFailure()
         << bad << " of " << av.size() << " elements differ beyond atol=" << atol
         << " rtol=" << rtol << " (shape " << expected.shape().str() << "); worst at "
         << index_str(expected.shape(), worst) << ": actual " << av[w] << ", expected " << ev[w]
         << "; max abs err " << max_abs << ", max rel err " << max_rel;
}

}  // namespace cnnergy::test
