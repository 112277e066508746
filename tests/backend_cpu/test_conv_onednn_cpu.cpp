// The CPU convolution's oneDNN forward path against the reference loops: fresh random shapes
// (stride, asymmetric padding, dilation, groups incl. depthwise, odd channel counts that oneDNN's
// 8-channel blocks must pad, batch 1 and more), network-sized shapes, the fused ReLU, held weights
// (reordered once, again after each hold_weights) and unheld ones (training: new values per call),
// the algorithm names and errors. Skipped where the build has no oneDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backend/cpu/conv_onednn_cpu.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend_cpu/cpu_fixture.hpp"
#include "core/errors.hpp"

namespace cnnergy::test {
namespace {

// fp32 sums in oneDNN's order against the reference's double sums of at most a few hundred
// products of values in [-1, 1]: 1e-4 absolute and relative, as for im2col_gemm.
constexpr double kTol = 1e-4;

std::string describe(const Conv2dDesc& d) {
  return "x " + d.input_shape().str() + " w " + d.weight_shape().str() + " stride " + std::to_string(d.stride_h) +
         "x" + std::to_string(d.stride_w) + " pad " + std::to_string(d.pad_top) + "," + std::to_string(d.pad_bottom) +
         "," + std::to_string(d.pad_left) + "," + std::to_string(d.pad_right) + " dil " +
         std::to_string(d.dilation_h) + "x" + std::to_string(d.dilation_w) + " groups " + std::to_string(d.groups) +
         (d.bias ? " bias" : "") + (d.relu ? " relu" : "");
}

Conv2dDesc conv(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k, std::int64_t r,
                std::int64_t s, std::int64_t stride = 1, std::int64_t pad = 0, std::int64_t groups = 1) {
  Conv2dDesc d;
  d.n = n, d.c = c, d.h = h, d.w = w, d.k = k, d.r = r, d.s = s;
  d.stride_h = d.stride_w = stride;
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = pad;
  d.groups = groups;
  return d;
}

class ConvOnednn : public CpuBackendTest {
 protected:
  void SetUp() override {
    if (!cpu::onednn_available()) GTEST_SKIP() << "this build has no oneDNN (libdnnl-dev)";
  }

  std::int64_t pick(int lo, int hi) { return static_cast<std::int64_t>(lo + rng_.next_u32() % (hi - lo + 1)); }

  Conv2dDesc random_desc() {
    for (;;) {
      Conv2dDesc d;
      d.n = pick(1, 4);
      const int kind = static_cast<int>(pick(0, 3));  // plain, grouped, depthwise, wide plain
      d.groups = kind == 0 || kind == 3 ? 1 : pick(2, 4);
      const std::int64_t cg = kind == 2 ? 1 : kind == 3 ? pick(5, 20) : pick(1, 6);
      d.c = d.groups * cg;
      d.k = kind == 2 ? d.c * pick(1, 2) : d.groups * (kind == 3 ? pick(5, 20) : pick(1, 6));
      d.h = pick(1, 13), d.w = pick(1, 13);
      d.r = pick(1, 5), d.s = pick(1, 5);
      d.stride_h = pick(1, 3), d.stride_w = pick(1, 3);
      d.dilation_h = pick(1, 3), d.dilation_w = pick(1, 3);
      d.pad_top = pick(0, 3), d.pad_bottom = pick(0, 3), d.pad_left = pick(0, 3), d.pad_right = pick(0, 3);
      d.bias = pick(0, 1) == 1;
      d.relu = pick(0, 2) == 0;
      if (d.h + d.pad_top + d.pad_bottom >= d.dilation_h * (d.r - 1) + 1 &&
          d.w + d.pad_left + d.pad_right >= d.dilation_w * (d.s - 1) + 1)
        return d;
    }
  }

  // The reference's answer, with the ReLU applied after it where the descriptor fuses one.
  Tensor reference(Conv2dDesc d, const Tensor& x, const Tensor& w, const Tensor& b) {
    const bool relu = d.relu;
    d.relu = false;
    const Tensor y = Tensor::host(d.output_shape());
    backend_->make_conv(d, {"reference", "reference", "reference"})->forward(x, w, b, y);
    if (relu)
      for (float& v : y.f32()) v = std::max(v, 0.0f);
    return y;
  }

