// model_info(): per-layer counts follow Castro et al. 2019's equations, totals are the sum of the layers,
// batch scaling follows Eqs. 10-12, and CaffeNet / ResNet-34 totals agree with Castro et al. 2019's Table 1
// where the table is consistent with the network it names (tolerances justified at each check).
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

// Castro et al. 2019, Table 1, ResNetIm (= ResNet-34, its ref. [47]) row: 2080.96 M operations, 97.1 MB read,
// 46.6 MB written, CTC 81.8. The written volume (Eq. 9) agrees; the operation count does not
// describe ResNet-34 at 224x224: He et al. 2016 (Table 1) give 3.6e9 multiply-adds for it, and the
// table's 97.1 MiB read is less than ResNet-34's weights plus its activations. So operations are
// checked against He et al. and the discrepancy is explained in docs/model-info.md.
TEST(ModelInfo, ResNet34AgainstCastro2019Table1AndHe2016) {
  const auto graph = build_model("resnet34");
  const ModelInfo info = model_info(*graph, 1, DType::kF32);
  const Workload& t = info.total_per_sample;
  // Written: within 5%. The row is not self-consistent (above), so only closeness can be asked of
  // its one agreeing column: ours, 48.15 MiB, is 3.3% above it, while leaving out all batch-norm
  // or all ReLU outputs would move it by about 30%, far outside the tolerance.
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
}

}  // namespace
}  // namespace cnnergy
