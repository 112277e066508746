// RAPL on a fake powercap tree: package domains only (no subzones, mmio or psys), wrap-around at
// max_energy_range_uj, and an absent or unreadable tree giving "not available" rather than errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/rng.hpp"
#include "telemetry/rapl.hpp"
#include "telemetry_test_util.hpp"

using namespace cnnergy;
using cnnergy::telemetry::RaplMeter;

namespace {
void make_zone(const std::string& root, const std::string& zone, const std::string& name,
               std::uint64_t energy_uj, std::uint64_t range_uj) {
  std::filesystem::create_directories(root + "/" + zone);
  test::write_file(root + "/" + zone + "/name", name + "\n");
  test::write_file(root + "/" + zone + "/energy_uj", std::to_string(energy_uj) + "\n");
  test::write_file(root + "/" + zone + "/max_energy_range_uj", std::to_string(range_uj) + "\n");
}
}  // namespace

TEST(Rapl, SumsPackagesAndHandlesWrapAround) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  Rng rng(seed);
  test::TempDir dir;
  const std::string root = dir.path();
  const std::uint64_t range0 = 262143328850ull, range1 = 65532610987ull;
  const std::uint64_t near_top =
      range0 - 1000 - rng.next_u32() % 5000;  // package 0 is about to wrap
  const std::uint64_t start1 = rng.next_u32() % 1000000;
  make_zone(root, "intel-rapl:0", "package-0", near_top, range0);
  make_zone(root, "intel-rapl:1", "package-1", start1, range1);
  make_zone(root, "intel-rapl:0:0", "core", 5, range0);          // subzone: part of package-0
  make_zone(root, "intel-rapl-mmio:0", "package-0", 7, range0);  // duplicate of the package
  make_zone(root, "intel-rapl:2", "psys", 9, range0);            // whole SoC: would double count
  std::filesystem::create_directories(root + "/dtpm");

  RaplMeter meter(root);
  ASSERT_TRUE(meter.available());
  ASSERT_EQ(meter.domains().size(), 2u);
  EXPECT_EQ(meter.domains()[0].name, "package-0");
  EXPECT_EQ(meter.total_mj().value(), 0.0);

  const std::uint64_t after_wrap = rng.next_u32() % 100000;
  const std::uint64_t add1 = 1 + rng.next_u32() % 10000000;
  test::write_file(root + "/intel-rapl:0/energy_uj", std::to_string(after_wrap));
  test::write_file(root + "/intel-rapl:1/energy_uj", std::to_string(start1 + add1));
  const double expect_uj = static_cast<double>(range0 - near_top + after_wrap + add1);
  EXPECT_NEAR(meter.total_mj().value(), expect_uj / 1000.0, 1e-6);

  const std::uint64_t more = 1 + rng.next_u32() % 1000;
  test::write_file(root + "/intel-rapl:0/energy_uj", std::to_string(after_wrap + more));
  EXPECT_NEAR(meter.total_mj().value(), (expect_uj + double(more)) / 1000.0, 1e-6);
}

TEST(Rapl, AmdZonesAreRecognised) {
  test::TempDir dir;
  make_zone(dir.path(), "amd-rapl:0", "package-0", 100, 1000000);
  RaplMeter meter(dir.path());
  ASSERT_TRUE(meter.available());
  test::write_file(dir.file("amd-rapl:0/energy_uj"), "2100");
  EXPECT_NEAR(meter.total_mj().value(), 2.0, 1e-9);
}

TEST(Rapl, AbsentOrUnreadableMeansNotAvailable) {
  test::TempDir dir;
  EXPECT_FALSE(RaplMeter(dir.file("does-not-exist")).available());
  EXPECT_FALSE(RaplMeter(dir.file("does-not-exist")).total_mj().has_value());
  // A zone whose counter cannot be read (here: energy_uj is a folder; on a real machine it is
  // usually root-only) is left out, as is one with a malformed range.
  std::filesystem::create_directories(dir.file("intel-rapl:0/energy_uj"));
  test::write_file(dir.file("intel-rapl:0/max_energy_range_uj"), "1000");
  make_zone(dir.path(), "intel-rapl:1", "package-1", 10, 0);
  test::write_file(dir.file("intel-rapl:1/max_energy_range_uj"), "garbage");
  RaplMeter meter(dir.path());
  EXPECT_FALSE(meter.available());
  EXPECT_FALSE(meter.total_mj().has_value());
}
