// Multi-process data parallelism under mpirun (Open MPI, several ranks on this one machine): MPI
// collectives of every dtype, a 2-rank LeNet-5 training whose final weights match a one-process run
// of the same global batch, ranks that disagree on the model or on their count, and a rank that
// dies or stalls mid-run: the others stop with an error in bounded time and mpirun exits non-zero.
// The GPU variant (NCCL across processes) skips without two GPUs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include "cli/cmd_dist_train.hpp"
#include "common/tensor_testing.hpp"
#include "parallel/parallel_testing.hpp"

namespace cnnergy::test {
namespace {

struct Outcome {
  int exit_code = -1;
  double seconds = 0;
  std::string output;
};

// Runs `mpirun -np N ARGS` (ARGS may hold ':' separated MPMD parts), stdout and stderr together. A
// `timeout` guards the test itself against a hang: its exit code 124 fails the timing checks.
Outcome mpirun(const std::string& np_and_args) {
  const std::string cmd =
      std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 240 ") +
      CNNERGY_MPIEXEC + " --allow-run-as-root --oversubscribe --bind-to none " + np_and_args +
      " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(cmd.c_str(), "r");
  Outcome o;
  if (!pipe) {
    o.output = "popen failed";
    return o;
  }
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof(buf), pipe)) o.output.append(buf, n);
  const int status = ::pclose(pipe);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return o;
}

std::string worker() { return CNNERGY_PARALLEL_WORKER; }

class MpiDist : public SeededTest {
 protected:
  std::string train_args(const std::string& extra) const {
    return "--model lenet5 --data synthetic --dataset-size 256 --max-iters 5 --warmup 1 --workers "
           "1 --no-energy "
           "--no-eval --lr 0.002 --seed " +
           std::to_string(seed_ % 1000000) + " " + extra;
  }
};

TEST_F(MpiDist, CollectivesOfEveryDtype) {
  const Outcome o = mpirun("-np 3 " + worker() + " selftest");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(o.output.find("rank " + std::to_string(r) + ": selftest ok"), std::string::npos)
        << o.output;
}

TEST_F(MpiDist, TwoRanksMatchOneProcessOfTheSameGlobalBatch) {
  ScratchDir dir("mpi");
  const std::string mpi_ckpt = dir.file("mpi.ckpt"), single_ckpt = dir.file("single.ckpt");
  const Outcome o = mpirun("-np 2 " + worker() + " cli " +
                           train_args("--device cpu --global-batch 16 --save " + mpi_ckpt));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("2 MPI rank(s) (mpi"), std::string::npos) << o.output;
  // The same training in this process, one replica with the whole global batch.
  std::vector<std::string> args;
  std::istringstream in(
      train_args("--device cpu --global-batch 16 --launcher local --gpus 1 --save " + single_ckpt));
  for (std::string a; in >> a;) args.push_back(a);
  ASSERT_EQ(cli::run_dist_train(args), 0);
  auto graph = build_model("lenet5");
  EXPECT_LE(weight_mismatch(checkpoint_weights(*graph, mpi_ckpt),
                            checkpoint_weights(*graph, single_ckpt), 1e-5, 1e-4),
            1.0);
}

TEST_F(MpiDist, RanksThatDisagreeOnTheModelStopWithAClearError) {
  const std::string a = worker() + " cli " + train_args("--device cpu --global-batch 16");
  const Outcome o = mpirun("-np 1 " + a + " : -np 1 " + a + " --classes 12");
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("ranks disagree"), std::string::npos) << o.output;
  EXPECT_LT(o.seconds, 120.0);
}

TEST_F(MpiDist, ARankCountThatDiffersFromGpusIsRefused) {
  const Outcome o =
      mpirun("-np 2 " + worker() + " cli " + train_args("--device cpu --global-batch 16 --gpus 3"));
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("the MPI launcher started 2 ranks"), std::string::npos) << o.output;
}

TEST_F(MpiDist, ARankThatDiesStopsTheOthersInBoundedTime) {
  const Outcome o = mpirun("-np 2 " + worker() + " fault die 1 3 20");
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("rank 1 dies after step 3"), std::string::npos) << o.output;
  EXPECT_LT(o.seconds, 120.0) << o.output;
  EXPECT_EQ(o.output.find("finished without noticing"), std::string::npos) << o.output;
}

TEST_F(MpiDist, ARankThatStallsIsATimeoutErrorOnTheOthers) {
  const Outcome o = mpirun("-np 2 " + worker() + " fault stall 1 3 2");
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("did not complete within"), std::string::npos) << o.output;
  EXPECT_LT(o.seconds, 120.0) << o.output;
}

TEST_F(MpiDist, GpuRanksThroughNcclMatchOneGpu) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  ScratchDir dir("mpi_gpu");
  const std::string mpi_ckpt = dir.file("mpi.ckpt"), single_ckpt = dir.file("single.ckpt");
  const Outcome o =
      mpirun("-np 2 " + worker() + " cli " +
             train_args("--device cuda --precision fp32 --global-batch 32 --save " + mpi_ckpt));
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("(nccl"), std::string::npos) << o.output;
  std::vector<std::string> args;
  std::istringstream in(train_args(
      "--device cuda --precision fp32 --global-batch 32 --launcher local --gpus 1 --save " +
      single_ckpt));
  for (std::string a; in >> a;) args.push_back(a);
  ASSERT_EQ(cli::run_dist_train(args), 0);
  auto graph = build_model("lenet5");
  EXPECT_LE(weight_mismatch(checkpoint_weights(*graph, mpi_ckpt),
                            checkpoint_weights(*graph, single_ckpt), 1e-4, 1e-3),
            1.0);
}

}  // namespace
}  // namespace cnnergy::test
