// `cnnergy convbench` end to end on the CPU (what CI runs): the JSON document (every cell has a
// status; ok cells have time > 0 and TFLOP/s = 2 N K C/g R S P Q / time), the CSV rows, the HTML
// page, a model source naming its shared layers (a zoo name or an ONNX file), bad flags exiting 2 with the valid choices, and
// studies kept in a results database (--db) that `cnnergy report` lists and draws beside sweeps.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cli_run.hpp"
#include "core/json.hpp"

using cnnergy::testing::run_cli;
namespace fs = std::filesystem;

namespace cnnergy {
namespace {

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("cnnergy_convbench_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ConvbenchCli, CpuRunWritesJsonCsvAndHtml) {
  const auto dir = temp_dir("run");
  const auto r = run_cli(
      "convbench --device cpu --problem n=2,c=3,h=10,w=9,k=4,r=3,s=3,stride=2,pad=1 "
      "--problem=n=1,c=4,h=8,w=8,k=4,r=3,s=3,pad=1,groups=2 --problem n=1,c=1,h=3,w=3,k=1,r=5,s=5 "
      "--impl reference,im2col_gemm,own:winograd --calls 3 --warmup 1 --windows 1 --window-s 0.05 "
      "--json " + (dir / "r.json").string() + " --csv " + (dir / "r.csv").string() + " --html " +
      (dir / "r.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("problem n=2,c=3,h=10,w=9,k=4,r=3,s=3,stride=2,pad=1"), std::string::npos) << r.output;
  const Json j = Json::parse(read_text(dir / "r.json"));
  ASSERT_EQ(j.at("problems").items().size(), 3u);
  ASSERT_EQ(j.at("cells").items().size(), 3u * 3u * 3u);
  std::map<std::string, const Json*> problems;
  for (const Json& p : j.at("problems").items()) problems[p.at("id").as_string()] = &p;
  const std::set<std::string> statuses = {"ok", "unsupported", "does_not_fit", "failed"};
  std::size_t ok = 0;
  for (const Json& c : j.at("cells").items()) {
    const std::string status = c.at("status").as_string();
    ASSERT_TRUE(statuses.count(status)) << status;
    const Json& p = *problems.at(c.at("problem").as_string());
    if (p.at("r").as_number() == 5) {
      EXPECT_EQ(status, "unsupported");
      EXPECT_NE(c.at("detail").as_string().find("empty output"), std::string::npos);
      continue;
    }
    if (c.at("implementation").as_string() == "own:winograd") {
      EXPECT_EQ(status, "unsupported");
      EXPECT_NE(c.at("detail").as_string().find("own:winograd"), std::string::npos);
      continue;
    }
    ASSERT_EQ(status, "ok") << c.dump();
    ++ok;
    const double ms = c.at("time_ms_median").as_number();
    EXPECT_GT(ms, 0);
    const double flops = 2 * p.at("n").as_number() * p.at("k").as_number() *
                         (p.at("c").as_number() / p.at("groups").as_number()) * p.at("r").as_number() *
                         p.at("s").as_number() * p.at("out_h").as_number() * p.at("out_w").as_number();
    EXPECT_DOUBLE_EQ(c.at("flops").as_number(), flops);
    EXPECT_NEAR(c.at("tflops").as_number(), flops / (ms * 1e9), 1e-9 * c.at("tflops").as_number() + 1e-15);
    // Energy: RAPL where readable, else null with the reason (never 0).
    if (c.at("joules_per_call_median").is_null()) {
      EXPECT_NE(c.at("energy_note").as_string().find("not measured"), std::string::npos);
    } else {
      EXPECT_GT(c.at("joules_per_call_median").as_number(), 0);
    }
  }
  EXPECT_EQ(ok, 2u * 2u * 3u);
  EXPECT_EQ(j.at("transfers").items().size(), 2u * 8u);  // the empty-output problem moves nothing
  const std::string csv = read_text(dir / "r.csv");
  EXPECT_EQ(static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n')), 1u + 27u);  // header + cells
  EXPECT_NE(csv.find("implementation"), std::string::npos);
  const std::string html = read_text(dir / "r.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("Roofline"), std::string::npos);
  fs::remove_all(dir);
}

TEST(ConvbenchCli, ModelSourceNamesSharedLayersAndHotspots) {
  const auto dir = temp_dir("model");
  const auto r = run_cli("convbench --device cpu --model resnetim --batch 1 --impl im2col_gemm --direction forward "
                         "--calls 1 --warmup 0 --window-s 0 --transfers off --format json -o " +
                         (dir / "m.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json j = Json::parse(read_text(dir / "m.json"));
  bool shared = false;
  for (const Json& p : j.at("problems").items()) shared = shared || p.at("layers").items().size() > 1;
  EXPECT_TRUE(shared);
  ASSERT_EQ(j.at("hotspots").items().size(), j.at("problems").items().size());
  double share = 0;
  for (const Json& h : j.at("hotspots").items()) {
    share += h.at("share").as_number();
    EXPECT_EQ(h.at("winners").at("forward").as_string(), "im2col_gemm");
  }
  EXPECT_NEAR(share, 1.0, 1e-9);
  fs::remove_all(dir);
}

// A model file as the problem source: the zoo's model exported to ONNX gives the same problems, each
// named by its source file and listing its layers.
TEST(ConvbenchCli, OnnxModelFileIsAProblemSource) {
  const auto dir = temp_dir("onnx");
  const std::string file = (dir / "resnetim.onnx").string();
  auto r = run_cli("export-onnx resnetim " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string common = " --batch 1 --impl im2col_gemm --direction forward --calls 1 --warmup 0 --window-s 0 "
                             "--transfers off --device cpu --format json -o ";
  r = run_cli("convbench --model " + file + common + (dir / "file.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_cli("convbench --model resnetim" + common + (dir / "zoo.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json from_file = Json::parse(read_text(dir / "file.json"));
  const Json from_zoo = Json::parse(read_text(dir / "zoo.json"));
  std::set<std::string> file_ids, zoo_ids;
  for (const Json& p : from_file.at("problems").items()) {
    file_ids.insert(p.at("id").as_string());
    EXPECT_EQ(p.at("source").as_string(), file);
    EXPECT_FALSE(p.at("layers").items().empty());
  }
  for (const Json& p : from_zoo.at("problems").items()) zoo_ids.insert(p.at("id").as_string());
  EXPECT_FALSE(file_ids.empty());
  EXPECT_EQ(file_ids, zoo_ids);
  fs::remove_all(dir);
}

TEST(ConvbenchCli, StudiesKeptInTheResultsDatabaseAreReported) {
  const auto dir = temp_dir("db");
  const std::string db = (dir / "r.db").string();
  for (const char* problem : {"n=2,c=4,h=8,w=8,k=4,r=3,s=3,pad=1", "n=1,c=2,h=6,w=6,k=2,r=1,s=1"}) {
    const auto r = run_cli(std::string("convbench --device cpu --problem ") + problem +
                           " --impl reference,im2col_gemm --direction forward --calls 2 --warmup 0 --window-s 0 "
                           "--transfers off --db " + db);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("stored as study"), std::string::npos) << r.output;
  }
  const auto rep = run_cli("report " + db + " -o " + (dir / "r.html").string());
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  EXPECT_NE(rep.output.find("Study 1: convbench"), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("Study 2: convbench"), std::string::npos) << rep.output;
  EXPECT_NE(rep.output.find("n=2,c=4,h=8,w=8,k=4,r=3,s=3,stride=1,pad=1  forward fp32 nchw: "), std::string::npos)
      << rep.output;
  EXPECT_NE(rep.output.find("(fastest of 2 that ran, 2 cells)"), std::string::npos) << rep.output;
  const std::string html = read_text(dir / "r.html");
  EXPECT_NE(html.find("id=\"study1\""), std::string::npos);
  EXPECT_NE(html.find("id=\"study2\""), std::string::npos);
  EXPECT_NE(html.find("n=1,c=2,h=6,w=6,k=2,r=1,s=1"), std::string::npos);
  EXPECT_NE(html.find("Roofline"), std::string::npos);
  const auto exp = run_cli("export " + db + " --json " + (dir / "e.json").string());
  ASSERT_EQ(exp.exit_code, 0) << exp.output;
  const Json e = Json::parse(read_text(dir / "e.json"));
  ASSERT_EQ(e.at("studies").items().size(), 2u);
  EXPECT_EQ(e.at("studies").items()[1].at("document").at("cells").items().size(), 2u);
  // an unwritable database path is refused before anything is measured
  const auto bad = run_cli("convbench --device cpu --problem n=1,c=1,h=4,w=4,k=1,r=3,s=3 --window-s 0 --db " +
                           (dir / "no_such_dir" / "r.db").string());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(bad.output.find("convbench on"), std::string::npos) << bad.output;
}

TEST(ConvbenchCli, BadFlagsExitTwoWithTheChoices) {
  auto r = run_cli("convbench --device cpu --problem n=1,c=1,h=4,w=4,k=1,r=3,s=3,q=1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown key 'q'"), std::string::npos) << r.output;
  r = run_cli("convbench --device cpu --problem n=1,c=1,h=4,w=4,k=1,r=3,s=3 --precision fp32,fp64");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("fp64"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;  // the valid choices
  r = run_cli("convbench --device cpu --preset li2099");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("li2016"), std::string::npos) << r.output;
  r = run_cli("convbench --device cpu --problem n=1,c=1,h=4,w=4,k=1,r=3,s=3 --metrics most");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("kernels"), std::string::npos) << r.output;
  r = run_cli("convbench --device cpu --problem n=1,c=1,h=4,w=4,k=1,r=3,s=3 --direction up");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("backward_filter"), std::string::npos) << r.output;
  r = run_cli("convbench --device cpu --model resnet50");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--batch"), std::string::npos) << r.output;
  r = run_cli("convbench --device cpu");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--preset li2016"), std::string::npos) << r.output;
  r = run_cli("convbench --device cpu --problem");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace cnnergy
