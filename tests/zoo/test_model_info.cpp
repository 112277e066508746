// model_info(): per-layer counts follow Castro et al. 2019's equations, totals are the sum of the
// layers, batch scaling follows Eqs. 10-12, and all four rows of their Table 1 are held to the zoo's
// readings: within 2% where a reading reproduces a column, and pinned, with the reason, where the
// paper's own numbers rule a match out (docs/model-info.md, "Table 1, row by row").
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "net/graph.hpp"
#include "net/model_info.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy {
namespace {

const LayerInfo& find_layer(const ModelInfo& info, const std::string& name) {
  for (const auto& l : info.layers)
    if (l.name == name) return l;
  throw InvalidArgument("no layer " + name);
}

TEST(ModelInfo, CaffeNetLayersFollowEquations) {
  const auto graph = build_model("caffenet");
  const ModelInfo info = model_info(*graph, 1);
  // Eq. 1 with ch_in per group, plus one bias add per output element (workload.hpp).
  const auto& conv1 = find_layer(info, "conv1");
  EXPECT_EQ(conv1.per_sample.operations, std::int64_t{11} * 11 * 55 * 55 * 3 * 96 + 96 * 55 * 55);
  EXPECT_EQ(conv1.per_sample.written_elements, 96 * 55 * 55);                       // Eq. 9
  EXPECT_EQ(conv1.per_sample.read_elements, 3 * 227 * 227 + 96 * 3 * 11 * 11 + 96);  // Eq. 8, weights in full
  EXPECT_EQ(conv1.per_sample.parameters, 96 * 3 * 11 * 11 + 96);
  EXPECT_EQ(conv1.output_shape, (Shape{1, 96, 55, 55}));
  const auto& conv2 = find_layer(info, "conv2");  // group 2: 48 input channels per filter
  EXPECT_EQ(conv2.per_sample.operations, std::int64_t{5} * 5 * 27 * 27 * 48 * 256 + 256 * 27 * 27);
  const auto& pool1 = find_layer(info, "pool1");  // Eq. 3
  EXPECT_EQ(pool1.per_sample.operations, 3 * 3 * 27 * 27 * 96);
  const auto& relu1 = find_layer(info, "relu1");  // Eq. 4
  EXPECT_EQ(relu1.per_sample.operations, 96 * 55 * 55);
  const auto& fc6 = find_layer(info, "fc6");  // Eq. 2
  EXPECT_EQ(fc6.per_sample.operations, std::int64_t{9216} * 4096);
  EXPECT_EQ(fc6.output_shape, (Shape{1, 4096}));
  const auto& drop6 = find_layer(info, "drop6");  // Eq. 5
  EXPECT_EQ(drop6.per_sample.operations, 4096);
  EXPECT_DOUBLE_EQ(fc6.ctc, static_cast<double>(fc6.per_sample.operations) /
                                static_cast<double>(fc6.per_sample.read_elements));
}

TEST(ModelInfo, TotalsAreTheSumOfTheLayers) {
  for (const char* name : {"caffenet", "resnet50", "inception_v3", "gait_resnet"}) {
    SCOPED_TRACE(name);
    const auto graph = build_model(name);
    const ModelInfo info = model_info(*graph, 1);
    Workload sum;
    for (const auto& l : info.layers) sum += l.per_sample;
    EXPECT_EQ(sum, info.total_per_sample);
    EXPECT_EQ(info.parameters, graph->parameter_count());
    EXPECT_EQ(info.layers.size(), graph->num_layers());
    EXPECT_GT(info.total_per_sample.flops_backward, info.total_per_sample.flops_forward);
  }
}

TEST(ModelInfo, BatchScalingFollowsEquations10To12) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::int64_t batch = std::uniform_int_distribution<std::int64_t>(2, 512)(rng);
  const auto graph = build_model("resnet34");
  const ModelInfo one = model_info(*graph, 1);
  const ModelInfo info = model_info(*graph, batch);
  EXPECT_EQ(info.batch, batch);
  EXPECT_EQ(info.total_batch.operations, batch * one.total_per_sample.operations);            // Eq. 10
  EXPECT_EQ(info.total_batch.read_elements, batch * one.total_per_sample.read_elements);      // Eq. 11
  EXPECT_EQ(info.total_batch.written_elements, batch * one.total_per_sample.written_elements);  // Eq. 12
  EXPECT_EQ(info.total_batch.flops_forward, batch * one.total_per_sample.flops_forward);
  EXPECT_EQ(info.total_batch.flops_backward, batch * one.total_per_sample.flops_backward);
  EXPECT_EQ(info.total_batch.parameters, one.parameters);  // weights do not multiply
  EXPECT_EQ(info.total_per_sample, one.total_per_sample);
  EXPECT_EQ(info.read_elements_weights_once(),
            batch * one.total_per_sample.read_elements - (batch - 1) * one.parameters);
  EXPECT_DOUBLE_EQ(info.ctc(), one.ctc());  // a ratio of two batch-scaled counts
  for (std::size_t i = 0; i < info.layers.size(); ++i) {
    EXPECT_EQ(info.layers[i].batch, one.layers[i].per_sample.for_batch(batch)) << info.layers[i].name;
    if (info.layers[i].output_shape.rank() > 1) {
      EXPECT_EQ(info.layers[i].output_shape[0], batch);
    }
  }
  EXPECT_EQ(find_layer(info, "fc").output_shape, (Shape{batch, 1000}));
  EXPECT_EQ(find_layer(info, "loss").output_shape, (Shape{1}));  // the batch-mean loss
}

