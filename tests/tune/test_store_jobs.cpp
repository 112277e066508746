// Schema 6 of the results store: every trial's Slurm job id (for a join with sacct), kept through a
// merge; a version-5 database is read as it is and upgraded by its first writer; and merge of the
// shards of one sweep (--same-sweep) refuses a shard of another sweep, naming both keys, writing nothing.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>

#include "core/errors.hpp"
#include "tune/store.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;
using cnnergy::tune::testing::random_trial;
using cnnergy::tune::testing::sqlite_scalar;
using cnnergy::tune::testing::TempDir;

namespace {

std::vector<TrialSpec> batch_trials() {
  KnobSpace space;
  space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "1,2,3,4", {}));
  return space.trials(space.default_reference({}));
}

SweepRecord sweep_with_key(const std::string& key) {
  SweepRecord s;
  s.sweep_key = key;
  s.description = "workload=command=train.sh";
  s.environment.host = "node1";
  return s;
}

}  // namespace

TEST(StoreJobs, TrialsCarryTheirSlurmJobThroughAMerge) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const auto trials = batch_trials();
  std::vector<std::string> shards;
  for (int shard = 0; shard < 2; ++shard) {
    shards.push_back(dir.file("shard-" + std::to_string(shard + 1) + ".db"));
    ResultStore s(shards.back());
    s.set_default_job_id("777_" + std::to_string(shard + 1));
    const auto id = s.add_sweep(sweep_with_key("sw-aaaa"));
    for (std::size_t i = shard; i < trials.size(); i += 2) s.write_trial(id, random_trial(rng, trials[i], 2));
  }
  MergeOptions one;
  one.one_sweep = true;
  const MergeReport r = merge_stores(dir.file("out.db"), shards, one);
  EXPECT_EQ(r.trials_copied, 4u);
  ASSERT_EQ(r.sweep_keys, std::vector<std::string>{"sw-aaaa"});
  ResultStore out(dir.file("out.db"), ResultStore::Mode::kReadOnly);
  const auto stored = out.trials(out.find_sweep("sw-aaaa")->id);
  ASSERT_EQ(stored.size(), 4u);
  for (const auto& t : stored)  // trial i ran in shard i % 2 + 1
    EXPECT_EQ(t.slurm_job_id, "777_" + std::to_string(t.trial_index % 2 + 1)) << t.summary.key;
}

TEST(StoreJobs, VersionFiveDatabaseReadsWithoutJobsAndIsUpgradedByItsWriter) {
  TempDir dir;
  Rng rng(default_seed());
  const std::string path = dir.file("v5.db");
  {
    ResultStore s(path);
    s.write_trial(s.add_sweep(sweep_with_key("sw-old")), random_trial(rng, batch_trials()[0], 2));
  }
  sqlite3* raw = nullptr;  // back to version 5: no slurm_job_id column
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "ALTER TABLE trials DROP COLUMN slurm_job_id; "
                              "UPDATE schema_info SET value='5' WHERE key='schema_version'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  {
    ResultStore reader(path, ResultStore::Mode::kReadOnly);
    const auto t = reader.trials(reader.find_sweep("sw-old")->id);
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].slurm_job_id, "");
  }
  {
    ResultStore writer(path);
    writer.set_default_job_id("99");
    writer.write_trial(writer.find_sweep("sw-old")->id, random_trial(rng, batch_trials()[1], 2));
  }
  sqlite3_open(path.c_str(), &raw);
  EXPECT_EQ(sqlite_scalar(raw, "SELECT value FROM schema_info WHERE key='schema_version'"), "6");
  EXPECT_EQ(sqlite_scalar(raw, "SELECT group_concat(slurm_job_id, '|') FROM (SELECT slurm_job_id FROM trials ORDER BY trial_index)"), "|99");
  sqlite3_close(raw);
}

TEST(StoreJobs, SameSweepMergeRefusesAShardOfAnotherSweepNamingBothKeys) {
  TempDir dir;
  Rng rng(default_seed());
  const std::string a = dir.file("a.db"), b = dir.file("b.db"), out = dir.file("out.db");
  for (const auto& [path, key] : {std::pair{a, "sw-1111"}, std::pair{b, "sw-2222"}}) {
    ResultStore s(path);
    s.write_trial(s.add_sweep(sweep_with_key(key)), random_trial(rng, batch_trials()[0], 2));
  }
  MergeOptions one;
  one.one_sweep = true;
  try {
    merge_stores(out, {a, b}, one);
    FAIL() << "merged a shard of another sweep";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sw-1111"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sw-2222"), std::string::npos) << msg;
    EXPECT_NE(msg.find(b), std::string::npos) << msg;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_EQ(merge_stores(out, {a, b}).sweeps_created, 2u);  // without --same-sweep: two sweeps side by side
}
