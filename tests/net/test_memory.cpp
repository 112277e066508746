// Memory planning: liveness-based reuse must need less memory than one buffer per tensor, share
// storage where it promises to (in-place ReLU, flatten views), and give bit-identical results to a
// run without any reuse: losses, logits, every parameter gradient, and parameters after SGD steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {

// A residual stack deep enough for lifetimes to end early: conv-bn-relu blocks with shortcuts.
std::unique_ptr<Graph> residual_graph() {
  GraphBuilder g("residual", Shape{3, 12, 12}, 4);
  auto x = g.relu(g.batch_norm(g.conv(g.input(), "stem", ConvSpec::make(6, 3, 1, 1)), "stem_bn"), "stem_relu");
  for (int b = 0; b < 3; ++b) {
    const std::string n = "b" + std::to_string(b);
    auto y = g.relu(g.batch_norm(g.conv(x, n + "_c1", ConvSpec::make(6, 3, 1, 1, 1, false)), n + "_bn1"), n + "_r1");
    y = g.batch_norm(g.conv(y, n + "_c2", ConvSpec::make(6, 3, 1, 1, 1, false)), n + "_bn2");
    x = g.relu(g.add(y, x, n + "_add"), n + "_r2");
  }
  x = g.max_pool(x, "pool", PoolSpec::make(2, 2));
  x = g.dropout(g.relu(g.fc(x, "fc1", 16), "fc1_relu"), "drop", 0.2f);
  g.softmax_loss(g.fc(x, "fc2", 4));
  return g.build();
}

bool same_bytes(Backend& b, const Tensor& x, const Tensor& y) {
  const Tensor hx = to_host(b, x), hy = to_host(b, y);
  return hx.size_bytes() == hy.size_bytes() && std::memcmp(hx.raw(), hy.raw(), hx.size_bytes()) == 0;
}

class MemoryPlan : public SeededTest {
 protected:
  // Three SGD steps of both executors from the same weights and batches: the same loss, logits and
  // gradients every step, the same weights after, the same evaluation logits: bit for bit. The loss must
  // stay finite (two NaN losses would say nothing): the learning rate is small enough for VGG-16 without
  // batch norm on random labels (0.05 diverged to NaN by the third step for some seeds).
  void expect_same_training(const Graph& graph, Backend& backend, std::int64_t batch, Executor& a, Executor& b) {
    a.initialize_parameters(seed_);
    b.initialize_parameters(seed_);
    SolverOptions so;
    so.schedule.base_lr = 0.01;
    SgdSolver s_a(a, so), s_b(b, so);
    const auto& in_shape = graph.input_per_sample().dims();
    std::vector<std::int64_t> dims{batch};
    dims.insert(dims.end(), in_shape.begin(), in_shape.end());
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      Tensor images = to_backend(backend, random_tensor(Shape(dims), rng_));
      Tensor labels = to_backend(backend, random_labels(batch, graph.num_classes(), rng_));
      a.set_input(images, labels);
      b.set_input(images, labels);
      a.forward(Phase::kTrain);
      b.forward(Phase::kTrain);
      ASSERT_TRUE(std::isfinite(a.read_loss())) << "the training diverged: the comparison would say nothing";
      EXPECT_EQ(a.read_loss(), b.read_loss());
      EXPECT_TRUE(same_bytes(backend, a.logits(), b.logits()));
      a.backward();
      b.backward();
      const auto pa = a.parameters(), pb = b.parameters();
      ASSERT_EQ(pa.size(), pb.size());
      for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bytes(backend, pa[i]->grad, pb[i]->grad)) << pa[i]->name;
      s_a.step();
      s_b.step();
    }
    const auto pa = a.parameters(), pb = b.parameters();
    for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bytes(backend, pa[i]->master, pb[i]->master)) << pa[i]->name;
    a.forward(Phase::kEval);
    b.forward(Phase::kEval);
    EXPECT_TRUE(same_bytes(backend, a.logits(), b.logits()));
  }

  void compare(const Graph& graph, std::int64_t batch) {
    auto backend = cpu_backend();
    ExecutorOptions o;
    o.batch_size = batch;
    o.dropout_seed = seed_;
    Executor reuse(graph, *backend, o);
    o.reuse_memory = false;
    Executor naive(graph, *backend, o);
    EXPECT_LT(reuse.memory().activation_bytes, naive.memory().activation_bytes);
    EXPECT_EQ(naive.memory().activation_bytes, naive.memory().naive_bytes);
    EXPECT_EQ(reuse.memory().naive_bytes, naive.memory().naive_bytes);
    EXPECT_LT(reuse.memory().num_buffers, naive.memory().num_buffers);
    EXPECT_GT(reuse.memory().parameter_bytes, 0u);

    expect_same_training(graph, *backend, batch, reuse, naive);
    const auto pr = reuse.parameters();

    // An inference-only executor keeps nothing for backward: less memory still, same logits.
    o.training = false;
    o.reuse_memory = true;
    Executor infer(graph, *backend, o);
    EXPECT_LT(infer.memory().activation_bytes, reuse.memory().activation_bytes);
    for (std::size_t i = 0; i < pr.size(); ++i) {
      backend->copy(pr[i]->master, infer.parameters()[i]->master);
    }
    const auto br = reuse.buffers(), bi = infer.buffers();
    for (std::size_t i = 0; i < br.size(); ++i) backend->copy(br[i]->tensor, bi[i]->tensor);
    infer.set_input(reuse.input(), reuse.labels());
    infer.forward(Phase::kEval);
    EXPECT_TRUE(same_bytes(*backend, infer.logits(), naive.logits()));
    EXPECT_THROW(infer.forward(Phase::kTrain), InvalidArgument);
    EXPECT_THROW(infer.backward(), InvalidArgument);
  }
};

