// CPU convolution: finite-difference checks of dx, dw and db for both algorithms over stride,
// padding (asymmetric), dilation, groups (depthwise too), odd sizes; im2col_gemm against the
// reference on random shapes; batch chunking; accumulate/overwrite semantics; hand-computed values;
// errors.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/conv_onednn_cpu.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

Conv2dDesc conv(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k,
                std::int64_t r, std::int64_t s) {
  Conv2dDesc d;
  d.n = n, d.c = c, d.h = h, d.w = w, d.k = k, d.r = r, d.s = s;
  return d;
}

std::string describe(const Conv2dDesc& d) {
  return "x " + d.input_shape().str() + " w " + d.weight_shape().str() + " stride " +
         std::to_string(d.stride_h) + "x" + std::to_string(d.stride_w) + " pad t" +
         std::to_string(d.pad_top) + " b" + std::to_string(d.pad_bottom) + " l" +
         std::to_string(d.pad_left) + " r" + std::to_string(d.pad_right) + " dil " +
         std::to_string(d.dilation_h) + "x" + std::to_string(d.dilation_w) + " groups " +
         std::to_string(d.groups) + (d.bias ? " bias" : " no-bias");
}

struct ConvCase {
  std::string name;
  Conv2dDesc desc;
};
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name << ": " << describe(c.desc); }

std::vector<ConvCase> gradient_cases() {
  std::vector<ConvCase> cases;
  {
    auto d = conv(2, 3, 7, 6, 4, 3, 3);
    d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
    cases.push_back({"Basic3x3Pad1", d});
  }
  {
    auto d = conv(2, 3, 9, 8, 4, 3, 3);
    d.stride_h = d.stride_w = 2;
    d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
    cases.push_back({"Stride2", d});
  }
  {
    auto d = conv(2, 2, 6, 7, 3, 3, 2);
    d.pad_top = 2, d.pad_bottom = 0, d.pad_left = 1, d.pad_right = 3;
    cases.push_back({"AsymmetricPadNonSquareKernel", d});
  }
  {
    auto d = conv(1, 3, 9, 10, 2, 3, 3);
    d.dilation_h = 2, d.dilation_w = 3;
    d.pad_top = d.pad_bottom = 2, d.pad_left = d.pad_right = 1;
    cases.push_back({"Dilation", d});
  }
  {
    auto d = conv(2, 4, 7, 5, 6, 2, 3);
    d.groups = 2;
    d.stride_h = 2, d.stride_w = 1;
    d.pad_left = 1;
    cases.push_back({"Groups2StrideHOnly", d});
  }
  {
    auto d = conv(2, 5, 8, 7, 5, 3, 3);
    d.groups = 5;
    d.stride_h = d.stride_w = 2;
    d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
    cases.push_back({"DepthwiseOddChannels", d});
  }
  {
    auto d = conv(2, 3, 5, 6, 6, 3, 1);
    d.groups = 3;  // channel multiplier 2
    d.pad_top = 1;
    cases.push_back({"DepthwiseMultiplier", d});
  }
  {
    auto d = conv(2, 5, 6, 5, 7, 1, 1);
    d.stride_h = d.stride_w = 2;
    d.bias = false;
    cases.push_back({"Pointwise1x1Stride2NoBias", d});
  }
  {
    auto d = conv(1, 3, 23, 19, 2, 11, 7);
    d.stride_h = 4, d.stride_w = 3;
    d.pad_top = d.pad_bottom = 2;
    cases.push_back({"LargeKernelStride4", d});
  }
  {
    auto d = conv(3, 1, 4, 9, 3, 4, 2);
    d.stride_w = 3;
    d.dilation_w = 2;
    d.pad_bottom = 1, d.pad_right = 2;
    cases.push_back({"OneChannelMixed", d});
  }
  return cases;
}

class ConvGradient : public CpuBackendTest,
                     public ::testing::WithParamInterface<std::tuple<ConvCase, std::string>> {};

