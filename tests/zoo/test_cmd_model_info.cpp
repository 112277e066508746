// `cnnergy model-info` end to end through run_model_info(): the listing, every output format, and
// usage errors (unknown model, empty layer, batch 0) as typed exceptions that main() maps to exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/cmd_model_info.hpp"
#include "core/errors.hpp"
#include "net/graph.hpp"
#include "net/model_info.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy::cli {
namespace {

std::string run_captured(const std::vector<std::string>& args, int* rc = nullptr) {
  ::testing::internal::CaptureStdout();
  int code = -1;
  try {
    code = run_model_info(args);
  } catch (...) {
    ::testing::internal::GetCapturedStdout();
    throw;
  }
  if (rc) *rc = code;
  return ::testing::internal::GetCapturedStdout();
}

TEST(CmdModelInfo, ListShowsEveryModelWithItsParameters) {
  int rc = -1;
  const std::string out = run_captured({"--list"}, &rc);
  EXPECT_EQ(rc, 0);
  for (const auto& m : model_zoo()) EXPECT_NE(out.find(m.name), std::string::npos) << m.name;
  EXPECT_NE(out.find("25,557,032"), std::string::npos) << out;   // resnet50
  EXPECT_NE(out.find("60,965,224"), std::string::npos) << out;   // caffenet
  const std::string csv = run_captured({"--list", "--format", "csv"});
  EXPECT_NE(csv.find("resnet50,3x224x224,1000,25557032,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("gait_2dcnn,50x60x60,155,"), std::string::npos) << csv;
}

TEST(CmdModelInfo, CsvTotalsEqualTheLibrary) {
  const std::string out = run_captured({"caffenet", "--summary", "--format", "csv", "--batch", "64"});
  const auto graph = build_model("caffenet");
  const ModelInfo info = model_info(*graph, 64);
  const std::string expected_prefix = "caffenet,64,fp32,total,,,," + std::to_string(info.parameters) + "," +
                                      std::to_string(info.total_batch.operations) + ",";
  EXPECT_NE(out.find(expected_prefix), std::string::npos) << out;
  // --summary: the header and the total only.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
}

TEST(CmdModelInfo, TablePerLayerAndJson) {
  const std::string table = run_captured({"lenet5"});
  for (const char* name : {"conv1", "pool1", "conv2", "pool2", "ip1", "relu1", "ip2", "loss", "total (batch)"})
    EXPECT_NE(table.find(name), std::string::npos) << name << "\n" << table;
  const std::string json = run_captured({"resnet50", "--format", "json", "--batch", "4", "--input", "3x128x128",
                                         "--classes", "10", "--dtype", "fp16"});
  EXPECT_NE(json.find("\"batch\": 4"), std::string::npos);
  EXPECT_NE(json.find("\"input\": [3, 128, 128]"), std::string::npos);
  EXPECT_NE(json.find("\"classes\": 10"), std::string::npos);
  EXPECT_NE(json.find("\"dtype\": \"fp16\""), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"layer4.2.conv3\""), std::string::npos);
  EXPECT_NE(json.find("\"output_shape\": [4, 10]"), std::string::npos) << "fc output at batch 4";
  const std::int64_t params = 25557032 - (2048 * 1000 + 1000) + (2048 * 10 + 10);
  EXPECT_NE(json.find("\"parameters\": " + std::to_string(params)), std::string::npos);
}

TEST(CmdModelInfo, HelpDocumentsTheConventions) {
  int rc = -1;
  const std::string out = run_captured({"--help"}, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("counting conventions"), std::string::npos);
  EXPECT_NE(out.find("Eqs. 10-12"), std::string::npos);
}

TEST(CmdModelInfo, UsageErrors) {
  try {
    run_captured({"alexnett"});
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("inception_v4"), std::string::npos) << e.what();  // lists the names
  }
  EXPECT_THROW(run_captured({"caffenet", "--batch", "0"}), InvalidArgument);
  EXPECT_THROW(run_captured({"caffenet", "--batch", "-1"}), InvalidArgument);
  EXPECT_THROW(run_captured({"caffenet", "--input", "3x8x8"}), ShapeError);
  EXPECT_THROW(run_captured({"caffenet", "--input", "3x227"}), InvalidArgument);
  EXPECT_THROW(run_captured({"caffenet", "--input", "axb"}), InvalidArgument);
  EXPECT_THROW(run_captured({"caffenet", "--classes", "1"}), InvalidArgument);
  EXPECT_THROW(run_captured({"caffenet", "--format", "xml"}), InvalidArgument);
  EXPECT_THROW(run_captured({"caffenet", "--dtype", "int32"}), InvalidArgument);
  EXPECT_THROW(run_captured({}), InvalidArgument);                       // neither MODEL nor --list
  EXPECT_THROW(run_captured({"caffenet", "--list"}), InvalidArgument);  // both
}

}  // namespace
}  // namespace cnnergy::cli
