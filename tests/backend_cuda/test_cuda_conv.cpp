// cuDNN convolution against the CPU reference: forward, backward data (overwrite and accumulate),
// backward filter with bias, in every precision and layout, on awkward shapes (stride, groups,
// depthwise, asymmetric padding, non-square input and kernel, odd channels, dilation); every named
// forward algorithm; the heuristic; the find cache; the graph-API policies (graph_find,
// graph_heuristic) and their plan cache; bad names; fallback notes against errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

struct ConvCase {
  const char* name;
  Conv2dDesc desc;
};
// Test names and failure messages show the case's name, not its bytes.
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

Conv2dDesc make_desc(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k,
                     std::int64_t r, std::int64_t s, std::int64_t stride_h, std::int64_t stride_w,
                     std::int64_t pt, std::int64_t pb, std::int64_t pl, std::int64_t pr,
                     std::int64_t dil, std::int64_t groups, bool bias) {
  Conv2dDesc d;
  d.n = n, d.c = c, d.h = h, d.w = w, d.k = k, d.r = r, d.s = s;
  d.stride_h = stride_h, d.stride_w = stride_w;
  d.pad_top = pt, d.pad_bottom = pb, d.pad_left = pl, d.pad_right = pr;
  d.dilation_h = d.dilation_w = dil;
  d.groups = groups;
  d.bias = bias;
  return d;
}

std::vector<ConvCase> conv_cases() {
  return {
      {"3x3_pad1_odd_channels", make_desc(2, 3, 9, 11, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true)},
      {"3x5_stride2_asymmetric_pad",
       make_desc(2, 13, 10, 9, 5, 3, 5, 2, 2, 1, 2, 0, 1, 1, 1, true)},
      {"groups4_stride1x2", make_desc(3, 8, 7, 8, 12, 3, 3, 1, 2, 1, 1, 1, 1, 1, 4, true)},
      {"depthwise_stride2", make_desc(2, 6, 9, 9, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 6, true)},
      {"dilation2_nonsquare", make_desc(2, 5, 10, 7, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 1, true)},
      {"1x1_stride2_no_bias", make_desc(4, 16, 6, 6, 8, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, false)},
      // 16 outputs on an 8x8 plane: the channel-packed bias add and gradient in NHWC, the
      // plane-packed bias add in NCHW.
      {"3x3_16_outputs_bias", make_desc(2, 8, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true)},
  };
}

class CudaConv : public CudaTest {
 protected:
  struct Result {
    Tensor y, dx, dx_accumulated, dw, db;
  };

  // The whole forward/backward of one convolution on `b`, from host fp32 NCHW inputs.
  Result run(Backend& b, const Conv2dDesc& d, const ConvAlgoChoice& algo, DType dtype,
             Layout layout, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy,
             const Tensor& dx0) {
    auto conv = b.make_conv(d, algo);
    const bool host = b.device().is_cpu();
    auto put = [&](const Tensor& t) { return host ? clone(t) : upload(b, t, dtype, layout); };
    auto get = [&](const Tensor& t) { return host ? clone(t) : download(b, t); };
    const Tensor xd = put(x), wd = put(w), dyd = put(dy);
    const Tensor bd = d.bias ? put(bias) : Tensor{};
    Tensor y = b.alloc(d.output_shape(), dtype, layout),
           dx = b.alloc(d.input_shape(), dtype, layout);
    Tensor dw = b.alloc(d.weight_shape(), dtype, layout);
    Tensor db = d.bias ? b.alloc(Shape{d.k}, dtype) : Tensor{};
    conv->forward(xd, wd, bd, y);
    conv->backward_data(dyd, wd, dx, false);
    Tensor dx_acc = put(dx0);
    conv->backward_data(dyd, wd, dx_acc, true);
    conv->backward_filter(xd, dyd, dw, db);
    return {get(y), get(dx), get(dx_acc), get(dw), d.bias ? get(db) : Tensor{}};
  }