TEST_P(ConvGradient, MatchesFiniteDifferences) {
  const auto& [c, algo] = GetParam();
  const Conv2dDesc& d = c.desc;
  SCOPED_TRACE(describe(d) + " algo " + algo);
  auto kernel = backend_->make_conv(d, ConvAlgoChoice{algo, algo, algo});
  const Tensor x = random_tensor(d.input_shape(), rng_);
  const Tensor w = random_tensor(d.weight_shape(), rng_, -0.5f, 0.5f);
  const Tensor b = d.bias ? random_tensor({d.k}, rng_) : Tensor();
  const Tensor y = Tensor::host(d.output_shape());
  const Tensor dy = random_tensor(d.output_shape(), rng_);
  const Tensor dx = Tensor::host(d.input_shape()), dw = Tensor::host(d.weight_shape());
  const Tensor db = d.bias ? Tensor::host({d.k}) : Tensor();
  kernel->backward_data(dy, w, dx, false);
  kernel->backward_filter(x, dy, dw, db);
  const auto objective = [&] {
    kernel->forward(x, w, b, y);
    return dot(dy, y);
  };
  GradCheckOptions opt;
  opt.seed = seed_;
  EXPECT_TRUE(check_gradient("conv dx", x, objective, dx, opt));
  EXPECT_TRUE(check_gradient("conv dw", w, objective, dw, opt));
  if (d.bias) {
    EXPECT_TRUE(check_gradient("conv db", b, objective, db, opt));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, ConvGradient,
    ::testing::Combine(::testing::ValuesIn(gradient_cases()),
                       ::testing::Values(std::string("reference"), std::string("im2col_gemm"))),
    [](const auto& p) { return std::get<0>(p.param).name + "_" + std::get<1>(p.param); });

class Conv : public CpuBackendTest {
 protected:
  // A random valid descriptor: groups (incl. depthwise), strides, dilations, asymmetric padding.
  Conv2dDesc random_desc() {
    auto pick = [&](int lo, int hi) {
      return static_cast<std::int64_t>(lo + rng_.next_u32() % (hi - lo + 1));
    };
    for (;;) {
      Conv2dDesc d;
      d.n = pick(1, 3);
      const int kind = static_cast<int>(pick(0, 2));
      d.groups = kind == 0 ? 1 : pick(2, 3);
      const std::int64_t cg = kind == 2 ? 1 : pick(1, 3);  // kind 2: depthwise
      d.c = d.groups * cg;
      d.k = d.groups * pick(1, 3);
      d.h = pick(1, 10), d.w = pick(1, 10);
      d.r = pick(1, 4), d.s = pick(1, 4);
      d.stride_h = pick(1, 3), d.stride_w = pick(1, 3);
      d.dilation_h = pick(1, 2), d.dilation_w = pick(1, 2);
      d.pad_top = pick(0, 2), d.pad_bottom = pick(0, 2), d.pad_left = pick(0, 2),
      d.pad_right = pick(0, 2);
      d.bias = pick(0, 1) == 1;
      if (d.h + d.pad_top + d.pad_bottom >= d.dilation_h * (d.r - 1) + 1 &&
          d.w + d.pad_left + d.pad_right >= d.dilation_w * (d.s - 1) + 1)
        return d;
    }
  }

  // Runs forward, backward_data (overwrite and accumulate) and backward_filter with both kernels on
  // the same inputs and expects the same numbers.
  void expect_same(const Conv2dDesc& d, ConvKernel& a, ConvKernel& b) {
    const Tensor x = random_tensor(d.input_shape(), rng_),
                 w = random_tensor(d.weight_shape(), rng_);
    const Tensor bias = d.bias ? random_tensor({d.k}, rng_) : Tensor();
    const Tensor dy = random_tensor(d.output_shape(), rng_);
    const Tensor ya = Tensor::host(d.output_shape()), yb = Tensor::host(d.output_shape());
    a.forward(x, w, bias, ya);
    b.forward(x, w, bias, yb);
    EXPECT_TRUE(all_close(ya, yb, 1e-4, 1e-4)) << "forward";
    const Tensor dx0 = random_tensor(d.input_shape(), rng_);
    for (const bool acc : {false, true}) {
      const Tensor dxa = clone(dx0), dxb = clone(dx0);
      a.backward_data(dy, w, dxa, acc);
      b.backward_data(dy, w, dxb, acc);
      EXPECT_TRUE(all_close(dxa, dxb, 1e-4, 1e-4)) << "backward_data accumulate=" << acc;
    }
    const Tensor dwa = random_tensor(d.weight_shape(), rng_), dwb = Tensor::host(d.weight_shape());
    const Tensor dba = d.bias ? random_tensor({d.k}, rng_) : Tensor(),
                 dbb = d.bias ? Tensor::host({d.k}) : Tensor();
    a.backward_filter(x, dy, dwa, dba);  // a starts from garbage, b from zeros: both must overwrite
    b.backward_filter(x, dy, dwb, dbb);
    EXPECT_TRUE(all_close(dwa, dwb, 1e-4, 1e-4)) << "backward_filter dw";
    if (d.bias) {
      EXPECT_TRUE(all_close(dba, dbb, 1e-4, 1e-4)) << "backward_filter db";
    }
  }
};

TEST_F(Conv, Im2colGemmMatchesReferenceOnRandomShapes) {
  for (int trial = 0; trial < 40; ++trial) {
    const Conv2dDesc d = random_desc();
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + describe(d));
    auto ref = backend_->make_conv(d, {"reference", "reference", "reference"});
    auto gemm = backend_->make_conv(d, {"im2col_gemm", "im2col_gemm", "im2col_gemm"});
    expect_same(d, *ref, *gemm);
  }
}