// conv -> a batch norm (or a ReLU) read by two max pools whose sum feeds the loss: a pool's input that
// another layer reads too.
std::unique_ptr<Graph> pool_input_read_twice(bool batch_norm) {
  GraphBuilder g("shared", Shape{3, 8, 8}, 4);
  auto conv = g.conv(g.input(), "conv", ConvSpec::make(8, 3, 1, 1));
  auto x = batch_norm ? g.batch_norm(conv, "bn") : g.relu(conv, "relu");
  auto pooled = g.max_pool(x, "pool", PoolSpec::make(2, 2));
  auto side = g.max_pool(x, "side", PoolSpec::make(2, 2));
  g.softmax_loss(g.fc(g.add(pooled, side, "sum"), "fc", 4));
  return g.build();
}

// A training executor's memory report at batch 2.
MemoryReport memory_at_batch_2(const Graph& graph, Backend& backend) {
  ExecutorOptions o;
  o.batch_size = 2;
  return Executor(graph, backend, o).memory();
}

}  // namespace

TEST_F(MemoryPlan, ReuseIsSmallerAndBitIdenticalOnTheSmallGraph) { compare(*small_graph(5), 3); }

TEST_F(MemoryPlan, ReuseIsSmallerAndBitIdenticalOnAResidualStack) { compare(*residual_graph(), 4); }

// ReLU fusion changes no value: batch norms and adds that take the ReLU after them train bit for bit
// as separate layers do, with and without memory reuse; the absorbed ReLU's output and input
// gradient are its producer's (also without reuse), and it says where it went.
TEST_F(MemoryPlan, FusedReluTrainsBitForBitAsSeparateLayers) {
  auto backend = cpu_backend();
  auto graph = residual_graph();
  auto out = [&](const char* layer) { return graph->layer_outputs(graph->layer_index(layer))[0]; };
  for (const bool reuse : {true, false}) {
    SCOPED_TRACE(reuse ? "reuse" : "no reuse");
    ExecutorOptions o;
    o.batch_size = 4;
    o.dropout_seed = seed_;
    o.reuse_memory = reuse;
    // The ReLU fusion alone: the add's mask in the batch norm's backward keeps a tensor live one
    // layer longer (BatchNormTakesTheResidualAdd... below).
    o.fuse_residual_backward = false;
    Executor fused(*graph, *backend, o);
    o.fuse_relu = false;
    Executor separate(*graph, *backend, o);
    // stem_relu and the three b*_r1 follow a batch norm, the three b*_r2 an add; fc1_relu an fc,
    // which keeps it.
    EXPECT_EQ(fused.memory().fused_relus, 7u);
    EXPECT_EQ(separate.memory().fused_relus, 0u);
    const Layer& relu = fused.layer(graph->layer_index("b1_r1"));
    EXPECT_TRUE(relu.absorbed());
    EXPECT_EQ(relu.describe(), "relu (fused into b1_bn1)");
    // (Its statistics come from the convolution before it: BackendOptions::conv_statistics_fusion, on by default.)
    EXPECT_EQ(fused.layer(graph->layer_index("b1_bn1")).describe(), "batch_norm (statistics from its convolution) + relu");
    EXPECT_EQ(fused.layer(graph->layer_index("b1_r2")).describe(), "relu (fused into b1_add)");
    EXPECT_EQ(fused.layer(graph->layer_index("b1_add")).describe(), "add + relu");
    EXPECT_FALSE(fused.layer(graph->layer_index("fc1_relu")).absorbed());
    EXPECT_EQ(fused.activation(out("b1_r1")).raw(), fused.activation(out("b1_bn1")).raw());
    EXPECT_EQ(fused.gradient(out("b1_r1")).raw(), fused.gradient(out("b1_bn1")).raw());
    if (reuse) {
      EXPECT_LE(fused.memory().activation_bytes, separate.memory().activation_bytes);
    }
    expect_same_training(*graph, *backend, 4, fused, separate);
  }
}

