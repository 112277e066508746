// Graph building: structure, parameter counts, per-layer workload formulas (Castro et al. 2019, Section 4),
// and the shape/argument errors a bad model definition must produce.
#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "net_testing.hpp"

using namespace cnnergy;
using namespace cnnergy::test;

namespace {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Graph, StructureAndParameterCount) {
  auto g = small_graph(5);
  ASSERT_EQ(g->num_layers(), 15u);  // fc's automatic flatten included
  EXPECT_EQ(g->layer(g->layer_index("fc_flatten")).type(), "flatten");
  EXPECT_EQ(g->layer(static_cast<std::size_t>(g->loss_layer())).type(), "softmax_loss");
  EXPECT_EQ(g->tensor(g->logits_tensor()).shape, (Shape{1, 5}));
  // conv1 112 + bn1 8 + conv_a 148 + conv_b 20 + fc (32*5+5) 165
  EXPECT_EQ(g->parameter_count(), 453);
  EXPECT_EQ(g->total_workload().parameters, 453);
  // conv_b's output feeds the add and the concat.
  const int b = g->layer_outputs(g->layer_index("conv_b"))[0];
  EXPECT_EQ(g->tensor(b).consumers.size(), 2u);
  EXPECT_FALSE(g->tensor(g->input_tensor()).needs_grad);
  EXPECT_TRUE(g->tensor(b).needs_grad);
  EXPECT_FALSE(g->layer(0).input_grad_needed());
  EXPECT_TRUE(g->layer(g->layer_index("conv_a")).input_grad_needed());
  EXPECT_EQ(g->layer(g->layer_index("pool2")).type(), "avg_pool");
  EXPECT_EQ(g->layer(g->layer_index("sum")).category(), LayerCategory::kEltwise);
  EXPECT_EQ(category_name(g->layer(g->layer_index("lrn")).category()), "norm");
}

TEST(Graph, ConvAndFcWorkloadFollowCastro2019) {
  auto g = small_graph(5);
  // conv1: 3x8x8 -> 4x8x8, 3x3 kernel. Eq. 1: 9*64*3*4 maccs + 4*64 bias adds.
  const Workload& c1 = g->layer_workload(0);
  EXPECT_EQ(c1.operations, 6912 + 256);
  EXPECT_EQ(c1.flops_forward, 2 * 6912 + 256);
  EXPECT_EQ(c1.flops_backward, 2 * 6912 + 256);  // first layer: no data gradient
  EXPECT_EQ(c1.read_elements, 192 + 108 + 4);     // Eq. 8: input + all weights + bias
  EXPECT_EQ(c1.written_elements, 256);            // Eq. 9
  EXPECT_EQ(c1.parameters, 112);
  // conv_a: 4x4x4 -> 4x4x4 with a data gradient.
  const Workload& ca = g->layer_workload(g->layer_index("conv_a"));
  EXPECT_EQ(ca.operations, 9 * 16 * 4 * 4 + 64);
  EXPECT_EQ(ca.flops_backward, 4 * (9 * 16 * 4 * 4) + 64);
  // fc: Eq. 2, 32 x 5 maccs.
  const Workload& fc = g->layer_workload(g->layer_index("fc"));
  EXPECT_EQ(fc.operations, 160);
  EXPECT_EQ(fc.flops_forward, 325);
  // pool1: Eq. 3, 2x2 window x 4x4x4 outputs; relu1: Eq. 4; bn1: Eq. 6; loss: Eq. 7.
  EXPECT_EQ(g->layer_workload(g->layer_index("pool1")).operations, 4 * 64);
  EXPECT_EQ(g->layer_workload(g->layer_index("relu1")).operations, 256);
  EXPECT_EQ(g->layer_workload(g->layer_index("bn1")).operations, 512);
  EXPECT_EQ(g->layer_workload(g->layer_index("drop")).operations, 32);
  EXPECT_EQ(g->layer_workload(static_cast<std::size_t>(g->loss_layer())).operations, 15);
  // Eqs. 10-12: a batch multiplies everything but the parameter count.
  const Workload b = g->total_workload().for_batch(8);
  EXPECT_EQ(b.operations, 8 * g->total_workload().operations);
  EXPECT_EQ(b.read_elements, 8 * g->total_workload().read_elements);
  EXPECT_EQ(b.parameters, 453);
}

TEST(Graph, GroupedConvCountsChannelsPerGroup) {
  GraphBuilder g("grouped", Shape{4, 6, 6}, 3);
  auto x = g.conv(g.input(), "conv", ConvSpec::make(6, 3, 1, 0, /*groups=*/2, /*bias=*/false));
  g.softmax_loss(g.fc(x, "fc", 3));
  auto graph = g.build();
  const Workload& w = graph->layer_workload(0);
  EXPECT_EQ(w.parameters, 6 * 2 * 9);
  EXPECT_EQ(w.operations, 6 * 2 * 9 * 16);  // no bias adds
}