  // Compares the GPU under `p`/`layout`/`algo` with the CPU on one case; returns false if skipped.
  void compare(const Conv2dDesc& d, const Precision& p, Layout layout, const std::string& policy,
               const ConvAlgoChoice& algo, double tol, const std::string& what) {
    auto g = gpu(p, layout, policy);
    if (!g) return;
    const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
    const Tensor bias = random(Shape{d.k}, p.dtype), dy = random(d.output_shape(), p.dtype);
    const Tensor dx0 = random(d.input_shape(), p.dtype);
    const Result ref = run(*cpu_, d, {}, DType::kF32, Layout::kNCHW, x, w, bias, dy, dx0);
    const Result got = run(*g, d, algo, p.dtype, layout, x, w, bias, dy, dx0);
    EXPECT_TRUE(close(got.y, ref.y, tol, what + " forward"));
    EXPECT_TRUE(close(got.dx, ref.dx, tol, what + " backward_data"));
    EXPECT_TRUE(
        close(got.dx_accumulated, ref.dx_accumulated, tol, what + " backward_data accumulate"));
    EXPECT_TRUE(close(got.dw, ref.dw, tol, what + " backward_filter dw"));
    if (d.bias) {
      EXPECT_TRUE(close(got.db, ref.db, tol, what + " backward_filter db"));
    }
  }
};

class CudaConvShapes : public CudaConv, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(CudaConvShapes, MatchesCpuInEveryPrecisionAndLayout) {
  const ConvCase& c = GetParam();
  for (const Precision& p : kAllPrecisions)
    for (const Layout l : kAllLayouts)
      compare(c.desc, p, l, "find", {}, p.tol, std::string(c.name) + " " + label(p, l));
}

TEST_P(CudaConvShapes, HeuristicPolicyMatchesCpu) {
  const ConvCase& c = GetParam();
  compare(c.desc, kFp32, Layout::kNCHW, "heuristic", {}, kFp32.tol,
          std::string(c.name) + " heuristic");
  compare(c.desc, kFp16, Layout::kNHWC, "heuristic", {}, kFp16.tol,
          std::string(c.name) + " heuristic");
}

// The graph API's plans: graph_find in every precision and layout, graph_heuristic in two.
TEST_P(CudaConvShapes, GraphPoliciesMatchCpu) {
  const ConvCase& c = GetParam();
  for (const Precision& p : kAllPrecisions)
    for (const Layout l : kAllLayouts)
      compare(c.desc, p, l, "graph_find", {}, p.tol,
              std::string(c.name) + " graph_find " + label(p, l));
  compare(c.desc, kFp32, Layout::kNCHW, "graph_heuristic", {}, kFp32.tol,
          std::string(c.name) + " graph_heuristic");
  compare(c.desc, kBf16, Layout::kNHWC, "graph_heuristic", {}, kBf16.tol,
          std::string(c.name) + " graph_heuristic");
  // auto: whichever of the two APIs it picks per direction
  compare(c.desc, kFp32, Layout::kNCHW, "auto", {}, kFp32.tol, std::string(c.name) + " auto");
  compare(c.desc, kBf16, Layout::kNHWC, "auto", {}, kBf16.tol, std::string(c.name) + " auto");
}

// auto decides once per problem: an identical layer runs what the first one chose, in every
// direction, and says which API it is (a graph engine tag or a legacy algorithm name).
TEST_F(CudaConv, AutoDecidesOncePerProblem) {
  auto g = gpu(kBf16, Layout::kNHWC, "auto");
  if (!g) GTEST_SKIP() << "no bf16 on this GPU";
  const Conv2dDesc d = make_desc(8, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false);
  const ConvAlgoInfo first = g->make_conv(d, {})->info();
  const ConvAlgoInfo second = g->make_conv(d, {})->info();
  EXPECT_EQ(second.forward, first.forward);
  EXPECT_EQ(second.backward_data, first.backward_data);
  EXPECT_EQ(second.backward_filter, first.backward_filter);
  for (const std::string& a : {first.forward, first.backward_data, first.backward_filter})
    EXPECT_FALSE(a.empty() || a.rfind("algo#", 0) == 0) << a;
}