// A batch norm takes the residual add after it (and the add's ReLU) in training: its forward
// writes relu?(bn(x) + z) into the add's output, the add's forward runs nothing, its backward runs
// as before, or, with the add's ReLU, leaves the mask to the batch norm's backward
// (ExecutorOptions::fuse_residual_backward). Bit for bit what the separate layers compute, with and
// without memory reuse and with and without the ReLU fusion; evaluation (running statistics) likewise.
TEST_F(MemoryPlan, BatchNormTakesTheResidualAddAndTrainsBitForBit) {
  auto backend = cpu_backend();
  auto graph = residual_graph();
  auto out = [&](const char* layer) { return graph->layer_outputs(graph->layer_index(layer))[0]; };
  for (const bool reuse : {true, false}) {
    for (const bool relu : {true, false}) {
      SCOPED_TRACE(std::string(reuse ? "reuse" : "no reuse") + (relu ? ", relu fused" : ", relu separate"));
      ExecutorOptions o;
      o.batch_size = 4;
      o.dropout_seed = seed_;
      o.reuse_memory = reuse;
      o.fuse_relu = relu;
      Executor fused(*graph, *backend, o);
      o.fuse_residual_backward = false;
      Executor forward_only(*graph, *backend, o);
      o.fuse_residual = false;
      o.fuse_residual_backward = true;
      Executor separate(*graph, *backend, o);
      EXPECT_EQ(fused.memory().fused_residuals, 3u);  // b0_bn2, b1_bn2, b2_bn2 take b*_add
      // With the add's ReLU, each batch norm (right before its add) masks in its backward too.
      EXPECT_EQ(fused.memory().fused_residual_masks, relu ? 3u : 0u);
      EXPECT_EQ(forward_only.memory().fused_residuals, 3u);
      EXPECT_EQ(forward_only.memory().fused_residual_masks, 0u);
      EXPECT_EQ(separate.memory().fused_residuals, 0u);
      EXPECT_EQ(separate.memory().fused_residual_masks, 0u);
      EXPECT_EQ(fused.layer(graph->layer_index("b1_bn2")).describe(),
                relu ? "batch_norm (statistics from its convolution) + add + relu"
                     : "batch_norm (statistics from its convolution) + add");
      EXPECT_EQ(separate.layer(graph->layer_index("b1_bn2")).describe(), "batch_norm (statistics from its convolution)");
      // The add's output is the batch norm's: one tensor in every plan.
      EXPECT_EQ(fused.activation(out("b1_add")).raw(), fused.activation(out("b1_bn2")).raw());
      EXPECT_NE(separate.activation(out("b1_add")).raw(), separate.activation(out("b1_bn2")).raw());
      EXPECT_LT(fused.memory().naive_bytes, separate.memory().naive_bytes);
      if (reuse) {
        EXPECT_LE(forward_only.memory().activation_bytes, separate.memory().activation_bytes);
        // The mask in the batch norm's backward keeps the add's output (the batch norm's) live
        // through that backward: at most that one tensor more at once.
        const std::size_t add_out = fused.activation(out("b1_add")).size_bytes();
        EXPECT_LE(fused.memory().activation_bytes, forward_only.memory().activation_bytes + add_out);
      }
      expect_same_training(*graph, *backend, 4, fused, separate);
      // Fresh executors (dropout masks follow the iteration count): the forward fusion alone, too.
      o.fuse_residual = true;
      o.fuse_residual_backward = false;
      Executor forward_only_again(*graph, *backend, o);
      o.fuse_residual = false;
      Executor separate_again(*graph, *backend, o);
      expect_same_training(*graph, *backend, 4, forward_only_again, separate_again);
    }
  }
}

