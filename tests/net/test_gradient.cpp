// Whole-network gradients of the small branching graph (shared inputs, add, concat, in-place ReLU,
// BN in training mode, LRN, pooling, dropout with a fixed mask, fc, softmax loss) against central
// finite differences of the loss on the CPU backend, with memory reuse on and off; the same for a graph
// of the imported networks' layers (activations, SE multiply, channel slice/shuffle/affine).
//
// Kinks: the loss is only piecewise smooth in the weights. Perturbing one conv1 weight moves every
// pre-ReLU value behind BN, and now and then one crosses ReLU's kink or swaps a max-pooling winner
// inside the step, which bends the central difference. A kink on one side leaves the one-sided
// difference on the other side exact, so an element passes when its central, left or right
// difference matches (Caffe's checker skips kinks instead; a whole network cannot). A wrong
// gradient (accumulation, branch, memory reuse, layer) matches none of the three; each tensor may
// still have max(1, 10 %) elements with kinks on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {

struct FdResult {
  int checked = 0;
  int outliers = 0;
  std::string worst;
};

// Finite differences of the loss w.r.t. up to `count` random elements of a host fp32 parameter.
FdResult finite_differences(Executor& ex, Parameter& p, const Tensor& analytic, Rng& rng, int count, double step) {
  auto x = p.master.f32();
  const auto a = analytic.f32();
  // Noise floor: one fp32 rounding of a loss of ~1.6 over one step is ~1.2e-4.
  double scale = 5e-2;
  for (float g : a) scale = std::max(scale, static_cast<double>(std::fabs(g)));
  std::vector<std::size_t> idx(x.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::shuffle(idx.begin(), idx.end(), rng.engine());
  idx.resize(std::min<std::size_t>(idx.size(), static_cast<std::size_t>(count)));
  const double f0 = forward_loss(ex);
  FdResult r;
  double worst = -1.0;
  for (std::size_t i : idx) {
    const float orig = x[i];
    const auto up = static_cast<float>(orig + step), down = static_cast<float>(orig - step);
    x[i] = up;
    const double plus = forward_loss(ex);
    x[i] = down;
    const double minus = forward_loss(ex);
    x[i] = orig;
    const double an = a[i];
    const double diffs[3] = {(plus - minus) / (static_cast<double>(up) - down), (plus - f0) / (static_cast<double>(up) - orig),
                             (f0 - minus) / (static_cast<double>(orig) - down)};
    double best = 1e300;
    for (double numeric : diffs) {
      const double allowed = 5e-3 * scale + 2e-2 * std::max(std::fabs(numeric), std::fabs(an));
      best = std::min(best, std::fabs(numeric - an) / allowed);
    }
    if (best > 1.0) ++r.outliers;
    if (best > worst) {
      worst = best;
      std::ostringstream os;
      os << "element " << i << ": analytic " << an << ", central " << diffs[0] << ", right " << diffs[1] << ", left "
         << diffs[2];
      r.worst = os.str();
    }
  }
  forward_loss(ex);
  r.checked = static_cast<int>(idx.size());
  return r;
}

class NetGradient : public SeededTest, public ::testing::WithParamInterface<bool> {};

}  // namespace

TEST_P(NetGradient, EveryParameterMatchesFiniteDifferences) {
  auto backend = cpu_backend();
  auto graph = small_graph(5);
  ExecutorOptions o;
  o.batch_size = 4;
  o.dropout_seed = seed_;
  o.reuse_memory = GetParam();
  Executor ex(*graph, *backend, o);
  ex.initialize_parameters(seed_);
  // Non-trivial BN affine parameters, so their gradients are tested away from gamma = 1, beta = 0.
  for (Parameter* p : ex.parameters())
    if (p->name == "bn1.gamma" || p->name == "bn1.beta") fill_uniform(p->master, rng_, 0.5f, 1.5f);
  ex.set_input(to_backend(*backend, random_tensor({4, 3, 8, 8}, rng_)),
               to_backend(*backend, random_labels(4, 5, rng_)));
  ex.begin_iteration();  // one dropout mask for every evaluation below

  EXPECT_TRUE(std::isfinite(forward_loss(ex)));
  ex.backward(1.0f);
  for (Parameter* p : ex.parameters()) {
    ASSERT_TRUE(p->master.device().is_cpu());
    const Tensor analytic = clone(p->grad);
    if (p->name == "conv1.bias") {
      // bn1 subtracts the batch mean of each channel, so conv1's bias cannot change the loss.
      for (float g : analytic.f32()) EXPECT_LT(std::fabs(g), 1e-5f) << "conv1.bias gradient should be 0";
      continue;
    }
    const FdResult r = finite_differences(ex, *p, analytic, rng_, 24, 1e-3);
    EXPECT_LE(r.outliers, std::max(1, r.checked / 10))
        << p->name << ": " << r.outliers << " of " << r.checked << " elements disagree with finite differences; worst "
        << r.worst;
  }
}

