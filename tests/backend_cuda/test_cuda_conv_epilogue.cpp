// The fused-epilogue convolution (conv_epilogue_plan.hpp): y = relu?(conv(x, w) + b? + z?) and the
// per-channel statistics of y as one cuDNN graph, run directly from its plans and through the
// backend's offer (BackendOptions::conv_epilogue_fusion), against the CPU reference on fresh random
// inputs, in every precision and layout where cuDNN has an engine for the graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/conv_epilogue_plan.hpp"
#include "backend/cuda/cuda_context.hpp"
#include "backend/cuda/cuda_raii.hpp"
#include "backend_cuda/cuda_fixture.hpp"

namespace cnnergy::test {
namespace {

Conv2dDesc desc(std::int64_t n, std::int64_t c, std::int64_t hw, std::int64_t k, std::int64_t r,
                std::int64_t stride, std::int64_t pad) {
  Conv2dDesc d;
  d.n = n, d.c = c, d.h = d.w = hw, d.k = k, d.r = d.s = r;
  d.stride_h = d.stride_w = stride;
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = pad;
  d.bias = true;
  return d;
}

// The graph's problem for `d` as the convolution kernel builds it.
cuda::EpilogueConvProblem problem_of(const Conv2dDesc& d, const Precision& p, Layout l, bool residual,
                                     bool relu) {
  cuda::EpilogueConvProblem e;
  cuda::GraphConvProblem& g = e.conv;
  g.dir = cuda::ConvDirection::kForward;
  g.data_type = cuda::cudnn_dtype(p.dtype);
  g.nhwc = l == Layout::kNHWC;
  g.allow_tf32 = p.tf32;
  g.n = d.n, g.c = d.c, g.h = d.h, g.w = d.w, g.k = d.k, g.c_per_group = d.c, g.r = d.r, g.s = d.s;
  g.out_h = d.out_h(), g.out_w = d.out_w();
  g.pad_h = d.pad_top, g.pad_w = d.pad_left, g.stride_h = d.stride_h, g.stride_w = d.stride_w;
  e.residual = residual;
  e.relu = relu;
  return e;
}

class CudaConvEpilogue : public CudaTest {
 protected:
  // `body` for every precision and layout this GPU runs: the backend (for the operands) and a
  // context of the same settings (for the plans, on its own stream).
  void for_each_setting(
      const std::function<void(const Precision&, Layout, Backend&, cuda::CudaContext&)>& body) {
    for (const Precision& p : kAllPrecisions)
      for (const Layout l : kAllLayouts) {
        BackendOptions o;
        o.device = Device{DeviceKind::kCuda, 0};
        o.dtype = p.dtype;
        o.allow_tf32 = p.tf32;
        o.layout = l;
        o.conv_epilogue_fusion = false;  // as gpu() makes the backend: the plans are built by hand
        o.conv_space_to_depth = false;
        std::unique_ptr<Backend> g = gpu(p, l);
        if (!g) continue;
        cuda::CudaContext ctx(o);
        body(p, l, *g, ctx);
      }
  }
  // Per channel of an (N, K, H, W) fp32 host tensor: the sum, the sum of squares and the sum of
  // absolute values, in double.
  struct ChannelSums {
    std::vector<double> sum, squares, magnitude;
  };
  static ChannelSums channel_sums(const Tensor& y) {
    const Shape& s = y.shape();
    const std::int64_t k_count = s[1], per = s[2] * s[3];
    ChannelSums out{std::vector<double>(static_cast<std::size_t>(k_count)),
                    std::vector<double>(static_cast<std::size_t>(k_count)),
                    std::vector<double>(static_cast<std::size_t>(k_count))};
    for (std::int64_t n = 0; n < s[0]; ++n)
      for (std::int64_t k = 0; k < k_count; ++k)
        for (std::int64_t i = 0; i < per; ++i) {
          const double v = y.f32()[static_cast<std::size_t>((n * k_count + k) * per + i)];
          const auto c = static_cast<std::size_t>(k);
          out.sum[c] += v, out.squares[c] += v * v, out.magnitude[c] += std::abs(v);
        }
    return out;
  }

