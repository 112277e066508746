// `cnnergy dist-train` and `cnnergy concurrent` run in-process on CPU replicas: the JSON report
// (ranks, buckets, epochs), scaling against a one-replica baseline run here or read from a file,
// and bad flags (no batch, a batch that does not split, more GPUs than present, --cuda-graph on the
// CPU, also through the cnnergy binary for its exit code).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cli/cmd_dist_train.hpp"
#include "common/tensor_testing.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "parallel/parallel_testing.hpp"
#include "train/cli_run.hpp"

namespace cnnergy::cli {
namespace {


Json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

class DistTrainCli : public test::SeededTest {
 protected:
  std::vector<std::string> base(std::vector<std::string> extra) const {
    std::vector<std::string> a = {"--model",
                                  "lenet5",
                                  "--data",
                                  "synthetic",
                                  "--dataset-size",
                                  "256",
                                  "--device",
                                  "cpu",
                                  "--max-iters",
                                  "4",
                                  "--warmup",
                                  "1",
                                  "--workers",
                                  "1",
                                  "--no-energy",
                                  "--eval-batches",
                                  "2",
                                  "--seed",
                                  std::to_string(seed_ % 1000000),
                                  "--launcher",
                                  "local"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

TEST_F(DistTrainCli, StrongScalingAgainstASingleReplicaRunHere) {
  test::ScratchDir dir("cli");
  const std::string json = dir.file("run.json");
  ASSERT_EQ(run_dist_train(
                base({"--gpus", "2", "--global-batch", "16", "--compare-single", "--json", json})),
            0);
  const Json j = read_json(json);
  EXPECT_EQ(j.at("world_size").number(), 2);
  EXPECT_EQ(j.at("global_batch").number(), 16);
  EXPECT_EQ(j.at("per_replica_batch").number(), 8);
  EXPECT_EQ(j.at("comm").str(), "threads");
  EXPECT_EQ(j.at("timed_iterations").number(), 3);
  EXPECT_EQ(j.at("ranks").items().size(), 2u);
  EXPECT_EQ(j.at("weights_checksum").str().size(), 16u);
  EXPECT_FALSE(j.at("buckets").items().empty());
  ASSERT_EQ(j.at("epochs").items().size(), 1u);
  EXPECT_FALSE(j.at("epochs").items()[0].at("top1").is_null());
  const Json& s = j.at("scaling");
  EXPECT_EQ(s.at("mode").str(), "strong");
  EXPECT_EQ(s.at("gpus").number(), 2);
  EXPECT_GT(s.at("speedup").number(), 0);
  EXPECT_NEAR(s.at("efficiency").number(), s.at("speedup").number() / 2, 1e-12);
  EXPECT_EQ(j.at("baseline").at("global_batch").number(), 16);
  EXPECT_EQ(j.at("baseline").at("world_size").number(), 1);
}

// --fixed-batch: no loader at all (nothing waited for, no load phase), replicas still identical after
// every step (--check-weights 1 throws otherwise), and the one-replica baseline runs the same way.
TEST_F(DistTrainCli, FixedBatchTrainsWithoutTheLoader) {
  test::ScratchDir dir("cli");
  const std::string json = dir.file("fixed.json");
  ASSERT_EQ(run_dist_train(base({"--gpus", "2", "--global-batch", "16", "--fixed-batch", "--check-weights", "1",
                                 "--compare-single", "--no-eval", "--json", json})),
            0);
  const Json j = read_json(json);
  EXPECT_TRUE(j.at("fixed_batch").boolean());
  ASSERT_EQ(j.at("ranks").items().size(), 2u);
  for (const Json& r : j.at("ranks").items()) {
    EXPECT_EQ(r.at("loader_wait_ms").number(), 0.0);
    EXPECT_GT(r.at("compute_ms").number(), 0.0);
  }
  EXPECT_EQ(j.at("scaling").at("mode").str(), "strong");
  EXPECT_EQ(j.at("baseline").at("world_size").number(), 1);
}

TEST_F(DistTrainCli, WeakScalingAgainstABaselineFile) {
  test::ScratchDir dir("cli");
  const std::string single = dir.file("single.json"), run = dir.file("run.json");
  ASSERT_EQ(run_dist_train(base({"--gpus", "1", "--per-gpu-batch", "8", "--json", single})), 0);
  ASSERT_EQ(run_dist_train(
                base({"--gpus", "2", "--per-gpu-batch", "8", "--baseline", single, "--json", run})),
            0);
  const Json j = read_json(run);
  EXPECT_EQ(j.at("scaling").at("mode").str(), "weak");
  EXPECT_EQ(j.at("global_batch").number(), 16);
  // A strong-scaling comparison with a baseline of another batch is refused.
  EXPECT_THROW(run_dist_train(base({"--gpus", "2", "--global-batch", "32", "--baseline", single})),
               InvalidArgument);
  EXPECT_THROW(run_dist_train(base(
                   {"--gpus", "2", "--global-batch", "16", "--baseline", dir.file("none.json")})),
               DataError);
}

TEST_F(DistTrainCli, BadFlags) {
  EXPECT_THROW(run_dist_train(base({"--gpus", "2"})), InvalidArgument);  // no batch
  EXPECT_THROW(
      run_dist_train(base({"--gpus", "2", "--global-batch", "16", "--per-gpu-batch", "8"})),
      InvalidArgument);
  EXPECT_THROW(run_dist_train(base({"--gpus", "3", "--global-batch", "16"})),
               InvalidArgument);  // 16 / 3
  EXPECT_THROW(
      run_dist_train(base({"--gpus", "2", "--global-batch", "16", "--wait-method", "guess"})),
      InvalidArgument);
  if (cuda_device_count() < 64) {
    try {
      std::vector<std::string> a = base({"--gpus", "64", "--per-gpu-batch", "2"});
      a.push_back("--device");
      a.push_back("cuda");
      run_dist_train(a);
      FAIL() << "expected NotSupported for 64 GPUs";
    } catch (const NotSupported& e) {
      EXPECT_NE(std::string(e.what()).find("64 GPU replica(s)"), std::string::npos) << e.what();
    }
  }
}

TEST_F(DistTrainCli, ConcurrentAgainstSequentialSchedules) {
  test::ScratchDir dir("cli");
  const std::string json = dir.file("concurrent.json");
  std::vector<std::string> a =
      base({"--jobs", "2", "--gpus-per-job", "1", "--job-batch", "8", "--no-eval", "--json", json});
  for (std::size_t i = 0; i + 1 < a.size(); ++i)
    if (a[i] == "--launcher")
      a.erase(a.begin() + static_cast<std::ptrdiff_t>(i),
              a.begin() + static_cast<std::ptrdiff_t>(i) + 2);
  ASSERT_EQ(run_concurrent(a), 0);
  const Json j = read_json(json);
  EXPECT_EQ(j.at("total_gpus").number(), 2);
  for (const char* s : {"concurrent", "sequential"}) {
    SCOPED_TRACE(s);
    const Json& sch = j.at(s);
    EXPECT_GT(sch.at("seconds").number(), 0);
    EXPECT_EQ(sch.at("samples").number(), 2 * 4 * 8);  // 2 jobs x 4 steps x batch 8
    ASSERT_EQ(sch.at("jobs").items().size(), 2u);
  }
  EXPECT_EQ(j.at("concurrent").at("jobs").items()[0].at("world_size").number(), 1);
  EXPECT_EQ(j.at("sequential").at("jobs").items()[0].at("world_size").number(), 2);
  a.push_back("--job-batch");
  a.push_back("9");  // does not split over the two replicas of the sequential schedule
  EXPECT_THROW(run_concurrent(a), InvalidArgument);
}

// --cuda-graph records each replica's step as a CUDA graph: with CPU replicas it is refused before
// anything runs, as NotSupported (exit code 4) naming the flag and what it needs.
TEST_F(DistTrainCli, CudaGraphOnTheCpuIsNotSupported) {
  for (const bool concurrent : {false, true}) {
    SCOPED_TRACE(concurrent ? "concurrent" : "dist-train");
    std::vector<std::string> a =
        concurrent ? base({"--jobs", "2", "--job-batch", "8", "--cuda-graph"})
                   : base({"--gpus", "2", "--global-batch", "16", "--cuda-graph"});
    if (concurrent)
      for (std::size_t i = 0; i + 1 < a.size(); ++i)
        if (a[i] == "--launcher")
          a.erase(a.begin() + static_cast<std::ptrdiff_t>(i),
                  a.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    try {
      if (concurrent) {
        run_concurrent(a);
      } else {
        run_dist_train(a);
      }
      FAIL() << "expected NotSupported";
    } catch (const NotSupported& e) {
      EXPECT_EQ(e.exit_code(), 4);
      const std::string m = e.what();
      EXPECT_NE(m.find("--cuda-graph"), std::string::npos) << m;
      EXPECT_NE(m.find("--device cuda"), std::string::npos) << m;
    }
  }
}

// The same through the binary: the message on stderr and exit code 4 (`cnnergy --help`).
TEST(DistTrainBinary, CudaGraphOnTheCpuExitsWithCodeFour) {
  const auto r = cnnergy::testing::run_cli(
      "dist-train --model lenet5 --data synthetic --dataset-size 64 --device cpu --gpus 2 "
      "--global-batch 16 --max-iters 2 --no-energy --launcher local --cuda-graph");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("--cuda-graph records the step as a CUDA graph and needs --device cuda"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace cnnergy::cli