INSTANTIATE_TEST_SUITE_P(MemoryReuse, NetGradient, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "reuse" : "no_reuse"; });

// The imported networks' layers in one graph: channel slices of one tensor (two consumers, so the
// second accumulates), ReLU6, concat, channel shuffle, a squeeze-and-excitation block (global
// pooling, SiLU, hard sigmoid, the (N, C, 1, 1) product, both inputs trained through), a constant
// channel affine map, leaky ReLU, hard swish and sigmoid.
std::unique_ptr<Graph> imported_ops_graph(std::int64_t classes) {
  GraphBuilder g("imported_ops", Shape{3, 6, 6}, classes);
  auto x = g.conv(g.input(), "conv1", ConvSpec::make(8, 3, 1, 1));
  x = g.activation(x, "hswish1", {ActivationKind::kHardSwish, 0.0f, 0.0f});
  auto left = g.channel_slice(x, "left", 0, 4), right = g.channel_slice(x, "right", 4, 4);
  right = g.conv(right, "conv_r", ConvSpec::make(4, 1));
  right = g.activation(right, "relu6", {ActivationKind::kClip, 0.0f, 6.0f});
  x = g.channel_shuffle(g.concat({left, right}, "cat"), "shuffle", 2);
  auto se = g.global_avg_pool(x, "se_pool");
  se = g.activation(g.conv(se, "se_fc1", ConvSpec::make(4, 1)), "se_silu", {ActivationKind::kSilu, 0.0f, 0.0f});
  se = g.activation(g.conv(se, "se_fc2", ConvSpec::make(8, 1)), "se_gate", {ActivationKind::kHardSigmoid, 1.0f / 6.0f, 0.5f});
  x = g.mul(se, x, "se_scale");  // the (N, C, 1, 1) operand first, as torchvision writes it
  x = g.channel_affine(x, "affine", {0.5f, -1.0f, 2.0f, 1.0f, 0.25f, 1.5f, -0.5f, 1.0f}, {0.1f});
  x = g.activation(x, "leaky", {ActivationKind::kLeakyRelu, 0.1f, 0.0f});
  x = g.activation(g.conv(x, "conv2", ConvSpec::make(6, 3, 2, 1)), "sig", {ActivationKind::kSigmoid, 0.0f, 0.0f});
  g.softmax_loss(g.fc(x, "fc", classes));
  return g.build();
}

class ImportedOpsGradient : public SeededTest, public ::testing::WithParamInterface<bool> {};

TEST_P(ImportedOpsGradient, EveryParameterMatchesFiniteDifferences) {
  auto backend = cpu_backend();
  auto graph = imported_ops_graph(5);
  ExecutorOptions o;
  o.batch_size = 3;
  o.reuse_memory = GetParam();
  Executor ex(*graph, *backend, o);
  ex.initialize_parameters(seed_);
  ex.set_input(to_backend(*backend, random_tensor({3, 3, 6, 6}, rng_)),
               to_backend(*backend, random_labels(3, 5, rng_)));
  ex.begin_iteration();
  EXPECT_TRUE(std::isfinite(forward_loss(ex)));
  ex.backward(1.0f);
  for (Parameter* p : ex.parameters()) {
    const Tensor analytic = clone(p->grad);
    double norm = 0;
    for (float v : analytic.f32()) norm += std::fabs(v);
    EXPECT_GT(norm, 0.0) << p->name << " got no gradient";
    const FdResult r = finite_differences(ex, *p, analytic, rng_, 24, 1e-3);
    EXPECT_LE(r.outliers, std::max(1, r.checked / 10))
        << p->name << ": " << r.outliers << " of " << r.checked << " elements disagree with finite differences; worst "
        << r.worst;
  }
}

INSTANTIATE_TEST_SUITE_P(MemoryReuse, ImportedOpsGradient, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "reuse" : "no_reuse"; });

class NetLossScale : public SeededTest {};

TEST_F(NetLossScale, LossScaleScalesEveryGradient) {
  auto backend = cpu_backend();
  auto graph = small_graph(5);
  ExecutorOptions o;
  o.batch_size = 3;
  Executor ex(*graph, *backend, o);
  ex.initialize_parameters(seed_);
  ex.set_input(to_backend(*backend, random_tensor({3, 3, 8, 8}, rng_)), to_backend(*backend, random_labels(3, 5, rng_)));
  ex.begin_iteration();
  forward_loss(ex);
  ex.backward(1.0f);
  std::vector<Tensor> plain;
  for (Parameter* p : ex.parameters()) plain.push_back(clone(p->grad));
  forward_loss(ex);  // same mask, same parameters: same activations (pooled memory was reused)
  ex.backward(8.0f);
  const auto params = ex.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor scaled = clone(params[i]->grad);
    for (auto& v : scaled.f32()) v /= 8.0f;
    EXPECT_TRUE(all_close(scaled, plain[i], 1e-6, 1e-4)) << params[i]->name;
  }
}
