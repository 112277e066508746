// CPU pooling: output sizes of real networks (ceil mode, padding), hand-computed windows and
// divisors, finite-difference checks of every mode incl. ceil mode with padding and global pooling,
// max ties, accumulate semantics and argument errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

class Pool : public CpuBackendTest {};

Pool2dDesc pool(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k,
                std::int64_t s, std::int64_t p, bool ceil_mode, PoolMode mode) {
  Pool2dDesc d;
  d.n = n, d.c = c, d.h = h, d.w = w;
  d.kernel_h = d.kernel_w = k;
  d.stride_h = d.stride_w = s;
  d.pad_h = d.pad_w = p;
  d.ceil_mode = ceil_mode;
  d.mode = mode;
  return d;
}

const char* mode_name(PoolMode m) {
  return m == PoolMode::kMax             ? "max"
         : m == PoolMode::kAvgIncludePad ? "avg_include_pad"
                                         : "avg_exclude_pad";
}

TEST_F(Pool, OutputSizesOfRealNetworks) {
  // CaffeNet/AlexNet pool1: 55 -> 27 (k3 s2, ceil); pool5: 13 -> 6.
  EXPECT_EQ(pool(1, 1, 55, 55, 3, 2, 0, true, PoolMode::kMax).out_h(), 27);
  EXPECT_EQ(pool(1, 1, 13, 13, 3, 2, 0, true, PoolMode::kMax).out_h(), 6);
  // GoogLeNet (Caffe): 112 -> 56 and 28 -> 14 with k3 s2 ceil; k3 s1 p1 keeps the size.
  EXPECT_EQ(pool(1, 1, 112, 112, 3, 2, 0, true, PoolMode::kMax).out_h(), 56);
  EXPECT_EQ(pool(1, 1, 28, 28, 3, 2, 0, true, PoolMode::kMax).out_h(), 14);
  EXPECT_EQ(pool(1, 1, 28, 28, 3, 1, 1, true, PoolMode::kMax).out_h(), 28);
  // Padding with ceil: 14 -> 8 (k3 s2 p1); a last window that would start in the padding is
  // dropped: 5 -> 3, not 4 (k2 s2 p1).
  EXPECT_EQ(pool(1, 1, 14, 14, 3, 2, 1, true, PoolMode::kMax).out_h(), 8);
  EXPECT_EQ(pool(1, 1, 5, 5, 2, 2, 1, true, PoolMode::kMax).out_h(), 3);
  // Floor mode (ResNet/Inception): 112 -> 56 (k3 s2 p1), 35 -> 17 (k3 s2).
  EXPECT_EQ(pool(1, 1, 112, 112, 3, 2, 1, false, PoolMode::kMax).out_h(), 56);
  EXPECT_EQ(pool(1, 1, 35, 35, 3, 2, 0, false, PoolMode::kMax).out_h(), 17);
  // The kernel runs with those sizes: every window, including the clipped ceil-mode ones.
  for (const auto& d : {pool(2, 3, 55, 55, 3, 2, 0, true, PoolMode::kMax),
                        pool(2, 3, 14, 14, 3, 2, 1, true, PoolMode::kAvgIncludePad),
                        pool(2, 3, 5, 5, 2, 2, 1, true, PoolMode::kAvgExcludePad)}) {
    const Tensor x = random_tensor({d.n, d.c, d.h, d.w}, rng_), y = Tensor::host(d.output_shape());
    backend_->make_pool(d)->forward(x, y);
    for (const float v : y.f32()) {
      EXPECT_GE(v, -1.0f);
      EXPECT_LE(v, 1.0f);
    }
  }
}