TEST(ModelInfo, BytesFollowTheElementType) {
  const auto graph = build_model("lenet5");
  const ModelInfo f32 = model_info(*graph, 8, DType::kF32);
  const ModelInfo f16 = model_info(*graph, 8, DType::kF16);
  const ModelInfo b16 = model_info(*graph, 8, DType::kBF16);
  const std::int64_t read = f32.total_batch.read_elements;
  EXPECT_DOUBLE_EQ(f32.mib(read), static_cast<double>(read) * 4.0 / 1048576.0);
  EXPECT_DOUBLE_EQ(f16.mib(read), static_cast<double>(read) * 2.0 / 1048576.0);
  EXPECT_DOUBLE_EQ(b16.mib(read), f16.mib(read));
  EXPECT_EQ(f16.total_batch, f32.total_batch);  // element counts do not depend on the type
  EXPECT_THROW(model_info(*graph, 8, DType::kI32), InvalidArgument);
}

TEST(ModelInfo, BadBatchIsAUsageError) {
  const auto graph = build_model("lenet5");
  EXPECT_THROW(model_info(*graph, 0), InvalidArgument);
  EXPECT_THROW(model_info(*graph, -3), InvalidArgument);
  EXPECT_THROW(model_info(*graph, std::int64_t{1} << 62), InvalidArgument);  // counts would overflow
}

// Castro et al. 2019, Table 1, CaffeNet row: 727.20 M operations, 239.1 MB read, 6 MB written, CTC 11.6.
// Its "MB" are MiB at 4 bytes per element: 727.20 M / (239.1 * 2^20 / 4) = 11.60, the printed CTC.
TEST(ModelInfo, CaffeNetMatchesCastro2019Table1) {
  const auto graph = build_model("caffenet");
  const ModelInfo info = model_info(*graph, 1, DType::kF32);
  const Workload& t = info.total_per_sample;
  // Convolution and fully connected multiply-accumulates (99.6% of the total) admit no convention:
  // exact, hand-summed from Eqs. 1-2 (grouped conv2/4/5 use ch_in / 2).
  std::int64_t macs = 0;
  for (const auto& l : info.layers) {
    if (l.category == "conv") macs += l.per_sample.operations - l.per_sample.written_elements;  // minus bias adds
    if (l.category == "fc") macs += l.per_sample.operations;
  }
  const std::int64_t expected_macs = std::int64_t{105415200} + 223948800 + 149520384 + 112140288 + 74760192 +
                                     37748736 + 16777216 + 4096000;
  EXPECT_EQ(macs, expected_macs);
  // The remaining 0.4% (bias adds, LRN, pooling, ReLU, dropout, softmax) depends on conventions
  // the paper does not state (LRN has no equation there): 0.5% covers any of them.
  EXPECT_NEAR(static_cast<double>(t.operations) / 727.20e6, 1.0, 0.005);
  // Data volumes of the layers Caffe has: our graph adds a flatten view in front of fc6 (Caffe's
  // InnerProduct flattens its input itself), so its 9216 elements are left out of the comparison.
  std::int64_t read = t.read_elements, written = t.written_elements;
  for (const auto& l : info.layers)
    if (l.type == "flatten") {
      read -= l.per_sample.read_elements;
      written -= l.per_sample.written_elements;
    }
  // Read: weights in full plus every layer's input; the table rounds to 0.1 MiB.
  EXPECT_NEAR(info.mib(read), 239.1, 0.05);
  // Written: the table gives "6 MB", one significant digit.
  EXPECT_NEAR(info.mib(written), 6.0, 0.5);
  // CTC: operations within 0.5% and read within 0.02% move it by at most 0.06 around 11.6.
  EXPECT_NEAR(info.ctc(), 11.6, 0.06);
}

