// RunConfig (train/run_config.hpp): a run's settings read once from flags or knobs. Every flag and
// knob spelling, the defaults equal to the library's (BackendOptions{}, ExecutorOptions{}) and to what
// the commands declare (their --help), and a typed error naming the flag or knob for a bad value.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "cli_run.hpp"
#include "core/errors.hpp"
#include "train/run_config.hpp"

namespace cnnergy {
namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The message of the InvalidArgument `f` throws ("" when it throws nothing).
template <typename F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

void expect_same(const BackendOptions& a, const BackendOptions& b) {
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.allow_tf32, b.allow_tf32);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.workspace_limit_bytes, b.workspace_limit_bytes);
  EXPECT_EQ(a.conv_algo_policy, b.conv_algo_policy);
  EXPECT_EQ(a.conv_search_candidates, b.conv_search_candidates);
  EXPECT_EQ(a.conv_algo_fallback, b.conv_algo_fallback);
  EXPECT_EQ(a.conv_epilogue_fusion, b.conv_epilogue_fusion);
  EXPECT_EQ(a.conv_space_to_depth, b.conv_space_to_depth);
  EXPECT_EQ(a.conv_statistics_fusion, b.conv_statistics_fusion);
  EXPECT_EQ(a.algo_cache_dir, b.algo_cache_dir);
}

TEST(RunConfig, DefaultsAreTheLibrarysDefaults) {
  const RunConfig run;
  expect_same(run.backend_options(), BackendOptions{});
  ExecutorOptions eo;
  eo.activation_budget_bytes = 7;
  run.apply(eo);
  EXPECT_EQ(eo.activation_budget_bytes, ExecutorOptions{}.activation_budget_bytes);
  // The product's: the fusions taken where they time faster.
  EXPECT_TRUE(run.fuse_epilogue);
  EXPECT_TRUE(run.space_to_depth);
  EXPECT_EQ(run.fuse_statistics, StatisticsFusion::kWhereFaster);
  EXPECT_EQ(run.describe(),
            "fp32 nchw, conv-algo auto (10 candidates), fuse-epilogue on, space-to-depth on, fuse-statistics on");
}

TEST(RunConfig, EveryFlagSpelling) {
  const std::pair<const char*, Precision> precisions[] = {
      {"fp32", Precision::kFp32}, {"tf32", Precision::kTf32}, {"fp16", Precision::kFp16}, {"bf16", Precision::kBf16}};
  for (const auto& [text, p] : precisions) EXPECT_EQ(RunConfig::from_flags({{"precision", text}}).precision, p);
  for (const char* text : {"nhwc", "NHWC"}) EXPECT_EQ(RunConfig::from_flags({{"layout", text}}).layout, Layout::kNHWC);
  for (const char* text : {"nchw", "NCHW"}) EXPECT_EQ(RunConfig::from_flags({{"layout", text}}).layout, Layout::kNCHW);
  EXPECT_EQ(RunConfig::from_flags({{"conv-algo", "own:winograd"}}).conv_algo_policy, "own:winograd");
  EXPECT_EQ(RunConfig::from_flags({{"conv-candidates", "1"}}).conv_search_candidates, 1u);
  EXPECT_EQ(RunConfig::from_flags({{"conv-candidates", "100"}}).conv_search_candidates, 100u);
  EXPECT_FALSE(RunConfig::from_flags({{"fuse-epilogue", "off"}}).fuse_epilogue);
  EXPECT_TRUE(RunConfig::from_flags({{"fuse-epilogue", "on"}}).fuse_epilogue);
  EXPECT_FALSE(RunConfig::from_flags({{"space-to-depth", "off"}}).space_to_depth);
  EXPECT_TRUE(RunConfig::from_flags({{"space-to-depth", "on"}}).space_to_depth);
  EXPECT_EQ(RunConfig::from_flags({{"fuse-statistics", "off"}}).fuse_statistics, StatisticsFusion::kOff);
  EXPECT_EQ(RunConfig::from_flags({{"fuse-statistics", "on"}}).fuse_statistics, StatisticsFusion::kWhereFaster);
  EXPECT_EQ(RunConfig::from_flags({{"fuse-statistics", "always"}}).fuse_statistics, StatisticsFusion::kAlways);
  EXPECT_FALSE(RunConfig::from_flags({}).activation_budget_bytes.has_value());
  EXPECT_EQ(RunConfig::from_flags({{"activation-budget-mib", "0"}}).activation_budget_bytes, 0u);
  EXPECT_EQ(RunConfig::from_flags({{"activation-budget-mib", "512"}}).activation_budget_bytes, std::size_t{512} << 20);
  EXPECT_EQ(RunConfig::from_flags({{"algo-cache", "off"}}).algo_cache_dir, "");
  EXPECT_EQ(RunConfig::from_flags({{"algo-cache", "/tmp/cnnergy-run-config-cache"}}).algo_cache_dir,
            "/tmp/cnnergy-run-config-cache");
  // A flag the command does not give keeps the base's value.
  RunConfig base;
  base.precision = Precision::kBf16;
  base.fuse_epilogue = false;
  const RunConfig over = RunConfig::from_flags({{"layout", "nhwc"}}, base);
  EXPECT_EQ(over.precision, Precision::kBf16);
  EXPECT_FALSE(over.fuse_epilogue);
  EXPECT_EQ(over.layout, Layout::kNHWC);
  // The activation budget reaches the executor.
  ExecutorOptions eo;
  RunConfig::from_flags({{"activation-budget-mib", "3"}}).apply(eo);
  EXPECT_EQ(eo.activation_budget_bytes, std::size_t{3} << 20);
  // Every name flag_names() lists is read.
  for (const std::string& name : RunConfig::flag_names())
    EXPECT_NO_THROW(RunConfig::from_flags({{name, name == "precision"         ? "fp32"
                                                  : name == "layout"          ? "nchw"
                                                  : name == "conv-algo"       ? "auto"
                                                  : name == "conv-candidates" ? "10"
                                                  : name == "algo-cache"      ? "off"
                                                  : name == "fuse-statistics" ? "on"
                                                  : name == "activation-budget-mib" ? "1"
                                                                                    : "on"}}))
        << name;
}