// An add whose batch norm input is read by another layer too, or whose other input is computed
// after the batch norm, is not offered: both would need a value the fused pass never writes or
// has not yet got.
TEST_F(MemoryPlan, BatchNormResidualFusionNeedsTheAddAsSoleReaderAndItsOtherInputReady) {
  auto backend = cpu_backend();
  GraphBuilder g("residual_cases", Shape{3, 8, 8}, 4);
  auto x = g.relu(g.batch_norm(g.conv(g.input(), "stem", ConvSpec::make(4, 3, 1, 1)), "stem_bn"), "stem_relu");
  // bn_a is also read by conv_side: not offered.
  auto a = g.batch_norm(g.conv(x, "conv_a", ConvSpec::make(4, 3, 1, 1, 1, false)), "bn_a");
  auto side = g.conv(a, "conv_side", ConvSpec::make(4, 1, 1, 0, 1, false));
  auto y = g.relu(g.add(a, x, "add_a"), "relu_a");
  // bn_b's add reads a tensor computed after bn_b (conv_late): not offered.
  auto b = g.batch_norm(g.conv(y, "conv_b", ConvSpec::make(4, 3, 1, 1, 1, false)), "bn_b");
  auto late = g.conv(side, "conv_late", ConvSpec::make(4, 1, 1, 0, 1, false));
  auto z = g.relu(g.add(b, late, "add_b"), "relu_b");
  g.softmax_loss(g.fc(z, "fc", 4));
  auto graph = g.build();
  ExecutorOptions o;
  o.batch_size = 4;
  Executor ex(*graph, *backend, o);
  EXPECT_EQ(ex.memory().fused_residuals, 0u);
  EXPECT_EQ(ex.layer(graph->layer_index("bn_a")).describe(), "batch_norm (statistics from its convolution)");
  EXPECT_EQ(ex.layer(graph->layer_index("bn_b")).describe(), "batch_norm (statistics from its convolution)");
}

// A convolution with a bias takes the ReLU after it in training too: forward clamps in the
// convolution's own pass, backward masks the output gradient by the output first; bit for bit what
// the separate ReLU computes, with and without memory reuse.
TEST_F(MemoryPlan, ConvolutionTakesTheReluAfterItAndTrainsBitForBit) {
  auto backend = cpu_backend();
  auto graph = small_graph(5);
  for (const bool reuse : {true, false}) {
    SCOPED_TRACE(reuse ? "reuse" : "no reuse");
    ExecutorOptions o;
    o.batch_size = 4;
    o.dropout_seed = seed_;
    o.reuse_memory = reuse;
    Executor fused(*graph, *backend, o);
    o.fuse_relu = false;
    Executor separate(*graph, *backend, o);
    EXPECT_EQ(fused.memory().fused_relus, 2u);  // relu1 into bn1, relu_a into conv_a
    EXPECT_EQ(fused.layer(graph->layer_index("relu_a")).describe(), "relu (fused into conv_a)");
    expect_same_training(*graph, *backend, 4, fused, separate);
  }
}

TEST_F(MemoryPlan, InPlaceReluAndFlattenViewsShareStorage) {
  auto backend = cpu_backend();
  auto graph = small_graph(5);
  ExecutorOptions o;
  o.batch_size = 2;
  o.fuse_relu = false;  // the in-place ReLU itself (fused, it would be bn1's output in any plan)
  Executor ex(*graph, *backend, o);
  auto out = [&](const char* layer) { return graph->layer_outputs(graph->layer_index(layer))[0]; };
  // relu1 reads bn1's output, which only it reads and BN's backward does not need: in place.
  EXPECT_EQ(ex.activation(out("relu1")).raw(), ex.activation(out("bn1")).raw());
  // fc's flatten is a view of the dropout output on NCHW.
  EXPECT_EQ(ex.activation(out("fc_flatten")).raw(), ex.activation(out("drop")).raw());
  // pool1's output is read by two convolutions and kept for their backward: never shared with them.
  EXPECT_NE(ex.activation(out("pool1")).raw(), ex.activation(out("conv_a")).raw());
  // Without reuse nothing is shared.
  o.reuse_memory = false;
  Executor plain(*graph, *backend, o);
  EXPECT_NE(plain.activation(out("relu1")).raw(), plain.activation(out("bn1")).raw());
}