// Every graph-API engine configuration the backend lists for a problem (convbench's engine rows)
// runs when named in its direction's field, matches the CPU, and is reported back under the same
// name; a tag that does not run the problem is NotSupported, not replaced by another engine.
TEST_F(CudaConv, EveryListedGraphEngineRunsAndMatchesCpu) {
  const Conv2dDesc d = make_desc(2, 16, 10, 9, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true);
  for (const auto& [p, layout] : {std::pair{kFp32, Layout::kNCHW}, std::pair{kBf16, Layout::kNHWC}}) {
    auto g = gpu(p, layout, "find", /*fallback=*/false);
    if (!g) continue;
    const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
    const Tensor bias = random(Shape{d.k}, p.dtype), dy = random(d.output_shape(), p.dtype);
    const Tensor dx0 = random(d.input_shape(), p.dtype);
    const Result ref = run(*cpu_, d, {}, DType::kF32, Layout::kNCHW, x, w, bias, dy, dx0);
    for (const std::string dir : {"forward", "backward_data", "backward_filter"}) {
      const std::vector<std::string> names = g->conv_engine_names(d, dir);
      EXPECT_FALSE(names.empty()) << dir << " " << label(p, layout);
      for (const std::string& name : names) {
        ConvAlgoChoice choice;
        (dir == std::string("forward") ? choice.forward
         : dir == std::string("backward_data") ? choice.backward_data
                                                : choice.backward_filter) = name;
        const std::string what = name + " " + dir + " " + label(p, layout);
        const Result got = run(*g, d, choice, p.dtype, layout, x, w, bias, dy, dx0);
        if (dir == std::string("forward")) {
          EXPECT_TRUE(close(got.y, ref.y, p.tol, what));
          EXPECT_EQ(g->make_conv(d, choice)->info().forward, name);
        } else if (dir == std::string("backward_data")) {
          EXPECT_TRUE(close(got.dx, ref.dx, p.tol, what));
          EXPECT_TRUE(close(got.dx_accumulated, ref.dx_accumulated, p.tol, what + " accumulate"));
        } else {
          EXPECT_TRUE(close(got.dw, ref.dw, p.tol, what));
        }
      }
    }
    ConvAlgoChoice bogus;
    bogus.forward = "graph:eng99999";
    const Tensor xd = upload(*g, x, p.dtype, layout), wd = upload(*g, w, p.dtype, layout);
    const Tensor bd = upload(*g, bias, p.dtype, layout);
    Tensor y = g->alloc(d.output_shape(), p.dtype, layout);
    EXPECT_THROW(g->make_conv(d, bogus)->forward(xd, wd, bd, y), NotSupported);
    EXPECT_THROW(g->conv_engine_names(d, "sideways"), InvalidArgument);
  }
  EXPECT_TRUE(cpu_->conv_engine_names(d, "forward").empty());  // no engines below the CPU's names
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaConvShapes, ::testing::ValuesIn(conv_cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return std::string(i.param.name);
                         });

