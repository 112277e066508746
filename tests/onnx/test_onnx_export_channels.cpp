// ONNX export of the layer types of imported networks (activations beyond ReLU, mul, channel
// shuffle / slice / affine): hand-built graphs written by the exporter, read back by our importer,
// run on the CPU against the original; the operators written; what is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "net/graph_builder.hpp"
#include "net/onnx/onnx_export.hpp"
#include "onnx/onnx_maker.hpp"

namespace cnnergy::test {
namespace {

std::unique_ptr<Executor> eval_executor(const Graph& g, Backend& b, std::int64_t batch) {
  ExecutorOptions o;
  o.batch_size = batch;
  o.training = false;
  return std::make_unique<Executor>(g, b, o);
}

std::vector<float> logits_of(Executor& e, const std::vector<float>& x) {
  Backend& b = e.backend();
  Tensor host = Tensor::host(e.graph().tensor(e.graph().input_tensor()).shape.with_batch(e.batch_size()));
  std::copy(x.begin(), x.end(), host.f32().begin());
  e.set_input(to_backend(b, host), Tensor{});
  e.forward(Phase::kEval);
  const Tensor out = to_host(b, e.logits());
  return {out.f32().begin(), out.f32().end()};
}

ActivationDesc act(ActivationKind kind, float alpha = 0.0f, float beta = 0.0f) {
  ActivationDesc d;
  d.kind = kind;
  d.alpha = alpha;
  d.beta = beta;
  return d;
}

std::vector<float> values(std::size_t n, float lo, float hi, std::uint64_t seed) {
  std::vector<float> v(n);
  Rng rng(seed);
  for (float& x : v) x = rng.uniform(lo, hi);
  return v;
}

// Every new layer type once: clip, leaky ReLU, a channel shuffle, two slices, hard swish and SiLU,
// a per-channel affine map, a squeeze-and-excitation product with a sigmoid gate, a hard sigmoid, a
// scalar affine map; on the 2-D logits a slice and a per-channel affine map.
std::unique_ptr<Graph> all_new_layers() {
  GraphBuilder b("new_layers", Shape{3, 8, 8}, 5);
  auto x = b.conv(b.input(), "conv1", ConvSpec::make(8, 3, 1, 1));
  x = b.activation(x, "clip1", act(ActivationKind::kClip, -0.5f, 2.0f));
  x = b.activation(x, "leaky1", act(ActivationKind::kLeakyRelu, 0.1f));
  x = b.channel_shuffle(x, "shuffle1", 2);
  auto left = b.activation(b.channel_slice(x, "slice_a", 0, 4), "hswish1", act(ActivationKind::kHardSwish));
  auto right = b.activation(b.channel_slice(x, "slice_b", 4, 4), "silu1", act(ActivationKind::kSilu));
  x = b.concat({left, right}, "cat1");
  x = b.channel_affine(x, "affine1", values(8, 0.5f, 1.5f, 3), values(8, -0.3f, 0.3f, 4));
  auto gate = b.global_avg_pool(x, "se_pool");
  gate = b.conv(gate, "se_conv", ConvSpec::make(8, 1));
  gate = b.activation(gate, "se_sigmoid", act(ActivationKind::kSigmoid));
  x = b.mul(x, gate, "se_mul");
  x = b.activation(x, "hsig1", act(ActivationKind::kHardSigmoid, 0.2f, 0.5f));
  x = b.channel_affine(x, "affine2", {2.0f}, {-1.0f});
  x = b.fc(x, "fc1", 6);
  x = b.channel_slice(x, "logit_slice", 1, 5);
  x = b.channel_affine(x, "logit_affine", values(5, 0.5f, 2.0f, 5), values(5, -1.0f, 1.0f, 6));
  b.softmax_loss(x);
  return b.build();
}

TEST(OnnxExportChannels, NewLayerTypesRoundTripWithTheSameLogits) {
  auto graph = all_new_layers();
  auto backend = cpu_backend();
  constexpr std::int64_t kBatch = 3;
  auto original = eval_executor(*graph, *backend, kBatch);
  original->initialize_parameters(7);
  OnnxExportOptions symbolic, fixed;
  fixed.batch = kBatch;
  for (const auto& options : {symbolic, fixed}) {
    const std::string bytes = export_onnx_bytes(*original, options);
    auto imported_graph = import_onnx_bytes(bytes, "new_layers", "").builder.build();
    EXPECT_EQ(imported_graph->parameter_count(), graph->parameter_count());
    // The importer fuses HardSigmoid+Mul and Sigmoid+Mul back into one layer each.
    std::map<std::string, int> types;
    for (std::size_t i = 0; i < imported_graph->num_layers(); ++i) ++types[imported_graph->layer(i).type()];
    for (const char* t : {"clip", "leaky_relu", "hard_swish", "silu", "sigmoid", "hard_sigmoid", "mul",
                          "channel_shuffle"})
      EXPECT_EQ(types[t], 1) << t;
    EXPECT_EQ(types["channel_slice"], 3);
    EXPECT_EQ(types["channel_affine"], 6);  // each map as a Mul and an Add by constants
    auto imported = eval_executor(*imported_graph, *backend, kBatch);
    imported->initialize_parameters(1);
    std::vector<float> x(static_cast<std::size_t>(graph->input_per_sample().numel() * kBatch));
    Rng rng(9);
    rng.fill_normal(x, 0.0f, 1.0f);
    const auto want = logits_of(*original, x), got = logits_of(*imported, x);
    ASSERT_EQ(want.size(), got.size());
    float max_abs = 0, max_diff = 0;
    for (std::size_t k = 0; k < want.size(); ++k) {
      ASSERT_TRUE(std::isfinite(want[k]) && std::isfinite(got[k])) << k;
      max_abs = std::max(max_abs, std::abs(want[k]));
      max_diff = std::max(max_diff, std::abs(want[k] - got[k]));
    }
    EXPECT_GT(max_abs, 0.0f);
    EXPECT_LE(max_diff, 1e-5f * max_abs) << "max abs difference " << max_diff << ", max abs logit " << max_abs;
  }
}

TEST(OnnxExportChannels, OperatorsAndConstantsAsWritten) {
  auto graph = all_new_layers();
  auto backend = cpu_backend();
  auto e = eval_executor(*graph, *backend, 1);
  e->initialize_parameters(2);
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(export_onnx_bytes(*e)));
  EXPECT_EQ(m.opset_import(0).version(), 13);
  std::map<std::string, int> ops;
  for (const auto& n : m.graph().node()) ++ops[n.op_type()];
  EXPECT_EQ(ops["HardSwish"], 0);  // opset 14: written as HardSigmoid + Mul
  EXPECT_EQ(ops["HardSigmoid"], 2);
  EXPECT_EQ(ops["Sigmoid"], 2);
  EXPECT_EQ(ops["Mul"], 2 + 1 + 3);  // hard swish, SiLU, the SE product, three affine scales
  EXPECT_EQ(ops["Add"], 3);
  EXPECT_EQ(ops["Reshape"], 2);
  EXPECT_EQ(ops["Transpose"], 1);
  EXPECT_EQ(ops["Slice"], 3);
  EXPECT_EQ(ops["Clip"], 1);
  EXPECT_EQ(ops["LeakyRelu"], 1);
  std::map<std::string, const onnx::TensorProto*> init;
  for (const auto& t : m.graph().initializer()) init[t.name()] = &t;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "Clip") {  // min and max as inputs (opset 11+)
      ASSERT_EQ(n.input_size(), 3);
      EXPECT_FLOAT_EQ(init.at(n.input(1))->float_data(0), -0.5f);
      EXPECT_FLOAT_EQ(init.at(n.input(2))->float_data(0), 2.0f);
    } else if (n.op_type() == "Transpose") {
      ASSERT_EQ(n.attribute_size(), 1);
      EXPECT_EQ(std::vector<std::int64_t>(n.attribute(0).ints().begin(), n.attribute(0).ints().end()),
                (std::vector<std::int64_t>{0, 2, 1, 3, 4}));
    } else if (n.op_type() == "Reshape" && n.name() == "shuffle1") {
      const auto* s = init.at(n.input(1));
      EXPECT_EQ(std::vector<std::int64_t>(s->int64_data().begin(), s->int64_data().end()),
                (std::vector<std::int64_t>{0, 8, 8, 8}));
    } else if (n.op_type() == "Slice" && n.name() == "slice_b") {
      ASSERT_EQ(n.input_size(), 4);
      EXPECT_EQ(init.at(n.input(1))->int64_data(0), 4);
      EXPECT_EQ(init.at(n.input(2))->int64_data(0), 8);
      EXPECT_EQ(init.at(n.input(3))->int64_data(0), 1);
    } else if (n.op_type() == "Mul" && n.name() == "affine1.scale") {
      const auto* s = init.at(n.input(1));
      EXPECT_EQ(std::vector<std::int64_t>(s->dims().begin(), s->dims().end()),
                (std::vector<std::int64_t>{1, 8, 1, 1}));
      EXPECT_EQ(s->float_data_size(), 8);
    }
  }
}

TEST(OnnxExportChannels, AShuffleOf2DFeaturesIsRefused) {
  GraphBuilder b("flat_shuffle", Shape{3, 4, 4}, 4);
  auto x = b.fc(b.input(), "fc1", 4);
  x = b.channel_shuffle(x, "shuffle_fc", 2);
  b.softmax_loss(x);
  auto graph = b.build();
  auto backend = cpu_backend();
  auto e = eval_executor(*graph, *backend, 1);
  e->initialize_parameters(1);
  try {
    export_onnx_bytes(*e);
    FAIL() << "exported a shuffle of 2-D features";
  } catch (const NotSupported& err) {
    EXPECT_NE(std::string(err.what()).find("'shuffle_fc'"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace cnnergy::test
