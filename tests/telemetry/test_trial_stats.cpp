// Window telemetry statistics: running figures and their merge, the JSON round trip the results
// store keeps, /proc/stat parsing, RAPL DRAM subzones on a fake powercap tree, the fake NVML's GPU
// profiles (H100-like and A100-like differ in name, power range and clocks), and a recorder over a
// real sampler on the fake device seeing a busy window as busy and an idle one as idle.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "core/errors.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/rapl.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/trial_stats.hpp"
#include "telemetry_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;

TEST(TrialStats, RunningStatMergesLikeOneStream) {
  RunningStat a, b, all;
  for (double v : {3.0, 9.0, 4.0}) a.add(v), all.add(v);
  for (double v : {1.0, 12.0}) b.add(v), all.add(v);
  a.merge(b);
  EXPECT_EQ(a.n, all.n);
  EXPECT_DOUBLE_EQ(a.mean(), 29.0 / 5);
  EXPECT_EQ(a.min, 1.0);
  EXPECT_EQ(a.max, 12.0);
  const RunningStat back = RunningStat::from_json(a.to_json());
  EXPECT_EQ(back.n, 5u);
  EXPECT_DOUBLE_EQ(back.mean(), a.mean());
  EXPECT_TRUE(RunningStat{}.to_json().is_null());
}

TEST(TrialStats, GpuWindowCountsReasonsAndMergesThroughJson) {
  GpuWindowStats w;
  w.nvml_index = 3;
  for (int i = 0; i < 4; ++i) {
    GpuSample g;
    g.t_ns = i * 100'000'000LL;
    g.power_mw = 300'000 + 100'000 * static_cast<std::uint32_t>(i);
    g.utilization = Utilization{static_cast<std::uint32_t>(25 * i), 10};
    g.temperature_c = 50 + static_cast<std::uint32_t>(i);
    g.sm_mhz = 1980 - 100 * static_cast<std::uint32_t>(i);
    g.mem_mhz = 2619;
    g.memory_used_bytes = (1ull << 30) * static_cast<std::uint64_t>(i + 1);
    g.clock_event_reasons = i < 3 ? 0x4ull : (0x4ull | 0x1000ull);  // power cap always; one unknown bit
    g.nvlink = LinkCounters{1000ull * static_cast<std::uint64_t>(i), 500ull * static_cast<std::uint64_t>(i)};
    w.add(g);
  }
  EXPECT_EQ(w.samples, 4u);
  EXPECT_DOUBLE_EQ(w.power_w.mean(), 450.0);
  EXPECT_EQ(w.power_w.min, 300.0);
  EXPECT_EQ(*w.memory_used_peak_mib, 4096.0);
  const Json j = w.to_json();
  EXPECT_DOUBLE_EQ(j["throttle_fraction"]["sw_power_cap"].as_number(), 1.0);
  EXPECT_DOUBLE_EQ(j["throttle_fraction"]["other"].as_number(), 0.25);
  EXPECT_DOUBLE_EQ(j["throttle_fraction"]["gpu_idle"].as_number(), 0.0);
  // 3000 KiB over 0.3 s = 10240 kB/s = 10.24 MB/s.
  EXPECT_NEAR(j["nvlink_tx_mb_s"].as_number(), 10.24, 1e-9);
  EXPECT_EQ(j["pcie_tx_mb_s"].as_string(), "unavailable");

  // Two windows merged through their JSON: counts add, means weigh by samples.
  WindowTelemetry a, b;
  a.elapsed_ms = 400, b.elapsed_ms = 400;
  a.gpus.push_back(w), b.gpus.push_back(w);
  a.cpu.utilization_pct = 20, a.cpu.seconds = 1;
  b.cpu.utilization_pct = 60, b.cpu.seconds = 3;
  const std::string merged = merge_window_telemetry({a.to_json().dump(), "", b.to_json().dump()}, 77.5);
  const WindowTelemetry m = WindowTelemetry::from_json(Json::parse(merged));
  ASSERT_EQ(m.gpus.size(), 1u);
  EXPECT_EQ(m.gpus[0].samples, 8u);
  EXPECT_EQ(m.gpus[0].reason_counts[2], 8u);
  EXPECT_DOUBLE_EQ(*m.idle_power_w, 77.5);
  EXPECT_DOUBLE_EQ(*m.cpu.utilization_pct, 50.0);
  EXPECT_FALSE(m.cpu.package_energy_j.has_value());
  EXPECT_EQ(Json::parse(merged)["cpu"]["package_energy_j"].as_string(), "unavailable");
  EXPECT_NEAR(Json::parse(merged)["gpus"].as_array()[0]["nvlink_tx_mb_s"].as_number(), 10.24, 1e-9);
  EXPECT_EQ(merge_window_telemetry({"", ""}, 1.0), "");
  EXPECT_THROW(WindowTelemetry::from_json(Json::parse("{\"gpus\": 3}")), DataError);
}

TEST(TrialStats, ProcStatGivesBusyAndTotal) {
  const auto t = parse_proc_stat("cpu  100 5 50 800 45 0 0 0 0 0");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->total, 1000u);
  EXPECT_EQ(t->busy, 155u);  // idle and iowait are not busy
  EXPECT_FALSE(parse_proc_stat("intr 1 2 3").has_value());
  EXPECT_FALSE(parse_proc_stat("cpu 1 2").has_value());
  EXPECT_TRUE(read_cpu_times().has_value());  // Linux always has /proc/stat
}