  // Whether the 2K device sums (sum, then sum of squares, fp32) are those of the host copy of y
  // within tol of each channel's magnitude; names the first three channels that are not.
  ::testing::AssertionResult sums_of(Backend& g, const Tensor& sums, const Tensor& y, double tol) {
    const std::int64_t k_count = y.shape()[1];
    Tensor got = Tensor::host(Shape{2 * k_count});
    g.download(sums, got);
    const ChannelSums want = channel_sums(y);
    int bad = 0;
    std::string which;
    for (std::int64_t k = 0; k < k_count; ++k) {
      const auto c = static_cast<std::size_t>(k);
      const double got1 = got.f32()[c], got2 = got.f32()[static_cast<std::size_t>(k_count + k)];
      if (std::abs(got1 - want.sum[c]) > tol * want.magnitude[c] + 1e-3 ||
          std::abs(got2 - want.squares[c]) > 2 * tol * want.squares[c] + 1e-3) {
        if (++bad <= 3)
          which += " channel " + std::to_string(k) + ": " + std::to_string(got1) + ", " + std::to_string(got2) +
                   " against " + std::to_string(want.sum[c]) + ", " + std::to_string(want.squares[c]) + ";";
      }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " channels' sums off:" << which;
  }

  // relu?(conv(x, w) + b + z?) on the CPU, from the rounded inputs both sides see.
  Tensor reference(const Conv2dDesc& d, const Tensor& x, const Tensor& w, const Tensor& b,
                   const Tensor* z, bool relu) {
    Tensor y = Tensor::host(d.output_shape());
    cpu_->make_conv(d, {})->forward(x, w, b, y);
    auto v = y.f32();
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (z) v[i] += z->f32()[i];
      if (relu) v[i] = std::max(v[i], 0.0f);
    }
    return y;
  }
};

// Every graph shape (bias; bias + ReLU; bias + residual + ReLU) on a ResNet-like 3x3 and a strided
// 1x1, run from each candidate plan cuDNN finalizes. fp16/bf16 NHWC must have an engine on a GPU
// with tensor cores for bf16 (compute capability 8.0 and up): there the fused graph is what inference
// asks for.
TEST_F(CudaConvEpilogue, PlansMatchTheCpuReference) {
  const Conv2dDesc shapes[] = {desc(2, 32, 12, 64, 3, 1, 1), desc(3, 64, 10, 32, 1, 2, 0)};
  std::size_t ran = 0, half_nhwc_ran = 0;
  for_each_setting([&](const Precision& p, Layout l, Backend& backend, cuda::CudaContext& ctx) {
      Backend* g = &backend;
      for (const Conv2dDesc& d : shapes)
        for (const auto& [residual, relu] : {std::pair{false, false}, {false, true}, {true, true}}) {
          const std::string what = label(p, l) + " " + d.input_shape().str() + " k" + std::to_string(d.k) +
                                   (residual ? " +z" : "") + (relu ? " relu" : "");
          std::string why;
          const auto plans = cuda::epilogue_conv_candidates(ctx.cudnn(), problem_of(d, p, l, residual, relu),
                                                            std::size_t{256} << 20, 2, &why);
          if (plans.empty()) {
            std::printf("[  NOTE    ] %s: %s\n", what.c_str(), why.c_str());
            continue;
          }
          const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
          const Tensor b = random(Shape{d.k}, p.dtype), z = random(d.output_shape(), p.dtype);
          const Tensor want = reference(d, x, w, b, residual ? &z : nullptr, relu);
          const Tensor xd = upload(*g, x, p.dtype, l), wd = upload(*g, w, p.dtype, l);
          const Tensor bd = upload(*g, b, p.dtype, l), zd = upload(*g, z, p.dtype, l);
          for (const auto& plan : plans) {
            Tensor yd = g->alloc(d.output_shape(), p.dtype, l);
            // The backend's tensors live on the same GPU; the plan runs on this context's stream.
            auto ws = ctx.scratch(std::max<std::size_t>(plan->workspace_bytes(), 1));
            cuda::EpilogueConvLaunch launch(plan);
            ASSERT_EQ(launch.execute(ctx.cudnn(), {xd.raw(), wd.raw(), bd.raw(), residual ? zd.raw() : nullptr,
                                                   yd.raw(), ws->data()}),
                      CUDNN_STATUS_SUCCESS)
                << what << " " << plan->engine();
            ASSERT_EQ(cudaStreamSynchronize(ctx.stream()), cudaSuccess);
            EXPECT_TRUE(close(download(*g, yd), want, p.tol, what + " " + plan->engine()));
            ++ran;
            half_nhwc_ran += p.dtype != DType::kF32 && l == Layout::kNHWC;
          }
        }
  });
  std::printf("[  NOTE    ] %zu fused plans ran\n", ran);
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  if (major >= 8) {
    EXPECT_GT(half_nhwc_ran, 0u) << "no fused plan ran in fp16/bf16 NHWC";
  }
}

// Through the backend: with the offer on, a convolution with a bias (and its fused ReLU) gives the
// reference's values whichever way the timing went, and says which way it went.
TEST_F(CudaConvEpilogue, BackendOfferKeepsTheValues) {
  for (const Precision& p : {kBf16, kFp32})
    for (const Layout l : kAllLayouts)
      for (const bool relu : {false, true}) {
        BackendOptions o;
        o.device = Device{DeviceKind::kCuda, 0};
        o.dtype = p.dtype;
        o.layout = l;
        o.conv_epilogue_fusion = true;
        o.conv_space_to_depth = false;  // the epilogue alone
        o.workspace_limit_bytes = std::size_t{256} << 20;
        std::unique_ptr<Backend> g = create_backend(o);
        Conv2dDesc d = desc(8, 64, 28, 64, 3, 1, 1);
        d.relu = relu;
        const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
        const Tensor b = random(Shape{d.k}, p.dtype);
        const Tensor want = reference(d, x, w, b, nullptr, relu);
        auto conv = g->make_conv(d, {});
        Tensor y = g->alloc(d.output_shape(), p.dtype, l);
        conv->forward(upload(*g, x, p.dtype, l), upload(*g, w, p.dtype, l), upload(*g, b, p.dtype, l), y);
        const std::string what = label(p, l) + (relu ? " relu" : "");
        EXPECT_TRUE(close(download(*g, y), want, p.tol, what));
        std::printf("[  NOTE    ] %s: %s\n", what.c_str(), conv->epilogue_fused() ? "fused" : "two passes");
        // A second forward on the decided path gives the same values.
        Tensor y2 = g->alloc(d.output_shape(), p.dtype, l);
        conv->forward(upload(*g, x, p.dtype, l), upload(*g, w, p.dtype, l), upload(*g, b, p.dtype, l), y2);
        EXPECT_TRUE(close(download(*g, y2), want, p.tol, what + " again"));
      }
}

// Statistics in the epilogue: y = conv(x', w) with no bias, and sum[k], sqsum[k] of y, where x' is x
// or, with the prologue, relu(x * scale + shift) per input channel. y against the CPU reference;
// the sums against fp64 sums of the y the GPU wrote (whether cuDNN sums its fp32 accumulators or the
// rounded values, the difference is within y's rounding: tolerance p.tol on the sum of |y|),
// overwriting whatever the sums held. The note says where cuDNN has no engine.
TEST_F(CudaConvEpilogue, StatisticsPlansGiveTheOutputAndItsSums) {
  const Conv2dDesc shapes[] = {desc(4, 64, 14, 64, 3, 1, 1), desc(3, 64, 10, 128, 1, 2, 0)};
  std::size_t ran = 0;
  for_each_setting([&](const Precision& p, Layout l, Backend& backend, cuda::CudaContext& ctx) {
      Backend* g = &backend;
      for (const bool prologue : {false, true})
      for (Conv2dDesc d : shapes) {
        d.bias = false;
        const std::string what = label(p, l) + " " + d.input_shape().str() + " k" + std::to_string(d.k) +
                                 (prologue ? " prologue" : "") + " stats";
        cuda::EpilogueConvProblem e = problem_of(d, p, l, false, false);
        e.bias = false;
        e.statistics = true;
        e.input_affine_relu = prologue;
        std::string why;
        const auto plans = cuda::epilogue_conv_candidates(ctx.cudnn(), e, std::size_t{256} << 20, 2, &why);
        if (plans.empty()) {
          std::printf("[  NOTE    ] %s: %s\n", what.c_str(), why.c_str());
          continue;
        }
        const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
        const Tensor scale = random(Shape{d.c}, p.dtype, 0.5f, 1.5f), shift = random(Shape{d.c}, p.dtype);
        Tensor x_in = clone(x);
        if (prologue) {
          const std::int64_t hw = d.h * d.w;
          auto v = x_in.f32();
          for (std::size_t i = 0; i < v.size(); ++i) {
            const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / hw) % d.c);
            v[i] = std::max(0.0f, v[i] * scale.f32()[c] + shift.f32()[c]);
          }
          x_in = rounded(x_in, p.dtype);
        }
        const Tensor want = reference(d, x_in, w, Tensor(), nullptr, false);
        const Tensor xd = upload(*g, x, p.dtype, l), wd = upload(*g, w, p.dtype, l);
        const Tensor scale_d = upload(*g, scale, p.dtype, l), shift_d = upload(*g, shift, p.dtype, l);
        for (const auto& plan : plans) {
          Tensor yd = g->alloc(d.output_shape(), p.dtype, l);
          Tensor sums = g->alloc(Shape{2 * d.k}, DType::kF32);
          g->fill(sums, 12345.0f);  // overwritten, not added to
          auto ws = ctx.scratch(std::max<std::size_t>(plan->workspace_bytes(), 1));
          cuda::EpilogueConvLaunch launch(plan);
          cuda::EpilogueConvOperands ops{xd.raw(), wd.raw(), nullptr, nullptr, yd.raw(), ws->data()};
          ops.sum = static_cast<float*>(sums.raw());
          ops.sqsum = static_cast<float*>(sums.raw()) + d.k;
          if (prologue) ops.in_scale = scale_d.raw(), ops.in_shift = shift_d.raw();
          ASSERT_EQ(launch.execute(ctx.cudnn(), ops), CUDNN_STATUS_SUCCESS) << what << " " << plan->engine();
          std::printf("[  NOTE    ] %s: %s%s\n", what.c_str(), plan->engine().c_str(),
                      plan->compiled_at_run_time() ? " (compiled at run time)" : " (pre-compiled)");
          ASSERT_EQ(cudaStreamSynchronize(ctx.stream()), cudaSuccess);
          const Tensor y = download(*g, yd);
          EXPECT_TRUE(close(y, want, p.tol, what + " " + plan->engine()));
          EXPECT_TRUE(sums_of(*g, sums, y, p.tol)) << what << " " << plan->engine();
          ++ran;
        }
      }
  });
  std::printf("[  NOTE    ] %zu statistics plans ran\n", ran);
}

