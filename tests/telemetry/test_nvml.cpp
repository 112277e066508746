// NVML loading and readings against the fake driver: identity, sensors, throttling under load,
// unsupported readings as empty optionals, an old driver without the versioned symbols, a lost
// GPU, no driver at all, and paths that are not NVML.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <set>
#include <thread>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/nvml_api.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;

namespace {
std::shared_ptr<Nvml> open_fake() {
  auto r = Nvml::open();
  if (!r.nvml) throw std::runtime_error("fake NVML did not open: " + r.unavailable_reason);
  return r.nvml;
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST(Nvml, IdentityAndReadings) {
  test::FakeNvmlEnv fake(3);
  auto nvml = open_fake();
  ASSERT_EQ(nvml->device_count(), 3u);
  EXPECT_FALSE(nvml->driver_version().empty());
  EXPECT_EQ(nvml->library_path(), test::fake_nvml_path());
  std::set<std::string> uuids;
  for (const auto& d : nvml->devices()) {
    EXPECT_FALSE(d.lost());
    EXPECT_TRUE(contains(d.name(), "H200"));
    EXPECT_TRUE(d.uuid().rfind("GPU-", 0) == 0) << d.uuid();
    uuids.insert(d.uuid());
    EXPECT_TRUE(contains(d.pci_bus_id(), ":00.0")) << d.pci_bus_id();
    EXPECT_EQ(nvml->find_by_uuid(d.uuid()), &d);
    const GpuSnapshot s = d.snapshot();
    ASSERT_TRUE(s.energy_mj && s.power_mw && s.power_instant_mw && s.power_average_mw);
    EXPECT_NEAR(*s.power_instant_mw / 1000.0, 75.0, 2.0);  // idle
    EXPECT_EQ(s.limits.min_mw, 200000u);
    EXPECT_EQ(s.limits.max_mw, 700000u);
    EXPECT_EQ(s.limits.default_mw, 700000u);
    EXPECT_EQ(s.limits.current_mw, 700000u);
    EXPECT_EQ(s.limits.enforced_mw, 700000u);
    EXPECT_EQ(s.clocks.sm_max_mhz, 1980u);
    EXPECT_EQ(s.clocks.mem_max_mhz, 2619u);
    ASSERT_TRUE(s.utilization && s.memory && s.temperature_c && s.clock_event_reasons);
    EXPECT_EQ(s.utilization->gpu_percent, 0u);
    EXPECT_GT(s.memory->total_bytes, s.memory->used_bytes);
    EXPECT_EQ(decode_clock_event_reasons(*s.clock_event_reasons),
              std::vector<std::string>{"gpu_idle"});
    const auto mem = d.supported_mem_clocks_mhz();
    ASSERT_EQ(mem, std::vector<std::uint32_t>{2619});
    const auto sm = d.supported_sm_clocks_mhz(2619);
    ASSERT_EQ(sm.size(), 110u);
    EXPECT_EQ(sm.front(), 1980u);  // NVML lists from the top
    EXPECT_EQ(sm.back(), 345u);
    EXPECT_TRUE(d.supported_sm_clocks_mhz(1234).empty());  // not a memory clock
    const GpuCapabilities c = d.capabilities();
    EXPECT_TRUE(c.energy_counter && c.power_instant && c.power_average && c.power_limit_range);
    EXPECT_EQ(c.supported_sm_clocks, 110u);
  }
  EXPECT_EQ(uuids.size(), 3u);
  EXPECT_EQ(nvml->find_by_uuid("GPU-nope"), nullptr);
  EXPECT_THROW(nvml->device(3), InvalidArgument);
}

TEST(Nvml, LoadRaisesPowerAndThePowerCapPullsTheClockDown) {
  test::FakeNvmlEnv fake(1, 20);
  auto nvml = open_fake();
  test::FakeTruth truth;
  const GpuDevice& d = nvml->device(0);
  auto settle = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  };  // 3 sensor updates
  truth.set_load(0, 0.3);
  settle();
  EXPECT_EQ(d.sm_clock_mhz(), 1980u);  // light load: full clock, no cap
  EXPECT_TRUE(decode_clock_event_reasons(d.clock_event_reasons().value()).empty());
  const double light_w = d.power_instant_mw().value() / 1000.0;

  truth.set_load(0, 1.0);
  settle();
  const auto full_clock = d.sm_clock_mhz().value();
  const double full_w = d.power_instant_mw().value() / 1000.0;
  EXPECT_LT(full_clock, 1980u);
  EXPECT_GT(full_clock, 1200u);
  EXPECT_GT(full_w, light_w + 100);
  EXPECT_LE(full_w, 700 * 1.02);  // at the limit (within the sensor noise)
  EXPECT_EQ(decode_clock_event_reasons(d.clock_event_reasons().value()),
            std::vector<std::string>{"sw_power_cap"});
  EXPECT_EQ(d.utilization()->gpu_percent, 100u);

  d.set_power_limit_mw(300000);  // a lower cap: lower clock and power
  settle();
  EXPECT_LT(d.sm_clock_mhz().value(), full_clock);
  EXPECT_LE(d.power_instant_mw().value() / 1000.0, 300 * 1.02);
  EXPECT_EQ(d.power_limits().current_mw, 300000u);
  d.set_power_limit_mw(700000);
}

TEST(Nvml, LoadFileDrivesTheSimulatedUtilisation) {
  test::FakeNvmlEnv fake(2, 20);
  test::ScopedEnv env;
  const std::string load = fake.dir.file("load.txt");
  test::write_file(load, "0.9, 0.2\n");
  env.set("CNNERGY_FAKE_NVML_LOAD_FILE", load);
  auto nvml = open_fake();
  EXPECT_EQ(nvml->device(0).utilization()->gpu_percent, 90u);
  EXPECT_EQ(nvml->device(1).utilization()->gpu_percent, 20u);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a new mtime, then the next update
  test::write_file(load, "0.1");
  EXPECT_TRUE(test::wait_until([&] { return nvml->device(0).utilization()->gpu_percent == 10u; },
                               std::chrono::seconds(5)));
  EXPECT_EQ(nvml->device(1).utilization()->gpu_percent, 10u);  // one value: every GPU
}

// File times are coarse (one kernel tick): a job that marks the GPU busy in the same tick as the
// previous job marked it idle must still be seen, or it runs its whole length at the idle clock.
TEST(Nvml, ALoadWrittenWithAnUnchangedMtimeIsStillSeen) {
  test::FakeNvmlEnv fake(1, 20);
  test::ScopedEnv env;
  const std::string load = fake.dir.file("load.txt");
  test::write_file(load, "0\n");
  env.set("CNNERGY_FAKE_NVML_LOAD_FILE", load);
  auto nvml = open_fake();
  EXPECT_EQ(nvml->device(0).utilization()->gpu_percent, 0u);
  struct stat before {};
  ASSERT_EQ(::stat(load.c_str(), &before), 0);
  test::write_file(load, "1\n");
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, load.c_str(), times, 0), 0);  // the same mtime as the idle content
  EXPECT_TRUE(test::wait_until([&] { return nvml->device(0).utilization()->gpu_percent == 100u; },
                               std::chrono::seconds(5)));
}