// Gradients share storage where a layer hands its output gradient on (add) or computes the input
// gradient in place (ReLU) and is the input's sole consumer; never where another layer also writes.
TEST_F(MemoryPlan, AddAndReluGradientsShareTheOutputGradient) {
  auto backend = cpu_backend();
  auto graph = residual_graph();
  ExecutorOptions o;
  o.batch_size = 2;
  o.fuse_relu = false;
  Executor ex(*graph, *backend, o);
  auto out = [&](const char* layer) { return graph->layer_outputs(graph->layer_index(layer))[0]; };
  // b0_bn2's output is read by the add alone: its gradient is the add's output gradient, which is
  // also the gradient the following ReLU writes in place.
  EXPECT_EQ(ex.gradient(out("b0_bn2")).raw(), ex.gradient(out("b0_add")).raw());
  EXPECT_EQ(ex.gradient(out("b0_add")).raw(), ex.gradient(out("b0_r2")).raw());
  // The shortcut (stem_relu's output) also feeds b0_c1, which comes before the add: the add writes
  // its gradient first (in place: it is the add's output gradient) and b0_c1 accumulates into it
  // after every other reader of that buffer is done.
  EXPECT_EQ(ex.gradient(out("stem_relu")).raw(), ex.gradient(out("b0_add")).raw());
  EXPECT_EQ(ex.gradient(out("b0_r2")).raw(), ex.gradient(out("b1_add")).raw());
  o.reuse_memory = false;
  Executor plain(*graph, *backend, o);
  EXPECT_NE(plain.gradient(out("b0_bn2")).raw(), plain.gradient(out("b0_add")).raw());
}

// A shortcut whose other consumers' backward would run while another tensor of the add's gradient
// group is still being read or written keeps its own gradient: here x feeds conv_p, conv_c and add1;
// add1's other input (bn_p's output) and add2's (conv_c's) are read in backward between conv_c's and
// conv_p's accumulations into x's gradient. Training stays bit-identical to the plan without reuse.
std::unique_ptr<Graph> crossed_shortcut_graph() {
  GraphBuilder g("crossed", Shape{3, 8, 8}, 4);
  auto x = g.relu(g.conv(g.input(), "stem", ConvSpec::make(4, 3, 1, 1)), "stem_relu");
  auto p = g.batch_norm(g.conv(x, "conv_p", ConvSpec::make(4, 3, 1, 1, 1, false)), "bn_p");
  auto q = g.conv(x, "conv_c", ConvSpec::make(4, 3, 1, 1, 1, false));
  auto s = g.add(p, x, "add1");
  auto r = g.relu(g.add(s, q, "add2"), "relu2");
  g.softmax_loss(g.fc(g.max_pool(r, "pool", PoolSpec::make(2, 2)), "fc", 4));
  return g.build();
}

TEST_F(MemoryPlan, ShortcutGradientSharesOnlyWhereThePlanStaysExact) {
  auto backend = cpu_backend();
  auto graph = crossed_shortcut_graph();
  ExecutorOptions o;
  o.batch_size = 2;
  Executor ex(*graph, *backend, o);
  auto out = [&](const char* layer) { return graph->layer_outputs(graph->layer_index(layer))[0]; };
  EXPECT_NE(ex.gradient(out("stem_relu")).raw(), ex.gradient(out("add1")).raw());
  EXPECT_EQ(ex.gradient(out("bn_p")).raw(), ex.gradient(out("add1")).raw());  // its sole consumer
  compare(*graph, 3);
}

