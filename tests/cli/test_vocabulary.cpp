// Every command speaks the same flags: -o/--out FILE, --json FILE, --csv FILE and --format for its
// output, --device with one default rule, -r/--windows and --window-s where it measures windows. The
// commands are run for real (tiny CPU workloads, no GPU) and their files read back; old spellings still
// work with a deprecation note.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../train/cli_run.hpp"
#include "core/json.hpp"

namespace fs = std::filesystem;
using cnnergy::Json;
using cnnergy::testing::run_cli;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class Vocabulary : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cnnergy_vocab_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string f(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// The command names `cnnergy --help` lists (so a new command is held to the vocabulary too).
std::vector<std::string> command_names() {
  const std::string help = run_cli("--help").output;
  std::vector<std::string> names;
  std::istringstream is(help.substr(help.find("commands:")));
  std::string line;
  std::getline(is, line);
  while (std::getline(is, line) && line.starts_with("  ")) {
    std::istringstream ls(line);
    std::string name;
    ls >> name;
    names.push_back(name);
  }
  return names;
}

}  // namespace

TEST_F(Vocabulary, EveryCommandsHelpListsTheCommonFlags) {
  const auto names = command_names();
  ASSERT_GE(names.size(), 12u);
  for (const auto& cmd : names) {
    const auto r = run_cli(cmd + " --help");
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    for (const char* flag : {"-o,--out FILE", "--json", "--csv FILE", "--format {table,json"})
      EXPECT_TRUE(has(r.output, flag)) << cmd << " lacks " << flag << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "Output:")) << cmd << ": no grouped help\n" << r.output;
  }
  for (const char* cmd : {"train", "dist-train", "concurrent", "profile", "sweep", "model-info"}) {
    const auto r = run_cli(std::string(cmd) + " --help");
    EXPECT_TRUE(has(r.output, "--device VALUE")) << cmd;
    EXPECT_TRUE(has(r.output, "cuda when a CUDA GPU is present, else cpu")) << cmd << ": not the one default rule";
  }
  for (const char* cmd : {"profile", "sweep", "monitor"})
    EXPECT_TRUE(has(run_cli(std::string(cmd) + " --help").output, "-r,--windows")) << cmd;
  for (const char* cmd : {"profile", "sweep"})
    EXPECT_TRUE(has(run_cli(std::string(cmd) + " --help").output, "--window-s")) << cmd;
  const auto sweep = run_cli("sweep --help").output;  // units in the knobs' help
  for (const char* unit : {"in W", "in MHz", "in samples"}) EXPECT_TRUE(has(sweep, unit)) << unit << "\n" << sweep;
}

