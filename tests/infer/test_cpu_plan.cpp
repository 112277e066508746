// The whole-network oneDNN plan of CPU inference sessions against the per-layer executor path: the
// same logits (to fp32 rounding) for residual and plain models at several batch sizes, weights
// copied again after they change, and models with a layer the plan lacks falling back with a reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/conv_onednn_cpu.hpp"
#include "backend/cpu/onednn_plan.hpp"
#include "common/tensor_testing.hpp"
#include "infer/infer_testing.hpp"
#include "infer/session.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy {
namespace {

std::unique_ptr<Backend> cpu() { return test::cpu_backend(); }

// The plan sums in another order (oneDNN's blocked kernels, the residual add inside the convolution):
// every logit within 1e-4 of the largest logit magnitude.
::testing::AssertionResult close_to_scale(const Tensor& actual, const Tensor& expected) {
  double scale = 0, worst = 0;
  const auto a = actual.f32(), e = expected.f32();
  if (a.size() != e.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < e.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(e[i])));
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - e[i])));
  }
  if (worst <= 1e-4 * std::max(scale, 1e-3)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max |diff| " << worst << " > 1e-4 x max |logit| " << scale;
}

struct Case {
  const char* model;
  Shape input;
  std::int64_t batch;
  const char* fallback;  // nullptr: the plan must run; else a word of the expected fallback reason
};

// A session (plan on or off) with seeded weights and randomised batch-norm statistics, folded.
std::unique_ptr<InferenceSession> session(const Graph& g, Backend& be, std::int64_t batch, bool plan,
                                          std::int64_t chunk = 0) {
  InferenceOptions io;
  io.batch = batch;
  io.seed = 7;
  io.cpu_plan = plan;
  io.cpu_plan_chunk = chunk;
  auto s = std::make_unique<InferenceSession>(g, be, io);
  test::randomize_batch_norms(s->executor(), 11);
  s->executor().fold_parameters();
  return s;
}

class CpuPlanMatchesPerLayer : public ::testing::TestWithParam<Case> {};

TEST_P(CpuPlanMatchesPerLayer, SameLogits) {
  if (!cpu::onednn_available()) GTEST_SKIP() << "this build has no oneDNN: no CPU inference plan to test";
  const Case c = GetParam();
  auto backend = cpu();
  const auto graph = build_model(c.model, c.input);
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  Rng rng(seed);
  const Tensor images = test::random_tensor(graph->tensor(graph->input_tensor()).shape.with_batch(c.batch), rng);

  auto reference = session(*graph, *backend, c.batch, false);
  EXPECT_EQ(reference->forward_path(), "per-layer");
  Tensor expected;
  reference->run_host(images, expected);

  auto planned = session(*graph, *backend, c.batch, true);
  if (c.fallback) {
    EXPECT_EQ(planned->forward_path(), "per-layer");
    EXPECT_NE(planned->plan_fallback_reason().find(c.fallback), std::string::npos) << planned->plan_fallback_reason();
  } else {
    ASSERT_EQ(planned->forward_path(), "onednn-plan") << planned->plan_fallback_reason();
    EXPECT_TRUE(planned->plan_fallback_reason().empty());
  }
  Tensor logits;
  planned->run_host(images, logits);
  EXPECT_TRUE(close_to_scale(logits, expected));
  planned->run_host(images, logits);  // buffers reused: the same answer again
  EXPECT_TRUE(close_to_scale(logits, expected));
}

INSTANTIATE_TEST_SUITE_P(
    Models, CpuPlanMatchesPerLayer,
    ::testing::Values(Case{"resnet34", Shape{3, 32, 32}, 1, nullptr}, Case{"resnet34", Shape{3, 32, 32}, 3, nullptr},
                      Case{"resnet50", Shape{3, 32, 32}, 2, nullptr}, Case{"gait_resnet", Shape{2, 32, 32}, 2, nullptr},
                      Case{"vgg16", Shape{3, 32, 32}, 2, nullptr}, Case{"lenet5", Shape{1, 28, 28}, 3, nullptr},
                      Case{"googlenet", Shape{3, 64, 64}, 2, "concat"}, Case{"caffenet", Shape{3, 67, 67}, 2, "lrn"}),
    [](const auto& param_info) {
      return std::string(param_info.param.model) + "_b" + std::to_string(param_info.param.batch);
    });