TEST(Graph, ShapeErrorsNameTheLayer) {
  {
    GraphBuilder g("m", Shape{3, 4, 4}, 2);
    const std::string msg = error_of([&] { g.conv(g.input(), "too_big", ConvSpec::make(8, 5)); });
    EXPECT_NE(msg.find("too_big"), std::string::npos) << msg;
    EXPECT_THROW(g.conv(g.input(), "too_big2", ConvSpec::make(8, 5)), ShapeError);
  }
  {
    GraphBuilder g("m", Shape{3, 4, 4}, 2);
    auto a = g.conv(g.input(), "a", ConvSpec::make(8, 3, 1, 1));
    auto b = g.conv(g.input(), "b", ConvSpec::make(4, 3, 1, 1));
    const std::string msg = error_of([&] { g.add(a, b, "mismatch"); });
    EXPECT_NE(msg.find("mismatch"), std::string::npos) << msg;
    EXPECT_THROW(g.add(a, b, "mismatch2"), ShapeError);
    auto c = g.max_pool(b, "pool", PoolSpec::make(2, 2));
    EXPECT_THROW(g.concat({a, c}, "cat"), ShapeError);                       // spatial sizes disagree
    EXPECT_THROW(g.max_pool(c, "pool_big", PoolSpec::make(3, 1)), ShapeError);  // 2x2 input, 3x3 window
    EXPECT_THROW(g.conv(a, "groups", ConvSpec::make(6, 1, 1, 0, 3)), ShapeError);  // 8 channels, 3 groups
    EXPECT_THROW(g.fc(a, "fc_bad", 0), ShapeError);
    EXPECT_THROW(g.softmax_loss(g.fc(a, "fc3", 3)), ShapeError);  // 3 logits, 2 classes
  }
  EXPECT_THROW(GraphBuilder("m", Shape{3, 0, 4}, 2), ShapeError);
  EXPECT_THROW(GraphBuilder("m", Shape{3, 4, 4}, 1), InvalidArgument);
}

TEST(Graph, BuildRejectsIncompleteGraphs) {
  {
    GraphBuilder g("m", Shape{3, 4, 4}, 2);
    auto x = g.relu(g.input(), "r");
    EXPECT_THROW(g.relu(x, "r"), InvalidArgument);  // duplicate name
    g.fc(x, "fc", 2);
    EXPECT_THROW(g.build(), InvalidArgument);        // no loss layer
  }
  {
    GraphBuilder g("m", Shape{3, 4, 4}, 2);
    auto x = g.relu(g.input(), "r");
    g.relu(x, "dangling");
    g.softmax_loss(g.fc(x, "fc", 2));
    const std::string msg = error_of([&] { g.build(); });
    EXPECT_NE(msg.find("dangling"), std::string::npos) << msg;
  }
  {
    GraphBuilder g("m", Shape{3, 4, 4}, 2);
    EXPECT_THROW(g.relu(42, "bad_node"), InvalidArgument);
  }
}

TEST(Graph, ExecutorRejectsBadBatchAndInput) {
  auto backend = cpu_backend();
  auto g = small_graph(5);
  ExecutorOptions o;
  o.batch_size = 0;
  EXPECT_THROW(Executor(*g, *backend, o), InvalidArgument);
  o.batch_size = 2;
  Executor ex(*g, *backend, o);
  Rng rng(1);
  Tensor wrong = to_backend(*backend, random_tensor({3, 3, 8, 8}, rng));
  Tensor labels = to_backend(*backend, random_labels(2, 5, rng));
  EXPECT_THROW(ex.set_input(wrong, labels), ShapeError);
  EXPECT_THROW(ex.forward(), InvalidArgument);  // no input yet
}

TEST(Graph, HooksSeeEveryLayerInOrderAndInferenceNeedsNoLabels) {
  auto backend = cpu_backend();
  auto g = small_graph(5);
  ExecutorOptions o;
  o.batch_size = 2;
  Executor ex(*g, *backend, o);
  ex.initialize_parameters(7);
  Rng rng(7);
  Tensor images = to_backend(*backend, random_tensor({2, 3, 8, 8}, rng));
  std::vector<std::pair<std::size_t, Pass>> seen;
  ex.set_hook([&](std::size_t layer, Pass pass, bool after) {
    if (after) {
      ASSERT_FALSE(seen.empty());
      EXPECT_EQ(seen.back(), std::make_pair(layer, pass));
    } else {
      seen.emplace_back(layer, pass);
    }
  });
  ex.set_input(images, Tensor{});
  EXPECT_THROW(ex.forward(Phase::kTrain), InvalidArgument);  // training needs labels
  seen.clear();
  ex.forward(Phase::kEval);  // inference: logits without a loss
  ASSERT_EQ(seen.size(), ex.num_layers());
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], std::make_pair(i, Pass::kForward));
  const Tensor logits = clone(to_host(*backend, ex.logits()));

  ex.set_input(images, to_backend(*backend, random_labels(2, 5, rng)));
  seen.clear();
  ex.forward(Phase::kEval);
  EXPECT_TRUE(all_close(to_host(*backend, ex.logits()), logits, 0.0, 0.0));
  ex.forward(Phase::kTrain);
  ex.backward();
  ASSERT_EQ(seen.size(), 3 * ex.num_layers());
  EXPECT_EQ(seen.back(), std::make_pair(std::size_t{0}, Pass::kBackward));
  EXPECT_EQ(seen[2 * ex.num_layers()], std::make_pair(ex.num_layers() - 1, Pass::kBackward));
}

TEST(Graph, BuilderReportsShapes) {
  GraphBuilder g("m", Shape{3, 10, 10}, 4);
  EXPECT_EQ(g.shape(g.input()), (Shape{1, 3, 10, 10}));
  auto x = g.conv(g.input(), "c", ConvSpec::make(5, 3, 2, 1));
  EXPECT_EQ(g.shape(x), (Shape{1, 5, 5, 5}));
  auto p = g.max_pool(x, "p", PoolSpec::make(2, 2, 0, /*ceil_mode=*/true));
  EXPECT_EQ(g.shape(p), (Shape{1, 5, 3, 3}));
  auto a = g.global_avg_pool(p, "gap");
  EXPECT_EQ(g.shape(a), (Shape{1, 5, 1, 1}));
  EXPECT_EQ(g.shape(g.flatten(a, "flat")), (Shape{1, 5}));
  EXPECT_EQ(g.shape(g.concat({x, x}, "cat")), (Shape{1, 10, 5, 5}));
}
