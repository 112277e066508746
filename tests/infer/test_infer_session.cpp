// The inference session against the training executor's eval-mode forward on the CPU reference
// backend: batch norms folded into the convolutions (and the ReLUs after them fused into those
// convolutions) give the same logits (to fp32 rounding), the
// folded layers run nothing and the executor holds no gradients; latency percentiles; bad input.
#include <gtest/gtest.h>

#include <cstring>

#include <chrono>
#include <algorithm>
#include <cmath>

#include "common/tensor_testing.hpp"
#include "core/errors.hpp"
#include "infer/drivers.hpp"
#include "infer/session.hpp"
#include "infer/infer_testing.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy {
namespace {

std::unique_ptr<Backend> cpu() { return test::cpu_backend(); }

// Folding reorders fp32 rounding (w * s before the sum instead of s * the sum): logits agree to
// 1e-5 of their largest magnitude, element by element (the deep ResNets with random statistics
// amplify activations layer by layer, so a fixed absolute tolerance would say nothing).
::testing::AssertionResult close_to_scale(const Tensor& actual, const Tensor& expected) {
  double scale = 0;
  for (float v : expected.f32()) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  return test::all_close(actual, expected, 1e-5 * std::max(scale, 1.0), 1e-4);
}

struct Case {
  const char* model;
  Shape input;
};

class InferMatchesEval : public ::testing::TestWithParam<Case> {};

TEST_P(InferMatchesEval, FoldedSessionEqualsTrainingExecutorInEvalMode) {
  const Case c = GetParam();
  auto backend = cpu();
  const auto graph = build_model(c.model, c.input);
  constexpr std::int64_t kBatch = 3;
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  Rng rng(seed);
  const Tensor images = test::random_tensor(graph->tensor(graph->input_tensor()).shape.with_batch(kBatch), rng);

  ExecutorOptions to;
  to.batch_size = kBatch;
  Executor reference(*graph, *backend, to);
  reference.initialize_parameters(7);
  test::randomize_batch_norms(reference, seed + 1);
  const Tensor dev = backend->alloc(images.shape(), DType::kF32);
  backend->upload(images, dev);
  reference.set_input(dev, Tensor{});
  reference.forward(Phase::kEval);
  Tensor expected = Tensor::host(reference.logits().shape());
  backend->download(reference.logits(), expected);

  InferenceOptions io;
  io.batch = kBatch;
  io.seed = 7;
  InferenceSession session(*graph, *backend, io);
  test::randomize_batch_norms(session.executor(), seed + 1);
  session.executor().fold_parameters();
  Tensor logits;
  session.run_host(images, logits);
  EXPECT_TRUE(close_to_scale(logits, expected));
  session.run_host(images, logits);  // second request: the same answer
  EXPECT_TRUE(close_to_scale(logits, expected));

  std::size_t bns = 0, folded = 0;
  for (std::size_t i = 0; i < graph->num_layers(); ++i)
    if (graph->layer(i).type() == "batch_norm") ++bns;
  for (std::size_t i = 0; i < session.executor().num_layers(); ++i)
    if (session.executor().layer(i).type() == "batch_norm" && session.executor().layer(i).absorbed()) ++folded;
  EXPECT_EQ(folded, session.executor().memory().folded_batch_norms);
  EXPECT_EQ(folded, bns);  // every batch norm of these models follows a convolution it alone reads
  // On the CPU the ReLU after a folded batch norm runs inside the convolution (Backend::fuses_conv_relu:
  // oneDNN's post-op, a clamp after the other algorithms): the logits above are with it.
  std::size_t relus_into_convs = 0;
  for (std::size_t i = 0; i < session.executor().num_layers(); ++i) {
    const Layer& l = session.executor().layer(i);
    if (l.type() == "relu" && l.absorbed())
      relus_into_convs += session.executor().layer(graph->layer_index(l.absorbed_into())).type() == "conv";
  }
  if (std::string(c.model) == "resnet34") {
    EXPECT_GT(relus_into_convs, 0u);
  }
  for (const Parameter* p : session.executor().parameters()) EXPECT_FALSE(p->grad.defined()) << p->name;
  EXPECT_FALSE(session.graphed());  // the CPU records no graphs: requests run eagerly
}

INSTANTIATE_TEST_SUITE_P(Models, InferMatchesEval,
                         ::testing::Values(Case{"resnet34", Shape{3, 32, 32}}, Case{"gait_resnet", Shape{2, 32, 32}},
                                           Case{"googlenet", Shape{3, 64, 64}}, Case{"caffenet", Shape{3, 67, 67}},
                                           Case{"lenet5", Shape{1, 28, 28}}),
                         [](const auto& param_info) { return std::string(param_info.param.model); });

TEST(InferSession, UnfoldedSessionNeedsNoFoldAndFoldedWeightsMustBeFolded) {
  auto backend = cpu();
  const auto graph = build_model("resnet34", Shape{3, 32, 32});
  ExecutorOptions eo;
  eo.training = false;
  eo.fold_batch_norm = true;
  Executor ex(*graph, *backend, eo);  // weights never initialised: folds are pending
  const Tensor in = backend->alloc(graph->tensor(0).shape.with_batch(1), DType::kF32);
  backend->fill(in, 0.0f);
  ex.set_input(in, Tensor{});
  EXPECT_THROW(ex.forward(Phase::kEval), InvalidArgument);
  ex.fold_parameters();
  EXPECT_NO_THROW(ex.forward(Phase::kEval));
  ExecutorOptions bad = eo;
  bad.training = true;
  EXPECT_THROW(Executor(*graph, *backend, bad), InvalidArgument);  // folding is for eval-only executors
  InferenceOptions io;
  io.batch = 0;
  EXPECT_THROW(InferenceSession(*graph, *backend, io), InvalidArgument);
  io.batch = 2;
  InferenceSession session(*graph, *backend, io);
  Tensor logits;
  EXPECT_THROW(session.run_host(Tensor::host(Shape{1, 3, 32, 32}), logits), ShapeError);
  // Two requests in flight (one by one on the CPU): each request's logits are its own images'.
  Rng rng(default_seed());
  std::vector<Tensor> batches, piped(1);
  for (int i = 0; i < 3; ++i) batches.push_back(test::random_tensor(Shape{2, 3, 32, 32}, rng));
  std::vector<Tensor> want(batches.size());
  for (std::size_t i = 0; i < batches.size(); ++i) session.run_host(batches[i], want[i]);
  EXPECT_GT(session.run_host_pipelined(batches, piped), 0.0);
  ASSERT_EQ(piped.size(), batches.size());
  for (std::size_t i = 0; i < batches.size(); ++i)
    EXPECT_EQ(std::memcmp(piped[i].raw(), want[i].raw(), want[i].size_bytes()), 0) << "request " << i;
  EXPECT_THROW(session.run_host_pipelined({}, piped), InvalidArgument);
  EXPECT_THROW(session.run_host_pipelined({Tensor::host(Shape{1, 3, 32, 32})}, piped), ShapeError);
}

TEST(InferLatency, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // 1..100 ms, unsorted
  const LatencySummary s = summarize_latencies(v);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.p50_ms, 50);
  EXPECT_DOUBLE_EQ(s.p90_ms, 90);
  EXPECT_DOUBLE_EQ(s.p99_ms, 99);
  EXPECT_DOUBLE_EQ(s.max_ms, 100);
  EXPECT_DOUBLE_EQ(s.mean_ms, 50.5);
  const LatencySummary one = summarize_latencies({4.0});
  EXPECT_DOUBLE_EQ(one.p50_ms, 4.0);
  EXPECT_DOUBLE_EQ(one.p99_ms, 4.0);
  EXPECT_EQ(summarize_latencies({}).count, 0u);
}