TEST_F(Conv, Im2colGemmMatchesReferenceOnNetworkSizedShapes) {
  // Big enough for OpenBLAS to take its blocked, multi-threaded paths.
  auto resnet = conv(2, 32, 14, 14, 48, 3, 3);
  resnet.pad_top = resnet.pad_bottom = resnet.pad_left = resnet.pad_right = 1;
  auto grouped = resnet;
  grouped.groups = 4;
  grouped.stride_h = grouped.stride_w = 2;
  auto stem = conv(2, 3, 32, 30, 16, 7, 7);
  stem.stride_h = stem.stride_w = 2;
  stem.pad_top = stem.pad_left = 3, stem.pad_bottom = stem.pad_right = 2;
  auto depthwise = conv(2, 64, 12, 12, 64, 3, 3);
  depthwise.groups = 64;
  depthwise.pad_top = depthwise.pad_bottom = depthwise.pad_left = depthwise.pad_right = 1;
  for (const Conv2dDesc& d : {resnet, grouped, stem, depthwise}) {
    SCOPED_TRACE(describe(d));
    auto ref = backend_->make_conv(d, {"reference", "reference", "reference"});
    auto gemm = backend_->make_conv(d, {"im2col_gemm", "im2col_gemm", "im2col_gemm"});
    expect_same(d, *ref, *gemm);
  }
}

TEST_F(Conv, SingleSampleAndPointwiseFastPathsMatchReference) {
  // A chunk of one sample is written by sgemm straight into y (bias added in place); a pointwise
  // convolution (1x1, stride 1, no padding) of one sample skips im2col. Both against the loops.
  auto pointwise = conv(1, 64, 14, 14, 256, 1, 1);  // ResNet-50's expansion, big enough for threads
  pointwise.bias = true;
  auto pointwise_grouped = conv(1, 6, 5, 7, 4, 1, 1);
  pointwise_grouped.groups = 2;
  auto strided_1x1 = conv(1, 8, 9, 9, 16, 1, 1);  // 1x1 but stride 2: im2col still needed
  strided_1x1.stride_h = strided_1x1.stride_w = 2;
  strided_1x1.bias = true;
  auto padded_1x1 = conv(1, 4, 6, 6, 5, 1, 1);  // 1x1 with padding: not pointwise either
  padded_1x1.pad_top = padded_1x1.pad_left = 1;
  // 1x1 whose output is as wide as its input though it is not pointwise: stride 2 over 2 columns
  // padded by 2 on the right reads columns 0 and 2 (padding). A random trial found it (seed
  // 10800855030707376724) when only the sizes and the top/left padding were checked.
  auto strided_same_width = conv(1, 6, 6, 2, 9, 1, 1);
  strided_same_width.stride_w = 2;
  strided_same_width.pad_right = 2;
  strided_same_width.dilation_h = strided_same_width.dilation_w = 2;
  strided_same_width.groups = 3;
  strided_same_width.bias = true;
  auto three = conv(1, 16, 11, 13, 24, 3, 3);
  three.pad_top = three.pad_bottom = three.pad_left = three.pad_right = 1;
  three.bias = true;
  for (const Conv2dDesc& d : {pointwise, pointwise_grouped, strided_1x1, padded_1x1, strided_same_width, three}) {
    SCOPED_TRACE(describe(d));
    auto ref = backend_->make_conv(d, {"reference", "reference", "reference"});
    auto gemm = backend_->make_conv(d, {"im2col_gemm", "im2col_gemm", "im2col_gemm"});
    expect_same(d, *ref, *gemm);
  }
  // A batch the workspace cap cuts into one-sample chunks takes the same paths, sample by sample.
  auto batch = pointwise;
  batch.n = 3, batch.c = 8, batch.k = 12, batch.h = 5, batch.w = 6;
  BackendOptions opts;
  opts.workspace_limit_bytes = 1;
  auto one_at_a_time = create_backend(opts)->make_conv(batch, {"im2col_gemm", "im2col_gemm", "im2col_gemm"});
  auto ref = backend_->make_conv(batch, {"reference", "reference", "reference"});
  expect_same(batch, *one_at_a_time, *ref);
}

