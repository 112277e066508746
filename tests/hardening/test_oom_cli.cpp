// An out-of-memory batch on the CPU path through the command line (issue 22): `train`, `infer` and
// `profile` of VGG-16 at batch 100,000 (about 1.2 TiB of activations) end with exit code 5 and a
// "does not fit in host memory" message naming the bytes needed and available, within seconds and
// without allocating the arena (the prediction runs before anything batch-sized is allocated).
#include <gtest/gtest.h>

#include <chrono>

#include "train/cli_run.hpp"

using cnnergy::testing::run_cli;

namespace {

void expect_does_not_fit(const std::string& args) {
  SCOPED_TRACE(args);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_cli(args);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 5) << r.output;  // ExitCode::kOutOfMemory, not a signal (-1) or an internal error
  EXPECT_NE(r.output.find("batch 100000 of vgg16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not fit in host memory: it needs at least"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" available ("), std::string::npos) << r.output;
  EXPECT_LT(s, 30.0) << "the refusal should come before any large allocation";
}

}  // namespace

TEST(OutOfMemoryCli, TrainOfAnAbsurdBatchOnTheCpuDoesNotFit) {
  expect_does_not_fit("train --model vgg16 --data synthetic --dataset-size 100000 --batch 100000 --device cpu "
                      "--max-iters 1 --no-energy");
}

TEST(OutOfMemoryCli, InferOfAnAbsurdBatchOnTheCpuDoesNotFit) {
  expect_does_not_fit("infer vgg16 --batch 100000 --device cpu --idle-s 0");
}

TEST(OutOfMemoryCli, ProfileOfAnAbsurdBatchOnTheCpuDoesNotFit) {
  expect_does_not_fit("profile vgg16 --batch 100000 --device cpu");
}
