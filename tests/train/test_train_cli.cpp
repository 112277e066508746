// End-to-end: `cnnergy train` reaches the stated accuracy on real Fashion-MNIST on the CPU, and bad
// input of every kind gets a clear message and the documented exit code.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_run.hpp"
#include "core/json.hpp"

using cnnergy::testing::run_cli;
namespace fs = std::filesystem;

namespace {
bool have_fashion_mnist() { return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); }

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("cnnergy_train_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

// The acceptance figure: LeNet-5 reaches >= 89 % test accuracy on Fashion-MNIST on the CPU.
TEST(TrainCli, LeNet5ReachesEightyNinePercentOnFashionMnist) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "Debian package dataset-fashion-mnist is not installed";
  const auto dir = temp_dir("lenet");
  const auto json = dir / "report.json";
  const auto r = run_cli("train --model lenet5 --data fashion-mnist --device cpu --batch 64 --epochs 5 --seed 1 "
                         "--save " + (dir / "ck.bin").string() + " --out " + json.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(json);
  std::stringstream ss;
  ss << f.rdbuf();
  const auto report = cnnergy::Json::parse(ss.str());
  const auto& epochs = report.at("epochs").items();
  ASSERT_EQ(epochs.size(), 5u);
  const double top1 = epochs.back().at("top1").number();
  EXPECT_GE(top1, 0.89) << r.output;
  EXPECT_GT(epochs.back().at("top5").number(), top1);
  // Energy measured (RAPL) or not, joules and average watts agree: never 0 W beside a null J.
  EXPECT_EQ(epochs.back().at("joules").is_null(), epochs.back().at("average_watts").is_null());
  EXPECT_LT(epochs.back().at("train_loss").number(), epochs.front().at("train_loss").number());
  EXPECT_TRUE(fs::exists(dir / "ck.bin"));
  // Resuming the finished run trains nothing more and keeps the checkpoint readable.
  const auto again = run_cli("train --model lenet5 --data fashion-mnist --device cpu --batch 64 --epochs 5 --resume " +
                             (dir / "ck.bin").string());
  EXPECT_EQ(again.exit_code, 0) << again.output;
  fs::remove_all(dir);
}

struct BadInput {
  const char* args;
  int exit_code;
  const char* message;  // a fragment the error must contain
};

class TrainCliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(TrainCliBadInput, ClearMessageAndExitCode) {
  const auto& c = GetParam();
  const auto r = run_cli(c.args);
  EXPECT_EQ(r.exit_code, c.exit_code) << r.output;
  EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    All, TrainCliBadInput,
    ::testing::Values(BadInput{"train --model nosuchnet", 2, "lenet5"},
                      BadInput{"train --model lenet5 --batch 0", 2, "--batch must be between 1"},
                      BadInput{"train --model lenet5 --data synthetic --input 1x3x3", 2, "conv1"},
                      BadInput{"train --model lenet5 --data cifar10:/nonexistent/dir", 3, "/nonexistent/dir"},
                      BadInput{"train --model lenet5 --data nosuchkind", 2, "synthetic"},
                      BadInput{"train --model lenet5 --target-accuracy 1.5", 2, "(0, 1]"},
                      BadInput{"train --model lenet5 --precision fp16 --device cpu", 4, "GPU"},
                      BadInput{"train --model lenet5 --precision fp8", 2, "fp32, tf32, fp16, bf16"},
                      BadInput{"train --model lenet5 --bogus 1", 2, "unknown option --bogus"},
                      BadInput{"train --model lenet5 --conv-candidates 0", 2, "--conv-candidates must be between 1"},
                      BadInput{"train --model alexnet --data fashion-mnist", 2, "1x28x28"},
                      BadInput{"train --model lenet5 --data synthetic --device cpu --cuda-graph", 4, "needs the CUDA backend"},
                      BadInput{"nosuchcommand", 2, "train"}));

// Per-layer profiles say where a fused ReLU went; --fuse-relu off measures every layer on its own.
TEST(ProfileCli, FusedReluLayersSayWhereTheyWent) {
  const std::string args = "profile resnet34 --device cpu --input 3x32x32 --classes 10 --batch 2 --reps 1 "
                           "--energy-top 0 --no-phases --format json";
  for (const bool fused : {true, false}) {
    const auto r = run_cli(args + (fused ? "" : " --fuse-relu off"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto report = cnnergy::Json::parse(r.output.substr(r.output.find('{')));
    int relus = 0, absorbed = 0;
    for (const auto& layer : report.at("layers").items()) {
      if (layer.at("type").as_string() != "relu") continue;
      ++relus;
      absorbed += layer.at("fused_into").is_string();
    }
    EXPECT_GT(relus, 30);
    // ResNet-34: every ReLU follows a batch norm or an add.
    EXPECT_EQ(absorbed, fused ? relus : 0) << r.output.substr(0, 2000);
  }
}

TEST(TrainCli, TruncatedAndWrongMagicIdxFilesAreDataErrorsNamingTheFile) {
  const auto dir = temp_dir("idx");
  // A labels file with a wrong magic number and an images file cut short.
  {
    std::ofstream img(dir / "train-images-idx3-ubyte", std::ios::binary);
    const unsigned char hdr[] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
    img.write(reinterpret_cast<const char*>(hdr), sizeof hdr);
    img.write(std::string(100, '\0').data(), 100);  // far fewer than 10 * 784 bytes
    std::ofstream lab(dir / "train-labels-idx1-ubyte", std::ios::binary);
    const unsigned char lh[] = {0, 0, 9, 9, 0, 0, 0, 10};
    lab.write(reinterpret_cast<const char*>(lh), sizeof lh);
  }
  const auto r = run_cli("train --model lenet5 --data mnist:" + dir.string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("train-"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// model-info --show-algos binds the model to a backend and lists each convolution's algorithms.
TEST(ModelInfoCli, ShowAlgosListsEveryConvolution) {
  const auto r = run_cli("model-info lenet5 --show-algos --device cpu --batch 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("conv1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("conv2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("im2col_gemm"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("fused:"), std::string::npos) << r.output;  // LeNet-5: ReLUs after convolutions
  // ResNet-34's 33 ReLUs all follow a batch norm or an add, and its 16 adds each follow a batch norm
  // that takes them.
  const auto resnet = run_cli("model-info resnet34 --input 3x32x32 --show-algos --device cpu --batch 2");
  ASSERT_EQ(resnet.exit_code, 0) << resnet.output;
  EXPECT_NE(resnet.output.find("fused: 33 ReLU layer(s)"), std::string::npos) << resnet.output;
  EXPECT_NE(resnet.output.find("fused: 16 residual add(s) run inside the batch norm"), std::string::npos)
      << resnet.output;
  EXPECT_EQ(r.output.find("residual add"), std::string::npos) << r.output;  // LeNet-5 has none
  const auto bad = run_cli("model-info lenet5 --show-algos --device cpu --precision bf16");
  EXPECT_EQ(bad.exit_code, 4) << bad.output;
}