TEST_F(Conv, BatchChunksGiveTheSameResult) {
  auto d = conv(5, 3, 8, 7, 4, 3, 3);
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
  d.groups = 1;
  const std::size_t per_sample =
      static_cast<std::size_t>((d.c * d.r * d.s + d.k) * d.out_h() * d.out_w()) * 4;
  BackendOptions opts;
  opts.workspace_limit_bytes = 2 * per_sample + 8;  // chunks of 2, 2 and 1 samples
  auto small = create_backend(opts);
  auto chunked = small->make_conv(d, {"im2col_gemm", "im2col_gemm", "im2col_gemm"});
  EXPECT_EQ(chunked->info().workspace_bytes, 2 * per_sample);
  ASSERT_EQ(chunked->info().notes.size(), 1u);
  EXPECT_NE(chunked->info().notes[0].find("chunks of 2 of 5"), std::string::npos)
      << chunked->info().notes[0];
  auto whole = backend_->make_conv(d, {"im2col_gemm", "im2col_gemm", "im2col_gemm"});
  EXPECT_EQ(whole->info().workspace_bytes, 5 * per_sample);
  EXPECT_TRUE(whole->info().notes.empty());
  expect_same(d, *chunked, *whole);
  opts.workspace_limit_bytes = 1;  // less than one sample: one at a time
  auto one = create_backend(opts)->make_conv(d, {"im2col_gemm", "im2col_gemm", "im2col_gemm"});
  EXPECT_EQ(one->info().workspace_bytes, per_sample);
  auto ref = backend_->make_conv(d, {"reference", "reference", "reference"});
  expect_same(d, *one, *ref);
}

TEST_F(Conv, WorkspaceStaysBoundedForLargeInputs) {
  auto vgg = conv(64, 64, 224, 224, 64, 3, 3);  // VGG conv1_2 at batch 64
  vgg.pad_top = vgg.pad_bottom = vgg.pad_left = vgg.pad_right = 1;
  const auto info = backend_->make_conv(vgg, {"im2col_gemm", "im2col_gemm", "im2col_gemm"})->info();
  EXPECT_GT(info.workspace_bytes, 0u);
  EXPECT_LE(info.workspace_bytes, cpu::kMaxConvWorkspaceBytes);
  EXPECT_FALSE(info.notes.empty());
  EXPECT_EQ(
      backend_->make_conv(vgg, {"reference", "reference", "reference"})->info().workspace_bytes,
      0u);
}

TEST_F(Conv, InfoNamesTheAlgorithms) {
  const auto d = conv(1, 2, 5, 5, 2, 3, 3);
  const auto info = backend_->make_conv(d, {"", "reference", "im2col_gemm"})->info();
  const char* default_forward = cpu::onednn_available() ? "onednn" : "im2col_gemm";
  EXPECT_EQ(info.forward, default_forward);  // the default
  EXPECT_EQ(info.backward_data, "reference");
  EXPECT_EQ(info.backward_filter, "im2col_gemm");
  EXPECT_EQ(info.math_type, "fp32");
  BackendOptions opts;
  opts.conv_algo_policy = "reference";  // a CPU name as the run's policy sets the default
  EXPECT_EQ(create_backend(opts)->make_conv(d, {})->info().forward, "reference");
  opts.conv_algo_policy = "heuristic";  // a CUDA policy means nothing on the CPU
  EXPECT_EQ(create_backend(opts)->make_conv(d, {})->info().forward, default_forward);
}

