// Regression tests of the reliability audit (docs/hardening.md) on the results database: concurrent
// schema creation, two sweeps writing one database, concurrent --resume (trial claims), merge of
// overlapping shards, a reader during a write, JSON column errors, permission and full-disk errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "hardening/hardening_util.hpp"
#include "report/html_report.hpp"
#include "tune/plan.hpp"
#include "tune/store.hpp"
#include "tune/tune_test_util.hpp"

namespace cnnergy {
namespace {

namespace fs = std::filesystem;
using tune::testing::TempDir;
using namespace hardening_testing;


tune::SweepDefinition small_definition(const std::string& tag) {
  using namespace tune;
  SweepDefinition d;
  d.workload = "model=lenet5";
  d.space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "16,32,64", {}));
  d.space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "200,300", {}));
  d.reference = d.space.default_reference({});
  d.settings = {{"tag", tag}};
  return d;
}

void sleep_until(Clock::time_point t) { std::this_thread::sleep_until(t); }

TEST(ConcurrentDb, TwoWritersCreatingANewDatabaseBothSucceed) {
  TempDir dir;
  for (int round = 0; round < 20; ++round) {
    const std::string path = dir.file("new" + std::to_string(round) + ".db");
    const auto start = Clock::now() + std::chrono::milliseconds(30);
    std::vector<pid_t> kids;
    for (int w = 0; w < 2; ++w) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        int rc = 0;
        try {
          sleep_until(start);
          tune::ResultStore store(path);
          const auto d = small_definition("w" + std::to_string(w));
          store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
        } catch (const std::exception& e) {
          std::fprintf(stderr, "writer %d: %s\n", w, e.what());
          rc = 3;
        }
        ::_exit(rc);
      }
      kids.push_back(pid);
    }
    for (pid_t k : kids) {
      int status = 0;
      ::waitpid(k, &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    EXPECT_EQ(tune::ResultStore(path, tune::ResultStore::Mode::kReadOnly).sweeps().size(), 2u);
  }
}

// Two sweeps (different definitions) writing one database at once, 20 times: every trial of both is
// stored exactly once.
TEST(ConcurrentDb, TwoSweepsWritingOneDatabaseLoseNothing) {
  TempDir dir;
  for (int round = 0; round < 20; ++round) {
    const std::string path = dir.file("two" + std::to_string(round) + ".db");
    const auto start = Clock::now() + std::chrono::milliseconds(30);
    std::vector<pid_t> kids;
    for (int w = 0; w < 2; ++w) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        int rc = 0;
        try {
          sleep_until(start);
          tune::ResultStore store(path);
          const auto d = small_definition("w" + std::to_string(w));
          const auto id = store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
          const auto plan = tune::plan_sweep(d.space.trials(d.reference), {}, {});
          tune::FailurePolicy policy(0);
          Rng rng(static_cast<std::uint64_t>(round * 2 + w));
          const auto out = tune::execute_sweep(
              store, id, plan, [&](const tune::TrialSpec& t) { return tune::testing::random_trial(rng, t, 2, 1).measurement; },
              policy, {}, {});
          rc = out.ok == plan.to_run.size() ? 0 : 4;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "sweep %d: %s\n", w, e.what());
          rc = 3;
        }
        ::_exit(rc);
      }
      kids.push_back(pid);
    }
    for (pid_t k : kids) {
      int status = 0;
      ::waitpid(k, &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    tune::ResultStore store(path, tune::ResultStore::Mode::kReadOnly);
    const auto sweeps = store.sweeps();
    ASSERT_EQ(sweeps.size(), 2u);
    for (const auto& s : sweeps) {
      std::set<std::string> keys;
      for (const auto& t : store.trials(s.id)) keys.insert(t.summary.key);
      EXPECT_EQ(store.trials(s.id).size(), 6u);
      EXPECT_EQ(keys.size(), 6u);
    }
  }
}

