// The SQLite results store: round trips, resume bookkeeping, crash safety (a writer killed with
// SIGKILL loses no committed trial), damaged and foreign files, schema versions, and merging.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "tune/store.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;
using cnnergy::tune::testing::random_trial;
using cnnergy::tune::testing::TempDir;

namespace {

SweepRecord sample_sweep(const std::string& key, const std::string& host = "node1") {
  SweepRecord s;
  s.sweep_key = key;
  s.command_line = "cnnergy sweep --model resnet50 --power-limit 200:700:25";
  s.description = "model=resnet50";
  s.environment.gpu_names = {"NVIDIA H200", "NVIDIA H200"};
  s.environment.driver_version = "580.1";
  s.environment.cuda_version = "13.0";
  s.environment.cudnn_version = "9.19";
  s.environment.host = host;
  s.environment.date = "2026-11-21T10:00:00Z";
  s.environment.cnnergy_version = "0.1.0";
  s.environment.extra["sm_clock_max_mhz"] = "1980";
  return s;
}

std::vector<TrialSpec> power_trials(int n) {
  KnobSpace space;
  space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "200:" + std::to_string(200 + 25 * (n - 1)) + ":25", {}));
  return space.trials(space.default_reference({}));
}

template <typename Fn>
std::string data_error_of(Fn fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Store, RoundTripsEverything) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const std::string path = dir.file("r.db");
  std::vector<TrialRecord> written;
  std::int64_t sweep_id = 0;
  {
    ResultStore store(path);
    sweep_id = store.add_sweep(sample_sweep("sw-1"));
    for (const auto& spec : power_trials(5)) {
      written.push_back(random_trial(rng, spec, 2 + static_cast<int>(rng.next_u32() % 3)));
      store.write_trial(sweep_id, written.back());
    }
    TrialRecord failed;
    failed.spec = power_trials(6).back();
    failed.status = TrialStatus::kFailed;
    failed.error_message = "exit code 3: \"quoted\" <b>";
    store.write_trial(sweep_id, failed);
  }
  ResultStore store(path, ResultStore::Mode::kReadOnly);
  const auto sweeps = store.sweeps();
  ASSERT_EQ(sweeps.size(), 1u);
  EXPECT_EQ(sweeps[0].environment.gpu_names.size(), 2u);
  EXPECT_EQ(sweeps[0].environment.extra.at("sm_clock_max_mhz"), "1980");
  EXPECT_EQ(sweeps[0].command_line, sample_sweep("x").command_line);
  const auto trials = store.trials(sweep_id);
  ASSERT_EQ(trials.size(), 6u);
  for (std::size_t i = 0; i < written.size(); ++i) {
    const TrialRecord back = store.read_trial(trials[i].id);
    const TrialRecord& w = written[i];
    EXPECT_EQ(back.spec.key, w.spec.key);
    EXPECT_EQ(back.spec.reference, w.spec.reference);
    ASSERT_EQ(back.measurement.repetitions.size(), w.measurement.repetitions.size());
    for (std::size_t r = 0; r < w.measurement.repetitions.size(); ++r) {
      EXPECT_EQ(back.measurement.repetitions[r].elapsed_ms, w.measurement.repetitions[r].elapsed_ms);  // exact
      EXPECT_EQ(back.measurement.repetitions[r].energy_mj, w.measurement.repetitions[r].energy_mj);
      EXPECT_EQ(back.measurement.repetitions[r].peak_power_w, w.measurement.repetitions[r].peak_power_w);
    }
    EXPECT_EQ(back.measurement.phases.size(), 4u);
    EXPECT_EQ(back.measurement.layers.size(), 4u);
    EXPECT_EQ(back.measurement.layers[2].energy_mj, w.measurement.layers[2].energy_mj);
    // stored medians agree with metrics recomputed from the stored repetitions
    const auto recomputed = compute_trial_metrics(back.measurement);
    for (const auto& [m, s] : recomputed) EXPECT_DOUBLE_EQ(trials[i].summary.metrics.at(m).median, s.median) << metric_name(m);
  }
  EXPECT_EQ(trials[5].summary.status, TrialStatus::kFailed);
  EXPECT_EQ(trials[5].error_message, "exit code 3: \"quoted\" <b>");
  EXPECT_TRUE(store.has_trial(sweep_id, written[0].spec.key));
  EXPECT_FALSE(store.has_trial(sweep_id, "power_limit_w=999"));
  EXPECT_FALSE(store.has_trial(sweep_id + 1, written[0].spec.key));
  EXPECT_EQ(store.find_sweep("sw-1")->id, sweep_id);
  EXPECT_FALSE(store.find_sweep("sw-2"));
}

