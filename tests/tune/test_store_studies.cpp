// Schema 4 of the results store: studies (a convolution study's JSON document) are written, read back
// in order and carried by merge once; a version-3 database (no studies table) reads as holding none,
// and its first writer adds the table with its sweeps kept; a study that is not JSON is refused.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "tune/store.hpp"
#include "tune/tune_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::tune;
using cnnergy::tune::testing::TempDir;
using cnnergy::tune::testing::sqlite_scalar;

namespace {

StudyRecord study(const std::string& device, int cells) {
  Json::Array cell_list;
  for (int i = 0; i < cells; ++i) cell_list.emplace_back(Json::Object{{"implementation", Json("algo_" + std::to_string(i))}});
  StudyRecord s;
  s.kind = "convbench";
  s.command_line = "cnnergy convbench --problem n=1,c=1,h=4,w=4,k=1,r=3,s=3";
  s.device = device;
  s.document_json = Json(Json::Object{{"device", Json(device)}, {"cells", Json(std::move(cell_list))}}).dump();
  return s;
}


}  // namespace

TEST(StoreStudies, WrittenReadBackInOrderAndMergedOnce) {
  TempDir dir;
  const std::string a = dir.file("a.db"), b = dir.file("b.db"), merged = dir.file("m.db");
  {
    ResultStore store(a);
    EXPECT_TRUE(store.studies().empty());
    EXPECT_EQ(store.add_study(study("NVIDIA H200", 3)), 1);
    EXPECT_EQ(store.add_study(study("AMD EPYC", 1)), 2);
  }
  const ResultStore reader(a, ResultStore::Mode::kReadOnly);
  const auto studies = reader.studies();
  ASSERT_EQ(studies.size(), 2u);
  EXPECT_EQ(studies[0].device, "NVIDIA H200");
  EXPECT_EQ(studies[1].device, "AMD EPYC");
  EXPECT_EQ(studies[0].kind, "convbench");
  EXPECT_FALSE(studies[0].created.empty());
  EXPECT_EQ(Json::parse(studies[0].document_json).at("cells").items().size(), 3u);

  { ResultStore other(b); other.add_study(study("NVIDIA H100", 2)); }
  MergeReport r = merge_stores(merged, {a, b});
  EXPECT_EQ(r.studies_copied, 3u);
  r = merge_stores(merged, {a});  // again: already there
  EXPECT_EQ(r.studies_copied, 0u);
  EXPECT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(ResultStore(merged, ResultStore::Mode::kReadOnly).studies().size(), 3u);

  ResultStore writer(a);
  StudyRecord bad = study("x", 1);
  bad.document_json = "{not json";
  EXPECT_THROW(writer.add_study(bad), InvalidArgument);
  bad.document_json = "{}";
  bad.kind = "";
  EXPECT_THROW(writer.add_study(bad), InvalidArgument);
  EXPECT_EQ(writer.studies().size(), 2u);
}

TEST(StoreStudies, VersionThreeDatabaseHoldsNoneUntilItsFirstWriterAddsTheTable) {
  TempDir dir;
  const std::string path = dir.file("v3.db");
  std::int64_t sweep_id = 0;
  {
    ResultStore store(path);
    SweepRecord s;
    s.sweep_key = "sw";
    s.description = "workload=model=lenet5 device=cpu";
    sweep_id = store.add_sweep(s);
  }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);  // make it what version 3 wrote
  for (const char* newer : {"DROP TABLE studies", "ALTER TABLE trials DROP COLUMN settle_s",
                            "ALTER TABLE repetitions DROP COLUMN sequence", "ALTER TABLE repetitions DROP COLUMN settle_s"})
    ASSERT_EQ(sqlite3_exec(raw, newer, nullptr, nullptr, nullptr), SQLITE_OK) << newer;
  sqlite3_exec(raw, "UPDATE schema_info SET value='3' WHERE key='schema_version'", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  {
    const ResultStore reader(path, ResultStore::Mode::kReadOnly);
    EXPECT_TRUE(reader.studies().empty());
    EXPECT_EQ(reader.sweeps().size(), 1u);
  }
  {
    ResultStore writer(path);
    writer.add_study(study("NVIDIA H200", 1));
    EXPECT_EQ(writer.studies().size(), 1u);
    EXPECT_EQ(writer.sweep(sweep_id).sweep_key, "sw");
  }
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  EXPECT_EQ(sqlite_scalar(raw, "SELECT value FROM schema_info WHERE key='schema_version'"), "6");
  sqlite3_close(raw);
}
