// The trainer on the CPU backend: phase timing, target accuracy and checkpoints across models (the
// per-phase and per-layer measurement timings are in test_phase_timing.cpp, a serial binary).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "core/errors.hpp"
#include "data/dataset.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/solver.hpp"
#include "net/zoo/zoo.hpp"
#include "train/trainer.hpp"

using namespace cnnergy;
namespace fs = std::filesystem;

namespace {
data::DatasetSplits synthetic_mnist_like(std::int64_t size) {
  return data::open_dataset("synthetic:1x28x28:classes=10:size=" + std::to_string(size) + ":test_size=256");
}
std::unique_ptr<Backend> cpu() { return create_backend(BackendOptions{}); }
}  // namespace

TEST(Trainer, LearnsSyntheticDataAndTimesEveryPhase) {
  auto graph = build_model("lenet5");
  auto backend = cpu();
  TrainConfig tc;
  tc.batch_size = 32;
  tc.epochs = 2;
  tc.max_iterations_per_epoch = 40;
  std::vector<EpochReport> seen;
  const auto report = train(*graph, *backend, synthetic_mnist_like(2048), tc, nullptr,
                            [&](const EpochReport& e) { seen.push_back(e); });
  ASSERT_EQ(report.epochs.size(), 2u);
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(report.phase_names.size(), 4u);
  ASSERT_EQ(report.phase_ms.size(), 4u);
  EXPECT_EQ(report.iteration_ms.n, 80u);
  for (const auto& s : report.phase_ms) EXPECT_EQ(s.n, 80u);
  EXPECT_GT(report.phase_ms[1].median, 0);  // forward
  EXPECT_GT(report.phase_ms[2].median, 0);  // backward
  // The phases tile the iteration (device events on one stream).
  double sum = 0;
  for (const auto& s : report.phase_ms) sum += s.mean;
  EXPECT_NEAR(sum, report.iteration_ms.mean, 0.05 * report.iteration_ms.mean + 0.05);
  ASSERT_TRUE(report.epochs.back().top1.has_value());
  EXPECT_GT(*report.epochs.back().top1, 0.5);  // learnable synthetic classes, chance is 0.1
  EXPECT_FALSE(report.total_joules.has_value());  // no probe
}

TEST(Trainer, StopsAtTargetAccuracyAndRejectsImpossibleTargets) {
  auto graph = build_model("lenet5");
  auto backend = cpu();
  TrainConfig tc;
  tc.batch_size = 32;
  tc.epochs = 10;
  tc.max_iterations_per_epoch = 30;
  tc.target_accuracy = 0.5;
  const auto report = train(*graph, *backend, synthetic_mnist_like(1024), tc, nullptr, {});
  ASSERT_TRUE(report.seconds_to_target.has_value());
  EXPECT_LT(report.epochs.size(), 10u);
  tc.target_accuracy = 0.0;
  EXPECT_THROW(train(*graph, *backend, synthetic_mnist_like(1024), tc, nullptr, {}), InvalidArgument);
}

TEST(Trainer, CheckpointOfAnotherModelIsRefusedAndNothingIsOverwritten) {
  const auto dir = fs::temp_directory_path() / ("cnnergy_trainer_ck_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto backend = cpu();
  TrainConfig tc;
  tc.batch_size = 16;
  tc.epochs = 1;
  tc.max_iterations_per_epoch = 2;
  tc.save_path = (dir / "lenet.ck").string();
  train(*build_model("lenet5"), *backend, synthetic_mnist_like(256), tc, nullptr, {});
  const auto size_before = fs::file_size(tc.save_path);
  TrainConfig other = tc;
  other.save_path.clear();
  other.resume_path = tc.save_path;
  auto gait = build_model("lenet5", Shape{1, 28, 28}, 7);  // same layers, other class count
  EXPECT_THROW(train(*gait, *backend, data::open_dataset("synthetic:1x28x28:classes=7:size=256"), other, nullptr, {}),
               DataError);
  EXPECT_EQ(fs::file_size(tc.save_path), size_before);
  fs::remove_all(dir);
}

TEST(Trainer, DataThatDoesNotFitTheModelIsAClearError) {
  auto backend = cpu();
  TrainConfig tc;
  try {
    train(*build_model("lenet5"), *backend, data::open_dataset("synthetic:3x32x32:classes=10:size=128"), tc, nullptr, {});
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("3x32x32"), std::string::npos) << e.what();
  }
}