TEST(Store, UsesWalAndReplacesARetriedTrial) {
  TempDir dir;
  Rng rng(default_seed());
  const std::string path = dir.file("r.db");
  ResultStore store(path);
  const auto id = store.add_sweep(sample_sweep("sw"));
  const auto spec = power_trials(1)[0];
  store.write_trial(id, TrialRecord{spec, TrialStatus::kFailed, "boom", {}, "", ""});
  EXPECT_EQ(store.trial_status(id, spec.key), TrialStatus::kFailed);
  store.write_trial(id, random_trial(rng, spec));
  EXPECT_EQ(store.trial_status(id, spec.key), TrialStatus::kOk);
  EXPECT_EQ(store.trials(id).size(), 1u);
  EXPECT_EQ(store.read_trial(store.trials(id)[0].id).measurement.repetitions.size(), 3u);

  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  // no orphan repetitions of the replaced trial
  sqlite3_prepare_v2(raw, "SELECT count(*) FROM repetitions", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 3);
  sqlite3_finalize(st);
  sqlite3_close(raw);
}

TEST(Store, AnInvalidMeasurementWritesNothing) {
  TempDir dir;
  ResultStore store(dir.file("r.db"));
  const auto id = store.add_sweep(sample_sweep("sw"));
  TrialRecord bad{power_trials(1)[0], TrialStatus::kOk, "", {}, "", ""};
  bad.measurement.repetitions.push_back({0.0, 0, {}, std::nullopt, std::nullopt, "", {}, {}});
  EXPECT_THROW(store.write_trial(id, bad), InvalidArgument);
  EXPECT_TRUE(store.trials(id).empty());
}