TEST(Nvml, UnsupportedReadingsAreEmptyNotErrors) {
  test::FakeNvmlEnv fake(1);
  test::ScopedEnv env;
  env.set(
      "CNNERGY_FAKE_NVML_FAIL",
      "unsupported:nvmlDeviceGetTotalEnergyConsumption,unsupported:nvmlDeviceGetTemperature,"
      "unsupported:nvmlDeviceGetFieldValues,unsupported:nvmlDeviceGetCurrentClocksEventReasons");
  auto nvml = open_fake();
  const GpuDevice& d = nvml->device(0);
  EXPECT_FALSE(d.energy_mj().has_value());
  EXPECT_FALSE(d.temperature_c().has_value());
  EXPECT_FALSE(d.power_instant_mw().has_value());
  EXPECT_FALSE(d.power_average_mw().has_value());
  EXPECT_FALSE(d.clock_event_reasons().has_value());  // the newer call is resolved first and fails
  EXPECT_TRUE(d.power_mw().has_value());
  EXPECT_TRUE(d.utilization().has_value());
  const auto c = d.capabilities();
  EXPECT_FALSE(c.energy_counter);
  EXPECT_TRUE(c.power_usage);
}

TEST(Nvml, OldDriverWithoutVersionedSymbols) {
  test::FakeNvmlEnv fake(2);
  test::ScopedEnv env;
  env.set("CNNERGY_NVML_LIBRARY", test::fake_nvml_minimal_path());
  auto nvml = open_fake();  // nvmlInit, nvmlDeviceGetCount, ... without _v2
  ASSERT_EQ(nvml->device_count(), 2u);
  const GpuDevice& d = nvml->device(1);
  EXPECT_FALSE(d.pci_bus_id().empty());
  EXPECT_FALSE(d.energy_mj().has_value());         // no nvmlDeviceGetTotalEnergyConsumption
  EXPECT_FALSE(d.power_instant_mw().has_value());  // no nvmlDeviceGetFieldValues
  EXPECT_TRUE(d.power_mw().has_value());
  EXPECT_TRUE(d.clock_event_reasons().has_value());  // through ...ClocksThrottleReasons
  EXPECT_FALSE(d.has_mem_locked_clocks());
}

