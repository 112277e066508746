// ONNX import of the operators of MobileNet v2/v3, EfficientNet, RegNet and ShuffleNet v2: each
// activation against its formula, the SiLU and HardSwish fusions (one layer, no Mul left), the
// squeeze-and-excitation product, arithmetic with constants, the channel shuffle pattern, and Split /
// Slice along channels in their attribute and input forms, all run on the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "onnx/onnx_maker.hpp"

namespace cnnergy::test {
namespace {

std::vector<float> values(std::size_t n, std::uint64_t seed, float lo = -4.0f, float hi = 4.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

std::vector<float> run(const OnnxMaker& m, const std::vector<float>& x) {
  return run_cpu(import_onnx_bytes(m.bytes(), "t", ""), 1, x);
}

// Layer types of the imported graph (loss and the output's flatten included).
std::multiset<std::string> layer_types(const OnnxMaker& m) {
  auto graph = import_onnx_bytes(m.bytes(), "t", "").builder.build();
  std::multiset<std::string> types;
  for (std::size_t i = 0; i < graph->num_layers(); ++i) types.insert(graph->layer(i).type());
  return types;
}

OnnxMaker flat_model(std::int64_t opset, std::int64_t n = 18) {
  OnnxMaker m(opset);
  m.input("x", {1, n});
  m.output("y", {1, n});
  return m;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(OnnxChannels, ActivationsMatchTheirFormulas) {
  const auto x = values(18, 1);
  struct Case {
    const char* op;
    std::int64_t opset;
    std::vector<std::pair<const char*, float>> attrs;
    double (*f)(double);
    const char* type;
  };
  const Case cases[] = {
      {"LeakyRelu", 13, {{"alpha", 0.2f}}, [](double v) { return v >= 0 ? v : 0.2 * v; }, "leaky_relu"},
      {"LeakyRelu", 13, {}, [](double v) { return v >= 0 ? v : 0.01 * v; }, "leaky_relu"},
      {"Sigmoid", 13, {}, [](double v) { return sigmoid(v); }, "sigmoid"},
      {"HardSigmoid", 13, {{"alpha", 0.3f}, {"beta", 0.4f}},
       [](double v) { return std::clamp(0.3 * v + 0.4, 0.0, 1.0); }, "hard_sigmoid"},
      {"HardSigmoid", 13, {}, [](double v) { return std::clamp(0.2 * v + 0.5, 0.0, 1.0); }, "hard_sigmoid"},
      {"HardSwish", 14, {}, [](double v) { return v * std::clamp(v / 6 + 0.5, 0.0, 1.0); }, "hard_swish"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    OnnxMaker m = flat_model(c.opset);
    auto* n = m.node(c.op, {"x"}, {"y"});
    for (const auto& [name, v] : c.attrs) OnnxMaker::attr_float(n, name, v);
    const auto y = run(m, x);
    ASSERT_EQ(y.size(), x.size());
    for (std::size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(y[k], c.f(x[k]), 1e-6) << "x = " << x[k];
    EXPECT_EQ(layer_types(m).count(c.type), 1u);
  }
}

TEST(OnnxChannels, MulOfSigmoidOrHardSigmoidByItsInputIsOneLayer) {
  const auto x = values(18, 2);
  // x * Sigmoid(x) (nn.SiLU), in both operand orders.
  for (const bool sigmoid_first : {false, true}) {
    OnnxMaker m = flat_model(13);
    m.node("Sigmoid", {"x"}, {"s"});
    m.node("Mul", sigmoid_first ? std::vector<std::string>{"s", "x"} : std::vector<std::string>{"x", "s"}, {"y"});
    const auto y = run(m, x);
    for (std::size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(y[k], x[k] * sigmoid(x[k]), 1e-6);
    const auto types = layer_types(m);
    EXPECT_EQ(types.count("silu"), 1u);
    EXPECT_EQ(types.count("mul") + types.count("sigmoid"), 0u);
  }
  // x * HardSigmoid(x; 1/6, 1/2) (nn.Hardswish before opset 14).
  OnnxMaker m = flat_model(13);
  auto* hs = m.node("HardSigmoid", {"x"}, {"h"});
  OnnxMaker::attr_float(hs, "alpha", 1.0f / 6.0f);
  m.node("Mul", {"x", "h"}, {"y"});
  const auto y = run(m, x);
  for (std::size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(y[k], x[k] * std::clamp(x[k] / 6.0 + 0.5, 0.0, 1.0), 1e-6);
  EXPECT_EQ(layer_types(m).count("hard_swish"), 1u);
  // A Sigmoid read twice stays a Sigmoid (and the product a Mul).
  OnnxMaker t = flat_model(13);
  t.node("Sigmoid", {"x"}, {"s"});
  t.node("Mul", {"x", "s"}, {"p"});
  t.node("Add", {"p", "s"}, {"y"});
  const auto yt = run(t, x);
  for (std::size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(yt[k], (x[k] + 1) * sigmoid(x[k]), 1e-5);
  EXPECT_EQ(layer_types(t).count("sigmoid"), 1u);
  EXPECT_EQ(layer_types(t).count("mul"), 1u);
}

TEST(OnnxChannels, SqueezeAndExcitationProduct) {
  const auto x = values(4 * 9, 3);
  OnnxMaker m(13);
  m.input("x", {1, 4, 3, 3});
  m.output("y", {1, 4, 3, 3});
  m.node("GlobalAveragePool", {"x"}, {"g"});
  m.node("Sigmoid", {"g"}, {"s"});
  m.node("Mul", {"s", "x"}, {"y"});
  const auto y = run(m, x);
  ASSERT_EQ(y.size(), x.size());
  for (int c = 0; c < 4; ++c) {
    double mean = 0;
    for (int k = 0; k < 9; ++k) mean += x[static_cast<std::size_t>(c * 9 + k)] / 9.0;
    for (int k = 0; k < 9; ++k) {
      const auto i = static_cast<std::size_t>(c * 9 + k);
      EXPECT_NEAR(y[i], x[i] * sigmoid(mean), 1e-5);
    }
  }
  // Shapes that neither equal nor broadcast per channel are refused by name.
  OnnxMaker bad(13);
  bad.input("x", {1, 4, 3, 3});
  bad.output("y", {1, 4, 3, 3});
  bad.init_ints("starts", {0});
  bad.init_ints("ends", {2});
  bad.init_ints("axes", {1});
  bad.node("Slice", {"x", "starts", "ends", "axes"}, {"half"});
  bad.node("Mul", {"x", "half"}, {"y"}, "odd_mul");
  try {
    import_onnx_bytes(bad.bytes(), "bad", "");
    FAIL() << "imported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("odd_mul"), std::string::npos) << e.what();
  }
}

TEST(OnnxChannels, ArithmeticWithConstantsIsAChannelAffineMap) {
  const auto x = values(3 * 4, 4);
  OnnxMaker m(13);
  m.input("x", {1, 3, 2, 2});
  m.output("y", {1, 3, 2, 2});
  m.init("two", {}, {2.0f});
  m.init("per_channel", {1, 3, 1, 1}, {0.5f, -1.0f, 3.0f});
  m.init("ten", {1}, {10.0f});
  m.init("four", {}, {4.0f});
  m.node("Mul", {"x", "two"}, {"a"});
  m.node("Add", {"per_channel", "a"}, {"b"});
  m.node("Sub", {"ten", "b"}, {"c"});
  m.node("Div", {"c", "four"}, {"d"});
  m.node("Sub", {"d", "per_channel"}, {"y"});
  const auto y = run(m, x);
  const float pc[3] = {0.5f, -1.0f, 3.0f};
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < 4; ++k) {
      const auto i = static_cast<std::size_t>(c * 4 + k);
      EXPECT_NEAR(y[i], (10.0 - (2.0 * x[i] + pc[c])) / 4.0 - pc[c], 1e-5);
    }
  EXPECT_EQ(layer_types(m).count("channel_affine"), 5u);
  OnnxMaker bad(13);
  bad.input("x", {1, 3, 2, 2});
  bad.output("y", {1, 3, 2, 2});
  bad.init("row", {1, 1, 1, 2}, {1.0f, 2.0f});
  bad.node("Mul", {"x", "row"}, {"y"});
  EXPECT_THROW(import_onnx_bytes(bad.bytes(), "bad", ""), NotSupported);
}

TEST(OnnxChannels, ReshapeTransposeReshapeIsAChannelShuffle) {
  const auto x = values(6 * 4, 5);
  OnnxMaker m(13);
  m.input("x", {1, 6, 2, 2});
  m.output("y", {1, 6, 2, 2});
  m.init_ints("grouped", {1, 2, 3, 2, 2});
  m.init_ints("back", {1, -1, 2, 2});
  m.node("Reshape", {"x", "grouped"}, {"g"});
  OnnxMaker::attr_ints(m.node("Transpose", {"g"}, {"t"}), "perm", {0, 2, 1, 3, 4});
  m.node("Reshape", {"t", "back"}, {"y"});
  const auto y = run(m, x);
  // Output channel a * 2 + b is input channel b * 3 + a.
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 2; ++b)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(y[static_cast<std::size_t>((a * 2 + b) * 4 + k)], x[static_cast<std::size_t>((b * 3 + a) * 4 + k)]);
  EXPECT_EQ(layer_types(m).count("channel_shuffle"), 1u);
  // Another permutation of the grouped view is refused.
  OnnxMaker bad(13);
  bad.input("x", {1, 6, 2, 2});
  bad.output("y", {1, 6, 2, 2});
  bad.init_ints("grouped", {1, 2, 3, 2, 2});
  bad.init_ints("back", {1, -1, 2, 2});
  bad.node("Reshape", {"x", "grouped"}, {"g"});
  OnnxMaker::attr_ints(bad.node("Transpose", {"g"}, {"t"}), "perm", {0, 1, 2, 4, 3});
  bad.node("Reshape", {"t", "back"}, {"y"});
  EXPECT_THROW(import_onnx_bytes(bad.bytes(), "bad", ""), NotSupported);
}

// Split of (1, 6, 2, 2) into channels [0, 2) and [2, 6), concatenated the other way round.
void expect_swapped_halves(const std::vector<float>& y, const std::vector<float>& x, std::size_t first) {
  ASSERT_EQ(y.size(), x.size());
  const std::size_t second = 24 - first * 4;  // elements of the second part
  for (std::size_t k = 0; k < second; ++k) EXPECT_EQ(y[k], x[first * 4 + k]);
  for (std::size_t k = 0; k < first * 4; ++k) EXPECT_EQ(y[second + k], x[k]);
}

TEST(OnnxChannels, SplitSizesAsAttributeAsInputAndEqualParts) {
  const auto x = values(6 * 4, 6);
  OnnxMaker a(11), b(13), c(18);
  for (auto* m : {&a, &b, &c}) {
    m->input("x", {1, 6, 2, 2});
    m->output("y", {1, 6, 2, 2});
  }
  auto* na = a.node("Split", {"x"}, {"p", "q"});
  OnnxMaker::attr_int(na, "axis", 1);
  OnnxMaker::attr_ints(na, "split", {2, 4});
  b.init_ints("sizes", {2, 4});
  OnnxMaker::attr_int(b.node("Split", {"x", "sizes"}, {"p", "q"}), "axis", 1);
  auto* nc = c.node("Split", {"x"}, {"p", "q"});
  OnnxMaker::attr_int(nc, "axis", 1);
  OnnxMaker::attr_int(nc, "num_outputs", 2);
  for (auto* m : {&a, &b, &c}) OnnxMaker::attr_int(m->node("Concat", {"q", "p"}, {"y"}), "axis", 1);
  expect_swapped_halves(run(a, x), x, 2);
  expect_swapped_halves(run(b, x), x, 2);
  expect_swapped_halves(run(c, x), x, 3);
  EXPECT_EQ(layer_types(b).count("channel_slice"), 2u);
}

TEST(OnnxChannels, SliceAlongChannelsAsInputsAndAsAttributes) {
  const auto x = values(6 * 4, 7);
  OnnxMaker a(9), b(13);
  for (auto* m : {&a, &b}) {
    m->input("x", {1, 6, 2, 2});
    m->output("y", {1, 3, 2, 2});
  }
  auto* na = a.node("Slice", {"x"}, {"y"});
  OnnxMaker::attr_ints(na, "starts", {2});
  OnnxMaker::attr_ints(na, "ends", {5});
  OnnxMaker::attr_ints(na, "axes", {1});
  b.init_ints("starts", {2, 0});
  b.init_ints("ends", {-1, 1000});
  b.init_ints("axes", {1, 2});
  b.node("Slice", {"x", "starts", "ends", "axes"}, {"y"});
  for (auto* m : {&a, &b}) {
    const auto y = run(*m, x);
    ASSERT_EQ(y.size(), 12u);
    for (std::size_t k = 0; k < 12; ++k) EXPECT_EQ(y[k], x[8 + k]);
  }
  OnnxMaker bad(13);
  bad.input("x", {1, 6, 2, 2});
  bad.output("y", {1, 6, 1, 2});
  bad.init_ints("starts", {1});
  bad.init_ints("ends", {2});
  bad.init_ints("axes", {2});
  bad.node("Slice", {"x", "starts", "ends", "axes"}, {"y"});
  EXPECT_THROW(import_onnx_bytes(bad.bytes(), "bad", ""), NotSupported);
}

}  // namespace
}  // namespace cnnergy::test
