// The fixture of the end-to-end sweep tests: a temporary folder, the fake NVML library with one
// simulated GPU whose state, load file and knob journal live in that folder, and the simulated job.
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
  void SetUp() override {
    namespace fs = std::filesystem;
    dir_ = fs::temp_directory_path() / ("cnnergy_sweep_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string build = std::getenv("CNNERGY_BUILD_DIR") ? std::getenv("CNNERGY_BUILD_DIR") : CNNERGY_TEST_BUILD_DIR;
    env_ = "CNNERGY_NVML_LIBRARY=" + build + "/lib/libnvidia-ml-fake.so CNNERGY_FAKE_NVML_GPUS=1 CNNERGY_FAKE_NVML_STATE=" +
           (dir_ / "state").string() + " CNNERGY_FAKE_NVML_LOAD_FILE=" + (dir_ / "load").string() +
           " CNNERGY_JOURNAL=" + (dir_ / "journal.json").string() + " ";
    std::ofstream(dir_ / "load") << "0\n";
    job_ = cnnergy_binary() + "-sim-job --gcycles 0.25";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  CliResult sweep(const std::string& args) {
    // run_cli prefixes the binary; the environment goes in front through `env`.
    return run_cli_env("sweep " + args);
  }
  CliResult run_cli_env(const std::string& args) { return run_cli_with_env(env_, args); }
  std::filesystem::path dir_;
  std::string env_, job_;
};

}  // namespace cnnergy::testing