// Every named forward algorithm, without fallback: those cuDNN rejects for the shape are reported
// and skipped; the rest must match the CPU (FFT and Winograd transforms lose a little accuracy).
TEST_F(CudaConv, EveryNamedForwardAlgorithm) {
  const Conv2dDesc d = make_desc(2, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true);
  const char* names[] = {
      "implicit_gemm", "implicit_precomp_gemm", "gemm", "direct", "fft", "fft_tiling",
      "winograd",      "winograd_nonfused"};
  int ran = 0;
  for (const Layout l : kAllLayouts)
    for (const char* name : names) {
      auto g = gpu(kFp32, l, "heuristic", /*fallback=*/false);
      ASSERT_TRUE(g);
      const Tensor x = random(d.input_shape(), DType::kF32),
                   w = random(d.weight_shape(), DType::kF32);
      const Tensor bias = random(Shape{d.k}, DType::kF32);
      auto cpu_conv = cpu_->make_conv(d, {});
      Tensor y_ref = Tensor::host(d.output_shape());
      cpu_conv->forward(x, w, bias, y_ref);
      ConvAlgoChoice algo;
      algo.forward = name;
      try {
        auto conv = g->make_conv(d, algo);
        const Tensor xd = upload(*g, x, DType::kF32, l), wd = upload(*g, w, DType::kF32, l);
        const Tensor bd = upload(*g, bias, DType::kF32, l);
        Tensor y = g->alloc(d.output_shape(), DType::kF32, l);
        conv->forward(xd, wd, bd, y);
        EXPECT_EQ(conv->info().forward, name);
        EXPECT_TRUE(close(download(*g, y), y_ref, 1e-3,
                          std::string("forward ") + name + " " + label(kFp32, l)));
        ++ran;
      } catch (const NotSupported& e) {
        std::printf("[  NOTE    ] cuDNN rejects forward %s for %s: %s\n", name,
                    label(kFp32, l).c_str(), e.what());
      }
    }
  EXPECT_GE(ran, 4) << "fewer than 4 of the 8 forward algorithms ran a plain 3x3 convolution";
}

// An inference convolution's fused ReLU (Conv2dDesc::relu, with a bias: what the executor asks for
// after folding a batch norm) gives exactly max(0, .) of the unfused convolution's output, for
// cuDNN and an own implementation, in every precision and layout; and a fused ReLU without a bias
// is refused.
TEST_F(CudaConv, FusedReluIsExactlyTheUnfusedPair) {
  Conv2dDesc d = make_desc(2, 8, 10, 10, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true);
  Conv2dDesc fused = d;
  fused.relu = true;
  for (const Precision& p : kAllPrecisions)
    for (const Layout l : kAllLayouts)
      for (const char* policy : {"find", "own:im2col_gemm"}) {
        if (std::string(policy) == "own:im2col_gemm" && l == Layout::kNHWC) continue;  // NCHW only
        auto g = gpu(p, l, policy);
        if (!g) continue;
        ASSERT_TRUE(g->fuses_conv_relu(fused));
        const Tensor x = random(d.input_shape(), DType::kF32), w = random(d.weight_shape(), DType::kF32);
        const Tensor bias = random(Shape{d.k}, DType::kF32);
        const Tensor xd = upload(*g, x, p.dtype, l), wd = upload(*g, w, p.dtype, l), bd = upload(*g, bias, p.dtype, l);
        Tensor y_plain = g->alloc(d.output_shape(), p.dtype, l), y_fused = g->alloc(d.output_shape(), p.dtype, l);
        g->make_conv(d, {})->forward(xd, wd, bd, y_plain);
        g->make_conv(fused, {})->forward(xd, wd, bd, y_fused);
        const Tensor plain = download(*g, y_plain), got = download(*g, y_fused);
        const std::string what = std::string(policy) + " " + label(p, l);
        int negatives = 0;
        for (std::size_t i = 0; i < plain.f32().size(); ++i) {
          negatives += plain.f32()[i] < 0;
          ASSERT_EQ(got.f32()[i], std::max(plain.f32()[i], 0.0f)) << what << " at " << i;
        }
        EXPECT_GT(negatives, 0) << what << ": the inputs never exercised the ReLU";
        Tensor y_ref = Tensor::host(d.output_shape());
        cpu_->make_conv(fused, {})->forward(x, w, bias, y_ref);
        EXPECT_TRUE(close(got, y_ref, p.tol, "fused relu " + what));
      }
  Conv2dDesc no_bias = fused;
  no_bias.bias = false;
  auto g = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(g);
  EXPECT_FALSE(g->fuses_conv_relu(no_bias));
  EXPECT_THROW(g->make_conv(no_bias, {}), NotSupported);
}