// Through the backend (BackendOptions::conv_statistics_fusion, offered in fp16 NHWC only): a
// convolution made with Conv2dDesc::statistics gives the reference's y whichever way its timing went
// (kWhereFaster), and with kAlways runs cuDNN's graph and says so; where it says it wrote the sums
// they are y's; and the batch norm given them normalises as with its own statistics (saved mean and
// inverse deviation within the sums' rounding, the output within fp16's).
TEST_F(CudaConvEpilogue, BackendStatisticsOfferKeepsTheValues) {
  for (const Precision& p : {kFp16, kBf16})
  for (const StatisticsFusion policy : {StatisticsFusion::kWhereFaster, StatisticsFusion::kAlways}) {
    BackendOptions o;
    o.device = Device{DeviceKind::kCuda, 0};
    o.dtype = p.dtype;
    o.layout = Layout::kNHWC;
    o.conv_statistics_fusion = policy;
    o.conv_epilogue_fusion = false;  // the statistics alone
    o.conv_space_to_depth = false;
    o.workspace_limit_bytes = std::size_t{256} << 20;
    std::unique_ptr<Backend> g = create_backend(o);
    Conv2dDesc d = desc(8, 64, 28, 64, 3, 1, 1);
    d.bias = false;
    if (p.dtype == DType::kBF16) {  // only a run-time-compiled engine there, never faster (cuda_backend.cpp)
      EXPECT_FALSE(g->fuses_conv_statistics(d));
      continue;
    }
    ASSERT_TRUE(g->fuses_conv_statistics(d)) << p.name;
    d.statistics = true;
    const Tensor x = random(d.input_shape(), p.dtype), w = random(d.weight_shape(), p.dtype);
    const Tensor want = reference(d, x, w, Tensor(), nullptr, false);
    auto conv = g->make_conv(d, {});
    Tensor y = g->alloc(d.output_shape(), p.dtype, Layout::kNHWC);
    Tensor sums = g->alloc(Shape{2 * d.k}, DType::kF32);
    const bool wrote = conv->forward_statistics(upload(*g, x, p.dtype, Layout::kNHWC),
                                                upload(*g, w, p.dtype, Layout::kNHWC), y, sums);
    const std::string what = std::string(p.name) + " " + statistics_fusion_name(policy) +
                             (wrote ? " (statistics fused)" : " (two passes)");
    std::printf("[  NOTE    ] %s\n", what.c_str());
    if (policy == StatisticsFusion::kAlways) {
      EXPECT_TRUE(wrote) << what << ": cuDNN ran this graph in every call before";
    }
    const Tensor yh = download(*g, y);
    EXPECT_TRUE(close(yh, want, p.tol, what));
    BatchNormDesc bd;
    bd.n = d.n, bd.c = d.k, bd.h = d.out_h(), bd.w = d.out_w();
    auto bn = g->make_batch_norm(bd);
    const Shape per{d.k};
    std::vector<Tensor> own, given;
    for (int i = 0; i < 4; ++i) {
      own.push_back(g->alloc(per, DType::kF32));
      given.push_back(g->alloc(per, DType::kF32));
      g->fill(own.back(), i == 1 ? 1.0f : 0.0f);
      g->fill(given.back(), i == 1 ? 1.0f : 0.0f);
    }
    Tensor gamma = g->alloc(per, DType::kF32), beta = g->alloc(per, DType::kF32);
    g->fill(gamma, 1.5f);
    g->fill(beta, 0.25f);
    Tensor out_own = g->alloc(d.output_shape(), p.dtype, Layout::kNHWC);
    Tensor out_given = g->alloc(d.output_shape(), p.dtype, Layout::kNHWC);
    bn->forward_training(y, gamma, beta, own[0], own[1], out_own, own[2], own[3]);
    if (!wrote) {  // the sums as the fused graph would give them, from y
      const ChannelSums from_y = channel_sums(yh);
      Tensor host = Tensor::host(Shape{2 * d.k});
      for (std::size_t k = 0; k < from_y.sum.size(); ++k) {
        host.f32()[k] = static_cast<float>(from_y.sum[k]);
        host.f32()[from_y.sum.size() + k] = static_cast<float>(from_y.squares[k]);
      }
      g->upload(host, sums);
    }
    bn->forward_training(y, gamma, beta, given[0], given[1], out_given, given[2], given[3], &sums);
    EXPECT_TRUE(close(download(*g, out_given), download(*g, out_own), p.tol, what + " normalised"));
    for (int i = 0; i < 4; ++i) {
      Tensor a = Tensor::host(per), b = Tensor::host(per);
      g->download(given[static_cast<std::size_t>(i)], a);
      g->download(own[static_cast<std::size_t>(i)], b);
      EXPECT_TRUE(all_close(a, b, 1e-4, 1e-4)) << what << ": statistic " << i;
    }
  }
}