TEST(Nvml, LostGpuIsMarkedNotFatal) {
  test::FakeNvmlEnv fake(3);
  test::ScopedEnv env;
  env.set("CNNERGY_FAKE_NVML_FAIL", "lost:1");
  auto nvml = open_fake();
  ASSERT_EQ(nvml->device_count(), 3u);
  EXPECT_TRUE(nvml->device(1).lost());
  EXPECT_FALSE(nvml->device(1).power_mw().has_value());
  EXPECT_THROW(nvml->device(1).set_power_limit_mw(300000), DeviceError);
  EXPECT_FALSE(nvml->device(2).lost());
  EXPECT_TRUE(nvml->device(2).power_mw().has_value());
  SamplerOptions o;
  o.sensor_period_ms = 50;
  Sampler sampler(nvml, nullptr, o);  // samples the accessible GPUs only
  EXPECT_EQ(sampler.gpu_indices(), (std::vector<unsigned>{0, 2}));
}

TEST(Nvml, NoDriverMeansUnavailableWithAReason) {
  test::FakeNvmlEnv fake(1);
  test::ScopedEnv env;
  env.set("CNNERGY_FAKE_NVML_FAIL", "init:driver_not_loaded");
  auto r = Nvml::open();
  EXPECT_EQ(r.nvml, nullptr);
  EXPECT_TRUE(contains(r.unavailable_reason, "Driver Not Loaded")) << r.unavailable_reason;

  env.set("CNNERGY_NVML_LIBRARY", std::nullopt);
  if (void* real = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    ::dlclose(real);
    GTEST_SKIP() << "a real NVIDIA driver is installed here";
  }
  r = Nvml::open();
  EXPECT_EQ(r.nvml, nullptr);
  EXPECT_TRUE(contains(r.unavailable_reason, "no NVIDIA driver")) << r.unavailable_reason;
}

TEST(Nvml, PathsThatAreNotNvmlAreClearErrors) {
  test::ScopedEnv env;
  for (const std::string& path : {std::string("/bin/ls"), std::string(CNNERGY_TEST_NOT_NVML),
                                  std::string("/nonexistent/libnvidia-ml.so.1")}) {
    env.set("CNNERGY_NVML_LIBRARY", path);
    try {
      (void)Nvml::open();
      ADD_FAILURE() << "accepted " << path;
    } catch (const InvalidArgument& e) {
      EXPECT_TRUE(contains(e.what(), path)) << e.what();
      EXPECT_TRUE(contains(e.what(), "CNNERGY_NVML_LIBRARY")) << e.what();
    }
  }
  env.set("CNNERGY_NVML_LIBRARY", std::nullopt);
  NvmlOptions o;
  o.library_path = CNNERGY_TEST_NOT_NVML;
  try {
    (void)Nvml::open(o);
    ADD_FAILURE() << "accepted a library without nvmlInit";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "not an NVML library")) << e.what();
  }
}

TEST(Nvml, ClockEventReasonNames) {
  EXPECT_TRUE(decode_clock_event_reasons(0).empty());
  EXPECT_EQ(
      decode_clock_event_reasons(kNvmlClocksEventSwPowerCap | kNvmlClocksEventHwThermalSlowdown),
      (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
  const auto odd = decode_clock_event_reasons(0x1000ull | kNvmlClocksEventGpuIdle);
  ASSERT_EQ(odd.size(), 2u);
  EXPECT_EQ(odd[1], "other(0x1000)");
}