TEST_F(Pool, HandComputedWindowsAndDivisors) {
  // x = 1..16 on 4x4, k3 s2 p1 ceil: out 3x3; the last row/column of windows covers padded
  // rows 3..4.
  const Tensor x = Tensor::host({1, 1, 4, 4});
  for (int i = 0; i < 16; ++i) x.f32()[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  auto run = [&](PoolMode mode) {
    const auto d = pool(1, 1, 4, 4, 3, 2, 1, true, mode);
    const Tensor y = Tensor::host(d.output_shape());
    EXPECT_EQ(d.output_shape(), (Shape{1, 1, 3, 3}));
    backend_->make_pool(d)->forward(x, y);
    return y;
  };
  const Tensor mx = run(PoolMode::kMax), inc = run(PoolMode::kAvgIncludePad),
               exc = run(PoolMode::kAvgExcludePad);
  // Window (0,0): rows/cols -1..1 -> real {1,2,5,6}; include-pad divides by 9, exclude-pad by 4.
  EXPECT_FLOAT_EQ(mx.f32()[0], 6.0f);
  EXPECT_FLOAT_EQ(inc.f32()[0], 14.0f / 9.0f);
  EXPECT_FLOAT_EQ(exc.f32()[0], 14.0f / 4.0f);
  // Window (0,1): rows -1..1, cols 1..3 -> {2,3,4,6,7,8}.
  EXPECT_FLOAT_EQ(inc.f32()[1], 30.0f / 9.0f);
  EXPECT_FLOAT_EQ(exc.f32()[1], 30.0f / 6.0f);
  // Window (2,2): rows/cols 3..5, clipped to the padded input [-1, 5) -> 3..4, real {16}:
  // include-pad divisor 2x2 = 4 (PyTorch count_include_pad), exclude-pad divisor 1.
  EXPECT_FLOAT_EQ(mx.f32()[8], 16.0f);
  EXPECT_FLOAT_EQ(inc.f32()[8], 4.0f);
  EXPECT_FLOAT_EQ(exc.f32()[8], 16.0f);
  // Window (1,2): rows 1..3, cols 3..4 -> {8,12,16}; include divisor 3x2 = 6.
  EXPECT_FLOAT_EQ(inc.f32()[5], 36.0f / 6.0f);
  EXPECT_FLOAT_EQ(exc.f32()[5], 36.0f / 3.0f);
}

struct PoolCase {
  std::string name;
  Pool2dDesc desc;
};
void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }

class PoolGradient : public CpuBackendTest, public ::testing::WithParamInterface<PoolCase> {};

TEST_P(PoolGradient, MatchesFiniteDifferences) {
  const Pool2dDesc& d = GetParam().desc;
  SCOPED_TRACE(GetParam().name);
  auto kernel = backend_->make_pool(d);
  // Distinct values 0.05 apart and a 1e-2 step: no max-pool window changes its argmax.
  const Tensor x = distinct_tensor({d.n, d.c, d.h, d.w}, rng_, 0.05f);
  const Tensor y = Tensor::host(d.output_shape()), dy = random_tensor(d.output_shape(), rng_);
  kernel->forward(x, y);
  const Tensor dx = Tensor::host(x.shape());
  kernel->backward(x, y, dy, dx, false);
  GradCheckOptions opt;
  opt.seed = seed_;
  opt.max_elements = 128;
  EXPECT_TRUE(check_gradient(
      std::string("pool dx ") + mode_name(d.mode), x,
      [&] {
        kernel->forward(x, y);
        return dot(dy, y);
      },
      dx, opt));
}

std::vector<PoolCase> pool_cases() {
  std::vector<PoolCase> cases;
  for (const PoolMode m : {PoolMode::kMax, PoolMode::kAvgIncludePad, PoolMode::kAvgExcludePad}) {
    const std::string n = mode_name(m);
    cases.push_back({n + "_k2s2", pool(2, 3, 6, 6, 2, 2, 0, false, m)});
    cases.push_back({n + "_k3s2_ceil", pool(2, 2, 7, 8, 3, 2, 0, true, m)});
    cases.push_back({n + "_k3s2p1_ceil", pool(1, 3, 8, 6, 3, 2, 1, true, m)});
    cases.push_back({n + "_k2s2p1_ceil_dropped_window", pool(2, 2, 5, 5, 2, 2, 1, true, m)});
    cases.push_back({n + "_k3s1p1_overlap", pool(1, 2, 5, 4, 3, 1, 1, false, m)});
    Pool2dDesc rect = pool(2, 2, 7, 9, 3, 2, 1, false, m);
    rect.kernel_w = 2, rect.stride_w = 3, rect.pad_w = 0;
    cases.push_back({n + "_rectangular", rect});
  }
  // Global average pooling: the kernel is the whole input.
  Pool2dDesc global = pool(3, 4, 5, 6, 1, 1, 0, false, PoolMode::kAvgIncludePad);
  global.kernel_h = 5, global.kernel_w = 6;
  cases.push_back({"global_avg", global});
  Pool2dDesc global_max = global;
  global_max.mode = PoolMode::kMax;
  cases.push_back({"global_max", global_max});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cpu, PoolGradient, ::testing::ValuesIn(pool_cases()),
                         [](const auto& p) { return p.param.name; });