TEST_F(Vocabulary, UnknownFlagsAndBadChoicesAreRefusedWithExitTwo) {
  auto r = run_cli("train --epoch 3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "did you mean --epochs?")) << r.output;
  r = run_cli("model-info lenet5 --format xml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "choose one of: table, json, csv")) << r.output;
  r = run_cli("sweeep --batch 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "did you mean 'sweep'?")) << r.output;
  r = run_cli("sweep --powr-limit 300 -- true");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "did you mean --power-limit?")) << r.output;
}

TEST_F(Vocabulary, EveryCommandWritesItsOutputWhereTheFlagsSay) {
  // model-info: -o by extension, --csv, --format for stdout.
  auto r = run_cli("model-info lenet5 -o " + f("mi.json") + " --csv " + f("mi.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("mi.json"))).at("model").str(), "lenet5");
  EXPECT_TRUE(read(f("mi.csv")).starts_with("model,")) << read(f("mi.csv"));
  r = run_cli("model-info --list --format csv");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "lenet5,")) << r.output;

  // train and profile on the CPU (tiny): -o FILE.json, --csv FILE, --format json on stdout.
  r = run_cli("train --model lenet5 --data synthetic --dataset-size 64 --batch 32 --max-iters 2 --eval-batches 1 "
              "--device cpu --no-energy -o " + f("t.json") + " --csv " + f("t.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("t.json"))).at("epochs").items().size(), 1u);
  EXPECT_TRUE(read(f("t.csv")).starts_with("epoch,")) << read(f("t.csv"));
  // --activation-budget-mib (train and profile): 0 recomputes the batch-norm outputs that lower the
  // peak (ResNet-34's 16: the stem's output is never written, its max pool applies it), and the report says how many; a negative budget is refused before anything runs.
  r = run_cli("train --model resnet34 --input 3x32x32 --classes 10 --data synthetic:3x32x32 --dataset-size 8 --batch 4 "
              "--max-iters 1 --eval-batches 1 --device cpu --no-energy --activation-budget-mib 0 -o " + f("tb.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "outputs recomputed in backward")) << r.output;
  {
    const Json tb = Json::parse(read(f("tb.json")));
    EXPECT_EQ(tb.at("recomputed_outputs").number(), 16) << read(f("tb.json"));
    EXPECT_EQ(tb.at("activation_budget_bytes").number(), 0);
  }
  // --fuse-statistics (train), on by default: ResNet-34's batch norms with at least 256 values per channel
  // at batch 4 (the stem's and layer1's 6) take their statistics from their convolutions (on the CPU, every
  // one at every training step, evaluation between them or not), and the report says so; off pairs none.
  EXPECT_TRUE(has(r.output, "statistics fusion: 7 batch norms paired with their convolution; 7 took")) << r.output;
  EXPECT_EQ(Json::parse(read(f("tb.json"))).at("conv_statistics").number(), 7) << read(f("tb.json"));
  EXPECT_EQ(Json::parse(read(f("tb.json"))).at("conv_statistics_computed").number(), 7) << read(f("tb.json"));
  r = run_cli("train --model resnet34 --input 3x32x32 --classes 10 --data synthetic:3x32x32 --dataset-size 8 --batch 4 "
              "--max-iters 1 --eval-batches 1 --device cpu --no-energy --fuse-statistics off -o " + f("ts.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(has(r.output, "statistics fusion")) << r.output;
  EXPECT_EQ(Json::parse(read(f("ts.json"))).at("conv_statistics").number(), 0) << read(f("ts.json"));
  r = run_cli("train --model lenet5 --data synthetic --dataset-size 64 --batch 32 --max-iters 1 --device cpu --no-energy "
              "--fuse-statistics sometimes");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "always")) << r.output;  // the choices are listed
  r = run_cli("train --model lenet5 --data synthetic --dataset-size 64 --batch 32 --max-iters 1 --device cpu --no-energy "
              "--activation-budget-mib -1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "activation-budget-mib")) << r.output;
  r = run_cli("profile lenet5 --device cpu --batch 4 --passes 1 -r 1 --window-s 0 --no-phases --energy-top 0 "
              "--activation-budget-mib 0 --format json 2>/dev/null > " + f("pb.out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("pb.out"))).at("model").str(), "lenet5");
  // --space-to-depth, --fuse-epilogue and --fuse-statistics: the same backend flags as train and infer.
  r = run_cli("profile lenet5 --device cpu --batch 4 --passes 1 -r 1 --window-s 0 --no-phases --energy-top 0 "
              "--space-to-depth off --fuse-epilogue on --fuse-statistics always --format json --json " + f("p.json") +
              " 2>/dev/null > " + f("p.out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("p.out"))).at("model").str(), "lenet5");  // stdout is one JSON document
  EXPECT_EQ(read(f("p.json")), read(f("p.out")));

  // dist-train over two CPU replicas; --gpus is a count here as in sweep.
  r = run_cli("dist-train --model lenet5 --data synthetic --dataset-size 128 --device cpu --gpus 2 --global-batch 32 "
              "--max-iters 2 --no-eval --no-energy --space-to-depth on --fuse-epilogue off --fuse-statistics on -o " +
              f("dt.json") + " --csv " + f("dt.csv"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("dt.json"))).at("world_size").number(), 2);
  EXPECT_EQ(Json::parse(read(f("dt.json"))).at("conv_statistics").number(), 0);  // LeNet-5 has no batch norm
  // dist-train takes the budget per replica, as train does: ResNet-34's 16 batch-norm outputs.
  r = run_cli("dist-train --model resnet34 --input 3x32x32 --classes 10 --data synthetic:3x32x32 --dataset-size 32 "
              "--device cpu --gpus 2 --global-batch 8 --max-iters 1 --no-eval --no-energy --activation-budget-mib 0 -o " +
              f("dtb.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("dtb.json"))).at("recomputed_outputs").number(), 16) << read(f("dtb.json"));
  EXPECT_TRUE(has(read(f("dt.csv")), "rank")) << read(f("dt.csv"));

  // sweep of a command (no GPU needed), then report, export and merge of its database.
  r = run_cli("sweep --batch 1,2 --warmup 0 --window-s 0 --min-iters 1 -r 1 --db " + f("s.db") + " -o " + f("s.txt") +
              " --json " + f("s.json") + " --csv " + f("s.csv") + " -- true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(read(f("s.txt")), "min time per iteration")) << read(f("s.txt"));
  EXPECT_EQ(Json::parse(read(f("s.json"))).at("sweeps").items().size(), 1u);
  EXPECT_TRUE(has(read(f("s.csv")), "batch")) << read(f("s.csv"));
  r = run_cli("report " + f("s.db") + " -o " + f("r.html") + " --format csv");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(f("r.html")));
  EXPECT_TRUE(has(r.output, "batch")) << r.output;
  r = run_cli("export " + f("s.db") + " -o " + f("e.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("e.json"))).at("sweeps").items().size(), 1u);
  r = run_cli("merge " + f("m.db") + " " + f("s.db") + " --json " + f("m.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("m.json"))).at("trials_copied").number(), 2);

  // devices, restore and monitor without a GPU.
  r = run_cli("devices --format json 2>/dev/null > " + f("d.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Json::parse(read(f("d.json"))).at("gpus").is_array());
  r = run_cli("restore --journal " + f("none.json") + " --json " + f("rs.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(read(f("rs.json"))).at("status").str(), "no journal");
  r = run_cli("monitor -o " + f("mo.txt") + " --json " + f("mo.json") + " -- true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(read(f("mo.txt")), "elapsed")) << read(f("mo.txt"));
  EXPECT_EQ(Json::parse(read(f("mo.json"))).at("exit_code").number(), 0);
}

TEST_F(Vocabulary, OldSpellingsStillWorkWithADeprecationNote) {
  auto r = run_cli("profile lenet5 --device cpu --batch 4 --reps 1 -r 1 --window-s 0 --no-phases --energy-top 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "--reps is deprecated")) << r.output;
  EXPECT_TRUE(has(r.output, "use --passes")) << r.output;
  // The old flag: JSON on stdout (run_cli sends stderr there too: the note comes first, on one line).
  r = run_cli("devices --json >" + f("d.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = read(f("d.json"));
  EXPECT_TRUE(has(text.substr(0, text.find('{')), "--json without a value is deprecated")) << text;
  EXPECT_TRUE(Json::parse(text.substr(text.find('{'))).is_object()) << text;
  // train --resume PATH (old) vs --resume (flag) and --resume-from PATH.
  const std::string tiny = "train --model lenet5 --data synthetic --dataset-size 64 --batch 32 --max-iters 1 "
                           "--eval-batches 1 --device cpu --no-energy ";
  r = run_cli(tiny + "--save " + f("c.ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_cli(tiny + "--epochs 2 --resume " + f("c.ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "--resume PATH is deprecated")) << r.output;
  r = run_cli(tiny + "--epochs 2 --save " + f("c.ckpt") + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(has(r.output, "deprecated")) << r.output;
  r = run_cli(tiny + "--resume");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // nothing to continue from
  r = run_cli(tiny + "--epochs 2 --resume-from " + f("c.ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
}