// Two processes resuming one sweep: each trial runs once in all (claims), and is stored once.
TEST(ConcurrentDb, ConcurrentResumeRunsEachTrialOnce) {
  TempDir dir;
  const std::string path = dir.file("resume.db");
  const std::string runs = dir.file("runs.log");
  const auto d = small_definition("r");
  std::int64_t id = 0;
  {
    tune::ResultStore store(path);
    id = store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  }
  const auto start = Clock::now() + std::chrono::milliseconds(50);
  std::vector<pid_t> kids;
  for (int w = 0; w < 2; ++w) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 0;
      try {
        tune::ResultStore store(path);
        const auto plan = tune::plan_sweep(d.space.trials(d.reference), {}, {});
        sleep_until(start);
        tune::FailurePolicy policy(0);
        Rng rng(static_cast<std::uint64_t>(w));
        tune::execute_sweep(
            store, id, plan,
            [&](const tune::TrialSpec& t) {
              std::ofstream(runs, std::ios::app) << t.key << "\n";
              std::this_thread::sleep_for(std::chrono::milliseconds(40));
              return tune::testing::random_trial(rng, t, 2, 1).measurement;
            },
            policy, {}, {});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "resume %d: %s\n", w, e.what());
        rc = 3;
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ::waitpid(k, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::ifstream in(runs);
  std::multiset<std::string> ran;
  for (std::string line; std::getline(in, line);) ran.insert(line);
  EXPECT_EQ(ran.size(), 6u) << "a trial ran in both processes";
  EXPECT_EQ(std::set<std::string>(ran.begin(), ran.end()).size(), 6u);
  tune::ResultStore store(path, tune::ResultStore::Mode::kReadOnly);
  EXPECT_EQ(store.trials(id).size(), 6u);
}

TEST(ConcurrentDb, ClaimOfADeadProcessIsTakenOver) {
  TempDir dir;
  const std::string path = dir.file("claims.db");
  const auto d = small_definition("c");
  std::int64_t id = 0;
  {
    tune::ResultStore store(path);
    id = store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  }
  // A process claims a trial and dies without releasing it.
  EXPECT_EQ(in_child([&] { return tune::ResultStore(path).claim_trial(id, "batch=16") ? 0 : 1; }), 0);
  tune::ResultStore store(path);
  EXPECT_TRUE(store.claim_trial(id, "batch=16"));
  EXPECT_TRUE(store.claim_trial(id, "batch=16"));  // ours already
  EXPECT_EQ(in_child([&] { return tune::ResultStore(path).claim_trial(id, "batch=16") ? 1 : 0; }), 0)
      << "a live process's claim was taken";
  store.release_trial(id, "batch=16");
  EXPECT_EQ(in_child([&] { return tune::ResultStore(path).claim_trial(id, "batch=16") ? 0 : 1; }), 0);
}

// Two shards of one sweep that overlap (both ran two of the trials): the merge holds each trial once,
// the better result of a duplicate, and reports the duplicates.
TEST(ConcurrentDb, MergeOfOverlappingShardsKeepsEachTrialOnce) {
  TempDir dir;
  const auto d = small_definition("m");
  const auto trials = d.space.trials(d.reference);
  Rng rng(3);
  for (int shard = 0; shard < 2; ++shard) {
    tune::ResultStore store(dir.file("shard" + std::to_string(shard) + ".db"));
    const auto id = store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
    for (std::size_t i = 0; i < trials.size(); ++i) {
      if (shard == 0 ? i >= 4 : i < 2) continue;  // shard 0: trials 0-3, shard 1: trials 2-5
      auto rec = tune::testing::random_trial(rng, trials[i], 2, 1);
      if (shard == 1 && i == 2) {  // a failure in one shard, a result in the other: the result wins
        rec.status = tune::TrialStatus::kFailed;
        rec.measurement = {};
        rec.error_message = "boom";
      }
      store.write_trial(id, rec);
    }
  }
  const auto report = tune::merge_stores(dir.file("all.db"), {dir.file("shard0.db"), dir.file("shard1.db")});
  EXPECT_EQ(report.duplicates_kept + report.duplicates_replaced, 2u);
  tune::ResultStore all(dir.file("all.db"), tune::ResultStore::Mode::kReadOnly);
  ASSERT_EQ(all.sweeps().size(), 1u);
  const auto stored = all.trials(all.sweeps()[0].id);
  EXPECT_EQ(stored.size(), 6u);
  for (const auto& t : stored) EXPECT_EQ(t.summary.status, tune::TrialStatus::kOk) << t.summary.key;
}

// A reader (what `report` and `export` do) opening and reading the database while a sweep writes it.
TEST(ConcurrentDb, ReaderDuringAWriteSeesConsistentTrials) {
  TempDir dir;
  const std::string path = dir.file("rw.db");
  const auto d = small_definition("rw");
  std::int64_t id = 0;
  {
    tune::ResultStore store(path);
    id = store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
  }
  const pid_t writer = ::fork();
  if (writer == 0) {
    int rc = 0;
    try {
      tune::ResultStore store(path);
      Rng rng(5);
      auto spec = d.space.trials(d.reference)[0];
      for (int i = 0; i < 150; ++i) {
        spec.key = "batch=" + std::to_string(100 + i);
        store.write_trial(id, tune::testing::random_trial(rng, spec, 3, 2));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "writer: %s\n", e.what());
      rc = 3;
    }
    ::_exit(rc);
  }
  std::size_t reads = 0, last = 0;
  int status = 0;
  while (::waitpid(writer, &status, WNOHANG) == 0) {
    tune::ResultStore store(path, tune::ResultStore::Mode::kReadOnly);
    const auto trials = store.trials(id);
    EXPECT_GE(trials.size(), last);  // committed trials never disappear
    last = trials.size();
    for (const auto& t : trials) ASSERT_NO_THROW(store.read_trial(t.id));
    ++reads;
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GT(reads, 0u);
  EXPECT_EQ(tune::ResultStore(path, tune::ResultStore::Mode::kReadOnly).trials(id).size(), 150u);
}

// A damaged JSON column: the error names the database, the row and the column (finding 11).
TEST(Db, JsonColumnErrorsNameFileRowAndColumn) {
  TempDir dir;
  const std::string path = dir.file("json.db");
  const auto d = small_definition("j");
  std::int64_t id = 0;
  {
    tune::ResultStore store(path);
    id = store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
    Rng rng(2);
    store.write_trial(id, tune::testing::random_trial(rng, d.space.trials(d.reference)[0], 2, 1));
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "UPDATE trials SET metrics_json = '{\"time_ms\": [1, 2'", nullptr, nullptr, nullptr);
  sqlite3_exec(db, "UPDATE sweeps SET environment_json = '{\"host\": 3'", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  tune::ResultStore store(path, tune::ResultStore::Mode::kReadOnly);
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0) store.trials(id);
      else store.sweeps();
      ADD_FAILURE() << "no error";
    } catch (const DataError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(path), std::string::npos) << m;
      EXPECT_NE(m.find(which == 0 ? "column metrics_json" : "column environment_json"), std::string::npos) << m;
    }
  }
}