TEST(RunConfig, EveryKnobSpelling) {
  RunConfig sweep;
  sweep.device = Device{DeviceKind::kCuda, 0};
  sweep.algo_cache_dir = "/tmp/x";
  sweep.fuse_epilogue = false;
  const RunConfig t = RunConfig::from_knobs(
      {{"precision", "bf16"}, {"layout", "nhwc"}, {"conv_algo", "graph_find"}, {"batch", "64"}, {"power_limit_w", "300"}},
      sweep);
  EXPECT_EQ(t.precision, Precision::kBf16);
  EXPECT_EQ(t.layout, Layout::kNHWC);
  EXPECT_EQ(t.conv_algo_policy, "graph_find");
  // What no knob sets stays the sweep's.
  EXPECT_EQ(t.device, sweep.device);
  EXPECT_EQ(t.algo_cache_dir, "/tmp/x");
  EXPECT_FALSE(t.fuse_epilogue);
  EXPECT_EQ(RunConfig::from_knobs({{"conv-algo", "find"}}, sweep).conv_algo_policy, "find");
  EXPECT_EQ(RunConfig::from_knobs({}, sweep).conv_algo_policy, "auto");
  EXPECT_TRUE(has(invalid_argument_of([&] { RunConfig::from_knobs({{"conv-algo", "find"}, {"conv_algo", "find"}}, sweep); }),
                  "conv_algo"));
}

TEST(RunConfig, BadValuesNameTheFlagOrKnob) {
  const std::pair<const char*, const char*> bad_flags[] = {
      {"precision", "fp64"},         {"layout", "chwn"},          {"conv-algo", ""},
      {"conv-candidates", "0"},      {"conv-candidates", "101"},  {"conv-candidates", "ten"},
      {"fuse-epilogue", "yes"},      {"space-to-depth", "1"},     {"fuse-statistics", "sometimes"},
      {"activation-budget-mib", "-1"}, {"activation-budget-mib", "12MiB"}};
  for (const auto& [name, value] : bad_flags) {
    const std::string what = invalid_argument_of([&] { RunConfig::from_flags({{name, value}}); });
    EXPECT_TRUE(has(what, std::string("--") + name)) << name << "=" << value << ": " << what;
  }
  EXPECT_TRUE(has(invalid_argument_of([] { RunConfig::from_flags({{"precision", "fp64"}}); }),
                  "choose one of: fp32, tf32, fp16, bf16"));
  EXPECT_TRUE(has(invalid_argument_of([] { RunConfig::from_flags({{"conv-candidates", "0"}}); }),
                  "--conv-candidates must be between 1 and 100, got 0"));
  const std::pair<const char*, const char*> bad_knobs[] = {{"precision", "int8"}, {"layout", "nc"}, {"conv_algo", ""}};
  for (const auto& [name, value] : bad_knobs) {
    const std::string what = invalid_argument_of([&] { RunConfig::from_knobs({{name, value}}, RunConfig{}); });
    EXPECT_TRUE(has(what, std::string("knob ") + name)) << name << "=" << value << ": " << what;
  }
  // A name that is no run setting is the caller's mistake, not the user's.
  EXPECT_THROW(RunConfig::from_flags({{"batch", "8"}}), InternalError);
}

