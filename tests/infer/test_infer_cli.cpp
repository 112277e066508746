// `cnnergy infer` end to end on the CPU: the closed-loop table and JSON, the open loop, a NumPy array
// of inputs through the model into a NumPy array of logits (checked against a second run at another
// batch size), and bad input with its exit code.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "core/json.hpp"
#include "data/npy.hpp"
#include "train/cli_run.hpp"

using cnnergy::testing::run_cli;
namespace fs = std::filesystem;

namespace cnnergy {
namespace {

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("cnnergy_infer_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Json read_json(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return Json::parse(ss.str());
}

TEST(InferCli, ClosedLoopReportsPercentilesThroughputAndSaysWhatIsNotMeasured) {
  const auto dir = temp_dir("closed");
  const auto r = run_cli("infer lenet5 --device cpu --batch 1,8 --requests 30 --windows 2 --window-s 0.1 --idle-s 0 "
                         "--json " + (dir / "r.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("end to end ms p50"), std::string::npos) << r.output;
  const Json j = read_json(dir / "r.json");
  ASSERT_EQ(j.at("results").items().size(), 2u);
  for (const Json& row : j.at("results").items()) {
    EXPECT_EQ(row.at("mode").as_string(), "closed_loop");
    const Json& e = row.at("end_to_end");
    EXPECT_EQ(e.at("count").as_number(), 30);
    EXPECT_LE(e.at("p50_ms").as_number(), e.at("p99_ms").as_number());
    EXPECT_LE(e.at("p99_ms").as_number(), e.at("max_ms").as_number());
    EXPECT_GT(row.at("images_per_s").as_number(), 0);
    if (j.at("energy_source").is_null()) {
      EXPECT_TRUE(row.at("joules_per_image").is_null());  // null, never 0
    }
  }
  fs::remove_all(dir);
}

// --fuse-relu off runs every ReLU as its own layer; on (the default) lets folded convolutions take
// theirs; the JSON row says how many were fused.
TEST(InferCli, FuseReluFlagDecidesWhereReluRuns) {
  const auto dir = temp_dir("fuse");
  std::map<std::string, double> fused;
  for (const std::string mode : {"on", "off"}) {
    const auto r = run_cli("infer resnet34 --input 3x32x32 --device cpu --batch 1 --requests 3 --warmup 0 --windows 1 "
                           "--window-s 0.05 --idle-s 0 --fuse-relu " + mode + " --json " + (dir / (mode + ".json")).string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    fused[mode] = read_json(dir / (mode + ".json")).at("results").items().front().at("fused_relus").as_number();
  }
  EXPECT_GT(fused["on"], 0);
  EXPECT_EQ(fused["off"], 0);
  EXPECT_NE(run_cli("infer lenet5 --device cpu --fuse-relu maybe").exit_code, 0);
  fs::remove_all(dir);
}

// --mark-requests: one "cnnergy_request,I,MS" line per timed end-to-end request, in order, between
// "cnnergy_request,begin" and ",end" (what bench/cpu_infer_profile.py lines oneDNN's verbose output up with).
TEST(InferCli, MarkRequestsPrintsOneLinePerTimedRequest) {
  const auto dir = temp_dir("marks");
  const std::string base = "infer lenet5 --device cpu --batch 2 --requests 4 --warmup 1 --windows 1 --window-s 0.05 "
                           "--idle-s 0 --json " + (dir / "r.json").string();
  const auto r = run_cli(base + " --mark-requests");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(r.output);
  std::string line;
  std::vector<std::string> marks;
  while (std::getline(in, line))
    if (line.rfind("cnnergy_request,", 0) == 0) marks.push_back(line.substr(16));
  ASSERT_EQ(marks.size(), 6u) << r.output;
  EXPECT_EQ(marks.front(), "begin");
  EXPECT_EQ(marks.back(), "end");
  for (int i = 0; i < 4; ++i) {
    const std::string& m = marks[static_cast<std::size_t>(i) + 1];
    ASSERT_EQ(m.substr(0, m.find(',')), std::to_string(i)) << m;
    EXPECT_GT(std::stod(m.substr(m.find(',') + 1)), 0.0) << m;
  }
  const auto plain = run_cli(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("cnnergy_request,"), std::string::npos);
  fs::remove_all(dir);
}

// --fuse-epilogue is the GPU's (cuDNN's fused graphs): on the CPU it is accepted and fuses nothing,
// and the row says so; a value other than on/off is refused by infer and train alike.
TEST(InferCli, FuseEpilogueFlagIsTheGpusAndCountsWhatItFused) {
  const auto dir = temp_dir("epilogue");
  const auto r = run_cli("infer resnet34 --input 3x32x32 --device cpu --batch 1 --requests 2 --warmup 0 --windows 1 "
                         "--window-s 0.05 --idle-s 0 --fuse-epilogue on --json " + (dir / "e.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json row = read_json(dir / "e.json").at("results").items().front();
  EXPECT_EQ(row.at("fused_epilogues").as_number(), 0);
  EXPECT_EQ(row.at("fused_residuals").as_number(), 0);
  EXPECT_GT(row.at("fused_relus").as_number(), 0);
  EXPECT_EQ(row.find("serving_peak_memory_mib"), nullptr);  // the GPU allocator's figure only
  EXPECT_NE(run_cli("infer lenet5 --device cpu --fuse-epilogue maybe").exit_code, 0);
  EXPECT_NE(run_cli("train lenet5 --device cpu --fuse-epilogue maybe").exit_code, 0);
  fs::remove_all(dir);
}

// --space-to-depth is the GPU's too (a strided first convolution over few channels, NHWC): the CPU
// accepts it and runs as before; --profile-range is a no-op without a profiler; the row says where
// the memory in use goes, and the parts add up to no more than the whole.
TEST(InferCli, SpaceToDepthAndProfileRangeFlagsAndTheMemoryBreakdown) {
  const auto dir = temp_dir("s2d");
  const auto r = run_cli("infer alexnet --device cpu --batch 2 --requests 2 --warmup 0 --windows 1 --window-s 0.05 "
                         "--idle-s 0 --space-to-depth on --profile-range --json " + (dir / "s.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json row = read_json(dir / "s.json").at("results").items().front();
  const double params = row.at("parameter_memory_mib").as_number();
  EXPECT_NEAR(params, 61100840.0 * 4 / 1048576.0, 1.0);  // AlexNet's fp32 parameters (no working copy on the CPU)
  const double parts = params + row.at("activation_memory_mib").as_number() +
                       row.at("layer_state_memory_mib").as_number() + row.at("request_buffer_memory_mib").as_number();
  EXPECT_GT(row.at("request_buffer_memory_mib").as_number(), 0.0);
  EXPECT_LE(parts, row.at("peak_memory_mib").as_number() + 1e-6);
  EXPECT_NE(run_cli("infer lenet5 --device cpu --space-to-depth maybe").exit_code, 0);
  EXPECT_NE(run_cli("train lenet5 --device cpu --space-to-depth maybe").exit_code, 0);  // train's flag too
  fs::remove_all(dir);
}

TEST(InferCli, OpenLoopServesASustainableRate) {
  const auto dir = temp_dir("open");
  const auto r = run_cli("infer lenet5 --device cpu --batch 4 --qps 100 --max-wait-ms 1 --duration-s 0.5 --format json -o " +
                         (dir / "o.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json j = read_json(dir / "o.json");
  const Json& row = j.at("results").items().at(0);
  EXPECT_EQ(row.at("mode").as_string(), "open_loop");
  EXPECT_EQ(row.at("served").as_number(), row.at("arrived").as_number());
  EXPECT_FALSE(row.at("saturated").as_bool());
  fs::remove_all(dir);
}

TEST(InferCli, RunsANumpyArrayAndWritesItsLogits) {
  const auto dir = temp_dir("npy");
  Tensor in = Tensor::host(Shape{5, 1, 28, 28});
  for (std::size_t i = 0; i < in.f32().size(); ++i) in.f32()[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  data::write_npy(dir / "in.npy", in);
  // Batch 2 (three chunks, the last padded) and batch 5 must give the same logits for the same weights.
  for (const char* b : {"2", "5"}) {
    const auto r = run_cli(std::string("infer lenet5 --device cpu --batch ") + b + " --inputs " + (dir / "in.npy").string() +
                           " --outputs " + (dir / (std::string("out") + b + ".npy")).string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const Tensor a = data::read_npy(dir / "out2.npy"), c = data::read_npy(dir / "out5.npy");
  ASSERT_EQ(a.shape(), (Shape{5, 10}));
  ASSERT_EQ(c.shape(), (Shape{5, 10}));
  for (std::size_t i = 0; i < a.f32().size(); ++i) EXPECT_NEAR(a.f32()[i], c.f32()[i], 1e-4) << i;
  fs::remove_all(dir);
}

TEST(InferCli, BadInputGetsAClearMessageAndExitCode) {
  const auto dir = temp_dir("bad");
  auto r = run_cli("infer lenet5 --device cpu --qps 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--qps"), std::string::npos) << r.output;
  r = run_cli("infer lenet5 --device cpu --qps -3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_cli("infer lenet5 --device cpu --batch 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = run_cli("infer lenet5 --device cpu --outputs " + (dir / "o.npy").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  data::write_npy(dir / "wrong.npy", Tensor::host(Shape{2, 3, 28, 28}));
  r = run_cli("infer lenet5 --device cpu --inputs " + (dir / "wrong.npy").string());
  EXPECT_EQ(r.exit_code, 3) << r.output;  // a data error: the file's shape is not the model's
  EXPECT_NE(r.output.find("2x3x28x28"), std::string::npos) << r.output;
  std::ofstream(dir / "junk.npy") << "not numpy";
  r = run_cli("infer lenet5 --device cpu --inputs " + (dir / "junk.npy").string());
  EXPECT_EQ(r.exit_code, 3) << r.output;
  r = run_cli("infer nosuchmodel --device cpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cnnergy