TEST(Db, EmptyPathIsRefused) { EXPECT_THROW(tune::ResultStore(""), InvalidArgument); }

// As an ordinary user (root may write anywhere): a folder or a file the user cannot write is a
// permission error, not a "damaged database".
TEST(Db, UnwritableFolderOrFileIsAPermissionError) {
  TempDir dir;
  const std::string path = dir.file("ro/results.db");
  fs::create_directories(dir.path() / "ro");
  { tune::ResultStore store(path); }
  ::chmod((dir.path() / "ro").c_str(), 0555);
  ::chmod(path.c_str(), 0444);
  ::chmod(dir.path().c_str(), 0755);
  const int rc = in_child([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 2;
    try {
      tune::ResultStore store(path);
      return 3;
    } catch (const PermissionDenied& e) {
      return std::string(e.what()).find("damaged") == std::string::npos ? 0 : 4;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 5;
    }
  });
  ::chmod((dir.path() / "ro").c_str(), 0755);
  EXPECT_EQ(rc, 0);
}

// A disk that fills while trials are written (RLIMIT_FSIZE): a clean DataError, and the database still
// opens with every trial committed before.
TEST(Db, FullDiskIsACleanErrorAndTheDatabaseStaysIntact) {
  TempDir dir;
  const std::string path = dir.file("full.db");
  const auto d = small_definition("f");
  const int rc = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    tune::ResultStore store(path);
    const auto id = store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
    rlimit r{200 * 1024, 200 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &r);
    Rng rng(1);
    try {
      for (int i = 0; i < 100000; ++i) {
        tune::TrialSpec spec = d.space.trials(d.reference)[0];
        spec.key = "batch=" + std::to_string(1000 + i);
        store.write_trial(id, tune::testing::random_trial(rng, spec, 20, 4));
      }
    } catch (const DataError& e) {
      std::fprintf(stderr, "full disk: %s\n", e.what());
      return 0;
    }
    return 6;
  });
  ASSERT_EQ(rc, 0);
  tune::ResultStore store(path, tune::ResultStore::Mode::kReadOnly);
  ASSERT_EQ(store.sweeps().size(), 1u);
  const auto trials = store.trials(store.sweeps()[0].id);
  EXPECT_GT(trials.size(), 0u);
  for (const auto& t : trials) EXPECT_NO_THROW(store.read_trial(t.id));
}

// The HTML report on a full disk: a clean DataError, no half-written report left under its name.
TEST(Db, FullDiskWhileWritingTheReportIsACleanError) {
  TempDir dir;
  const std::string path = dir.file("r.db"), html = dir.file("report.html");
  const auto d = small_definition("h");
  {
    tune::ResultStore store(path);
    const auto id = store.add_sweep(tune::SweepRecord{0, d.key(), "", "x", d.canonical(), {}, ""});
    Rng rng(4);
    for (const auto& t : d.space.trials(d.reference)) store.write_trial(id, tune::testing::random_trial(rng, t, 3, 1));
  }
  const int rc = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    tune::ResultStore store(path, tune::ResultStore::Mode::kReadOnly);
    rlimit r{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &r);
    try {
      report::write_html_report(store, html, {});
    } catch (const DataError& e) {
      std::fprintf(stderr, "full disk: %s\n", e.what());
      return 0;
    }
    return 7;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(fs::exists(html));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find("report.html.tmp"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace cnnergy
