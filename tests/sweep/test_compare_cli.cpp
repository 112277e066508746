// `cnnergy compare` end to end: two sweeps of one job on simulated GPUs of two kinds (the fake
// NVML's H100-like and A100-like profiles) and a CPU sweep, compared in the terminal and as HTML
// (rendered by headless Chromium where installed); the comparison's figures are the sweeps' own;
// bad input (no common workload, a newer schema, a damaged file, a baseline matching nothing) gets
// a clear message; no database is ever modified by compare.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../train/cli_run.hpp"
#include "report/compare.hpp"
#include "tune/store.hpp"

namespace fs = std::filesystem;
using cnnergy::testing::run_cli_with_env;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

// The three result sets are built once for the whole suite (each sweep takes a few seconds).
class CompareCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("cnnergy_compare_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string job = cnnergy::testing::cnnergy_binary() + "-sim-job --gcycles 0.2";
    for (const std::string profile : {"h100", "a100"}) {
      std::ofstream(dir_ / ("load-" + profile)) << "0\n";
      const auto r = run_cli_with_env(gpu_env(profile), "sweep --db " + db(profile) + " --tag '" + tag(profile) +
                                                            "' --batch 1,2 --warmup 0 --window-s 0.2 --min-iters 1 "
                                                            "--reps 2 -- " + job);
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    const auto r = run_cli_with_env("CNNERGY_NVML_LIBRARY= ", "sweep --db " + db("cpu") +
                                                                  " --tag cpu --model lenet5 --device cpu --batch 1,2 "
                                                                  "--warmup 1 --window-s 0.1 --min-iters 2 --reps 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string gpu_env(const std::string& profile) {
    const std::string build = std::getenv("CNNERGY_BUILD_DIR") ? std::getenv("CNNERGY_BUILD_DIR") : CNNERGY_TEST_BUILD_DIR;
    return "CNNERGY_NVML_LIBRARY=" + build + "/lib/libnvidia-ml-fake.so CNNERGY_FAKE_NVML_GPUS=1 CNNERGY_FAKE_NVML_PROFILE=" +
           profile + " CNNERGY_FAKE_NVML_ENERGY_READ_MS=0 CNNERGY_FAKE_NVML_STATE=" + (dir_ / ("state-" + profile)).string() +
           " CNNERGY_FAKE_NVML_LOAD_FILE=" + (dir_ / ("load-" + profile)).string() + " CNNERGY_JOURNAL=" +
           (dir_ / ("journal-" + profile)).string() + " ";
  }
  static std::string db(const std::string& name) { return (dir_ / (name + ".db")).string(); }
  // The A100 set's tag carries markup: every page must show it as text.
  static std::string tag(const std::string& profile) { return profile == "a100" ? "a100 <b>&amp;" : profile; }
  static cnnergy::testing::CliResult compare(const std::string& args) { return run_cli_with_env("", "compare " + args); }

  static fs::path dir_;
};
fs::path CompareCli::dir_;

}  // namespace

