// The project's own CUDA convolutions (own:direct, own:im2col_gemm, own:implicit_gemm, own:fft,
// own:winograd, own:winograd_2x2) against the CPU reference: every implementation x direction x precision x
// supported layout on fixed awkward shapes and on fresh random ones; the rules that exclude shapes
// (typed NotSupported naming the rule); the run-wide "own:NAME" policy's per-direction fallback
// with notes; info()'s names and extra memory; unknown names. GPU tests skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <span>
#include <ostream>
#include <string>
#include <vector>

#include "backend/cuda/conv_algos.hpp"
#include "backend/cuda/own_conv.hpp"
#include "backend/cuda/own_conv_implicit_gemm_maps.hpp"
#include "backend/cuda/own_conv_rules.hpp"
#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

using cuda::own::Direction;

struct Impl {
  const char* name;  // without "own:"
  bool nhwc;         // runs NHWC too
};
constexpr Impl kImpls[] = {{"direct", true},    {"im2col_gemm", false}, {"implicit_gemm", true},
                           {"fft", false},      {"winograd", false},    {"winograd_2x2", false}};

// "" when `impl` runs `dir` of d in this layout, else the rule (own_conv_rules.hpp).
std::string rule_of(const std::string& impl, const Conv2dDesc& d, Layout l, Direction dir) {
  const bool nhwc = l == Layout::kNHWC;
  if (impl == "direct") return cuda::own::direct_rule(d);
  if (impl == "im2col_gemm") return cuda::own::im2col_gemm_rule(d, nhwc);
  if (impl == "implicit_gemm") return cuda::own::implicit_gemm_rule(d);
  if (impl == "fft") return cuda::own::fft_rule(d, nhwc, dir);
  return cuda::own::winograd_rule(d, nhwc, impl == "winograd" ? 4 : 2, dir);
}

// The error bound of each implementation per precision (docs/convolutions.md): the fixture's
// precision tolerance, raised for Winograd, whose transforms amplify rounding (F(4x4) more than
// F(2x2); its GEMMs stay fp32 under tf32); and for FFT, whose rounding scales with
// the operands' norms over the whole padded plane rather than with each output.
double tolerance(const std::string& impl, const Precision& p) {
  double tol = p.tol;
  if (impl == "fft") tol = std::max(tol, 2e-3);
  if (impl == "winograd") tol = std::max(tol, 1e-3);
  if (impl == "winograd_2x2") tol = std::max(tol, 5e-4);
  return tol;
}

Conv2dDesc make_desc(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k,
                     std::int64_t r, std::int64_t s, std::int64_t stride, std::int64_t pt, std::int64_t pb,
                     std::int64_t pl, std::int64_t pr, std::int64_t dil, std::int64_t groups, bool bias) {
  Conv2dDesc d;
  d.n = n, d.c = c, d.h = h, d.w = w, d.k = k, d.r = r, d.s = s;
  d.stride_h = d.stride_w = stride;
  d.pad_top = pt, d.pad_bottom = pb, d.pad_left = pl, d.pad_right = pr;
  d.dilation_h = d.dilation_w = dil;
  d.groups = groups;
  d.bias = bias;
  return d;
}

std::string& field(ConvAlgoChoice& c, int i) {
  return i == 0 ? c.forward : (i == 1 ? c.backward_data : c.backward_filter);
}
const std::string& field(const ConvAlgoInfo& c, int i) {
  return i == 0 ? c.forward : (i == 1 ? c.backward_data : c.backward_filter);
}

struct OwnCase {
  const char* name;
  Conv2dDesc desc;
};
void PrintTo(const OwnCase& c, std::ostream* os) { *os << c.name; }

