// The recorded training step (`--cuda-graph`, TrainStep) against the eager one: the same weights
// after the same steps, a new recording exactly when the learning rate or the fp16 loss scale
// changes, the trainer's graph mode, and networks whose step cannot be recorded.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/errors.hpp"
#include "data/dataset.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "train/fixed_batch.hpp"
#include "train/train_step.hpp"
#include "train/trainer.hpp"
#include "train_cuda/gpu_training_fixture.hpp"

namespace cnnergy::test {
namespace {

std::vector<Tensor> masters(Executor& exec) {
  std::vector<Tensor> out;
  for (Parameter* p : exec.parameters()) out.push_back(to_host_f32(exec.backend(), p->master));
  return out;
}

// Trains `steps` steps of `model` from the same weights and batch, eagerly and recorded, on fresh
// backends of `dtype`, and compares every fp32 master weight. Returns the recorded run's counts.
struct Counts {
  std::int64_t recordings = 0, replays = 0;
  float final_loss_scale = 0;
};
Counts compare_eager_and_graphed(const std::string& model, DType dtype, Layout layout, const SolverOptions& so,
                                 int steps, double tol,
                                 StatisticsFusion statistics = BackendOptions{}.conv_statistics_fusion) {
  auto graph = build_model(model);
  std::vector<Tensor> result[2], initial;
  Counts counts;
  for (int graphed = 0; graphed < 2; ++graphed) {
    // "heuristic": both runs use the same algorithms (find could pick differently between them).
    auto backend = GpuTraining::gpu(dtype, layout, "heuristic", false, statistics);
    FixedBatchWorkload work(*graph, *backend, 16, 77);
    SgdSolver solver(work.executor(), so);
    if (graphed == 0) initial = masters(work.executor());
    TrainStep step(work.executor(), solver, graphed == 1);
    for (int i = 0; i < steps; ++i) step.run(0);
    backend->synchronize();
    result[graphed] = masters(work.executor());
    if (graphed == 1) {
      counts.recordings = step.recordings();
      counts.replays = step.replays();
      counts.final_loss_scale = solver.loss_scale();
    }
  }
  bool moved = false;
  for (std::size_t i = 0; i < initial.size(); ++i) {
    for (const float v : result[0][i].f32())
      if (!std::isfinite(v)) {
        ADD_FAILURE() << model << " parameter " << i << ": the eager run diverged (learning rate too high)";
        return counts;
      }
    EXPECT_LE(relative_norm_error(result[1][i], result[0][i]), tol) << model << " parameter " << i;
    moved = moved || relative_norm_error(result[0][i], initial[i]) > 1e-4;
  }
  EXPECT_TRUE(moved) << "the eager steps did not change the weights";
  return counts;
}

// 0.001: at 0.05 with momentum 0.9, LeNet-5 on one batch of N(0, 1) images diverges to NaN within
// 6 steps (seen on the H200 on 2026-11-22 and on the CPU), and at 0.01 its loss climbs to ~60; at
// 0.001 it falls steadily (3.9 to 0.7 in 8 steps on the CPU), so the comparison is of sane weights.
SolverOptions fixed_lr(DType dtype) {
  SolverOptions so;
  so.schedule.base_lr = 0.001;
  so.loss_scale = SolverOptions::loss_scale_for(dtype);
  return so;
}

TEST_F(GpuTraining, GraphedStepsGiveTheEagerWeights) {
  // 1e-4: cuDNN's backward-filter algorithms may sum with atomics, so two eager runs differ too
  // (1.8e-5 seen after 6 steps on the H200).
  const Counts c = compare_eager_and_graphed("lenet5", DType::kF32, Layout::kNCHW, fixed_lr(DType::kF32), 8, 1e-4);
  EXPECT_EQ(c.recordings, 1);  // the first step runs eagerly, then one recording serves every step
  EXPECT_EQ(c.replays, 7);
  // Batch norm and residual adds, bf16 in NHWC.
  const Counts r = compare_eager_and_graphed("gait_resnet", DType::kBF16, Layout::kNHWC, fixed_lr(DType::kBF16), 5, 1e-2);
  EXPECT_EQ(r.recordings, 1);
  // fp16 NHWC with dynamic loss scaling: a scale that backs off is a new recording. Without the
  // statistics from cuDNN's fused graph: its sums are not bit-reproducible run to run, and five steps
  // of a random network grow such differences past any tolerance (even fp16 against fp32 ends over
  // 100 % apart in the worst parameter; StatisticsFromTheConvolutionsTrainAsCloseToFp32AsTheBatchNormsOwn).
  const Counts h = compare_eager_and_graphed("gait_resnet", DType::kF16, Layout::kNHWC, fixed_lr(DType::kF16), 5,
                                             1e-2, StatisticsFusion::kOff);
  EXPECT_GE(h.recordings, 1);
}

// Batch-norm statistics from the convolutions over several steps (what one step cannot show): five
// fp16 SGD steps of gait_resnet with a fixed loss scale (no skipped steps), eager, with the statistics
// from cuDNN's fused graph wherever it runs (kAlways) and without, each against the same steps in
// fp32. Rounding differences grow over the steps of a random network, so the fused run must stay
// about as close to fp32 as the unfused one (within 3x and 1e-2 per parameter), not bit for bit.
TEST_F(GpuTraining, StatisticsFromTheConvolutionsTrainAsCloseToFp32AsTheBatchNormsOwn) {
  auto graph = build_model("gait_resnet");
  auto run = [&](DType dtype, Layout layout, StatisticsFusion statistics, std::size_t* taken) {
    auto backend = GpuTraining::gpu(dtype, layout, "heuristic", false, statistics);
    FixedBatchWorkload work(*graph, *backend, 16, 77);
    SolverOptions so = fixed_lr(DType::kF32);
    so.loss_scale.initial_scale = 128.0f;  // fixed: every run takes all five steps
    SgdSolver solver(work.executor(), so);
    TrainStep step(work.executor(), solver, false);
    for (int i = 0; i < 5; ++i) step.run(0);
    backend->synchronize();
    if (taken != nullptr) *taken = work.executor().statistics_from_convolutions();
    return masters(work.executor());
  };
  const std::vector<Tensor> fp32 = run(DType::kF32, Layout::kNCHW, StatisticsFusion::kOff, nullptr);
  std::size_t taken = 0;
  const std::vector<Tensor> own = run(DType::kF16, Layout::kNHWC, StatisticsFusion::kOff, nullptr);
  const std::vector<Tensor> fused = run(DType::kF16, Layout::kNHWC, StatisticsFusion::kAlways, &taken);
  EXPECT_GT(taken, 0u);
  ASSERT_EQ(own.size(), fp32.size());
  ASSERT_EQ(fused.size(), fp32.size());
  double worst_own = 0, worst_fused = 0;
  for (std::size_t i = 0; i < fp32.size(); ++i) {
    const double err_own = relative_norm_error(own[i], fp32[i]), err_fused = relative_norm_error(fused[i], fp32[i]);
    worst_own = std::max(worst_own, err_own);
    worst_fused = std::max(worst_fused, err_fused);
    EXPECT_LE(err_fused, 3 * err_own + 1e-2) << "parameter " << i << " (own " << err_own << ")";
  }
  std::printf("[  NOTE    ] %zu batch norms took the fused graph's statistics; worst parameter from fp32: "
              "fused %.3g, own %.3g\n", taken, worst_fused, worst_own);
}

TEST_F(GpuTraining, ANewLearningRateIsANewRecording) {
  SolverOptions so = fixed_lr(DType::kF32);
  so.schedule.policy = LrPolicy::kStep;
  so.schedule.unit = LrUnit::kIteration;
  so.schedule.step_size = 2;
  so.schedule.gamma = 0.5;
  // Iterations 0..5: step 0 eager; lr changes at 2 and 4, so recordings at 1, 2 and 4.
  const Counts c = compare_eager_and_graphed("lenet5", DType::kF32, Layout::kNCHW, so, 6, 1e-4);
  EXPECT_EQ(c.recordings, 3);
  EXPECT_EQ(c.replays, 5);
}

TEST_F(GpuTraining, Fp16LossScalingSkipsTheSameStepsWhenGraphed) {
  SolverOptions so = fixed_lr(DType::kF16);
  so.loss_scale.initial_scale = 1e30f;  // overflows: the first steps are skipped and the scale backs off
  so.loss_scale.backoff_factor = 1e-8f;
  const Counts c = compare_eager_and_graphed("lenet5", DType::kF16, Layout::kNCHW, so, 8, 1e-3);
  EXPECT_LT(c.final_loss_scale, 1e30f);
  EXPECT_GE(c.recordings, 2);  // a new scale is a new recording
}

TEST_F(GpuTraining, NetworksWithDropoutAreRefused) {
  auto graph = build_model("lenet5");
  auto backend = gpu();
  // LeNet-5 records; AlexNet's dropout would repeat its mask on every replay.
  EXPECT_NO_THROW(FixedBatchWorkload(*graph, *backend, 4, 1, true));
  auto alexnet = build_model("alexnet");
  try {
    FixedBatchWorkload w(*alexnet, *backend, 2, 1, true);
    FAIL() << "alexnet with --cuda-graph was accepted";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
  }
}

TEST_F(GpuTraining, TrainerInGraphModeLearnsAndTimesTheWholeStep) {
  auto graph = build_model("lenet5");
  auto backend = gpu();
  TrainConfig tc;
  tc.batch_size = 32;
  tc.epochs = 2;
  tc.max_iterations_per_epoch = 40;
  tc.cuda_graph = true;
  const auto report =
      train(*graph, *backend, data::open_dataset("synthetic:1x28x28:classes=10:size=2048:test_size=256"), tc, nullptr, {});
  ASSERT_EQ(report.phase_names, (std::vector<std::string>{"load", "step"}));
  ASSERT_EQ(report.phase_ms.size(), 2u);
  EXPECT_EQ(report.phase_ms[1].n, 80u);
  EXPECT_EQ(report.graph_recordings, 2);  // one per input slot of the double buffer
  ASSERT_TRUE(report.epochs.back().top1.has_value());
  EXPECT_GT(*report.epochs.back().top1, 0.5);
}

}  // namespace
}  // namespace cnnergy::test