// Per-sample totals of a zoo model at its default input, fp32.
ModelInfo info_of(const std::string& name) { return model_info(*build_model(name), 1, DType::kF32); }

std::int64_t layer_elements_written(const ModelInfo& info, const std::string& name) {
  return find_layer(info, name).per_sample.written_elements;
}

// Table 1, 2D-CNN row: 783.84 M operations, 73.8 MB read, 1.9 MB written, CTC 40.5. The zoo's reading
// (conv4 is the table's full5; gait.cpp) reproduces operations and read within 2%. Written cannot
// be reproduced under the counting rule that reproduces the CaffeNet row (every layer's output
// counts, ReLU's included: without the ReLU outputs CaffeNet writes 3.41 MiB, not 6): conv1, which
// carries 87% of the table's operations, and its ReLU write 2 x 96 x 54 x 54 elements, 2.14 MiB, more
// than the table's 1.9 MiB for the whole network. So written is pinned, with that reason checked.
TEST(ModelInfo, GaitTwoDCnnAgainstCastro2019Table1) {
  const ModelInfo info = info_of("gait_2dcnn");
  const Workload& t = info.total_per_sample;
  EXPECT_NEAR(static_cast<double>(t.operations) / 783.84e6, 1.0, 0.02);
  EXPECT_NEAR(static_cast<double>(t.operations) / 783.84e6, 1.0, 0.002);  // 784.41 M: 0.07%
  EXPECT_NEAR(info.mib(t.read_elements) / 73.8, 1.0, 0.02);                // 74.75 MiB: 1.3%
  EXPECT_NEAR(info.ctc(), 40.5, 0.81);                                      // 40.0 (2% of 40.5)
  const std::int64_t conv1_and_relu = layer_elements_written(info, "conv1") + layer_elements_written(info, "relu1");
  EXPECT_EQ(conv1_and_relu, 2 * 96 * 54 * 54);
  EXPECT_GT(info.mib(conv1_and_relu), 1.9 + 0.05);  // beyond the table's rounding, before any other layer
  EXPECT_NEAR(info.mib(t.written_elements), 2.80, 0.005);  // pinned: 47% above the table, for that reason
}

// Table 1, gait ResNet row: 425.13 M operations, 87.6 MB read, 4.8 MB written, CTC 18.5. The zoo's
// reading (conv1 stride 2 as in He et al. 2016, 3x3 adapters, last map 2x2; gait.cpp) reproduces
// read and written within 1%. Operations are pinned: the text's conv1 (64 filters 7x7, stride 1 on
// 50x60x60) alone is 564.5 M with He et al.'s padding (457.2 M without), above the table's total, so
// the text cannot be the table's network; with stride 2, conv1 is 141.1 M and the 3x3 stages the
// rest of 514.49 M, 21% above the table. No reading of the searched family (docs/model-info.md)
// meets all three columns within 2%.
TEST(ModelInfo, GaitResNetAgainstCastro2019Table1) {
  const ModelInfo info = info_of("gait_resnet");
  const Workload& t = info.total_per_sample;
  EXPECT_NEAR(info.mib(t.read_elements) / 87.6, 1.0, 0.02);     // 88.38 MiB: 0.9%
  EXPECT_NEAR(info.mib(t.written_elements) / 4.8, 1.0, 0.02);   // 4.77 MiB: 0.6%
  EXPECT_EQ(find_layer(info, "conv1.conv").output_shape, (Shape{1, 64, 30, 30}));
  EXPECT_EQ(find_layer(info, "pool").output_shape, (Shape{1, 512, 1, 1}));  // pooled from 2x2
  const std::int64_t text_conv1_macs = std::int64_t{7} * 7 * 60 * 60 * 50 * 64;  // stride 1, padding 3
  EXPECT_GT(static_cast<double>(text_conv1_macs), 425.13e6);
  EXPECT_NEAR(static_cast<double>(t.operations) / 1e6, 514.49, 0.01);  // pinned: 21% above the table
}