TEST(CpuPlan, ResidualAddsAreFusedIntoConvolutions) {
  if (!cpu::onednn_available()) GTEST_SKIP() << "this build has no oneDNN: no CPU inference plan to test";
  auto backend = cpu();
  const auto graph = build_model("resnet34", Shape{3, 32, 32});
  auto s = session(*graph, *backend, 1, true);
  ASSERT_NE(s->plan(), nullptr) << s->plan_fallback_reason();
  std::size_t adds = 0;
  for (std::size_t i = 0; i < graph->num_layers(); ++i) adds += graph->layer(i).type() == "add";
  EXPECT_EQ(s->plan()->fused_adds(), adds) << s->plan_description();  // ResNet-34: 16 blocks, every add fused
  EXPECT_NE(s->plan_description().find("conv+sum"), std::string::npos) << s->plan_description();
}

// New weights after the plan was made (fold_parameters, as a checkpoint load does): the plan copies
// them again before the next request.
TEST(CpuPlan, NewWeightsReachThePlan) {
  if (!cpu::onednn_available()) GTEST_SKIP() << "this build has no oneDNN: no CPU inference plan to test";
  auto backend = cpu();
  const auto graph = build_model("resnet34", Shape{3, 32, 32});
  Rng rng(3);
  const Tensor images = test::random_tensor(graph->tensor(graph->input_tensor()).shape.with_batch(2), rng);
  InferenceOptions io;
  io.batch = 2;
  io.seed = 7;
  InferenceSession planned(*graph, *backend, io);
  ASSERT_EQ(planned.forward_path(), "onednn-plan") << planned.plan_fallback_reason();
  Tensor before, after;
  planned.run_host(images, before);  // fresh batch-norm statistics
  test::randomize_batch_norms(planned.executor(), 11);
  planned.executor().fold_parameters();
  planned.run_host(images, after);
  Tensor expected;
  session(*graph, *backend, 2, false)->run_host(images, expected);
  EXPECT_TRUE(close_to_scale(after, expected));
  EXPECT_FALSE(close_to_scale(before, expected));  // the change was visible at all
}

// A request in chunks of the plan's batch, the last one by the second (remainder) plan.
TEST(CpuPlan, ChunkedRequestsGiveTheSameLogits) {
  if (!cpu::onednn_available()) GTEST_SKIP() << "this build has no oneDNN: no CPU inference plan to test";
  auto backend = cpu();
  const auto graph = build_model("resnet34", Shape{3, 32, 32});
  Rng rng(5);
  const Tensor images = test::random_tensor(graph->tensor(graph->input_tensor()).shape.with_batch(5), rng);
  Tensor expected, logits;
  session(*graph, *backend, 5, false)->run_host(images, expected);
  auto chunked = session(*graph, *backend, 5, true, 2);
  ASSERT_EQ(chunked->forward_path(), "onednn-plan") << chunked->plan_fallback_reason();
  EXPECT_EQ(chunked->plan_chunk(), 2);
  chunked->run_host(images, logits);
  EXPECT_TRUE(close_to_scale(logits, expected));
  // The automatic chunk keeps the largest activation within the budget: ResNet-34 at 32x32 holds
  // 64 x 16 x 16 floats (64 KiB) a sample at most, so a batch of 5 is one chunk.
  EXPECT_EQ(session(*graph, *backend, 5, true)->plan_chunk(), 5);
}

TEST(CpuPlan, UnfoldedBatchNormFallsBack) {
  if (!cpu::onednn_available()) GTEST_SKIP() << "this build has no oneDNN: no CPU inference plan to test";
  auto backend = cpu();
  const auto graph = build_model("resnet34", Shape{3, 32, 32});
  InferenceOptions io;
  io.fold_batch_norm = false;
  InferenceSession s(*graph, *backend, io);
  EXPECT_EQ(s.forward_path(), "per-layer");
  EXPECT_NE(s.plan_fallback_reason().find("batch_norm"), std::string::npos) << s.plan_fallback_reason();
}

}  // namespace
}  // namespace cnnergy