std::vector<OwnCase> own_cases() {
  return {
      {"3x3_pad1_odd", make_desc(2, 3, 9, 11, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, true)},
      {"3x3_pad1_c16_k24", make_desc(2, 16, 13, 10, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, true)},
      {"3x3_asymmetric_pad_0_2", make_desc(2, 5, 8, 9, 6, 3, 3, 1, 0, 2, 2, 0, 1, 1, true)},
      {"3x3_pad3_larger_than_kernel", make_desc(1, 4, 5, 6, 3, 3, 3, 1, 3, 3, 3, 3, 1, 1, false)},
      // 64 channels: the direct kernels' shared-memory chunks (35 channels) split the sum
      {"3x3_c64_k64_plane30", make_desc(2, 64, 30, 30, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true)},
      // implicit GEMM: several 128x64 tiles, K-slices and backward-filter splits
      {"3x3_c40_k72_stride1", make_desc(3, 40, 17, 19, 72, 3, 3, 1, 1, 1, 1, 1, 1, 1, true)},
      {"3x5_stride2_asymmetric_pad", make_desc(2, 13, 10, 9, 5, 3, 5, 2, 1, 2, 0, 1, 1, 1, true)},
      {"groups4", make_desc(3, 8, 7, 8, 12, 3, 3, 1, 1, 1, 1, 1, 1, 4, true)},
      {"depthwise_stride2", make_desc(2, 6, 9, 9, 6, 3, 3, 2, 1, 1, 1, 1, 1, 6, true)},
      {"dilation2", make_desc(2, 5, 10, 7, 4, 3, 3, 1, 2, 2, 2, 2, 2, 1, true)},
      {"1x1_stride2_no_bias", make_desc(4, 16, 6, 6, 8, 1, 1, 2, 0, 0, 0, 0, 1, 1, false)},
      {"7x7_stride2_pad3", make_desc(2, 3, 23, 21, 8, 7, 7, 2, 3, 3, 3, 3, 1, 1, true)},
      {"5x5_pad2_odd_plane", make_desc(1, 4, 7, 5, 3, 5, 5, 1, 2, 2, 2, 2, 1, 1, true)},
  };
}

class OwnConv : public CudaTest {
 protected:
  struct Result {
    Tensor y, dx, dx_accumulated, dw, db;
  };

  Result run(Backend& b, const Conv2dDesc& d, const ConvAlgoChoice& algo, DType dtype, Layout layout,
             const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy, const Tensor& dx0) {
    auto conv = b.make_conv(d, algo);
    const bool host = b.device().is_cpu();
    auto put = [&](const Tensor& t) { return host ? clone(t) : upload(b, t, dtype, layout); };
    auto get = [&](const Tensor& t) { return host ? clone(t) : download(b, t); };
    const Tensor xd = put(x), wd = put(w), dyd = put(dy);
    const Tensor bd = d.bias ? put(bias) : Tensor{};
    Tensor y = b.alloc(d.output_shape(), dtype, layout), dx = b.alloc(d.input_shape(), dtype, layout);
    Tensor dw = b.alloc(d.weight_shape(), dtype, layout);
    Tensor db = d.bias ? b.alloc(Shape{d.k}, dtype) : Tensor{};
    conv->forward(xd, wd, bd, y);
    conv->backward_data(dyd, wd, dx, false);
    Tensor dx_acc = put(dx0);
    conv->backward_data(dyd, wd, dx_acc, true);
    conv->backward_filter(xd, dyd, dw, db);
    return {get(y), get(dx), get(dx_acc), get(dw), d.bias ? get(db) : Tensor{}};
  }

