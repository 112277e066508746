// The knob journal file: round trip of every kind of entry, durable atomic replacement, corrupt
// files reported as DataError naming the file, and the "is the writer still alive" check.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "telemetry/journal.hpp"
#include "telemetry/knobs.hpp"
#include "telemetry_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;

TEST(Journal, RoundTripsEveryKind) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  Rng rng(seed);
  test::TempDir dir;
  Journal j(dir.file("sub/dir/journal.json"));  // parent folders are created
  EXPECT_FALSE(j.exists());
  JournalData d = Journal::for_this_process();
  const std::uint32_t limit = 100000 + rng.next_u32() % 600000;
  d.entries.push_back({"GPU-aaaa", 0, "NVIDIA H200", KnobKind::kPowerLimit, limit, 0, 0});
  d.entries.push_back({"GPU-bbbb", 3, "NVIDIA H200", KnobKind::kSmLockedClocks, 0, 0, 0});
  d.entries.push_back({"GPU-bbbb", 3, "NVIDIA H200", KnobKind::kMemLockedClocks, 0, 0, 0});
  d.entries.push_back({"GPU-cccc", 1, "Tesla P100", KnobKind::kApplicationClocks, 0, 715, 1189});
  j.write(d);
  ASSERT_TRUE(j.exists());
  const JournalData back = j.read();
  EXPECT_EQ(back.pid, static_cast<long>(::getpid()));
  EXPECT_EQ(back.host, d.host);
  ASSERT_EQ(back.entries.size(), 4u);
  EXPECT_EQ(back.entries[0].original_power_limit_mw, limit);
  EXPECT_EQ(back.entries[0].uuid, "GPU-aaaa");
  EXPECT_EQ(back.entries[1].kind, KnobKind::kSmLockedClocks);
  EXPECT_EQ(back.entries[1].index, 3u);
  EXPECT_EQ(back.entries[3].original_app_mem_mhz, 715u);
  EXPECT_EQ(back.entries[3].original_app_sm_mhz, 1189u);

  d.entries.pop_back();  // replacing leaves no temporary files behind
  j.write(d);
  EXPECT_EQ(j.read().entries.size(), 3u);
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("sub/dir"))) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
  j.remove();
  EXPECT_FALSE(j.exists());
  EXPECT_NO_THROW(j.remove());  // removing twice is fine
}

TEST(Journal, OwnerUidIsOptionalAndRoundTrips) {
  test::TempDir dir;
  Journal j(dir.file("journal.json"));
  JournalData d = Journal::for_this_process();
  d.entries.push_back({"GPU-aaaa", 0, "NVIDIA H200", KnobKind::kPowerLimit, 300000, 0, 0});
  j.write(d);  // a cnnergy process changing GPUs itself: no owner
  EXPECT_EQ(test::read_file(j.path()).find("owner_uid"), std::string::npos);
  EXPECT_FALSE(j.read().owner_uid.has_value());
  d.owner_uid = 1234;  // cnnergyd, on behalf of uid 1234
  j.write(d);
  EXPECT_EQ(j.read().owner_uid.value_or(0), 1234u);
  std::string text = test::read_file(j.path());
  text.replace(text.find("1234"), 4, "-5");
  test::write_file(j.path(), text);
  EXPECT_THROW(j.read(), DataError);
}

TEST(Journal, CorruptFilesAreDataErrors) {
  test::TempDir dir;
  const std::string path = dir.file("journal.json");
  Journal j(path);
  const std::string base = R"({"version":1,"pid":1,"host":"h","created_unix_s":0,"entries":[)";
  for (const std::string& text :
       {std::string("{not json"), std::string(""), std::string("[]"),
        std::string(R"({"version":2})"),
        base + R"({"uuid":"","index":0,"knob":"power_limit","original_power_limit_mw":1}]})",
        base + R"({"uuid":"GPU-1","index":0,"knob":"turbo"}]})",
        base + R"({"uuid":"GPU-1","index":0,"knob":"power_limit","original_power_limit_mw":-5}]})",
        base + R"({"uuid":"GPU-1","index":0,"knob":"power_limit"}]})", base + "]"}) {
    test::write_file(path, text);
    try {
      (void)j.read();
      ADD_FAILURE() << "accepted: " << text;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Journal(dir.file("missing.json")).read(), DataError);
}

TEST(Journal, DefaultPathAndWriterLiveness) {
  test::ScopedEnv env;
  env.set("CNNERGY_JOURNAL", "/some/where/j.json");
  EXPECT_EQ(Journal::default_path(), "/some/where/j.json");
  env.set("CNNERGY_JOURNAL", std::nullopt);
  env.set("XDG_CACHE_HOME", std::nullopt);
  env.set("HOME", "/home/someone");
  EXPECT_EQ(Journal::default_path(), "/home/someone/.cache/cnnergy/knob-journal.json");

  JournalData d = Journal::for_this_process();
  EXPECT_TRUE(Journal::writer_alive(d));
  d.pid = test::dead_pid();
  EXPECT_FALSE(Journal::writer_alive(d));
  d = Journal::for_this_process();
  d.host = "some-other-host";
  EXPECT_FALSE(Journal::writer_alive(d));
  d = Journal::for_this_process();
  d.boot_id = "an-earlier-boot";
  EXPECT_FALSE(Journal::writer_alive(d));
}

TEST(Knobs, NearestClock) {
  EXPECT_EQ(nearest_clock({1980, 1965, 1005, 990}, 1001), 1005u);
  EXPECT_EQ(nearest_clock({1980, 1005, 990}, 997), 990u);     // 7 MHz below beats 8 above
  EXPECT_EQ(nearest_clock({1980, 1010, 1000}, 1005), 1000u);  // exact tie: lower
  EXPECT_EQ(nearest_clock({1980}, 10), 1980u);
  EXPECT_THROW(nearest_clock({}, 10), InternalError);
}