// The arena lands on the lower bound (the most bytes live at one step) on the papers' networks,
// within alignment, and every placed tensor stays inside it.
TEST_F(MemoryPlan, ArenaIsTheLivePeakOnZooNetworks) {
  auto backend = cpu_backend();
  struct Case {
    const char* model;
    std::optional<Shape> input;
  };
  for (const Case& c : {Case{"resnet50", Shape{3, 64, 64}}, Case{"vgg16", Shape{3, 32, 32}},
                        Case{"googlenet", Shape{3, 96, 96}}, Case{"lenet5", std::nullopt}}) {
    auto graph = build_model(c.model, c.input, 10);
    ExecutorOptions o;
    o.batch_size = 2;
    Executor ex(*graph, *backend, o);
    const MemoryReport& m = ex.memory();
    EXPECT_GE(m.activation_bytes, m.live_peak_bytes) << c.model;
    EXPECT_LE(static_cast<double>(m.activation_bytes), 1.02 * static_cast<double>(m.live_peak_bytes) + 65536.0)
        << c.model << ": arena " << m.activation_bytes << " vs live peak " << m.live_peak_bytes;
    EXPECT_LT(m.activation_bytes, m.naive_bytes) << c.model;
    EXPECT_EQ(m.num_buffers, 1u);
  }
}

// A max pool after a convolution's fused ReLU applies that ReLU's mask in its backward
// (ExecutorOptions::pool_relu_mask, Pool2dDesc::relu_mask): it keeps its argmax, the convolution skips its
// own mask, and its output dies after the pool's forward. Training is the unmasked pair's bit for bit
// (losses, logits, every gradient and weight over three SGD steps), on VGG-16's 2x2 pools and AlexNet's
// overlapping 3x3/2 ones (two windows may share an argmax: their gradients add before the mask, as
// the ReLU's backward after the pool's would see them); the activation plan shrinks: VGG-16 b2 at
// 32x32 from every pool's input live at the peak to none of them.
TEST_F(MemoryPlan, PoolTakesTheConvolutionsReluMaskAndTrainsBitForBit) {
  auto backend = cpu_backend();
  for (const auto& [model, input, pools] : {std::tuple{"vgg16", Shape{3, 32, 32}, 5u},
                                            std::tuple{"alexnet", Shape{3, 79, 79}, 3u}}) {
    SCOPED_TRACE(model);
    auto graph = build_model(model, input, 10);
    ExecutorOptions o;
    o.batch_size = 2;
    o.dropout_seed = seed_;
    Executor masked(*graph, *backend, o);
    o.pool_relu_mask = false;
    Executor plain(*graph, *backend, o);
    EXPECT_EQ(masked.memory().relu_mask_pools, pools);
    EXPECT_EQ(plain.memory().relu_mask_pools, 0u);
    EXPECT_EQ(plain.memory().kept_pool_argmaxes, 0u);
    EXPECT_LT(masked.memory().live_peak_bytes, plain.memory().live_peak_bytes);
    for (const auto& [what, bytes] : masked.memory().live_at_peak) {
      (void)bytes;
      for (std::size_t i = 0; i < graph->num_layers(); ++i)
        if (graph->layer(i).type() == "max_pool") {  // no pool's input (a convolution's ReLU output) is live there
          const int producer = graph->tensor(graph->layer_inputs(i)[0]).producer;
          const int conv = graph->tensor(graph->layer_inputs(static_cast<std::size_t>(producer))[0]).producer;
          EXPECT_NE(what, "output of " + graph->layer(static_cast<std::size_t>(conv)).name()) << masked.memory().peak_step;
        }
    }
    expect_same_training(*graph, *backend, 2, masked, plain);
  }
  // The ReLU's output read by another layer too: no pool takes the mask.
  EXPECT_EQ(memory_at_batch_2(*pool_input_read_twice(false), *backend).relu_mask_pools, 0u);
}