  // One implementation on one shape in one precision and layout: the directions it runs are
  // named "own:IMPL" (the others run cuDNN's find) and compared with the CPU; an explicit own name
  // for a direction it cannot run must throw NotSupported stating the rule. Returns the number of
  // own directions compared.
  int compare(const std::string& impl, const Conv2dDesc& d, const Precision& p, Layout layout,
              const std::string& what) {
    auto g = gpu(p, layout, "find");
    if (!g) return 0;
    const std::string own = std::string(cuda::kOwnConvPrefix) + impl;
    ConvAlgoChoice algo;
    int own_count = 0;
    for (int i = 0; i < 3; ++i) {
      const std::string rule = rule_of(impl, d, layout, static_cast<Direction>(i));
      if (rule.empty()) {
        field(algo, i) = own;
        ++own_count;
        continue;
      }
      ConvAlgoChoice only;
      field(only, i) = own;
      try {
        g->make_conv(d, only);
        ADD_FAILURE() << what << ": " << own << " accepted a direction its rule excludes: " << rule;
      } catch (const NotSupported& e) {
        EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what() << " lacks " << rule;
      }
    }
    if (own_count == 0) return 0;
    const double tol = tolerance(impl, p);
    const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
    const Tensor bias = random(Shape{d.k}, p.dtype), dy = random(d.output_shape(), p.dtype);
    const Tensor dx0 = random(d.input_shape(), p.dtype);
    const Result ref = run(*cpu_, d, {}, DType::kF32, Layout::kNCHW, x, w, bias, dy, dx0);
    const Result got = run(*g, d, algo, p.dtype, layout, x, w, bias, dy, dx0);
    const ConvAlgoInfo info = g->make_conv(d, algo)->info();
    for (int i = 0; i < 3; ++i)
      if (!field(algo, i).empty()) {
        EXPECT_EQ(field(info, i), own) << what;
      }
    const std::string tag = what + " " + own;
    EXPECT_TRUE(close(got.y, ref.y, tol, tag + " forward"));
    EXPECT_TRUE(close(got.dx, ref.dx, tol, tag + " backward_data"));
    EXPECT_TRUE(close(got.dx_accumulated, ref.dx_accumulated, tol, tag + " backward_data accumulate"));
    EXPECT_TRUE(close(got.dw, ref.dw, tol, tag + " backward_filter dw"));
    if (d.bias) {
      EXPECT_TRUE(close(got.db, ref.db, tol, tag + " backward_filter db"));
    }
    return own_count;
  }

  void every_implementation(const Conv2dDesc& d, const std::string& name) {
    for (const Impl& impl : kImpls)
      for (const Precision& p : kAllPrecisions)
        for (const Layout l : kAllLayouts) {
          if (l == Layout::kNHWC && !impl.nhwc) {
            // The layout rule: explicit own names throw NotSupported naming NCHW.
            auto g = gpu(p, l, "find");
            if (!g) continue;
            const std::string own = std::string(cuda::kOwnConvPrefix) + impl.name;
            EXPECT_THROW(g->make_conv(d, ConvAlgoChoice{own, "", ""}), NotSupported) << name << " " << own;
            continue;
          }
          compare(impl.name, d, p, l, name + " " + label(p, l));
        }
  }
};

class OwnConvShapes : public OwnConv, public ::testing::WithParamInterface<OwnCase> {};

