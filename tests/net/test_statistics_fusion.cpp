// Statistics fusion (BackendOptions::conv_statistics_fusion, net/executor.hpp): a training executor
// gives every batch norm whose input is a bias-free convolution's only output that convolution's
// sums, and trains as with the batch norms' own reductions (within the fp32 sums' rounding). Run on
// the CPU, whose convolution computes the sums after its forward: the pairing, the hand-over and the
// values are the GPU's; which kernel writes the sums is the backend's (tests/backend_cuda).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {

// conv(bias) -> bn, conv -> bn -> relu (taken by the bn), conv -> bn + add (taken by the bn),
// conv -> bn read twice: the pairs are the bias-free convolutions whose output only the bn reads.
std::unique_ptr<Graph> mixed_graph() {
  GraphBuilder g("mixed", Shape{3, 10, 10}, 4);  // 400 values per channel at batch 4
  auto x = g.relu(g.batch_norm(g.conv(g.input(), "stem", ConvSpec::make(6, 3, 1, 1)), "stem_bn"), "stem_relu");
  auto y = g.relu(g.batch_norm(g.conv(x, "c1", ConvSpec::make(6, 3, 1, 1, 1, false)), "bn1"), "r1");
  y = g.batch_norm(g.conv(y, "c2", ConvSpec::make(6, 3, 1, 1, 1, false)), "bn2");
  x = g.relu(g.add(y, x, "add"), "r2");
  auto c3 = g.conv(x, "c3", ConvSpec::make(6, 1, 1, 0, 1, false));
  auto z = g.add(g.batch_norm(c3, "bn3"), c3, "add3");  // c3's output is read twice: no pair
  g.softmax_loss(g.fc(g.global_avg_pool(z, "gap"), "fc", 4));
  return g.build();
}

// ResNet-50's bottleneck pattern at a size where every channel has at least 512 values (batch 2):
// 1x1 -> 3x3 -> 1x1 with batch norms, a strided projection shortcut, two blocks.
std::unique_ptr<Graph> bottleneck_graph() {
  GraphBuilder g("bottlenecks", Shape{3, 32, 32}, 4);
  auto x = g.relu(g.batch_norm(g.conv(g.input(), "stem", ConvSpec::make(8, 3, 1, 1, 1, false)), "stem_bn"), "stem_relu");
  for (int b = 0; b < 2; ++b) {
    const std::string n = "b" + std::to_string(b);
    const std::int64_t stride = b == 0 ? 2 : 1;
    auto y = g.relu(g.batch_norm(g.conv(x, n + "_c1", ConvSpec::make(4, 1, 1, 0, 1, false)), n + "_bn1"), n + "_r1");
    y = g.relu(g.batch_norm(g.conv(y, n + "_c2", ConvSpec::make(4, 3, stride, 1, 1, false)), n + "_bn2"), n + "_r2");
    y = g.batch_norm(g.conv(y, n + "_c3", ConvSpec::make(16, 1, 1, 0, 1, false)), n + "_bn3");
    auto shortcut = b == 0 ? g.batch_norm(g.conv(x, n + "_down", ConvSpec::make(16, 1, 2, 0, 1, false)), n + "_down_bn") : x;
    x = g.relu(g.add(y, shortcut, n + "_add"), n + "_r3");
  }
  g.softmax_loss(g.fc(g.global_avg_pool(x, "gap"), "fc", 4));
  return g.build();
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (const float v : t.f32()) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

// |a - b| <= tol * max(max |b|, 1e-3) elementwise (host fp32 tensors).
bool close_scaled(const Tensor& a, const Tensor& b, double tol) {
  if (a.numel() != b.numel()) return false;
  const double scale = std::max(max_abs(b), 1e-3);
  for (std::int64_t i = 0; i < a.numel(); ++i)
    if (std::abs(static_cast<double>(a.f32()[i]) - b.f32()[i]) > tol * scale) return false;
  return true;
}

class StatisticsFromConvolution : public SeededTest {
 protected:
  std::unique_ptr<Backend> backend(bool fusion) {
    BackendOptions o;
    o.conv_statistics_fusion = fusion ? cnnergy::StatisticsFusion::kWhereFaster : cnnergy::StatisticsFusion::kOff;
    return create_backend(o);
  }

  // Three SGD steps of both executors from the same weights and batches: losses, logits, gradients,
  // weights, running statistics and evaluation logits agree within `tol` of each tensor's magnitude.
  void expect_close_training(const Graph& graph, std::int64_t batch, Backend& ba, Executor& a, Backend& bb,
                             Executor& b, double tol) {
    a.initialize_parameters(seed_);
    b.initialize_parameters(seed_);
    SolverOptions so;
    so.schedule.base_lr = 0.05;
    SgdSolver s_a(a, so), s_b(b, so);
    std::vector<std::int64_t> dims{batch};
    for (const auto d : graph.input_per_sample().dims()) dims.push_back(d);
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const Tensor images = random_tensor(Shape(dims), rng_), labels = random_labels(batch, graph.num_classes(), rng_);
      a.set_input(to_backend(ba, images), to_backend(ba, labels));
      b.set_input(to_backend(bb, images), to_backend(bb, labels));
      a.forward(Phase::kTrain);
      b.forward(Phase::kTrain);
      EXPECT_NEAR(a.read_loss(), b.read_loss(), tol * std::max(1.0, std::abs(static_cast<double>(b.read_loss()))));
      const Tensor la = to_host(ba, a.logits()), lb = to_host(bb, b.logits());
      EXPECT_TRUE(close_scaled(la, lb, tol)) << "logits";
      // The hand-over happened: statistics from fp32 sums differ from the batch norms' own fp64
      // two-pass ones in the last bits (identical logits would mean the sums went unused).
      if (step == 0) {
        EXPECT_NE(std::memcmp(la.raw(), lb.raw(), la.size_bytes()), 0) << "logits bit for bit";
      }
      a.backward();
      b.backward();
      const auto pa = a.parameters(), pb = b.parameters();
      ASSERT_EQ(pa.size(), pb.size());
      for (std::size_t i = 0; i < pa.size(); ++i)
        EXPECT_TRUE(close_scaled(to_host(ba, pa[i]->grad), to_host(bb, pb[i]->grad), tol)) << pa[i]->name;
      s_a.step();
      s_b.step();
    }
    const auto pa = a.parameters(), pb = b.parameters();
    for (std::size_t i = 0; i < pa.size(); ++i)
      EXPECT_TRUE(close_scaled(to_host(ba, pa[i]->master), to_host(bb, pb[i]->master), tol)) << pa[i]->name;
    const auto qa = a.buffers(), qb = b.buffers();
    for (std::size_t i = 0; i < qa.size(); ++i)
      EXPECT_TRUE(close_scaled(to_host(ba, qa[i]->tensor), to_host(bb, qb[i]->tensor), tol)) << qa[i]->name;
    a.forward(Phase::kEval);
    b.forward(Phase::kEval);
    EXPECT_TRUE(close_scaled(to_host(ba, a.logits()), to_host(bb, b.logits()), tol)) << "evaluation logits";
  }
};

}  // namespace