TEST_F(CudaConv, NamedBackwardAlgorithmsRun) {
  const Conv2dDesc d = make_desc(2, 4, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true);
  const Tensor x = random(d.input_shape(), DType::kF32), w = random(d.weight_shape(), DType::kF32);
  const Tensor bias = random(Shape{d.k}, DType::kF32), dy = random(d.output_shape(), DType::kF32);
  const Tensor dx0 = random(d.input_shape(), DType::kF32);
  auto g = gpu(kFp32, Layout::kNCHW, "find");
  ASSERT_TRUE(g);
  const Result ref = run(*cpu_, d, {}, DType::kF32, Layout::kNCHW, x, w, bias, dy, dx0);
  for (const char* bd : {"algo_0", "algo_1"})
    for (const char* bf : {"algo_0", "algo_1", "algo_3"}) {
      ConvAlgoChoice algo;
      algo.backward_data = bd;
      algo.backward_filter = bf;
      const Result got = run(*g, d, algo, DType::kF32, Layout::kNCHW, x, w, bias, dy, dx0);
      const std::string what = std::string("bwd data ") + bd + ", bwd filter " + bf;
      EXPECT_TRUE(close(got.dx, ref.dx, 1e-3, what));
      EXPECT_TRUE(close(got.dw, ref.dw, 1e-3, what));
    }
}

TEST_F(CudaConv, FindRunsOncePerProblemAndIsCached) {
  auto g = gpu(kFp32, Layout::kNCHW, "find");
  ASSERT_TRUE(g);
  const Conv2dDesc d = make_desc(2, 6, 10, 10, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true);
  const auto before = cuda::conv_algo_cache_stats(*g);
  const Tensor x = upload(*g, random(d.input_shape(), DType::kF32), DType::kF32, Layout::kNCHW);
  const Tensor w = upload(*g, random(d.weight_shape(), DType::kF32), DType::kF32, Layout::kNCHW);
  const Tensor b = upload(*g, random(Shape{d.k}, DType::kF32), DType::kF32, Layout::kNCHW);
  Tensor y = g->alloc(d.output_shape(), DType::kF32);
  auto first = g->make_conv(d, {});
  first->forward(x, w, b, y);
  const auto after_first = cuda::conv_algo_cache_stats(*g);
  EXPECT_EQ(after_first.find_runs, before.find_runs + 1);
  auto second = g->make_conv(d, {});  // an identical layer elsewhere in the network
  second->forward(x, w, b, y);
  const auto after_second = cuda::conv_algo_cache_stats(*g);
  EXPECT_EQ(after_second.find_runs, after_first.find_runs)
      << "find ran again for an identical problem";
  EXPECT_EQ(after_second.cache_hits, after_first.cache_hits + 1);
  EXPECT_EQ(second->info().forward, first->info().forward);
  // A different shape is a different problem.
  const auto before_other = cuda::conv_algo_cache_stats(*g);
  Conv2dDesc other = d;
  other.k = 5;
  Tensor y2 = g->alloc(other.output_shape(), DType::kF32);
  const Tensor w2 =
      upload(*g, random(other.weight_shape(), DType::kF32), DType::kF32, Layout::kNCHW);
  const Tensor b2 = upload(*g, random(Shape{other.k}, DType::kF32), DType::kF32, Layout::kNCHW);
  g->make_conv(other, {})->forward(x, w2, b2, y2);
  EXPECT_EQ(cuda::conv_algo_cache_stats(*g).find_runs, before_other.find_runs + 1);
  // info() resolves every direction and reports what runs.
  const ConvAlgoInfo info = first->info();
  EXPECT_FALSE(info.forward.empty());
  EXPECT_FALSE(info.backward_data.empty());
  EXPECT_FALSE(info.backward_filter.empty());
  EXPECT_EQ(info.math_type, "fp32");
}