TEST_P(OwnConvShapes, EveryImplementationDirectionPrecisionAndLayoutMatchesCpu) {
  every_implementation(GetParam().desc, GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(Cuda, OwnConvShapes, ::testing::ValuesIn(own_cases()),
                         [](const ::testing::TestParamInfo<OwnCase>& i) { return std::string(i.param.name); });

// Fresh random shapes each run (the seed is printed): sizes, stride 1-2, padding 0-2 (asymmetric),
// dilation 1-2, groups 1, 2 or depthwise, 1x1 to 5x5 kernels, bias or not; 3x3 stride-1 shapes
// half the time so Winograd runs too.
TEST_F(OwnConv, FreshRandomShapesMatchCpu) {
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng_.next_u32() % static_cast<std::uint32_t>(hi - lo + 1)); };
  for (int trial = 0; trial < 6; ++trial) {
    Conv2dDesc d;
    const bool winograd_shape = trial % 2 == 0;
    const int groups_kind = pick(0, 2);
    d.groups = groups_kind == 0 ? 1 : (groups_kind == 1 ? 2 : pick(2, 6));
    d.c = groups_kind == 2 ? d.groups : d.groups * pick(1, 6);
    d.k = groups_kind == 2 ? d.groups : d.groups * pick(1, 6);
    if (winograd_shape) {
      d.groups = 1;
      d.c = pick(1, 20);
      d.k = pick(1, 20);
    }
    d.n = pick(1, 3);
    d.r = winograd_shape ? 3 : pick(1, 5);
    d.s = winograd_shape ? 3 : pick(1, 5);
    d.stride_h = d.stride_w = winograd_shape ? 1 : pick(1, 2);
    d.dilation_h = d.dilation_w = winograd_shape ? 1 : pick(1, 2);
    d.pad_top = pick(0, 2), d.pad_bottom = pick(0, 2), d.pad_left = pick(0, 2), d.pad_right = pick(0, 2);
    d.h = pick(static_cast<int>(d.dilation_h * (d.r - 1) + 1), 17);
    d.w = pick(static_cast<int>(d.dilation_w * (d.s - 1) + 1), 17);
    d.bias = pick(0, 1) == 1;
    const std::string name = "random " + d.input_shape().str() + " k" + std::to_string(d.k) + " " +
                             std::to_string(d.r) + "x" + std::to_string(d.s) + " stride " +
                             std::to_string(d.stride_h) + " dilation " + std::to_string(d.dilation_h) +
                             " groups " + std::to_string(d.groups);
    every_implementation(d, name);
  }
}

// The run-wide policy "own:NAME": per direction the implementation where it runs, cuDNN auto with a
// note where it cannot (FFT's backward directions at stride 2; a 5x5 layer for Winograd);
// NotSupported without fallback.
TEST_F(OwnConv, RunWidePolicyFallsBackPerDirectionWithNotes) {
  auto g = gpu(kFp32, Layout::kNCHW, "own:winograd");
  ASSERT_TRUE(g);
  const Conv2dDesc d3 = make_desc(2, 8, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, true);
  const ConvAlgoInfo i3 = g->make_conv(d3, {})->info();
  EXPECT_EQ(i3.forward, "own:winograd");
  EXPECT_EQ(i3.backward_data, "own:winograd");
  EXPECT_EQ(i3.backward_filter, "own:winograd");
  EXPECT_TRUE(i3.notes.empty()) << i3.notes.front();
  EXPECT_GT(i3.workspace_bytes, 0u);

  auto f = gpu(kFp32, Layout::kNCHW, "own:fft");
  ASSERT_TRUE(f);
  const Conv2dDesc s2 = make_desc(2, 4, 11, 11, 6, 3, 3, 2, 1, 1, 1, 1, 1, 1, true);
  const ConvAlgoInfo fi = f->make_conv(s2, {})->info();
  EXPECT_EQ(fi.forward, "own:fft");
  EXPECT_NE(fi.backward_data.rfind("own:", 0), 0u) << fi.backward_data;
  EXPECT_NE(fi.backward_filter.rfind("own:", 0), 0u) << fi.backward_filter;
  ASSERT_GE(fi.notes.size(), 2u);
  EXPECT_NE(fi.notes[0].find("stride 1"), std::string::npos) << fi.notes[0];
  EXPECT_NE(fi.notes[0].find("fell back to cuDNN auto"), std::string::npos) << fi.notes[0];

  const Conv2dDesc d5 = make_desc(2, 8, 10, 10, 8, 5, 5, 1, 2, 2, 2, 2, 1, 1, true);
  const ConvAlgoInfo i5 = g->make_conv(d5, {})->info();
  for (const std::string& a : {i5.forward, i5.backward_data, i5.backward_filter})
    EXPECT_NE(a.rfind("own:", 0), 0u) << a;
  EXPECT_EQ(std::count_if(i5.notes.begin(), i5.notes.end(),
                          [](const std::string& n) { return n.find("only 3x3 stride 1") != std::string::npos; }),
            3);

  auto strict = gpu(kFp32, Layout::kNCHW, "own:winograd", /*fallback=*/false);
  ASSERT_TRUE(strict);
  EXPECT_THROW(strict->make_conv(d5, {}), NotSupported);
}

