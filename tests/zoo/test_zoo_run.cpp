// Every zoo model runs one training forward and backward pass on the CPU backend at batch 2, on
// fresh random images: logits are (N, classes) and finite, the loss is finite, every parameter
// gradient is finite and the gradient reaches the first layer (the graph is wired end to end).
// Inputs are reduced where the architecture allows it, to keep CI fast; the full-size networks are
// covered by the parameter-count and model-info tests.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>

#include "backend/ops.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy {
namespace {

struct RunCase {
  std::string model;
  Shape input;  // C, H, W of one sample
};

// Smallest sensible inputs per architecture (the reason in each comment).
const std::vector<RunCase>& run_cases() {
  static const std::vector<RunCase> cases = {
      {"lenet5", Shape{1, 28, 28}},           // full size: tiny already
      {"alexnet", Shape{3, 63, 63}},          // 63 -> conv1 15 -> pools 7, 3, 1: the smallest that works
      {"caffenet", Shape{3, 67, 67}},         // 67 -> conv1 15 -> pools 7, 3, 1 (ceil mode)
      {"overfeat", Shape{3, 71, 71}},         // 71 -> conv1 16 -> 8 -> conv2 4 -> 2 -> pool5 1
      {"vgg16", Shape{3, 32, 32}},            // five 2x2 pools: 32 -> 1
      {"vgg19", Shape{3, 32, 32}},
      {"googlenet", Shape{3, 64, 64}},        // inception5 at 2x2, so its batch norms see 8 values
      {"inception_v3", Shape{3, 75, 75}},     // torchvision's documented minimum
      {"inception_v4", Shape{3, 75, 75}},     // 75 -> 37 -> 35 -> 17 -> 15 -> 7 -> 3 -> 1
      {"resnet34", Shape{3, 64, 64}},         // layer4 at 2x2
      {"resnetim", Shape{3, 64, 64}},         // 64 -> 32 -> 16 -> adapters 16, 8, 4, 2
      {"resnet50", Shape{3, 64, 64}},
      {"resnet152", Shape{3, 32, 32}},        // the deepest: layer4 at 1x1 (BN over the batch of 2)
      {"gait_2dcnn", Shape{2, 60, 60}},       // 60x60 is its minimum (conv4 needs a 2x2 map): fewer channels
      {"gait_resnet", Shape{2, 32, 32}},      // 32 -> conv1 16 -> pool 8 -> adapters 8, 4, 2, 1
  };
  return cases;
}

// How gtest (and so CTest's test list) names a case.
void PrintTo(const RunCase& c, std::ostream* os) { *os << c.model << " at " << c.input.str(); }

class ZooRun : public ::testing::TestWithParam<RunCase> {};

bool all_finite(const Tensor& host) {
  for (const float v : host.f32())
    if (!std::isfinite(v)) return false;
  return true;
}

TEST_P(ZooRun, ForwardAndBackwardOnCpu) {
  const RunCase& c = GetParam();
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("model " + c.model + " input " + c.input.str() + ", CNNERGY_SEED=" + std::to_string(seed));
  constexpr std::int64_t kBatch = 2;
  const auto start = std::chrono::steady_clock::now();

  const auto graph = build_model(c.model, c.input);
  const std::int64_t classes = graph->num_classes();
  BackendOptions options;  // CPU, fp32, NCHW
  const auto backend = create_backend(options);
  ExecutorOptions exec_options;
  exec_options.batch_size = kBatch;
  exec_options.training = true;
  exec_options.dropout_seed = seed;
  Executor executor(*graph, *backend, exec_options);
  executor.initialize_parameters(seed);

  Rng rng(seed);
  Tensor images = Tensor::host(Shape{kBatch, c.input[0], c.input[1], c.input[2]});
  rng.fill_uniform(images.f32(), -1.0f, 1.0f);
  Tensor labels = Tensor::host(Shape{kBatch}, DType::kI32);
  for (std::int64_t i = 0; i < kBatch; ++i)
    labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng.next_u32() % static_cast<std::uint32_t>(classes));

  executor.set_input(images, labels);
  executor.forward(Phase::kTrain);
  executor.backward();
  const float loss = executor.read_loss();
  EXPECT_TRUE(std::isfinite(loss)) << loss;
  EXPECT_GT(loss, 0.0f);

  ASSERT_EQ(executor.logits().shape(), (Shape{kBatch, classes}));
  Tensor logits = Tensor::host(executor.logits().shape());
  backend->download(executor.logits(), logits);
  EXPECT_TRUE(all_finite(logits));

  const auto params = executor.parameters();
  ASSERT_FALSE(params.empty());
  for (const Parameter* p : params) {
    Tensor g = Tensor::host(p->grad.shape());
    backend->download(p->grad, g);
    EXPECT_TRUE(all_finite(g)) << p->name;
  }
  // The first parameter is the first layer's weight: a non-zero gradient there means the loss
  // gradient travelled back through every stage of the network.
  Tensor first = Tensor::host(params.front()->grad.shape());
  backend->download(params.front()->grad, first);
  double sum_abs = 0.0;
  for (const float v : first.f32()) sum_abs += std::fabs(v);
  EXPECT_GT(sum_abs, 0.0) << params.front()->name;

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ info ] %s %s batch %lld: loss %.4f, %.2f s\n", c.model.c_str(), c.input.str().c_str(),
              static_cast<long long>(kBatch), static_cast<double>(loss), seconds);
}

TEST(ZooRunCases, CoverEveryModel) {
  ASSERT_EQ(run_cases().size(), model_zoo().size());
  for (std::size_t i = 0; i < run_cases().size(); ++i) EXPECT_EQ(run_cases()[i].model, model_zoo()[i].name);
}

INSTANTIATE_TEST_SUITE_P(AllModels, ZooRun, ::testing::ValuesIn(run_cases()),
                         [](const ::testing::TestParamInfo<RunCase>& param_info) { return param_info.param.model; });

}  // namespace
}  // namespace cnnergy