// What the plan says is live at its peak (MemoryReport::live_at_peak, peak_step): the items add up to
// live_peak_bytes, largest first, each named after a layer of the graph; in training the first
// convolution's output (the largest activation, read again by its own backward, the last) is live there
// and the largest; with recomputation (budget 0) the peak and what is live there change with the plan.
TEST_F(MemoryPlan, WhatIsLiveAtThePeakAddsUpToIt) {
  auto backend = cpu_backend();
  for (const auto& [model, input, budget] :
       {std::tuple{"vgg16", Shape{3, 32, 32}, std::optional<std::size_t>{}},
        std::tuple{"resnet50", Shape{3, 64, 64}, std::optional<std::size_t>{}},
        std::tuple{"resnet50", Shape{3, 64, 64}, std::optional<std::size_t>{0}}}) {
    const std::string what = std::string(model) + (budget ? " recomputed" : "");
    auto graph = build_model(model, input, 10);
    ExecutorOptions o;
    o.batch_size = 2;
    o.activation_budget_bytes = budget;
    Executor ex(*graph, *backend, o);
    const MemoryReport& m = ex.memory();
    ASSERT_FALSE(m.live_at_peak.empty()) << what;
    std::size_t sum = 0, largest_activation = 0;
    for (std::size_t k = 0; k < m.live_at_peak.size(); ++k) {
      const auto& [name, bytes] = m.live_at_peak[k];
      sum += bytes;
      if (k > 0) {
        EXPECT_LE(bytes, m.live_at_peak[k - 1].bytes) << what << ": not largest first at " << name;
      }
      std::string layer;
      for (const char* prefix : {"output of ", "gradient of the output of ", "workspace of "})
        if (name.rfind(prefix, 0) == 0) layer = name.substr(std::strlen(prefix));
      layer = layer.substr(0, layer.find(' '));
      EXPECT_NO_THROW((void)graph->layer_index(layer)) << what << ": '" << name << "' names no layer";
    }
    EXPECT_EQ(sum, m.live_peak_bytes) << what;
    EXPECT_TRUE(m.peak_step.rfind("forward of ", 0) == 0 || m.peak_step.rfind("backward of ", 0) == 0) << m.peak_step;
    for (std::size_t t = 1; t < graph->num_tensors(); ++t)
      largest_activation = std::max<std::size_t>(
          largest_activation, static_cast<std::size_t>(graph->tensor(static_cast<int>(t)).shape.with_batch(2).numel()) * 4);
    if (!budget) {
      EXPECT_EQ(m.live_at_peak.front().bytes, largest_activation) << what << ": " << m.live_at_peak.front().what;
      EXPECT_EQ(m.live_at_peak.front().what.rfind("output of ", 0), 0u) << what << ": " << m.live_at_peak.front().what;
    }
  }
}

// Recomputation (ExecutorOptions::activation_budget_bytes) changes no value: batch-norm outputs
// dropped after forward and written again before their first backward reader train bit for bit as
// kept ones, on a residual stack (fused ReLUs and residual adds) and ResNet-50; with budget 0 every
// candidate that lowers the peak is recomputed (each block's first two batch norms in ResNet-50, never
// one with a fused add; the stem's is applied by its max pool, ExecutorOptions::fuse_batch_norm_pool,
// so its output is never written), and the most bytes live at one step drop.
TEST_F(MemoryPlan, RecomputedBatchNormOutputsTrainBitForBitInLessMemory) {
  auto backend = cpu_backend();
  struct Case {
    std::unique_ptr<Graph> graph;
    std::int64_t batch;
    std::size_t expected;  // batch norms recomputed with budget 0
  };
  std::vector<Case> cases;
  cases.push_back({residual_graph(), 4, 4});  // stem_bn and each block's bn1 (bn2 takes the add)
  cases.push_back({build_model("resnet50", Shape{3, 32, 32}, 10), 2, 32});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.graph->model_name());
    ExecutorOptions o;
    o.batch_size = c.batch;
    o.dropout_seed = seed_;
    Executor kept(*c.graph, *backend, o);
    o.activation_budget_bytes = 0;
    Executor rebuilt(*c.graph, *backend, o);
    EXPECT_EQ(kept.memory().recomputed_outputs, 0u);
    EXPECT_EQ(rebuilt.memory().recomputed_outputs, c.expected);
    EXPECT_GT(rebuilt.memory().recomputed_bytes, 0u);
    EXPECT_LT(rebuilt.memory().live_peak_bytes, kept.memory().live_peak_bytes);
    EXPECT_LT(rebuilt.memory().activation_bytes, kept.memory().activation_bytes);
    expect_same_training(*c.graph, *backend, c.batch, rebuilt, kept);
  }
}

