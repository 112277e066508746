// The comparison's matching rules on stores written in the test: workload keys, the reference trial
// preferred over faster ones, sets grouped by device and by tag, ratios against the baseline, the
// unmatched lists, telemetry figures summed over GPUs, and a baseline that matches nothing; and no
// database modified by compare (a WAL database leaves its directory exactly as it was).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/errors.hpp"
#include "report/compare.hpp"
#include "tune/sqlite.hpp"
#include "tune/store.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;
using cnnergy::tune::testing::random_trial;
using cnnergy::tune::testing::TempDir;

namespace {

// A store with one sweep of `model` on `gpu`: batch 64 and 128, each at power limits 300 (fast,
// hardware changed) and 700 (the reference), plus telemetry on every trial of two GPUs.
std::string make_store(const TempDir& dir, const std::string& name, const std::string& gpu, const std::string& model,
                       const std::string& tag, Rng& rng) {
  const std::string path = dir.file(name);
  ResultStore store(path);
  SweepRecord s;
  s.sweep_key = "sw-" + name;
  s.description = "workload=model=" + model + " device=cuda:0\nknobs=...";
  s.environment.gpu_names = {gpu};
  s.environment.host = "node";
  const auto id = store.add_sweep(s, tag);
  KnobSpace space;
  space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "64,128", {}));
  space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "300,700", {}));
  std::vector<KnobSetting> ref = {{Knob::kBatch, KnobValue::of_number(64)}, {Knob::kPowerLimit, KnobValue::of_number(700)}};
  for (const auto& spec : space.trials(ref)) {
    TrialRecord t = random_trial(rng, spec, 3, 1);
    if (const KnobValue* pl = spec.find(Knob::kPowerLimit); pl && *pl->number == 300)
      for (auto& r : t.measurement.repetitions) r.elapsed_ms *= 0.1;  // much faster, but not the default
    t.measurement.telemetry_json =
        R"({"elapsed_ms":1000,"idle_power_w":60,"gpus":[)"
        R"({"nvml_index":0,"samples":10,"power_w":{"n":10,"mean":300,"min":100,"max":400},"utilization_gpu_pct":{"n":10,"mean":80,"min":0,"max":100},"memory_used_peak_mib":1000,"reason_samples":10,"throttle_counts":{"sw_power_cap":4,"gpu_idle":1}},)"
        R"({"nvml_index":1,"samples":10,"power_w":{"n":10,"mean":200,"min":50,"max":300},"utilization_gpu_pct":{"n":10,"mean":60,"min":0,"max":90},"memory_used_peak_mib":500,"reason_samples":10,"throttle_counts":{"sw_power_cap":2}}],)"
        R"("cpu":{"utilization_pct":"unavailable","package_energy_j":"unavailable","dram_energy_j":"unavailable","seconds":1}})";
    store.write_trial(id, t);
  }
  return path;
}

}  // namespace

TEST(Compare, WorkloadKeysNameModelBatchPrecisionModeAndGpus) {
  TrialSpec t;
  t.knobs = {{Knob::kBatch, KnobValue::of_number(32)}, {Knob::kPrecision, KnobValue::of_text("bf16")},
             {Knob::kPowerLimit, KnobValue::of_number(300)}};
  EXPECT_EQ(report::workload_key("model=resnet50 device=cuda:0 input=3x32x32", t),
            "model=resnet50 input=3x32x32 batch=32 precision=bf16 mode=training gpus=1");
  EXPECT_EQ(report::workload_key("model=vgg16 device=cpu", TrialSpec{}), "model=vgg16 batch=64 precision=fp32 mode=training gpus=1");
  EXPECT_EQ(report::workload_key("command=./train.sh --x", TrialSpec{}), "command=./train.sh --x batch=- precision=- mode=training gpus=1");
  EXPECT_THROW(report::parse_compare_by("gpu"), InvalidArgument);
}