// The fused statistics inside a CUDA graph: a training forward captured as a graphed step records it
// (Backend::capture) and replayed on new inputs gives those inputs' y and sums, each replay
// overwriting the sums, so a replayed step's batch norms normalise by their own batch.
TEST_F(CudaConvEpilogue, CapturedStatisticsReplayOnNewInputs) {
  BackendOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.dtype = DType::kF16;
  o.layout = Layout::kNHWC;
  o.conv_statistics_fusion = StatisticsFusion::kAlways;
  o.workspace_limit_bytes = std::size_t{256} << 20;
  std::unique_ptr<Backend> g = create_backend(o);
  Conv2dDesc d = desc(8, 64, 28, 64, 3, 1, 1);
  d.bias = false;
  const Conv2dDesc plain = d;
  d.statistics = true;
  auto conv = g->make_conv(d, {});
  const Tensor w = random(d.weight_shape(), DType::kF16);
  const Tensor wd = upload(*g, w, DType::kF16, Layout::kNHWC);
  Tensor xd = g->alloc(d.input_shape(), DType::kF16, Layout::kNHWC);
  Tensor y = g->alloc(d.output_shape(), DType::kF16, Layout::kNHWC);
  Tensor sums = g->alloc(Shape{2 * d.k}, DType::kF32);
  g->copy(upload(*g, random(d.input_shape(), DType::kF16), DType::kF16, Layout::kNHWC), xd);
  ASSERT_TRUE(conv->forward_statistics(xd, wd, y, sums));  // eager: decides, then runs the fused graph
  bool captured_wrote = false;
  auto work = g->capture([&] { captured_wrote = conv->forward_statistics(xd, wd, y, sums); });
  ASSERT_TRUE(work);
  EXPECT_TRUE(captured_wrote);
  for (int round = 0; round < 2; ++round) {
    const Tensor x = random(d.input_shape(), DType::kF16);
    g->copy(upload(*g, x, DType::kF16, Layout::kNHWC), xd);
    g->fill(sums, 12345.0f);
    work->replay();
    g->synchronize();
    const Tensor yh = download(*g, y);
    EXPECT_TRUE(close(yh, reference(plain, x, w, Tensor(), nullptr, false), kFp16.tol, "replay"));
    EXPECT_TRUE(sums_of(*g, sums, yh, kFp16.tol)) << "replay " << round;
  }
}

}  // namespace
}  // namespace cnnergy::test