// A layer's explicit own name in one direction beside cuDNN in the others; info() names each and
// reports the column buffer / transformed tiles as extra memory (none for direct).
TEST_F(OwnConv, MixedDirectionsAndExtraMemory) {
  auto g = gpu(kFp32, Layout::kNCHW, "heuristic");
  ASSERT_TRUE(g);
  const Conv2dDesc d = make_desc(2, 16, 12, 12, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, false);
  const ConvAlgoInfo mixed = g->make_conv(d, ConvAlgoChoice{"own:im2col_gemm", "", "own:direct"})->info();
  EXPECT_EQ(mixed.forward, "own:im2col_gemm");
  EXPECT_NE(mixed.backward_data.rfind("own:", 0), 0u);
  EXPECT_EQ(mixed.backward_filter, "own:direct");
  // im2col forward: C*R*S x OH*OW fp32 per image, both images in one chunk
  EXPECT_GE(mixed.workspace_bytes, std::size_t{2} * 16 * 9 * 144 * 4);
  const ConvAlgoInfo direct = g->make_conv(d, ConvAlgoChoice{"own:direct", "own:direct", "own:direct"})->info();
  EXPECT_EQ(direct.workspace_bytes, 0u);
  EXPECT_EQ(direct.math_type, "fp32");
  const ConvAlgoInfo wino = g->make_conv(d, ConvAlgoChoice{"own:winograd", "own:winograd_2x2", ""})->info();
  // U (36 x K x C) plus V and M (36 x tiles x (C + K)) per image for F(4x4): 9 tiles per image
  EXPECT_GE(wino.workspace_bytes, std::size_t{36} * 16 * 16 * 4 + std::size_t{36} * 9 * 32 * 4);
}

TEST_F(OwnConv, UnknownOwnNamesListTheValidOnes) {
  auto g = gpu(kFp32, Layout::kNCHW, "find");
  ASSERT_TRUE(g);
  const Conv2dDesc d = make_desc(1, 2, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, false);
  try {
    g->make_conv(d, ConvAlgoChoice{"own:winograd_8x8", "", ""});
    FAIL() << "own:winograd_8x8 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("own:im2col_gemm"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu(kFp32, Layout::kNCHW, "own:nonesuch"), InvalidArgument);
}

// Without a GPU: the names and the policy check.
TEST(OwnConvNames, ListedAndValidated) {
  std::vector<std::string> names;
  for (const char* n : cuda::own_conv_implementations()) names.emplace_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"direct", "im2col_gemm", "implicit_gemm", "fft", "winograd"}));
  EXPECT_NO_THROW(cuda::validate_conv_algo_policy("own:direct"));
  EXPECT_NO_THROW(cuda::validate_conv_algo_policy("own:winograd_2x2"));
  EXPECT_THROW(cuda::validate_conv_algo_policy("own:gemm"), InvalidArgument);
  EXPECT_EQ(cuda::own_conv_implementation("own:im2col_gemm"), "im2col_gemm");
  try {
    cuda::validate_conv_algo_policy("nonesuch");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("own:winograd"), std::string::npos) << e.what();
  }
}

// ---- without a GPU: the implicit GEMM's index maps multiplied out on the host -------------------
struct HostOps {
  template <typename T>
  static float to(T v) {
    return static_cast<float>(v);
  }
  template <typename T>
  static T from(float v) {
    return static_cast<T>(v);
  }
  static void add(float* p, float v) { *p += v; }
};

// C (m x n) = A (m x k) B (k x n) per group through a map, as implicit_gemm_kernel does.
template <class Map>
void multiply(const Map& map, int groups, int m, int n, int k) {
  for (int grp = 0; grp < groups; ++grp)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int kk = 0; kk < k; ++kk) sum += static_cast<double>(map.a(grp, i, kk)) * map.b(grp, kk, j);
        map.store(grp, i, j, static_cast<float>(sum));
      }
}