TEST_F(Conv, HandComputedCrossCorrelation) {
  // x = 1..9 (3x3), w = [[1, 0], [0, -1]]: y(i,j) = x(i,j) - x(i+1,j+1) = -4 (no kernel flip).
  const auto d = [] {
    auto e = conv(1, 1, 3, 3, 1, 2, 2);
    e.bias = false;
    return e;
  }();
  const Tensor x = Tensor::host(d.input_shape()), w = Tensor::host(d.weight_shape());
  for (int i = 0; i < 9; ++i) x.f32()[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  w.f32()[0] = 1.0f, w.f32()[3] = -1.0f;
  for (const char* algo : {"reference", "im2col_gemm"}) {
    const Tensor y = Tensor::host(d.output_shape());
    backend_->make_conv(d, {algo, algo, algo})->forward(x, w, Tensor(), y);
    for (const float v : y.f32()) EXPECT_FLOAT_EQ(v, -4.0f) << algo;
  }
  // Depthwise (groups = C): output channel c sees input channel c only.
  auto dw = conv(1, 2, 1, 2, 2, 1, 1);
  dw.groups = 2;
  const Tensor x2 = Tensor::host(dw.input_shape()), w2 = Tensor::host(dw.weight_shape()),
               b2 = Tensor::host({2});
  x2.f32()[0] = 1, x2.f32()[1] = 2, x2.f32()[2] = 3, x2.f32()[3] = 4;
  w2.f32()[0] = 10, w2.f32()[1] = 100;
  b2.f32()[0] = 0.5f, b2.f32()[1] = -0.5f;
  for (const char* algo : {"reference", "im2col_gemm"}) {
    const Tensor y = Tensor::host(dw.output_shape());
    backend_->make_conv(dw, {algo, algo, algo})->forward(x2, w2, b2, y);
    EXPECT_FLOAT_EQ(y.f32()[0], 10.5f) << algo;
    EXPECT_FLOAT_EQ(y.f32()[1], 20.5f) << algo;
    EXPECT_FLOAT_EQ(y.f32()[2], 299.5f) << algo;
    EXPECT_FLOAT_EQ(y.f32()[3], 399.5f) << algo;
  }
}

TEST_F(Conv, RejectsBadArguments) {
  const auto d = conv(1, 4, 5, 5, 4, 3, 3);
  try {
    backend_->make_conv(d, {"winograd", "", ""});
    FAIL() << "an unknown algorithm must be rejected";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("reference, im2col_gemm"), std::string::npos) << e.what();
  }
  auto bad_groups = d;
  bad_groups.groups = 3;
  EXPECT_THROW(backend_->make_conv(bad_groups, {}), InvalidArgument);
  EXPECT_THROW(backend_->make_conv(conv(1, 1, 2, 2, 1, 3, 3), {}),
               ShapeError);  // kernel larger than input
  auto zero_stride = d;
  zero_stride.stride_w = 0;
  EXPECT_THROW(backend_->make_conv(zero_stride, {}), InvalidArgument);

  auto kernel = backend_->make_conv(d, {});
  const Tensor x = Tensor::host(d.input_shape()), w = Tensor::host(d.weight_shape()),
               b = Tensor::host({d.k});
  EXPECT_THROW(kernel->forward(x, w, b, Tensor::host({1, 4, 4, 4})), ShapeError);
  EXPECT_THROW(kernel->forward(x, w, Tensor(), Tensor::host(d.output_shape())),
               InvalidArgument);  // bias missing
  const Tensor x16 = Tensor::host(d.input_shape(), DType::kF16);
  EXPECT_THROW(kernel->forward(x16, w, b, Tensor::host(d.output_shape())), NotSupported);
  const Tensor x_nhwc = Tensor::host(d.input_shape(), DType::kF32, Layout::kNHWC);
  EXPECT_THROW(kernel->forward(x_nhwc, w, b, Tensor::host(d.output_shape())), NotSupported);
}

}  // namespace
}  // namespace cnnergy::test