TEST(Compare, MatchesOnWorkloadPrefersTheReferenceAndRatiosAgainstTheBaseline) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const auto a = make_store(dir, "a.db", "NVIDIA H100", "resnet50", "x", rng);
  const auto b = make_store(dir, "b.db", "NVIDIA H200", "resnet50", "y", rng);
  const auto c = make_store(dir, "c.db", "NVIDIA H200", "vgg16", "y", rng);

  report::CompareOptions o;
  o.baseline = b;
  const auto cmp = report::build_comparison({a, b, c}, o);
  ASSERT_EQ(cmp.sets.size(), 2u);  // by device: the two H200 databases are one set
  EXPECT_EQ(cmp.sets[cmp.baseline].label, "NVIDIA H200");
  EXPECT_EQ(cmp.matched.size(), 2u);    // resnet50 at batch 64 and 128
  EXPECT_EQ(cmp.unmatched.size(), 2u);  // vgg16 on the H200 only
  for (const auto& [key, set] : cmp.unmatched) {
    EXPECT_EQ(cmp.sets[set].label, "NVIDIA H200");
    EXPECT_NE(key.find("model=vgg16"), std::string::npos);
  }
  const auto& e = cmp.sets[0].workloads.at("model=resnet50 batch=64 precision=fp32 mode=training gpus=1");
  EXPECT_EQ(e.trial_key, "batch=64,power_limit_w=700");  // the reference, although 300 W ran faster
  const auto& e128 = cmp.sets[0].workloads.at("model=resnet50 batch=128 precision=fp32 mode=training gpus=1");
  EXPECT_EQ(e128.trial_key, "batch=128,power_limit_w=700");  // at the default power limit, not the faster one
  ASSERT_TRUE(e.power_w && e.gpu_util_pct && e.memory_peak_mib && e.idle_power_w);
  EXPECT_DOUBLE_EQ(e.power_w->value, 500);  // summed over the GPUs
  EXPECT_DOUBLE_EQ(*e.power_w->low, 150);
  EXPECT_DOUBLE_EQ(e.gpu_util_pct->value, 70);  // averaged
  EXPECT_DOUBLE_EQ(*e.gpu_util_pct->high, 100);
  EXPECT_DOUBLE_EQ(*e.memory_peak_mib, 1500);
  EXPECT_EQ(e.top_throttle, "sw_power_cap 30 %");
  EXPECT_FALSE(e.cpu_util_pct.has_value());
  EXPECT_EQ(cmp.sets[0].all_points.at("model=resnet50 batch=64 precision=fp32 mode=training gpus=1").size(), 2u);

  std::ostringstream out;
  report::print_comparison(out, cmp);
  EXPECT_NE(out.str().find("* NVIDIA H200"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("1.000x"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("only in NVIDIA H200"), std::string::npos) << out.str();

  o.by = report::CompareBy::kTag;
  o.baseline = "x";
  const auto by_tag = report::build_comparison({a, b, c}, o);
  ASSERT_EQ(by_tag.sets.size(), 2u);
  EXPECT_EQ(by_tag.sets[by_tag.baseline].label, "x");

  o.baseline = "nothing-like-this";
  try {
    report::build_comparison({a, b}, o);
    FAIL() << "a baseline matching nothing was accepted";
  } catch (const InvalidArgument& err) {
    EXPECT_NE(std::string(err.what()).find("matches no result set"), std::string::npos) << err.what();
  }
  EXPECT_THROW(report::build_comparison({}, {}), InvalidArgument);
}

namespace {

// Every entry of a directory: name -> "size mtime(ns) ctime(ns)".
std::map<std::string, std::string> listing(const std::filesystem::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    struct stat st {};
    EXPECT_EQ(::stat(e.path().c_str(), &st), 0);
    auto time = [](const timespec& t) { return std::to_string(t.tv_sec) + "." + std::to_string(t.tv_nsec); };
    out[e.path().filename().string()] =
        std::to_string(st.st_size) + " " + time(st.st_mtim) + " " + time(st.st_ctim);
  }
  return out;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// Issue 20's bad-input rule: "no database is ever modified by compare". A read-only open of a WAL
// database used to leave empty -wal and -shm files beside it.
TEST(Compare, LeavesAWalDatabaseAndItsDirectoryUntouched) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const auto a = make_store(dir, "a.db", "NVIDIA H100", "resnet50", "x", rng);
  const auto b = make_store(dir, "b.db", "NVIDIA H200", "resnet50", "y", rng);
  for (const auto& p : {a, b}) {
    const std::string db = bytes_of(p);
    ASSERT_GE(db.size(), 100u);
    EXPECT_EQ(db[18], 2) << p << " is not in WAL mode (file format write version)";
    EXPECT_TRUE(opens_immutable(p)) << "the writer left a -wal or -journal beside " << p;
  }
  const auto before = listing(dir.path());
  ASSERT_EQ(before.size(), 2u);  // a.db and b.db, nothing beside them
  const std::string a_bytes = bytes_of(a), b_bytes = bytes_of(b);

  report::CompareOptions o;
  o.baseline = a;
  const auto cmp = report::build_comparison({a, b}, o);
  std::ostringstream out;
  report::print_comparison(out, cmp);
  EXPECT_EQ(cmp.matched.size(), 2u) << out.str();
  {  // report and export read through the same read-only store
    const ResultStore store(b, ResultStore::Mode::kReadOnly);
    for (const auto& s : store.sweeps()) EXPECT_EQ(store.trials(s.id).size(), 4u);
  }
  EXPECT_EQ(listing(dir.path()), before);
  EXPECT_EQ(bytes_of(a), a_bytes);
  EXPECT_EQ(bytes_of(b), b_bytes);
}

// With a writer live (its -wal beside the database) the read-only open is the ordinary one and sees
// the writer's committed trials.
TEST(Compare, ReadsADatabaseWhoseWriterIsLive) {
  TempDir dir;
  Rng rng(default_seed());
  const auto a = make_store(dir, "a.db", "NVIDIA H100", "resnet50", "x", rng);
  ResultStore writer(a);
  SweepRecord s;
  s.sweep_key = "live";
  s.description = "workload=model=vgg16 device=cuda:0\nknobs=...";
  s.environment.gpu_names = {"NVIDIA H100"};
  const auto id = writer.add_sweep(s, "x");
  KnobSpace space;
  space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "32", {}));
  for (const auto& spec : space.trials({})) writer.write_trial(id, random_trial(rng, spec, 2, 1));
  ASSERT_TRUE(std::filesystem::exists(a + "-wal"));
  EXPECT_FALSE(opens_immutable(a));
  const auto cmp = report::build_comparison({a}, {});
  ASSERT_EQ(cmp.sets.size(), 1u);
  EXPECT_EQ(cmp.sets[0].workloads.count("model=vgg16 batch=32 precision=fp32 mode=training gpus=1"), 1u);
}