TEST_F(Pool, GlobalAverageIsTheMean) {
  Pool2dDesc d = pool(2, 3, 4, 5, 1, 1, 0, false, PoolMode::kAvgExcludePad);
  d.kernel_h = 4, d.kernel_w = 5;
  ASSERT_EQ(d.output_shape(), (Shape{2, 3, 1, 1}));
  const Tensor x = random_tensor({2, 3, 4, 5}, rng_), y = Tensor::host(d.output_shape());
  backend_->make_pool(d)->forward(x, y);
  for (std::int64_t p = 0; p < 6; ++p) {
    double sum = 0;
    for (std::int64_t i = 0; i < 20; ++i) sum += x.f32()[static_cast<std::size_t>(p * 20 + i)];
    EXPECT_NEAR(y.f32()[static_cast<std::size_t>(p)], sum / 20.0, 1e-6);
  }
}

TEST_F(Pool, MaxTiesRouteToTheFirstMaximum) {
  const auto d = pool(1, 1, 2, 2, 2, 2, 0, false, PoolMode::kMax);
  const Tensor x = Tensor::host({1, 1, 2, 2}), y = Tensor::host({1, 1, 1, 1});
  x.f32()[0] = 0.5f, x.f32()[1] = 2.0f, x.f32()[2] = 2.0f, x.f32()[3] = 2.0f;
  auto kernel = backend_->make_pool(d);
  kernel->forward(x, y);
  EXPECT_EQ(y.f32()[0], 2.0f);
  const Tensor dy = Tensor::host({1, 1, 1, 1}), dx = Tensor::host({1, 1, 2, 2});
  dy.f32()[0] = 3.0f;
  kernel->backward(x, y, dy, dx, false);
  EXPECT_EQ(dx.f32()[0], 0.0f);
  EXPECT_EQ(dx.f32()[1], 3.0f);
  EXPECT_EQ(dx.f32()[2], 0.0f);
  EXPECT_EQ(dx.f32()[3], 0.0f);
}

TEST_F(Pool, AccumulateAddsAndOverwriteReplaces) {
  for (const PoolMode m : {PoolMode::kMax, PoolMode::kAvgIncludePad}) {
    const auto d = pool(2, 2, 6, 5, 3, 2, 1, true, m);
    auto kernel = backend_->make_pool(d);
    const Tensor x = distinct_tensor({2, 2, 6, 5}, rng_), y = Tensor::host(d.output_shape());
    const Tensor dy = random_tensor(d.output_shape(), rng_), dx0 = random_tensor(x.shape(), rng_);
    kernel->forward(x, y);
    const Tensor fresh = clone(dx0), acc = clone(dx0);
    kernel->backward(x, y, dy, fresh, false);
    kernel->backward(x, y, dy, acc, true);
    const Tensor expected = clone(dx0);
    for (std::int64_t i = 0; i < x.numel(); ++i) expected.f32()[i] += fresh.f32()[i];
    EXPECT_TRUE(all_close(acc, expected, 1e-6, 1e-6)) << mode_name(m);
  }
}

