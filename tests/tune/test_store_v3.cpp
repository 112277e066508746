// Schema 3 of the results store: a version-2 database built from version 2's own DDL is read as it
// is (no tag, no telemetry), upgraded in place by the first writer with its trials kept, and then
// keeps tags and telemetry statistics; merge keeps tags and GPU kinds apart and carries both.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "core/errors.hpp"
#include "tune/store.hpp"
#include "tune/store_sql_v2.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;
using cnnergy::tune::testing::random_trial;
using cnnergy::tune::testing::TempDir;
using cnnergy::tune::testing::sqlite_scalar;

namespace {


std::vector<TrialSpec> batch_trials() {
  KnobSpace space;
  space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "1,64", {}));
  return space.trials(space.default_reference({}));
}

SweepRecord sweep_on(const std::string& gpu) {
  SweepRecord s;
  s.sweep_key = "sw-same";
  s.description = "workload=model=resnet50 device=cuda:0";
  s.environment.gpu_names = {gpu};
  s.environment.host = "node1";
  return s;
}

}  // namespace

TEST(StoreV3, VersionTwoDatabaseIsReadThenUpgradedByTheFirstWriter) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const std::string path = dir.file("v2.db");
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  for (const auto& stmt : sql_v2::schema()) ASSERT_EQ(sqlite3_exec(raw, stmt.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << stmt;
  ASSERT_EQ(sqlite3_exec(raw,
                         "INSERT INTO sweeps (sweep_key, created, command_line, description, gpu_names, environment_json) "
                         "VALUES ('sw-old', '2026-11-20T00:00:00Z', 'cnnergy sweep', 'workload=model=lenet5 device=cpu', "
                         "'[]', '{}')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);

  {
    ResultStore reader(path, ResultStore::Mode::kReadOnly);
    const auto sweeps = reader.sweeps();
    ASSERT_EQ(sweeps.size(), 1u);
    EXPECT_EQ(reader.sweep_tag(sweeps[0].id), "");
  }
  sqlite3_open(path.c_str(), &raw);
  EXPECT_EQ(sqlite_scalar(raw, "SELECT value FROM schema_info WHERE key='schema_version'"), "2");  // a reader changes nothing
  EXPECT_EQ(sqlite_scalar(raw, "SELECT count(*) FROM pragma_table_info('trials') WHERE name='telemetry_json'"), "0");
  sqlite3_close(raw);

  std::int64_t old_id = 0, new_id = 0;
  TrialRecord t = random_trial(rng, batch_trials().front(), 3);
  t.measurement.telemetry_json = R"({"idle_power_w":71.5})";
  t.measurement.repetition_telemetry_json = {"", R"({"elapsed_ms":3000})", ""};
  {
    ResultStore writer(path);
    old_id = writer.find_sweep("sw-old")->id;
    writer.write_trial(old_id, t);
    new_id = writer.add_sweep(sweep_on("NVIDIA H100"), "lab-a");
  }
  sqlite3_open(path.c_str(), &raw);
  EXPECT_EQ(sqlite_scalar(raw, "SELECT value FROM schema_info WHERE key='schema_version'"), "6");
  EXPECT_EQ(sqlite_scalar(raw, "SELECT tag FROM sweeps WHERE sweep_key='sw-old'"), "");
  sqlite3_close(raw);
  ResultStore store(path, ResultStore::Mode::kReadOnly);
  EXPECT_EQ(store.sweep_tag(new_id), "lab-a");
  const auto trials = store.trials(old_id);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(store.trial_telemetry_json(trials[0].id), R"({"idle_power_w":71.5})");
  const TrialRecord back = store.read_trial(trials[0].id);
  EXPECT_EQ(back.measurement.telemetry_json, t.measurement.telemetry_json);
  ASSERT_EQ(back.measurement.repetition_telemetry_json.size(), 3u);
  EXPECT_EQ(back.measurement.repetition_telemetry_json[0], "");
  EXPECT_EQ(back.measurement.repetition_telemetry_json[1], R"({"elapsed_ms":3000})");
}

TEST(StoreV3, MergeKeepsTagsAndGpuKindsApartAndCarriesTelemetry) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"NVIDIA H100", "lab-a"}, {"NVIDIA H200", "lab-a"}, {"NVIDIA H100", "lab-b"}, {"NVIDIA H100", "lab-a"}};
  std::vector<std::string> paths;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    paths.push_back(dir.file("in" + std::to_string(i) + ".db"));
    ResultStore s(paths.back());
    const auto id = s.add_sweep(sweep_on(inputs[i].first), inputs[i].second);
    TrialRecord t = random_trial(rng, batch_trials()[i % 2], 2);
    t.measurement.telemetry_json = "{\"input\":" + std::to_string(i) + "}";
    s.write_trial(id, t);
  }
  const MergeReport r = merge_stores(dir.file("out.db"), paths);
  EXPECT_EQ(r.sweeps_created, 3u);  // H100/lab-a (twice: joined), H200/lab-a, H100/lab-b
  EXPECT_EQ(r.sweeps_merged, 1u);
  ResultStore out(dir.file("out.db"), ResultStore::Mode::kReadOnly);
  const auto sweeps = out.sweeps();
  ASSERT_EQ(sweeps.size(), 3u);
  std::size_t h100_a_trials = 0;
  for (const auto& s : sweeps) {
 EXPECT_FALSE(out.sweep_tag(s.id).empty());
    if (out.sweep_tag(s.id) == "lab-a" && s.environment.gpu_names.front() == "NVIDIA H100") {
      const auto trials = out.trials(s.id);
      h100_a_trials = trials.size();
      for (const auto& t : trials) EXPECT_EQ(out.trial_telemetry_json(t.id).rfind("{\"input\":", 0), 0u);
    }
  }
  EXPECT_EQ(h100_a_trials, 2u);  // inputs 0 and 3 (batch 1 and 64)
}