// Table 1, ResNetIm row: 2080.96 M operations, 97.1 MB read, 46.6 MB written, CTC 81.8. Operations per
// element written hardly depend on the input size (both scale with its area), and the table's
// 2080.96 M / 46.6 MiB = 170 per element is far below that of the network the paper cites (resnet34:
// 290) and of the network its text describes (resnetim: 435), at any input size from 160 to 256: no
// input size brings either to the row. tools/table1_readings.py searches 5,384 readings (conv1 stride
// and padding, max pool, adapters, batch norm, ReLU outputs, output-size formula, input 160-256): the
// best misses a column by 28%. Written agrees for resnet34 at 224x224 (3.3%); its operations are
// checked against He et al. 2016 (3.6e9 multiply-adds for ResNet-34, their Table 1).
TEST(ModelInfo, ResNetImAgainstCastro2019Table1AndHe2016) {
  const double table_ops_per_written = 2080.96e6 / (46.6 * 1048576.0 / 4.0);
  for (const char* name : {"resnet34", "resnetim"})
    for (const std::int64_t side : {160, 192, 224, 256}) {
      SCOPED_TRACE(std::string(name) + " at " + std::to_string(side));
      const ModelInfo info = model_info(*build_model(name, Shape{3, side, side}), 1, DType::kF32);
      const Workload& t = info.total_per_sample;
      EXPECT_GT(static_cast<double>(t.operations) / static_cast<double>(t.written_elements),
                1.5 * table_ops_per_written);
    }
  const ModelInfo info = info_of("resnet34");
  const Workload& t = info.total_per_sample;
  // Written: within 5% (48.15 MiB, 3.3% above): the one column that can agree.
  EXPECT_NEAR(info.mib(t.written_elements) / 46.6, 1.0, 0.05);
  // Operations: conv + fc multiply-accumulates against He et al.'s 3.6e9, which is given to two
  // significant digits (3.55e9 .. 3.7e9 covers rounding or truncation).
  std::int64_t macs = 0;
  for (const auto& l : info.layers)
    if (l.category == "conv" || l.category == "fc") macs += l.per_sample.operations;  // ResNet convs have no bias
  EXPECT_GE(macs, std::int64_t{3550000000});
  EXPECT_LT(macs, std::int64_t{3700000000});
  // Hand-summed: conv1 118013952, layer1 693633024, layer2 57802752+809238528+6422528,
  // layer3 57802752+1271660544+6422528, layer4 57802752+578027520+6422528, fc 512000.
  EXPECT_EQ(macs, std::int64_t{118013952} + 693633024 + 57802752 + 809238528 + 6422528 + 57802752 + 1271660544 +
                      6422528 + 57802752 + 578027520 + 6422528 + 512000);
  // The paper's text network: the 94 layers it counts, and its totals pinned (docs/model-info.md).
  const auto resnetim = build_model("resnetim");
  EXPECT_EQ(resnetim->num_layers(), 94u + 1u);  // + the flatten view in front of fc (Caffe has none)
  const ModelInfo im = info_of("resnetim");
  EXPECT_NEAR(static_cast<double>(im.total_per_sample.operations) / 1e6, 4118.01, 0.01);
}

}  // namespace
}  // namespace cnnergy