// A kernel made with keep_argmax keeps each output's argmax from forward: its backward, given no x,
// routes dy exactly as the recomputing kernel does (ties to the first maximum), overwriting and
// accumulating; average pooling keeps none. The kept argmax (an int32 per output) is the backend's
// tracked memory: memory_stats() counts it while the kernel lives.
TEST_F(Pool, KeptArgmaxRoutesAsTheRecomputedOne) {
  auto d = pool(2, 3, 9, 7, 3, 2, 1, true, PoolMode::kMax);
  const std::size_t before = backend_->memory_stats().in_use_bytes;
  auto plain = backend_->make_pool(d);
  EXPECT_EQ(backend_->memory_stats().in_use_bytes, before);
  d.keep_argmax = true;
  auto kept = backend_->make_pool(d);
  EXPECT_EQ(backend_->memory_stats().in_use_bytes - before,
            static_cast<std::size_t>(d.output_shape().numel()) * sizeof(std::int32_t));
  EXPECT_FALSE(plain->keeps_argmax());
  EXPECT_TRUE(kept->keeps_argmax());
  Tensor x = random_tensor({2, 3, 9, 7}, rng_);
  for (std::int64_t i = 0; i < x.numel(); i += 5) x.f32()[i] = 1.0f;  // ties
  const Tensor y = Tensor::host(d.output_shape()), yk = Tensor::host(d.output_shape());
  plain->forward(x, y);
  kept->forward(x, yk);
  for (std::int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(yk.f32()[i], y.f32()[i]) << i;
  const Tensor dy = random_tensor(d.output_shape(), rng_);
  for (const bool accumulate : {false, true}) {
    const Tensor start = random_tensor(x.shape(), rng_);
    const Tensor dx = clone(start), dxk = clone(start);
    plain->backward(x, y, dy, dx, accumulate);
    kept->backward(Tensor{}, Tensor{}, dy, dxk, accumulate);
    for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(dxk.f32()[i], dx.f32()[i]) << i;
  }
  auto avg = pool(2, 3, 9, 7, 3, 2, 1, true, PoolMode::kAvgIncludePad);
  avg.keep_argmax = true;
  EXPECT_FALSE(backend_->make_pool(avg)->keeps_argmax());
}

// The batch-norm apply fusion on the CPU (Backend::fuses_batch_norm_pool): a pool made with
// Pool2dDesc::normalised, given the batch norm's map (training_coefficients, inference_coefficients),
// pools what the batch norm would have stored: with and without the batch norm's ReLU, the pooled
// output, the statistics, the pool's and the batch norm's backward, and the evaluation output equal the
// unfused pair's bit for bit. A normalised pool without kept argmax, and a batch norm with a residual
// add, refuse.
TEST_F(Pool, NormalisingPoolIsTheBatchNormThenPoolPair) {
  for (const bool relu : {true, false}) {
    SCOPED_TRACE(relu ? "relu" : "no relu");
    BatchNormDesc b;
    b.n = 3, b.c = 4, b.h = 11, b.w = 9, b.relu = relu;
    auto d = pool(3, 4, 11, 9, 3, 2, 1, false, PoolMode::kMax);
    d.keep_argmax = true;
    Pool2dDesc dn = d;
    dn.normalised = true;
    ASSERT_TRUE(backend_->fuses_batch_norm_pool(b, dn));
    auto bn_plain = backend_->make_batch_norm(b), bn_fused = backend_->make_batch_norm(b);
    auto pool_plain = backend_->make_pool(d), pool_fused = backend_->make_pool(dn);
    const Tensor x = random_tensor({3, 4, 11, 9}, rng_, -1.0f, 2.0f);
    const Tensor gamma = random_tensor({4}, rng_, -1.0f, 1.5f), beta = random_tensor({4}, rng_);
    gamma.f32()[0] = 0.5f, beta.f32()[0] = -3.0f;  // channel 0 below zero nearly everywhere
    auto stats = [&] {
      std::vector<Tensor> t{Tensor::host({4}), Tensor::host({4}), Tensor::host({4}), Tensor::host({4})};
      for (std::int64_t c = 0; c < 4; ++c) t[1].f32()[c] = 1.0f, t[0].f32()[c] = 0.0f;
      return t;
    };
    auto sp = stats(), sf = stats();
    const Tensor y = Tensor::host(x.shape()), yp = Tensor::host(d.output_shape()), yf = Tensor::host(d.output_shape());
    bn_plain->forward_training(x, gamma, beta, sp[0], sp[1], y, sp[2], sp[3]);
    pool_plain->forward(y, yp);
    const NormalisationMap map = bn_fused->training_coefficients(x, gamma, beta, sf[0], sf[1], sf[2], sf[3], nullptr);
    ASSERT_NE(map.f64, nullptr);
    pool_fused->forward_normalised(x, map, relu, yf);
    std::int64_t zeros = 0;
    for (std::int64_t i = 0; i < yp.numel(); ++i) {
      ASSERT_EQ(yf.f32()[i], yp.f32()[i]) << "pooled " << i;
      zeros += yp.f32()[i] == 0.0f;
    }
    if (relu) {
      EXPECT_GT(zeros, 0);  // whole windows clamped (channel 0): ties at 0 route to the first position
    }
    for (std::size_t k = 0; k < 4; ++k)
      for (std::int64_t c = 0; c < 4; ++c) ASSERT_EQ(sf[k].f32()[c], sp[k].f32()[c]) << "statistics " << k;
    const Tensor dy = random_tensor(d.output_shape(), rng_);
    const Tensor dzp = Tensor::host(x.shape()), dzf = Tensor::host(x.shape());
    pool_plain->backward(Tensor{}, Tensor{}, dy, dzp, false);
    pool_fused->backward(Tensor{}, Tensor{}, dy, dzf, false);
    for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(dzf.f32()[i], dzp.f32()[i]) << "pool dx " << i;
    const Tensor dxp = Tensor::host(x.shape()), dxf = Tensor::host(x.shape());
    const Tensor dgp = Tensor::host({4}), dbp = Tensor::host({4}), dgf = Tensor::host({4}), dbf = Tensor::host({4});
    bn_plain->backward(x, dzp, gamma, beta, sp[2], sp[3], dxp, dgp, dbp, false);
    bn_fused->backward(x, dzf, gamma, beta, sf[2], sf[3], dxf, dgf, dbf, false);
    for (std::int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(dxf.f32()[i], dxp.f32()[i]) << "dx " << i;
    for (std::int64_t c = 0; c < 4; ++c) {
      ASSERT_EQ(dgf.f32()[c], dgp.f32()[c]);
      ASSERT_EQ(dbf.f32()[c], dbp.f32()[c]);
    }
    bn_plain->forward_inference(x, gamma, beta, sp[0], sp[1], y);
    pool_plain->forward(y, yp);
    pool_fused->forward_normalised(x, bn_fused->inference_coefficients(gamma, beta, sf[0], sf[1]), relu, yf);
    for (std::int64_t i = 0; i < yp.numel(); ++i) ASSERT_EQ(yf.f32()[i], yp.f32()[i]) << "evaluation " << i;
    EXPECT_THROW(pool_plain->forward_normalised(x, map, relu, yf), InvalidArgument);
  }
  Pool2dDesc no_argmax = pool(1, 2, 6, 6, 3, 2, 1, false, PoolMode::kMax);
  no_argmax.normalised = true;
  EXPECT_THROW(backend_->make_pool(no_argmax), NotSupported);
  BatchNormDesc residual;
  residual.n = 1, residual.c = 2, residual.h = 6, residual.w = 6, residual.residual = true;
  no_argmax.keep_argmax = true;
  EXPECT_FALSE(backend_->fuses_batch_norm_pool(residual, no_argmax));
  const Tensor p = Tensor::host({2});
  EXPECT_THROW((void)backend_->make_batch_norm(residual)->inference_coefficients(p, p, p, p), NotSupported);
}

TEST_F(Pool, RejectsBadDescriptors) {
  EXPECT_THROW(backend_->make_pool(pool(1, 1, 4, 4, 2, 2, 2, false, PoolMode::kMax)),
               InvalidArgument);  // pad >= k
  EXPECT_THROW(backend_->make_pool(pool(1, 1, 2, 2, 5, 1, 1, false, PoolMode::kMax)), ShapeError);
  EXPECT_THROW(backend_->make_pool(pool(1, 1, 4, 4, 2, 0, 0, false, PoolMode::kMax)),
               InvalidArgument);
  auto kernel = backend_->make_pool(pool(1, 1, 4, 4, 2, 2, 0, false, PoolMode::kMax));
  EXPECT_THROW(kernel->forward(Tensor::host({1, 1, 4, 4}), Tensor::host({1, 1, 3, 3})), ShapeError);
}

}  // namespace
}  // namespace cnnergy::test
