// ONNX files through the CLI: model-info prints the per-layer table, and bad files end with the
// exit codes of the CLI's error mapping (3: malformed file, 4: unsupported operator, 2: bad flag).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "onnx/onnx_maker.hpp"
#include "train/cli_run.hpp"

namespace cnnergy::test {
namespace {

using cnnergy::testing::run_cli;
namespace fs = std::filesystem;

fs::path work_dir() {
  const fs::path dir = fs::temp_directory_path() / "cnnergy_onnx_cli";
  fs::create_directories(dir);
  return dir;
}

std::string small_model(const std::string& tail_op) {
  OnnxMaker m;
  m.input("x", {1, 2, 4, 4});
  m.output("y", {1, 3});
  m.init("W", {3, 2, 3, 3}, std::vector<float>(54, 0.1f));
  OnnxMaker::attr_ints(m.node("Conv", {"x", "W"}, {"c"}, "conv1"), "pads", {1, 1, 1, 1});
  m.node(tail_op, {"c"}, {"r"}, "act1");
  m.node("GlobalAveragePool", {"r"}, {"g"});
  m.node("Flatten", {"g"}, {"y"});
  const fs::path path = work_dir() / (tail_op + ".onnx");
  m.save(path.string());
  return path.string();
}

TEST(OnnxCli, ModelInfoPrintsThePerLayerTable) {
  const auto r = run_cli("model-info " + small_model("Relu"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("conv1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("act1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 classes"), std::string::npos) << r.output;
}

TEST(OnnxCli, BadFilesAndFlagsExitWithTheirCodes) {
  const fs::path garbage = work_dir() / "garbage.onnx";
  std::ofstream(garbage) << "not a model";
  auto r = run_cli("model-info " + garbage.string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("not an ONNX model"), std::string::npos) << r.output;
  r = run_cli("model-info onnx:" + (work_dir() / "absent.onnx").string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  r = run_cli("model-info " + small_model("Erf"));
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("act1"), std::string::npos) << r.output;
  r = run_cli("infer " + small_model("Relu") + " --device cpu --init sometimes");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace cnnergy::test