// graph_find searches once per problem: an identical layer reuses the plan (the same engine), every
// direction reports a graph engine, and fp32 stays off tensor cores on a reduction long enough
// (64 x 3 x 3 = 576 products) that TF32's 10-bit mantissa would break the fp32 tolerance.
TEST_F(CudaConv, GraphFindSharesPlansAndKeepsFp32Exact) {
  for (const Layout layout : kAllLayouts) {
    auto g = gpu(kFp32, layout, "graph_find");
    ASSERT_TRUE(g);
    const Conv2dDesc d = make_desc(4, 64, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false);
    const Tensor x = random(d.input_shape(), DType::kF32), w = random(d.weight_shape(), DType::kF32);
    Tensor y_ref = Tensor::host(d.output_shape());
    cpu_->make_conv(d, {})->forward(x, w, Tensor{}, y_ref);
    const Tensor xd = upload(*g, x, DType::kF32, layout), wd = upload(*g, w, DType::kF32, layout);
    Tensor y = g->alloc(d.output_shape(), DType::kF32, layout);
    const auto before = cuda::conv_algo_cache_stats(*g);
    auto first = g->make_conv(d, {});
    first->forward(xd, wd, Tensor{}, y);
    EXPECT_TRUE(close(download(*g, y), y_ref, kFp32.tol, "graph_find fp32 forward"));
    const auto after_first = cuda::conv_algo_cache_stats(*g);
    EXPECT_EQ(after_first.find_runs, before.find_runs + 1);
    auto second = g->make_conv(d, {});
    second->forward(xd, wd, Tensor{}, y);
    const auto after_second = cuda::conv_algo_cache_stats(*g);
    EXPECT_EQ(after_second.find_runs, after_first.find_runs) << "searched again for one problem";
    EXPECT_EQ(after_second.cache_hits, after_first.cache_hits + 1);
    const ConvAlgoInfo info = first->info();
    EXPECT_EQ(second->info().forward, info.forward);
    for (const std::string& a : {info.forward, info.backward_data, info.backward_filter})
      EXPECT_EQ(a.rfind("graph:eng", 0), 0u) << a << " (notes: " << info.notes.size() << ")";
    EXPECT_TRUE(info.notes.empty()) << info.notes.front();
  }
}

TEST_F(CudaConv, MathTypeNamesThePrecision) {
  const Conv2dDesc d = make_desc(1, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false);
  const std::pair<Precision, const char*> expected[] = {
      {kFp32, "fp32"}, {kTf32, "tf32"}, {kFp16, "tensor_op"}, {kBf16, "tensor_op"}};
  for (const auto& [p, math] : expected) {
    auto g = gpu(p, Layout::kNHWC, "heuristic");
    if (!g) continue;
    EXPECT_EQ(g->make_conv(d, {})->info().math_type, math) << p.name;
  }
}

TEST_F(CudaConv, UnknownAlgorithmNamesListTheValidOnes) {
  auto g = gpu(kFp32, Layout::kNCHW);
  ASSERT_TRUE(g);
  const Conv2dDesc d = make_desc(1, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true);
  ConvAlgoChoice bad_forward;
  bad_forward.forward = "winograd_fused";
  try {
    g->make_conv(d, bad_forward);
    FAIL() << "forward 'winograd_fused' accepted";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("winograd_fused"), std::string::npos) << msg;
    EXPECT_NE(msg.find("implicit_gemm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fft_tiling"), std::string::npos) << msg;
  }
  ConvAlgoChoice wrong_direction;
  wrong_direction.backward_filter = "implicit_gemm";  // a forward algorithm
  try {
    g->make_conv(d, wrong_direction);
    FAIL() << "backward filter 'implicit_gemm' accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("algo_3"), std::string::npos) << e.what();
  }
}