  // Forward through oneDNN (which must have taken the problem, not fallen back) vs the reference.
  void expect_matches(const Conv2dDesc& d) {
    SCOPED_TRACE(describe(d));
    auto kernel = backend_->make_conv(d, {"onednn", "", ""});
    ASSERT_EQ(kernel->info().forward, "onednn");
    const Tensor x = random_tensor(d.input_shape(), rng_), w = random_tensor(d.weight_shape(), rng_);
    const Tensor b = d.bias ? random_tensor({d.k}, rng_) : Tensor();
    const Tensor y = random_tensor(d.output_shape(), rng_);  // garbage: forward must overwrite it
    kernel->forward(x, w, b, y);
    EXPECT_TRUE(all_close(y, reference(d, x, w, b), kTol, kTol));
  }
};

TEST_F(ConvOnednn, ForwardMatchesReferenceOnRandomShapes) {
  for (int trial = 0; trial < 80; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_matches(random_desc());
  }
}

TEST_F(ConvOnednn, ForwardMatchesReferenceOnNetworkSizedShapes) {
  // ResNet-50's kinds at batch 1 and 2: 7x7/2 stem (3 input channels), 3x3, 1x1, 1x1/2 projection;
  // a grouped 3x3 (ResNeXt), a depthwise 3x3 (MobileNet), a dilated 3x3, channels not a multiple of 8.
  auto stem = conv(1, 3, 38, 37, 16, 7, 7, 2, 3);
  stem.pad_bottom = stem.pad_right = 2;
  auto dilated = conv(2, 24, 15, 15, 16, 3, 3, 1, 2);
  dilated.dilation_h = dilated.dilation_w = 2;
  for (Conv2dDesc d : {stem, conv(1, 64, 14, 14, 64, 3, 3, 1, 1), conv(2, 64, 14, 14, 256, 1, 1),
                       conv(1, 256, 14, 14, 128, 1, 1, 2), conv(2, 32, 14, 14, 48, 3, 3, 2, 1, 4),
                       conv(2, 64, 12, 12, 64, 3, 3, 1, 1, 64), dilated, conv(3, 13, 11, 9, 21, 3, 3, 1, 1)}) {
    for (const bool relu : {false, true}) {
      d.relu = relu;
      expect_matches(d);
    }
  }
}

TEST_F(ConvOnednn, HeldWeightsAreReorderedOnceAndAgainAfterEachHold) {
  const Conv2dDesc d = conv(2, 16, 9, 9, 24, 3, 3, 1, 1);
  auto kernel = backend_->make_conv(d, {"onednn", "", ""});
  const Tensor x = random_tensor(d.input_shape(), rng_), w = random_tensor(d.weight_shape(), rng_),
               b = random_tensor({d.k}, rng_), y = Tensor::host(d.output_shape());
  // Not held (training): weights changed in place between calls are seen by the next call.
  kernel->forward(x, w, b, y);
  EXPECT_TRUE(all_close(y, reference(d, x, w, b), kTol, kTol));
  for (float& v : w.f32()) v *= -0.5f;
  kernel->forward(x, w, b, y);
  EXPECT_TRUE(all_close(y, reference(d, x, w, b), kTol, kTol)) << "unheld weights changed in place";
  // Held: the copy made by the first call after hold_weights serves later calls ...
  kernel->hold_weights();
  kernel->forward(x, w, b, y);
  const Tensor held_answer = reference(d, x, w, b);
  EXPECT_TRUE(all_close(y, held_answer, kTol, kTol));
  for (float& v : w.f32()) v += 0.25f;  // (a change without hold_weights breaks the contract)
  kernel->forward(x, w, b, y);
  EXPECT_TRUE(all_close(y, held_answer, kTol, kTol)) << "the held copy must be used";
  // ... until the next hold_weights, and a different weight tensor is reordered anew.
  kernel->hold_weights();
  kernel->forward(x, w, b, y);
  EXPECT_TRUE(all_close(y, reference(d, x, w, b), kTol, kTol)) << "after a second hold_weights";
  const Tensor w2 = random_tensor(d.weight_shape(), rng_);
  kernel->forward(x, w2, b, y);
  EXPECT_TRUE(all_close(y, reference(d, x, w2, b), kTol, kTol)) << "another weight tensor";
}

TEST_F(ConvOnednn, BatchChunksBoundTheReorderedCopies) {
  auto vgg = conv(64, 64, 224, 224, 64, 3, 3, 1, 1);  // VGG conv1_2 at batch 64: 822 MB a copy
  const auto info = backend_->make_conv(vgg, {"onednn", "", ""})->info();
  EXPECT_EQ(info.forward, "onednn");
  EXPECT_LE(info.workspace_bytes, cpu::kMaxConvWorkspaceBytes);
  ASSERT_FALSE(info.notes.empty());
  EXPECT_NE(info.notes.front().find("chunks of"), std::string::npos) << info.notes.front();
  // A small budget: chunks of a few samples and a remainder, the same answer as the loops.
  auto d = conv(5, 12, 9, 8, 10, 3, 3, 1, 1);
  d.bias = true;
  BackendOptions opts;
  opts.workspace_limit_bytes = 2 * 16 * (9 * 8 + 9 * 8) * 4 + 256;  // about two samples of copies
  auto backend = create_backend(opts);
  auto kernel = backend->make_conv(d, {"onednn", "", ""});
  ASSERT_EQ(kernel->info().forward, "onednn");
  ASSERT_FALSE(kernel->info().notes.empty());
  EXPECT_NE(kernel->info().notes.front().find("of 5 samples"), std::string::npos) << kernel->info().notes.front();
  const Tensor x = random_tensor(d.input_shape(), rng_), w = random_tensor(d.weight_shape(), rng_),
               b = random_tensor({d.k}, rng_), y = Tensor::host(d.output_shape());
  kernel->forward(x, w, b, y);
  EXPECT_TRUE(all_close(y, reference(d, x, w, b), kTol, kTol));
}

TEST_F(ConvOnednn, IsTheForwardDefaultAndBackwardStaysOnIm2colGemm) {
  const auto d = conv(2, 4, 6, 6, 5, 3, 3, 1, 1);
  const auto info = backend_->make_conv(d, {})->info();
  EXPECT_EQ(info.forward, "onednn");
  EXPECT_EQ(info.backward_data, "im2col_gemm");
  EXPECT_EQ(info.backward_filter, "im2col_gemm");
  ASSERT_FALSE(info.notes.empty());
  EXPECT_NE(info.notes.back().find("oneDNN"), std::string::npos) << info.notes.back();
  const auto names = backend_->conv_algorithm_names("forward");
  EXPECT_NE(std::find(names.begin(), names.end(), "onednn"), names.end());
  EXPECT_EQ(backend_->conv_algorithm_names("backward_data").size(), 2u);
  for (const char* policy : {"reference", "im2col_gemm", "own:im2col_gemm"}) {
    BackendOptions opts;
    opts.conv_algo_policy = policy;  // a CPU algorithm as the run's policy: every direction runs it
    EXPECT_NE(create_backend(opts)->make_conv(d, {})->info().forward, "onednn") << policy;
  }
  EXPECT_THROW(backend_->make_conv(d, {"", "onednn", ""}), InvalidArgument);  // forward only
  EXPECT_THROW(backend_->make_conv(d, {"", "", "onednn"}), InvalidArgument);
}

TEST_F(ConvOnednn, FusedReluRunsOnEveryAlgorithmAndBackwardIsTheConvolutions) {
  auto d = conv(2, 5, 7, 7, 6, 3, 3, 1, 1);
  d.relu = true;
  const Tensor x = random_tensor(d.input_shape(), rng_), w = random_tensor(d.weight_shape(), rng_),
               b = random_tensor({d.k}, rng_);
  const Tensor expected = reference(d, x, w, b);
  for (const char* algo : {"reference", "im2col_gemm", "onednn"}) {
    auto kernel = backend_->make_conv(d, {algo, "", ""});
    const Tensor y = Tensor::host(d.output_shape());
    kernel->forward(x, w, b, y);
    EXPECT_TRUE(all_close(y, expected, kTol, kTol)) << algo;
    EXPECT_EQ(*std::min_element(y.f32().begin(), y.f32().end()), 0.0f) << algo;
    // Backward is the convolution's own (the layer masks dy by the output first): the same as the
    // kernel without the ReLU.
    Conv2dDesc plain = d;
    plain.relu = false;
    const Tensor dy = random_tensor(d.output_shape(), rng_);
    const Tensor dx = Tensor::host(d.input_shape()), dx_plain = Tensor::host(d.input_shape());
    kernel->backward_data(dy, w, dx, false);
    backend_->make_conv(plain, {algo, "", ""})->backward_data(dy, w, dx_plain, false);
    EXPECT_TRUE(all_close(dx, dx_plain, 0.0, 0.0)) << algo;
  }
}

}  // namespace
}  // namespace cnnergy::test