// The batch-norm apply fusion (ExecutorOptions::fuse_batch_norm_pool): ResNet-50's and ResNet-34's
// stem max pool applies the stem batch norm (and its ReLU) as it reads that batch norm's input, and
// keeps its argmax. Training is the unfused pair's bit for bit (losses, logits, every gradient and
// weight over three steps, then an evaluation forward); the batch norm's output has no memory (its
// activation is undefined, the planned tensors shrink by it) and the planned peak does not grow; the
// layers say what they do. A graph whose pool reads the batch norm's output beside another layer
// gets no fusion.
TEST_F(MemoryPlan, NormalisingPoolTrainsAsTheBatchNormThenPool) {
  auto backend = cpu_backend();
  for (const char* model : {"resnet50", "resnet34"}) {
    SCOPED_TRACE(model);
    auto graph = build_model(model, Shape{3, 32, 32}, 10);
    ExecutorOptions o;
    o.batch_size = 2;
    o.dropout_seed = seed_;
    Executor fused(*graph, *backend, o);
    o.fuse_batch_norm_pool = false;
    Executor plain(*graph, *backend, o);
    EXPECT_EQ(fused.memory().normalising_pools, 1u);
    EXPECT_EQ(plain.memory().normalising_pools, 0u);
    EXPECT_EQ(fused.memory().kept_pool_argmaxes, 1u);
    EXPECT_LT(fused.memory().naive_bytes, plain.memory().naive_bytes);
    EXPECT_LE(fused.memory().live_peak_bytes, plain.memory().live_peak_bytes);
    int stem_bn = -1, stem_pool = -1;
    for (std::size_t i = 0; i < graph->num_layers(); ++i) {
      if (stem_bn < 0 && graph->layer(i).type() == "batch_norm") stem_bn = static_cast<int>(i);
      if (stem_pool < 0 && graph->layer(i).type() == "max_pool") stem_pool = static_cast<int>(i);
    }
    ASSERT_GE(stem_bn, 0);
    ASSERT_GE(stem_pool, 0);
    EXPECT_NE(fused.layer(static_cast<std::size_t>(stem_bn)).describe().find("applied by the max pool"), std::string::npos)
        << fused.layer(static_cast<std::size_t>(stem_bn)).describe();
    EXPECT_NE(fused.layer(static_cast<std::size_t>(stem_pool)).describe().find("normalising"), std::string::npos);
    const int bn_out = graph->layer_outputs(static_cast<std::size_t>(stem_bn))[0];
    EXPECT_FALSE(fused.activation(bn_out).defined());
    EXPECT_TRUE(plain.activation(bn_out).defined());
    expect_same_training(*graph, *backend, 2, fused, plain);
  }
  // The pool's input read by another layer too: no fusion.
  EXPECT_EQ(memory_at_batch_2(*pool_input_read_twice(true), *backend).normalising_pools, 0u);
}

// The budget is met with as few recomputations as it needs, largest first: a budget between the
// all-recomputed and the kept peak recomputes some but not all, and lands at or under the budget; a
// budget above the kept peak recomputes nothing; one below what recomputation can reach recomputes
// everything it can and says so in the report (the plan is still valid).
TEST_F(MemoryPlan, ActivationBudgetRecomputesOnlyWhatItNeeds) {
  auto backend = cpu_backend();
  auto graph = build_model("resnet50", Shape{3, 32, 32}, 10);
  ExecutorOptions o;
  o.batch_size = 2;
  Executor kept(*graph, *backend, o);
  o.activation_budget_bytes = 0;
  Executor all(*graph, *backend, o);
  const std::size_t high = kept.memory().live_peak_bytes, low = all.memory().live_peak_bytes;
  ASSERT_LT(low, high);
  o.activation_budget_bytes = high;
  EXPECT_EQ(Executor(*graph, *backend, o).memory().recomputed_outputs, 0u);
  o.activation_budget_bytes = (high + low) / 2;
  Executor some(*graph, *backend, o);
  EXPECT_GT(some.memory().recomputed_outputs, 0u);
  EXPECT_LT(some.memory().recomputed_outputs, all.memory().recomputed_outputs);
  EXPECT_LE(some.memory().live_peak_bytes, *o.activation_budget_bytes);
  expect_same_training(*graph, *backend, 2, some, kept);
}

// Without memory reuse (every tensor its own buffer) or in an evaluation executor nothing is recomputed.
TEST_F(MemoryPlan, NothingIsRecomputedWithoutReuseOrTraining) {
  auto backend = cpu_backend();
  auto graph = residual_graph();
  ExecutorOptions o;
  o.batch_size = 2;
  o.activation_budget_bytes = 0;
  o.reuse_memory = false;
  EXPECT_EQ(Executor(*graph, *backend, o).memory().recomputed_outputs, 0u);
  o.reuse_memory = true;
  o.training = false;
  EXPECT_EQ(Executor(*graph, *backend, o).memory().recomputed_outputs, 0u);
}