// The pairs: bn1 (its ReLU taken), bn2 (its add taken), never the stem's (its convolution has a
// bias) nor bn3 (c3's output is read by the add too); in ResNet-50's bottleneck pattern every batch
// norm. Both train as the batch norms' own reductions do, the layers say what they took, and the
// plan is unchanged.
TEST_F(StatisticsFromConvolution, PairsConvolutionsWithTheirBatchNormsAndTrainsAsTheirOwnStatistics) {
  struct Case {
    std::unique_ptr<Graph> graph;
    std::int64_t batch;
    std::size_t pairs;
  };
  std::vector<Case> cases;
  cases.push_back({mixed_graph(), 4, 2});
  cases.push_back({bottleneck_graph(), 2, 8});  // every batch norm: the stem's, 3 per block, the projection's
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph->model_name());
    auto on = backend(true), off = backend(false);
    ExecutorOptions o;
    o.batch_size = c.batch;
    o.dropout_seed = seed_;
    Executor fused(*c.graph, *on, o), own(*c.graph, *off, o);
    EXPECT_EQ(fused.memory().conv_statistics, c.pairs);
    EXPECT_EQ(own.memory().conv_statistics, 0u);
    EXPECT_EQ(fused.memory().activation_bytes, own.memory().activation_bytes);
    std::size_t described = 0;
    for (std::size_t i = 0; i < fused.num_layers(); ++i)
      described += fused.layer(i).describe().find("statistics") != std::string::npos;
    EXPECT_EQ(described, 2 * c.pairs);  // each convolution and its batch norm
    EXPECT_EQ(fused.statistics_from_convolutions(), 0u);  // nothing computed before the first step
    expect_close_training(*c.graph, c.batch, *on, fused, *off, own, 2e-3);
    EXPECT_EQ(fused.statistics_from_convolutions(), c.pairs);  // the CPU computes every pair's sums
    EXPECT_EQ(own.statistics_from_convolutions(), 0u);
  }
}

// In ResNet-50 at 64x64 and batch 4, the batch norms with at least Conv2dDesc::kMinStatisticsValues
// values per channel: the stem's, layer1's (10), layer2's (13) and layer3.0's first; not layer3's
// 4x4 nor layer4's. (Training it is no comparison: with 16 to 64 values per channel in its last
// stages, the unfused network's own gradients move by tens of percent under rounding-size changes.)
TEST_F(StatisticsFromConvolution, ResNet50PairsTheBatchNormsWithEnoughValues) {
  auto graph = build_model("resnet50", Shape{3, 64, 64}, 10);
  auto on = backend(true);
  ExecutorOptions o;
  o.batch_size = 4;
  EXPECT_EQ(Executor(*graph, *on, o).memory().conv_statistics, 25u);
}

// Only training executors pair (an evaluation executor has no statistics to compute), nothing
// pairs without the backend's offer, nor with fewer values per channel than the sums keep exact
// enough (batch 2: 200 per channel).
TEST_F(StatisticsFromConvolution, NothingPairsInEvaluationWithoutTheOfferOrWithFewValues) {
  auto graph = mixed_graph();
  auto on = backend(true), off = backend(false);
  ExecutorOptions o;
  o.batch_size = 4;
  EXPECT_EQ(Executor(*graph, *on, o).memory().conv_statistics, 2u);
  EXPECT_EQ(Executor(*graph, *off, o).memory().conv_statistics, 0u);
  o.batch_size = 2;
  EXPECT_EQ(Executor(*graph, *on, o).memory().conv_statistics, 0u);
  o.batch_size = 4;
  o.training = false;
  EXPECT_EQ(Executor(*graph, *on, o).memory().conv_statistics, 0u);
}