TEST(TrialStats, RaplDramSubzonesAreMeteredApartFromPackages) {
  test::TempDir dir;
  const std::string root = dir.path();
  auto zone = [&](const std::string& z, const std::string& name, std::uint64_t uj) {
    std::filesystem::create_directories(root + "/" + z);
    test::write_file(root + "/" + z + "/name", name + "\n");
    test::write_file(root + "/" + z + "/energy_uj", std::to_string(uj) + "\n");
    test::write_file(root + "/" + z + "/max_energy_range_uj", "262143328850\n");
  };
  zone("intel-rapl:0", "package-0", 1000);
  zone("intel-rapl:0/intel-rapl:0:0", "core", 10);
  zone("intel-rapl:0/intel-rapl:0:1", "dram", 2000);
  auto rapl = std::make_shared<RaplMeter>(root);
  ASSERT_TRUE(rapl->has_dram());
  EXPECT_EQ(rapl->domains().size(), 1u);
  TelemetryRecorder rec(nullptr, rapl);
  rec.begin();
  test::write_file(root + "/intel-rapl:0/energy_uj", "3001000\n");                 // +3 J
  test::write_file(root + "/intel-rapl:0/intel-rapl:0:1/energy_uj", "502000\n");   // +0.5 J
  const WindowTelemetry w = rec.end();
  EXPECT_NEAR(*w.cpu.package_energy_j, 3.0, 1e-9);
  EXPECT_NEAR(*w.cpu.dram_energy_j, 0.5, 1e-9);
  EXPECT_TRUE(w.gpus.empty());
  EXPECT_FALSE(rec.recent_power_w(1000).has_value());

  RaplMeter none(dir.file("no-such-tree"));
  EXPECT_FALSE(none.has_dram());
  EXPECT_FALSE(none.dram_total_mj().has_value());
}

TEST(TrialStats, FakeProfilesAreDifferentGpus) {
  std::string names[2];
  std::uint32_t max_limit_mw[2] = {}, max_sm[2] = {};
  const char* profiles[2] = {"h100", "a100"};
  for (int i = 0; i < 2; ++i) {
    test::FakeNvmlEnv fake(1);
    fake.env.set("CNNERGY_FAKE_NVML_PROFILE", std::string(profiles[i]));
    auto nvml = Nvml::open().nvml;
    ASSERT_TRUE(nvml);
    names[i] = nvml->device(0).name();
    max_limit_mw[i] = nvml->device(0).power_limits().max_mw.value_or(0);
    max_sm[i] = nvml->device(0).clocks().sm_max_mhz.value_or(0);
    EXPECT_TRUE(nvml->device(0).pcie_throughput().has_value());
    EXPECT_TRUE(nvml->device(0).nvlink_data_kib().has_value());
  }
  EXPECT_NE(names[0].find("H100"), std::string::npos) << names[0];
  EXPECT_NE(names[1].find("A100"), std::string::npos) << names[1];
  EXPECT_EQ(max_limit_mw[0], 700'000u);
  EXPECT_EQ(max_limit_mw[1], 400'000u);
  EXPECT_EQ(max_sm[0], 1980u);
  EXPECT_EQ(max_sm[1], 1410u);
}

TEST(TrialStats, RecorderOverTheFakeDeviceSeesBusyAndIdleWindows) {
  test::FakeNvmlEnv fake(1, 20, 0);
  fake.env.set("CNNERGY_FAKE_NVML_LOAD_FILE", fake.dir.file("load"));
  test::write_file(fake.dir.file("load"), "0\n");
  auto nvml = Nvml::open().nvml;
  ASSERT_TRUE(nvml);
  SamplerOptions so;
  so.sensor_period_ms = 20;
  so.interval_ms = 10;
  so.read_links = true;
  so.links_every = 1;
  auto sampler = std::make_shared<Sampler>(nvml, nullptr, so);
  TelemetryRecorder rec(sampler, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const auto idle = rec.recent_power_w(100);
  ASSERT_TRUE(idle.has_value());
  EXPECT_NEAR(*idle, 75.0, 5.0);  // the default (H200-like) profile idles at 75 W

  rec.begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const WindowTelemetry quiet = rec.end();
  test::write_file(fake.dir.file("load"), "1\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // a sensor tick sees the new load
  rec.begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const WindowTelemetry busy = rec.end();
  ASSERT_EQ(busy.gpus.size(), 1u);
  ASSERT_GT(busy.gpus[0].samples, 5u);
  EXPECT_LT(quiet.gpus[0].utilization_gpu_pct.max, 1.0);
  EXPECT_GT(busy.gpus[0].utilization_gpu_pct.mean(), 90.0);
  EXPECT_GT(busy.gpus[0].power_w.mean(), quiet.gpus[0].power_w.mean() + 100);
  EXPECT_GT(busy.gpus[0].memory_used_peak_mib.value_or(0), 1000.0);
  EXPECT_GT(busy.gpus[0].pcie_rx_mb_s.mean(), 0.0);
  const Json j = busy.to_json();
  EXPECT_GT(j["gpus"].as_array()[0]["nvlink_rx_mb_s"].as_number(), 0.0);
  EXPECT_GT(j["gpus"].as_array()[0]["throttle_fraction"]["sw_power_cap"].as_number(), 0.5);  // 700 W cap at full load
  EXPECT_TRUE(busy.cpu.utilization_pct.has_value());
  test::write_file(fake.dir.file("load"), "0\n");
}