TEST(RunConfig, BackendOptionsCarryThePrecision) {
  RunConfig run;
  run.device = Device{DeviceKind::kCuda, 0};  // only the options: no backend is made
  run.precision = Precision::kTf32;
  EXPECT_TRUE(run.backend_options().allow_tf32);
  EXPECT_EQ(run.backend_options().dtype, DType::kF32);
  run.precision = Precision::kBf16;
  EXPECT_EQ(run.backend_options().dtype, DType::kBF16);
  EXPECT_FALSE(run.backend_options().allow_tf32);
  run.precision = Precision::kFp16;
  EXPECT_EQ(run.backend_options().dtype, DType::kF16);
  run.device = Device{};  // the CPU computes in fp32 only
  try {
    run.backend_options();
    FAIL() << "fp16 on the CPU accepted";
  } catch (const NotSupported& e) {
    EXPECT_TRUE(has(e.what(), "fp16")) << e.what();
  }
  run.activation_budget_bytes = std::size_t{64} << 20;
  run.layout = Layout::kNHWC;
  EXPECT_EQ(run.describe(), "fp16 nhwc, conv-algo auto (10 candidates), fuse-epilogue on, space-to-depth on, "
                            "fuse-statistics on, activation budget 64 MiB");
}

// The default each command declares for a flag, read from its --help ("[default: X]" after the
// flag's name); "" where the command declares the flag without a default, nullopt where it lacks it.
std::optional<std::string> help_default(const std::string& help, const std::string& flag) {
  std::istringstream is(help);
  std::string line, block;
  bool in = false;
  while (std::getline(is, line)) {
    const auto first = line.find_first_not_of(' ');
    const bool option_line = first != std::string::npos && line[first] == '-';
    if (option_line) {
      if (in) break;
      const std::string names = line.substr(first, line.find(' ', first) - first);  // "--x" or "-x,--x"
      in = names == "--" + flag || names.ends_with(",--" + flag);
    }
    if (in) block += line + " ";
  }
  if (!in) return std::nullopt;
  const auto at = block.find("[default: ");
  if (at == std::string::npos) return "";
  const auto start = at + 10;
  return block.substr(start, block.find(']', start) - start);
}

// RunConfig{} is what every command runs when no flag is given: each default a command declares for
// a run-setting flag is RunConfig{}'s value of it.
TEST(RunConfig, DefaultsAreTheCommandsDefaults) {
  const RunConfig run;
  const std::map<std::string, std::string> expected = {
      {"precision", std::string(precision_name(run.precision))},
      {"layout", run.layout == Layout::kNHWC ? "nhwc" : "nchw"},
      {"conv-algo", run.conv_algo_policy},
      {"conv-candidates", std::to_string(run.conv_search_candidates)},
      {"fuse-epilogue", run.fuse_epilogue ? "on" : "off"},
      {"space-to-depth", run.space_to_depth ? "on" : "off"},
      {"fuse-statistics", statistics_fusion_name(run.fuse_statistics)},
      {"activation-budget-mib", ""},  // unset: nothing recomputed
      {"algo-cache", ""},             // the environment's or the home directory's
  };
  int checked = 0;
  for (const char* command : {"train", "profile", "infer", "dist-train", "model-info"}) {
    const auto r = testing::run_cli(std::string(command) + " --help");
    ASSERT_EQ(r.exit_code, 0) << command << ": " << r.output;
    for (const auto& [flag, value] : expected) {
      const auto declared = help_default(r.output, flag);
      if (!declared) continue;
      EXPECT_EQ(*declared, value) << "cnnergy " << command << " --" << flag;
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);  // train, profile and dist-train declare all nine
}

}  // namespace
}  // namespace cnnergy
