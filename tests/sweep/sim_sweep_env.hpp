// The simulated GPU of the sweep tests, set up as scripts/main_job.sh sets it up: one fake NVML GPU
// whose settings and load live in files of a fresh directory, and the simulated job as the workload.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "../train/cli_run.hpp"

namespace cnnergy::testing {

class SimulatedSweepTest : public ::testing::Test {
 protected:
  // `gcycles`: the simulated job's work (0.25 = about 0.16 s at the full clock).
  explicit SimulatedSweepTest(std::string prefix = "cnnergy_sweep_", double gcycles = 0.25) : prefix_(std::move(prefix)), gcycles_(gcycles) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / (prefix_ + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const std::string build = std::getenv("CNNERGY_BUILD_DIR") ? std::getenv("CNNERGY_BUILD_DIR") : CNNERGY_TEST_BUILD_DIR;
    env_ = "CNNERGY_NVML_LIBRARY=" + build + "/lib/libnvidia-ml-fake.so CNNERGY_FAKE_NVML_GPUS=1 CNNERGY_FAKE_NVML_STATE=" +
           (dir_ / "state").string() + " CNNERGY_FAKE_NVML_LOAD_FILE=" + (dir_ / "load").string() +
           " CNNERGY_JOURNAL=" + (dir_ / "journal.json").string() + " ";
    std::ofstream(dir_ / "load") << "0\n";
    job_ = cnnergy_binary() + "-sim-job --gcycles " + std::to_string(gcycles_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  CliResult sweep(const std::string& args) { return run_cli_env("sweep " + args); }
  CliResult run_cli_env(const std::string& args) { return run_cli_with_env(env_, args); }

  std::string prefix_;
  double gcycles_;
  std::filesystem::path dir_;
  std::string env_, job_;
};

}  // namespace cnnergy::testing