TEST(Store, AKilledWriterLosesNoFinishedTrial) {
  TempDir dir;
  const std::string path = dir.file("crash.db");
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  {
    ResultStore store(path);
    store.add_sweep(sample_sweep("sw"));
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the writer: trials as fast as it can, until killed mid-way
    try {
      Rng rng(seed);
      ResultStore store(path);
      const auto specs = power_trials(4000 / 25);
      for (std::size_t i = 0;; ++i) {
        TrialSpec s = specs[i % specs.size()];
        s.key = "power_limit_w=" + std::to_string(i);
        s.knobs = parse_trial_key(s.key);
        s.index = i;
        store.write_trial(1, random_trial(rng, s, 5, 4));
      }
    } catch (...) {
    }
    _exit(1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped on its own";

  ResultStore store(path);  // opens: integrity check passes after the crash
  const auto trials = store.trials(1);
  EXPECT_GT(trials.size(), 0u) << "the writer committed nothing in 400 ms";
  for (const auto& t : trials) {  // every committed trial is complete
    const auto rec = store.read_trial(t.id);
    ASSERT_EQ(rec.measurement.repetitions.size(), 5u) << t.summary.key;
    ASSERT_EQ(rec.measurement.phases.size(), 4u);
    ASSERT_EQ(rec.measurement.layers.size(), 4u);
    ASSERT_EQ(t.repetitions, 5u);
  }
  for (std::size_t i = 0; i < trials.size(); ++i) ASSERT_EQ(trials[i].trial_index, i);  // no gaps
  std::printf("killed writer: %zu finished trials kept\n", trials.size());
}

TEST(Store, GarbageAndDamagedFilesAreRefusedClearly) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const std::string garbage = dir.file("garbage.db");
  {
    std::ofstream out(garbage, std::ios::binary);
    for (int i = 0; i < 5000; ++i) out.put(static_cast<char>(rng.next_u32()));
  }
  std::string msg = data_error_of([&] { ResultStore s(garbage); });
  EXPECT_NE(msg.find("not a cnnergy results database"), std::string::npos) << msg;
  EXPECT_NE(msg.find(garbage), std::string::npos) << msg;

  // a real store, then truncated to half its size
  const std::string good = dir.file("good.db");
  {
    ResultStore store(good);
    const auto id = store.add_sweep(sample_sweep("sw"));
    for (const auto& spec : power_trials(40)) store.write_trial(id, random_trial(rng, spec, 5, 8));
  }
  {
    ResultStore checkpoint(good);  // fold the WAL into the main file so truncation cuts real pages
  }
  sqlite3* raw = nullptr;
  sqlite3_open(good.c_str(), &raw);
  sqlite3_exec(raw, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  const auto size = std::filesystem::file_size(good);
  ASSERT_GT(size, 20000u);
  std::filesystem::resize_file(good, size / 2);
  msg = data_error_of([&] {
    ResultStore s(good, ResultStore::Mode::kReadOnly);
    for (const auto& sw : s.sweeps()) s.trials(sw.id);
  });
  EXPECT_FALSE(msg.empty()) << "a truncated store was read without complaint";
  EXPECT_TRUE(msg.find("damaged") != std::string::npos || msg.find("malformed") != std::string::npos) << msg;

  // the header intact, pages overwritten with garbage
  const std::string scribbled = dir.file("scribbled.db");
  {
    ResultStore store(scribbled);
    const auto id = store.add_sweep(sample_sweep("sw"));
    for (const auto& spec : power_trials(20)) store.write_trial(id, random_trial(rng, spec));
  }
  sqlite3_open(scribbled.c_str(), &raw);
  sqlite3_exec(raw, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  {
    std::fstream f(scribbled, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(5 * 4096);  // whole pages (headers included) of the tables: unused gaps inside a page are no damage
    for (int i = 0; i < 5 * 4096; ++i) f.put(static_cast<char>(rng.next_u32()));
  }
  msg = data_error_of([&] {
    ResultStore s(scribbled);
    for (const auto& sw : s.sweeps()) s.trials(sw.id);
  });
  EXPECT_FALSE(msg.empty()) << "a scribbled store was read without complaint";

  EXPECT_NE(data_error_of([&] { ResultStore s(dir.file("missing.db"), ResultStore::Mode::kReadOnly); }).find("no results database"),
            std::string::npos);
}

TEST(Store, OtherSchemaVersionsAndForeignDatabasesAreRefused) {
  TempDir dir;
  const std::string path = dir.file("v.db");
  { ResultStore store(path); }
  sqlite3* raw = nullptr;
  sqlite3_open(path.c_str(), &raw);
  sqlite3_exec(raw, "UPDATE schema_info SET value='7' WHERE key='schema_version'", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  std::string msg = data_error_of([&] { ResultStore s(path); });
  EXPECT_NE(msg.find("schema version 7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reads schema versions 1 to 6"), std::string::npos) << msg;

  const std::string foreign = dir.file("foreign.db");
  sqlite3_open(foreign.c_str(), &raw);
  sqlite3_exec(raw, "CREATE TABLE photos (id INTEGER)", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  msg = data_error_of([&] { ResultStore s(foreign); });
  EXPECT_NE(msg.find("not a cnnergy results database"), std::string::npos) << msg;
}

// A version-1 database (before the cuda_graph knob): read as it is, upgraded by the first writer,
// its trials kept, and the new knob's column filled for new trials.
TEST(Store, VersionOneDatabasesAreReadAndUpgraded) {
  TempDir dir;
  Rng rng(default_seed());
  const std::string path = dir.file("v1.db");
  std::int64_t sweep_id = 0;
  {
    ResultStore store(path);
    sweep_id = store.add_sweep(sample_sweep("old"));
    for (const auto& spec : power_trials(2)) store.write_trial(sweep_id, random_trial(rng, spec, 3));
  }
  sqlite3* raw = nullptr;
  auto scalar = [&](const char* sql) {
    std::string out;
    sqlite3_exec(
        raw, sql,
        [](void* o, int, char** v, char**) {
          *static_cast<std::string*>(o) = v[0] ? v[0] : "NULL";
          return 0;
        },
        &out, nullptr);
    return out;
  };
  sqlite3_open(path.c_str(), &raw);  // make it what version 1 wrote
  ASSERT_EQ(sqlite3_exec(raw, "ALTER TABLE trials DROP COLUMN cuda_graph", nullptr, nullptr, nullptr), SQLITE_OK);
  for (const char* v3 : {"ALTER TABLE sweeps DROP COLUMN tag", "ALTER TABLE trials DROP COLUMN telemetry_json",
                         "ALTER TABLE repetitions DROP COLUMN telemetry_json", "DROP TABLE studies",
                         "ALTER TABLE trials DROP COLUMN settle_s", "ALTER TABLE repetitions DROP COLUMN sequence",
                         "ALTER TABLE repetitions DROP COLUMN settle_s"})
    ASSERT_EQ(sqlite3_exec(raw, v3, nullptr, nullptr, nullptr), SQLITE_OK) << v3;
  sqlite3_exec(raw, "UPDATE schema_info SET value='1' WHERE key='schema_version'", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  {
    ResultStore reader(path, ResultStore::Mode::kReadOnly);
    EXPECT_EQ(reader.trials(sweep_id).size(), 2u);
  }
  sqlite3_open(path.c_str(), &raw);
  EXPECT_EQ(scalar("SELECT value FROM schema_info WHERE key='schema_version'"), "1");  // a reader changes nothing
  sqlite3_close(raw);
  {
    ResultStore writer(path);
    KnobSpace space;
    space.set(Knob::kCudaGraph, parse_knob_values(Knob::kCudaGraph, "on", {}));
    writer.write_trial(sweep_id, random_trial(rng, space.trials(space.default_reference({})).front(), 3));
    EXPECT_EQ(writer.trials(sweep_id).size(), 3u);
  }
  sqlite3_open(path.c_str(), &raw);
  EXPECT_EQ(scalar("SELECT value FROM schema_info WHERE key='schema_version'"), "6");  // 1 -> 2 -> 3 -> 4 -> 5 -> 6
  EXPECT_EQ(scalar("SELECT count(*) FROM trials WHERE cuda_graph = 'on'"), "1");
  EXPECT_EQ(scalar("SELECT count(*) FROM trials WHERE cuda_graph IS NULL"), "2");
  sqlite3_close(raw);
}

TEST(Store, MergeJoinsShardsAndReportsDuplicates) {
  TempDir dir;
  Rng rng(default_seed());
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(rng.seed()));
  const auto specs = power_trials(9);
  // three shards of one sweep, written on two hosts, plus an unrelated sweep in shard 3
  for (int shard = 0; shard < 3; ++shard) {
    ResultStore s(dir.file("shard" + std::to_string(shard) + ".db"));
    const auto id = s.add_sweep(sample_sweep("sw-main", shard == 2 ? "node2" : "node1"));
    for (const auto& spec : specs)
      if (spec.index % 3 == static_cast<std::size_t>(shard)) s.write_trial(id, random_trial(rng, spec));
    if (shard == 1) s.write_trial(id, TrialRecord{specs[0], TrialStatus::kFailed, "flaky", {}, "", ""});  // dup of shard 0's ok
    if (shard == 2) {
      const auto other = s.add_sweep(sample_sweep("sw-other"));
      s.write_trial(other, random_trial(rng, specs[4]));
    }
  }
  const std::string out = dir.file("merged.db");
  const MergeReport r = merge_stores(out, {dir.file("shard0.db"), dir.file("shard1.db"), dir.file("shard2.db")});
  EXPECT_EQ(r.sweeps_created, 2u);
  EXPECT_EQ(r.sweeps_merged, 2u);
  EXPECT_EQ(r.duplicates_kept, 1u);  // the failed copy of an ok trial is dropped
  EXPECT_EQ(r.trials_copied, 10u);
  bool env_note = false;
  for (const auto& m : r.messages) env_note = env_note || m.find("node2") != std::string::npos;
  EXPECT_TRUE(env_note);

  ResultStore merged(out, ResultStore::Mode::kReadOnly);
  const auto main = merged.find_sweep("sw-main");
  ASSERT_TRUE(main);
  const auto trials = merged.trials(main->id);
  ASSERT_EQ(trials.size(), specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(trials[i].summary.key, specs[i].key);
    EXPECT_EQ(trials[i].summary.status, TrialStatus::kOk);
  }
  EXPECT_NE(merged.sweep(main->id).notes.find("node2"), std::string::npos);

  // merging the same input again: every trial is a duplicate, nothing changes
  const MergeReport again = merge_stores(out, {dir.file("shard0.db")});
  EXPECT_EQ(again.trials_copied, 0u);
  EXPECT_EQ(again.duplicates_kept, 3u);

  // a damaged input is found before anything is written
  const std::string bad = dir.file("bad.db");
  std::ofstream(bad) << "this is not a database, just some text that is long enough to look like something";
  EXPECT_THROW(merge_stores(dir.file("merged2.db"), {dir.file("shard0.db"), bad}), DataError);
  EXPECT_FALSE(std::filesystem::exists(dir.file("merged2.db")));
  EXPECT_THROW(merge_stores(out, {out}), InvalidArgument);
}

TEST(Store, JsonEscapingAndParsing) {
  const std::string nasty = "a\"b\\c\n\t</script><x>\x01 \xC3\xA9 \xFF end";
  const std::string quoted = json_quote(nasty);
  EXPECT_EQ(quoted.find("</script>"), std::string::npos);
  const Json back = Json::parse(quoted);
  EXPECT_EQ(back.as_string(), "a\"b\\c\n\t</script><x>\x01 \xC3\xA9 \xEF\xBF\xBD end");  // invalid byte -> U+FFFD
  const Json obj = Json::parse(R"({"a": [1, 2.5e3, -0.125, true, null], "b": {"c": "\u00e9\ud83d\ude00"}})");
  EXPECT_EQ(obj["a"].as_array()[1].as_number(), 2500);
  EXPECT_EQ(obj["b"]["c"].as_string(), "\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(Json::parse(obj.dump()).dump(), obj.dump());
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"\\x\"", "[1] 2", "\"\x01\"", "nul"})
    EXPECT_THROW(Json::parse(bad), DataError) << bad;
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(INFINITY), "null");
}