TEST_F(CompareCli, TwoSimulatedGpusAndACpuSideBySide) {
  std::map<std::string, std::string> before;
  std::map<std::string, fs::file_time_type> mtime;
  for (const auto& name : {"h100", "a100", "cpu"}) {
    before[name] = slurp(db(name));
    mtime[name] = fs::last_write_time(db(name));
    ASSERT_EQ(before[name].at(18), 2) << name << " is not a WAL database";
    ASSERT_FALSE(fs::exists(db(name) + "-wal")) << "the sweep left its -wal behind";
  }
  const auto html = (dir_ / "cmp.html").string();
  const auto r = compare(db("h100") + " " + db("a100") + " " + db("cpu") + " --html " + html);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("H100"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("A100"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1.000x"), std::string::npos) << r.output;  // the baseline against itself
  EXPECT_NE(r.output.find("only in CPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model=lenet5 batch=1 precision=fp32 mode=training gpus=1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sw_power_cap"), std::string::npos) << r.output;  // throttle fractions from the telemetry
  for (const auto& name : {"h100", "a100", "cpu"}) {
    EXPECT_EQ(slurp(db(name)), before[name]) << name << " was modified";
    EXPECT_EQ(fs::last_write_time(db(name)), mtime[name]) << name;
    for (const char* side : {"-wal", "-shm", "-journal"})  // a read-only WAL open used to leave -wal and -shm
      EXPECT_FALSE(fs::exists(db(name) + side)) << "compare left " << db(name) << side;
  }

  // The figures are the sweeps' own stored medians, and the two GPU kinds really differ.
  cnnergy::report::CompareOptions o;
  const auto c = cnnergy::report::build_comparison({db("h100"), db("a100"), db("cpu")}, o);
  ASSERT_EQ(c.sets.size(), 3u);
  ASSERT_EQ(c.matched.size(), 2u);
  EXPECT_EQ(c.unmatched.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    cnnergy::tune::ResultStore store(c.sets[s].db_path, cnnergy::tune::ResultStore::Mode::kReadOnly);
    for (const auto& t : store.trials(store.sweeps().front().id)) {
      if (t.summary.key != "batch=1") continue;
      const auto& e = c.sets[s].workloads.begin()->second;
      ASSERT_TRUE(e.energy_j.has_value());
      EXPECT_DOUBLE_EQ(e.energy_j->value, t.summary.find(cnnergy::tune::Metric::kEnergyPerIteration)->median);
      ASSERT_TRUE(e.power_w && e.idle_power_w && e.gpu_util_pct && e.memory_peak_mib);
      EXPECT_LT(*e.idle_power_w, e.power_w->value);
    }
  }
  const auto& cpu = c.sets[2].workloads.begin()->second;
  EXPECT_TRUE(cpu.cpu_util_pct.has_value());  // /proc/stat is always there
  EXPECT_FALSE(cpu.power_w.has_value());      // no GPU figures for a CPU trial
  // A window holds a few 100 ms samples of the instant power, and the job marks the GPU busy only
  // while it runs, so one trial's samples may all fall on the idle gap between two runs: the claim
  // is about the highest sample over all the set's trials (a 0.2 Gcycle job keeps it busy most of
  // each window).
  auto highest = [](const cnnergy::report::ResultSet& set, auto pick) {
    double most = 0;
    for (const auto& [key, e] : set.workloads)
      if (const auto& f = e.*pick) most = std::max(most, f->high.value_or(f->value));
    return most;
  };
  using E = cnnergy::report::CompareEntry;
  ASSERT_NE(c.sets[0].device.find("H100"), std::string::npos) << c.sets[0].device;
  ASSERT_NE(c.sets[1].device.find("A100"), std::string::npos) << c.sets[1].device;
  EXPECT_GT(highest(c.sets[0], &E::power_w), highest(c.sets[1], &E::power_w) + 100)
      << "the H100-like profile should draw far more than the A100-like";
  EXPECT_GT(highest(c.sets[0], &E::sm_clock_mhz), highest(c.sets[1], &E::sm_clock_mhz));

  // The page: every chart kind, the sets' labels escaped, nothing injected.
  const std::string page = slurp(html);
  EXPECT_GE(count(page, "<svg"), 5u);
  EXPECT_NE(page.find("Pareto front"), std::string::npos);
  EXPECT_NE(page.find("id=\"unmatched\""), std::string::npos);
  EXPECT_EQ(count(page, "<script"), 1u);
  EXPECT_NE(page.find("a100 &lt;b&gt;&amp;amp;"), std::string::npos);  // the tag, shown as text

  if (std::system("command -v chromium >/dev/null 2>&1") != 0) GTEST_SKIP() << "chromium is not installed";
  const std::string dom = (dir_ / "dom.html").string(), log = (dir_ / "chromium.log").string();
  const std::string cmd = "timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run "
                          "--disable-background-networking --user-data-dir=" + (dir_ / "profile").string() +
                          " --enable-logging=stderr --v=0 --dump-dom file://" + html + " > " + dom + " 2> " + log;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(log);
  const std::string built = slurp(dom);
  EXPECT_EQ(count(built, "<svg"), count(page, "<svg"));
  EXPECT_NE(built.find("id=\"tip\""), std::string::npos) << "the tooltip script did not run";
  EXPECT_EQ(count(built, "<script"), 1u) << "an element was injected from the data";
  EXPECT_EQ(built.find("<b>&amp;"), std::string::npos);
  EXPECT_EQ(slurp(log).find(":CONSOLE"), std::string::npos) << slurp(log);
}

TEST_F(CompareCli, ByTagBaselineAndOneSetOnly) {
  auto r = compare(db("h100") + " " + db("a100") + " --by tag --baseline '" + tag("a100") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("* a100 <b>&amp;"), std::string::npos) << r.output;  // the baseline, marked
  EXPECT_NE(r.output.find("\n    h100 "), std::string::npos) << r.output;

  r = compare(db("h100") + " " + db("a100") + " --by sweep");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("h100.db:sw-"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a100.db:sw-"), std::string::npos) << r.output;

  r = compare(db("h100") + " " + db("a100") + " --baseline no-such-tag");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--baseline 'no-such-tag' matches no result set"), std::string::npos) << r.output;

  // export --json keeps the tag and the telemetry statistics of trials and repetitions.
  const auto json = (dir_ / "h100.json").string();
  r = run_cli_with_env("", "export " + db("h100") + " --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string exported = slurp(json);
  EXPECT_NE(exported.find("\"tag\":\"h100\""), std::string::npos);
  EXPECT_GE(count(exported, "\"throttle_fraction\""), 4u + 2u);  // 2 trials x (2 repetitions + the trial)
  EXPECT_NE(exported.find("\"idle_power_w\""), std::string::npos);

  r = compare(db("h100") + " " + db("cpu"));  // nothing in common: said, listed, exit 0
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no workload is in more than one result set"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("only in CPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("only in NVIDIA H100"), std::string::npos) << r.output;
}

TEST_F(CompareCli, NewerSchemaAndDamagedDatabasesAreRefusedClearly) {
  const auto newer = (dir_ / "newer.db").string();
  fs::copy_file(db("h100"), newer, fs::copy_options::overwrite_existing);
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(newer.c_str(), &raw), SQLITE_OK);
  sqlite3_exec(raw, "UPDATE schema_info SET value='99' WHERE key='schema_version'", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  auto r = compare(db("a100") + " " + newer);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("schema version 99"), std::string::npos) << r.output;

  const auto damaged = (dir_ / "damaged.db").string();
  std::string bytes = slurp(db("h100"));
  for (std::size_t i = 100; i < bytes.size(); i += 7) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  std::ofstream(damaged, std::ios::binary) << bytes;
  r = compare(db("a100") + " " + damaged);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.output.find("damaged") != std::string::npos || r.output.find("not a cnnergy") != std::string::npos) << r.output;

  r = compare((dir_ / "missing.db").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no results database"), std::string::npos) << r.output;
}

TEST_F(CompareCli, PresetDryRunSaysTrainingOnly) {
  const auto r = run_cli_with_env("CNNERGY_NVML_LIBRARY= ", "sweep --preset hardware-comparison --device cpu --dry-run --db " +
                                                                 (dir_ / "preset.db").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("TRAINING throughput only"), std::string::npos) << r.output;
  for (const auto& m : {"resnet50", "resnet152", "vgg16", "vgg19"})
    EXPECT_NE(r.output.find(std::string("--model ") + m + " --batch 1,64,256"), std::string::npos) << m;
  EXPECT_EQ(count(r.output, "dry run: no GPU setting was changed"), 4u) << r.output;
}