TEST(InferOpenLoop, RejectsBadRatesAndNeverHangsWhenSaturated) {
  auto backend = cpu();
  const auto graph = build_model("lenet5");
  InferenceOptions io;
  io.batch = 4;
  InferenceSession session(*graph, *backend, io);
  const Tensor images = Tensor::host(graph->tensor(0).shape.with_batch(4));
  OpenLoopSpec spec;
  spec.qps = 0;
  EXPECT_THROW(run_open_loop(session, images, spec), InvalidArgument);
  spec.qps = -5;
  EXPECT_THROW(run_open_loop(session, images, spec), InvalidArgument);
  // A sustainable rate: every request served, latencies at least the queueing time.
  spec.qps = 50;
  spec.duration_s = 0.5;
  const OpenLoopResult ok = run_open_loop(session, images, spec);
  EXPECT_EQ(ok.served, ok.arrived);
  EXPECT_FALSE(ok.saturated) << ok.note;
  EXPECT_GE(ok.latency.p50_ms, ok.queueing.p50_ms);
  // Far beyond any CPU: stopped 1 s after the last arrival (max(1 s, 0.2 x 0.2 s)), reported as
  // saturated (about 1.2 s; the bound leaves room for a loaded machine, and a run waiting for the
  // old cut-off of 2 x duration + 5 s would miss it).
  spec.qps = 5e6;
  spec.duration_s = 0.2;
  const auto t0 = std::chrono::steady_clock::now();
  const OpenLoopResult sat = run_open_loop(session, images, spec);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(sat.saturated);
  EXPECT_LT(sat.served, sat.arrived);
  EXPECT_LT(s, 4.0);
  EXPECT_GT(sat.served, 0);
  EXPECT_NE(sat.note.find("saturated"), std::string::npos);
}

}  // namespace
}  // namespace cnnergy
