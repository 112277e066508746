// The CPU as the metered device (`sweep --device cpu`): a real CPU training window measured through
// the RAPL probe over a fake powercap tree (package + DRAM), with its window statistics; and without
// readable RAPL, no energy but the CPU utilisation still kept and the energies said "unavailable".
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "core/json.hpp"
#include "measure/nvml_probe.hpp"
#include "measure/window.hpp"
#include "net/zoo/zoo.hpp"
#include "telemetry/rapl.hpp"
#include "telemetry/telemetry_test_util.hpp"
#include "train/fixed_batch.hpp"

using namespace cnnergy;

TEST(CpuProbe, RaplMetersACpuWindowAndKeepsItsStatistics) {
  test::TempDir dir;
  const std::string root = dir.path();
  std::filesystem::create_directories(root + "/intel-rapl:0/intel-rapl:0:1");
  test::write_file(root + "/intel-rapl:0/name", "package-0\n");
  test::write_file(root + "/intel-rapl:0/energy_uj", "1000000\n");
  test::write_file(root + "/intel-rapl:0/max_energy_range_uj", "262143328850\n");
  test::write_file(root + "/intel-rapl:0/intel-rapl:0:1/name", "dram\n");
  test::write_file(root + "/intel-rapl:0/intel-rapl:0:1/energy_uj", "5000\n");
  test::write_file(root + "/intel-rapl:0/intel-rapl:0:1/max_energy_range_uj", "262143328850\n");
  auto probe = make_cpu_energy_probe(std::make_shared<telemetry::RaplMeter>(root));
  EXPECT_EQ(probe->source(), "rapl package+dram");

  auto backend = create_backend(BackendOptions{});
  auto graph = build_model("lenet5");
  FixedBatchWorkload work(*graph, *backend, 4);
  // At least 100 ms: /proc/stat counts in jiffies (10 ms), and a window in which no jiffy passed has
  // no utilisation to report (it is then left out, not invented).
  probe->begin();
  const auto start = std::chrono::steady_clock::now();
  do work.step();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(100));
  test::write_file(root + "/intel-rapl:0/energy_uj", "13000000\n");           // +12 J
  test::write_file(root + "/intel-rapl:0/intel-rapl:0:1/energy_uj", "2005000\n");  // +2 J
  const auto r = probe->end();
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(r->joules, 14.0, 1e-9);
  ASSERT_EQ(r->per_device_joules.size(), 1u);
  const Json stats = Json::parse(probe->window_telemetry_json());
  EXPECT_NEAR(stats["cpu"]["package_energy_j"].as_number(), 12.0, 1e-9);
  EXPECT_NEAR(stats["cpu"]["dram_energy_j"].as_number(), 2.0, 1e-9);
  EXPECT_TRUE(stats["cpu"]["utilization_pct"].is_number());
  EXPECT_TRUE(stats["gpus"].as_array().empty());

  // No readable RAPL: time and utilisation only.
  auto bare = make_cpu_energy_probe(std::make_shared<telemetry::RaplMeter>(dir.file("none")));
  WindowSpec ws{0.1, 2, 2, 1};  // >= 100 ms each, as above
  const WindowResult wr = measure_windows(*backend, bare.get(), [&] { work.step(); }, ws);
  ASSERT_EQ(wr.windows.size(), 2u);
  for (const auto& w : wr.windows) {
    EXPECT_FALSE(w.energy.has_value());
    const Json j = Json::parse(w.telemetry_json);
    EXPECT_EQ(j["cpu"]["package_energy_j"].as_string(), "unavailable");
    EXPECT_TRUE(j["cpu"]["utilization_pct"].is_number());
  }
}