class ImplicitGemmMaps : public SeededTest {};

// Every direction, both layouts, against the CPU backend: catches any gather/scatter index error
// of the GPU kernel's maps without a GPU.
TEST_F(ImplicitGemmMaps, MultipliedOutOnTheHostMatchTheCpuReference) {
  auto cpu = create_backend(BackendOptions{});
  std::vector<OwnCase> cases = own_cases();
  for (const OwnCase& c : cases) {
    const Conv2dDesc& d = c.desc;
    const Tensor x = random_tensor(d.input_shape(), rng_), w = random_tensor(d.weight_shape(), rng_);
    const Tensor dy = random_tensor(d.output_shape(), rng_), dx0 = random_tensor(d.input_shape(), rng_);
    Conv2dDesc nb = d;
    nb.bias = false;
    auto conv = cpu->make_conv(nb, {});
    Tensor y_ref = Tensor::host(d.output_shape(), DType::kF32), dx_ref = clone(dx0);
    Tensor dw_ref = Tensor::host(d.weight_shape(), DType::kF32);
    conv->forward(x, w, Tensor{}, y_ref);
    conv->backward_data(dy, w, dx_ref, true);
    conv->backward_filter(x, dy, dw_ref, Tensor{});
    for (const Layout l : kAllLayouts) {
      const bool nhwc = l == Layout::kNHWC;
      const cuda::own::ConvGeom g = cuda::own::geom_of(d, nhwc);
      const Tensor xl = from_f32_nchw(x, DType::kF32, l), wl = from_f32_nchw(w, DType::kF32, l);
      const Tensor dyl = from_f32_nchw(dy, DType::kF32, l), dxl = from_f32_nchw(dx0, DType::kF32, l);
      const Tensor yl = Tensor::host(d.output_shape(), DType::kF32, l);  // NaN where nothing is stored
      const std::span<float> y_values = yl.f32();
      std::fill(y_values.begin(), y_values.end(), std::numeric_limits<float>::quiet_NaN());
      std::vector<float> dw32(static_cast<std::size_t>(d.weight_shape().numel()), 0.0f);
      const auto* xp = static_cast<const float*>(xl.raw());
      const auto* wp = static_cast<const float*>(wl.raw());
      const auto* dyp = static_cast<const float*>(dyl.raw());
      multiply(cuda::own::ForwardMap<float, HostOps>{xp, wp, static_cast<float*>(yl.raw()), g}, g.groups,
               g.n * g.oh * g.ow, g.kg, g.cg * g.r * g.s);
      multiply(cuda::own::BackwardDataMap<float, HostOps>{dyp, wp, static_cast<float*>(dxl.raw()), g, true},
               g.groups, g.n * g.h * g.w, g.cg, g.kg * g.r * g.s);
      multiply(cuda::own::BackwardFilterMap<float, HostOps>{xp, dyp, dw32.data(), g}, g.groups, g.kg,
               g.cg * g.r * g.s, g.n * g.oh * g.ow);
      const Tensor dwl = from_f32_nchw(dw_ref, DType::kF32, l);
      std::copy(dw32.begin(), dw32.end(), static_cast<float*>(dwl.raw()));
      const std::string what = std::string(c.name) + " " + std::string(layout_name(l));
      EXPECT_TRUE(all_close(to_f32_nchw(yl), y_ref, 1e-4, 1e-4)) << what << " forward";
      EXPECT_TRUE(all_close(to_f32_nchw(dxl), dx_ref, 1e-4, 1e-4)) << what << " backward_data accumulate";
      EXPECT_TRUE(all_close(to_f32_nchw(dwl), dw_ref, 1e-3, 1e-4)) << what << " backward_filter";
    }
  }
}

}  // namespace
}  // namespace cnnergy::test