// FFT needs unit stride and dilation: with fallback the layer runs the heuristic's choice and says
// so in its notes; without, it is an error naming the algorithm.
TEST_F(CudaConv, UnsupportedNamedAlgorithmFallsBackWithANoteOrThrows) {
  const Conv2dDesc d = make_desc(2, 4, 11, 11, 6, 3, 3, 2, 2, 2, 2, 2, 2, 2, 1, true);
  const Tensor x = random(d.input_shape(), DType::kF32), w = random(d.weight_shape(), DType::kF32);
  const Tensor bias = random(Shape{d.k}, DType::kF32);
  Tensor y_ref = Tensor::host(d.output_shape());
  cpu_->make_conv(d, {})->forward(x, w, bias, y_ref);
  ConvAlgoChoice algo;
  algo.forward = "fft";
  {
    auto g = gpu(kFp32, Layout::kNCHW, "find", /*fallback=*/true);
    ASSERT_TRUE(g);
    auto conv = g->make_conv(d, algo);
    Tensor y = g->alloc(d.output_shape(), DType::kF32);
    conv->forward(upload(*g, x, DType::kF32, Layout::kNCHW),
                  upload(*g, w, DType::kF32, Layout::kNCHW),
                  upload(*g, bias, DType::kF32, Layout::kNCHW), y);
    EXPECT_TRUE(close(download(*g, y), y_ref, kFp32.tol, "fallback forward"));
    const ConvAlgoInfo info = conv->info();
    EXPECT_NE(info.forward, "fft");
    bool noted = false;
    for (const std::string& n : info.notes)
      noted = noted ||
              (n.find("fft") != std::string::npos && n.find("fell back") != std::string::npos &&
               n.find(d.input_shape().str()) != std::string::npos);
    EXPECT_TRUE(noted) << "no fallback note naming fft and the shape; notes: " << info.notes.size();
  }
  {
    auto g = gpu(kFp32, Layout::kNCHW, "find", /*fallback=*/false);
    ASSERT_TRUE(g);
    auto conv = g->make_conv(d, algo);
    Tensor y = g->alloc(d.output_shape(), DType::kF32);
    try {
      conv->forward(upload(*g, x, DType::kF32, Layout::kNCHW),
                    upload(*g, w, DType::kF32, Layout::kNCHW),
                    upload(*g, bias, DType::kF32, Layout::kNCHW), y);
      g->synchronize();
      FAIL() << "forward fft ran a stride-2, dilation-2 convolution without fallback";
    } catch (const NotSupported& e) {
      EXPECT_NE(std::string(e.what()).find("fft"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
    }
  }
}

// A run-wide algorithm name applies to the directions that have it; the others use the heuristic
// and say so.
TEST_F(CudaConv, RunWidePolicyNameAppliesWhereItExists) {
  auto g = gpu(kFp32, Layout::kNCHW, "implicit_gemm");
  ASSERT_TRUE(g);
  const Conv2dDesc d = make_desc(2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true);
  const ConvAlgoInfo info = g->make_conv(d, {})->info();
  EXPECT_EQ(info.forward, "implicit_gemm");
  EXPECT_EQ(info.notes.size(), 2u) << "expected notes for backward data and backward filter";
}

TEST_F(CudaConv, RejectsImpossibleDescriptorsAndWrongTensors) {
  auto g = gpu(kFp32, Layout::kNHWC);
  ASSERT_TRUE(g);
  EXPECT_THROW(g->make_conv(make_desc(1, 6, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, true), {}),
               InvalidArgument);
  EXPECT_THROW(g->make_conv(make_desc(1, 4, 2, 2, 4, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, true), {}),
               ShapeError);
  const Conv2dDesc d = make_desc(1, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false);
  auto conv = g->make_conv(d, {});
  Tensor x_nchw = g->alloc(d.input_shape(), DType::kF32, Layout::kNCHW);
  Tensor w = g->alloc(d.weight_shape(), DType::kF32, Layout::kNHWC);
  Tensor y = g->alloc(d.output_shape(), DType::kF32, Layout::kNHWC);
  EXPECT_THROW(conv->forward(x_nchw, w, Tensor{}, y), InvalidArgument);  // wrong layout
  Tensor x_host = Tensor::host(d.input_shape(), DType::kF32, Layout::kNHWC);
  EXPECT_THROW(conv->forward(x_host, w, Tensor{}, y), InvalidArgument);  // host memory
  Tensor y_wrong = g->alloc(Shape{1, 4, 5, 5}, DType::kF32, Layout::kNHWC);
  EXPECT_THROW(
      conv->forward(g->alloc(d.input_shape(), DType::kF32, Layout::kNHWC), w, Tensor{}, y_wrong),
      ShapeError);
}

}  // namespace
}  // namespace cnnergy::test
