// Energy-meter windows against the fake driver's ground truth: counter windows, a load step inside
// a window, nested and overlapping windows, short windows, the integrated-power fallback, the
// device-sync hook, CPU energy from a fake RAPL tree, and misuse.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "telemetry/energy_meter.hpp"
#include "telemetry_test_util.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;
using std::chrono::milliseconds;

namespace {
std::shared_ptr<Nvml> open_fake() {
  auto r = Nvml::open();
  if (!r.nvml) throw std::runtime_error("fake NVML did not open: " + r.unavailable_reason);
  return r.nvml;
}

// The window's energy for GPU slot `g` against the simulated truth: within the reported bound.
void expect_matches_truth(const Measurement& m, std::size_t g, const test::FakeTruth& truth,
                          EnergySource source) {
  ASSERT_LT(g, m.gpus.size());
  const GpuEnergy& e = m.gpus[g];
  ASSERT_TRUE(e.energy_mj && e.uncertainty_mj) << m.label;
  EXPECT_EQ(e.source, source) << m.label;
  const double true_mj = truth.energy_mj(e.index, m.end_ns) - truth.energy_mj(e.index, m.begin_ns);
  EXPECT_NEAR(*e.energy_mj, true_mj, *e.uncertainty_mj)
      << m.label << " (truth " << true_mj << " mJ)";
  // The bound is a bound from the sensor granularity, not a shrug: at most ~1.5 sensor periods
  // of the window's average power per boundary.
  const double avg_mw = true_mj / (m.elapsed_ms / 1000.0);
  EXPECT_LT(*e.uncertainty_mj, 3.0 * 1.5 * avg_mw * m.sensor_period_ms / 1000.0) << m.label;
  ASSERT_TRUE(e.average_power_mw);
  EXPECT_NEAR(*e.average_power_mw, *e.energy_mj / (m.elapsed_ms / 1000.0), 1e-6);
}
}  // namespace

TEST(EnergyMeter, CounterWindowsMatchTheTruth) {
  const std::uint64_t seed = default_seed();
  SCOPED_TRACE("CNNERGY_SEED=" + std::to_string(seed));
  Rng rng(seed);
  test::FakeNvmlEnv fake(2, 100, 4);  // realistic sensor: 100 ms updates, 4 ms counter reads
  auto nvml = open_fake();
  test::FakeTruth truth;
  const double load0 = rng.uniform(0.2f, 1.0f), load1 = rng.uniform(0.0f, 1.0f);
  truth.set_load(0, load0);
  truth.set_load(1, load1);
  auto sampler = std::make_shared<Sampler>(nvml, nullptr);
  EnergyMeter meter(sampler);
  const auto id = meter.begin("constant load");
  std::this_thread::sleep_for(milliseconds(1500));
  const Measurement m = meter.end(id);
  SCOPED_TRACE("loads " + std::to_string(load0) + ", " + std::to_string(load1));
  EXPECT_NEAR(m.elapsed_ms, 1500, 300);
  EXPECT_FALSE(m.short_window);
  EXPECT_NEAR(m.sensor_period_ms, 100, 10);
  ASSERT_EQ(m.gpus.size(), 2u);
  for (std::size_t g = 0; g < 2; ++g) {
    expect_matches_truth(m, g, truth, EnergySource::kCounter);
    ASSERT_TRUE(m.gpus[g].peak_power_mw);
    EXPECT_GT(m.gpus[g].samples, 5u);
    EXPECT_NEAR(*m.gpus[g].peak_power_mw / 1000.0, truth.power_w(g), 0.05 * truth.power_w(g));
  }
  EXPECT_NEAR(m.gpu_energy_mj().value(), *m.gpus[0].energy_mj + *m.gpus[1].energy_mj, 1e-6);
  EXPECT_EQ(meter.open_windows(), 0u);
}

TEST(EnergyMeter, LoadStepNestedAndOverlappingWindows) {
  test::FakeNvmlEnv fake(1, 50, 1);
  auto nvml = open_fake();
  test::FakeTruth truth;
  truth.set_load(0, 0.1);
  auto sampler = std::make_shared<Sampler>(nvml, nullptr);
  EnergyMeter meter(sampler);
  const auto outer = meter.begin("outer");
  std::this_thread::sleep_for(milliseconds(300));
  const auto inner = meter.begin("inner");
  std::this_thread::sleep_for(milliseconds(300));
  truth.set_load(0, 1.0);  // a step inside inner and outer
  const auto overlap = meter.begin("overlap");
  std::this_thread::sleep_for(milliseconds(300));
  meter.close(inner);
  std::this_thread::sleep_for(milliseconds(300));
  meter.close(outer);
  std::this_thread::sleep_for(milliseconds(300));
  meter.close(overlap);
  EXPECT_EQ(meter.open_windows(), 3u);
  const Measurement mi = meter.result(inner), mo = meter.result(outer), mv = meter.result(overlap);
  for (const Measurement* m : {&mi, &mo, &mv})
    expect_matches_truth(*m, 0, truth, EnergySource::kCounter);
  EXPECT_GT(*mo.gpus[0].energy_mj, *mi.gpus[0].energy_mj);
  EXPECT_LT(mo.begin_ns, mi.begin_ns);
  EXPECT_GT(mo.end_ns, mi.end_ns);
  EXPECT_GT(*mv.gpus[0].peak_power_mw, 2.0 * 90000);  // the loaded part reaches far above idle
}

TEST(EnergyMeter, ShortWindowsAreFlagged) {
  test::FakeNvmlEnv fake(1, 100, 1);
  auto nvml = open_fake();
  test::FakeTruth truth;
  truth.set_load(0, 0.7);
  auto sampler = std::make_shared<Sampler>(nvml, nullptr);
  EnergyMeter meter(sampler);
  const auto id = meter.begin("short");
  std::this_thread::sleep_for(milliseconds(20));
  const Measurement m = meter.end(id);
  EXPECT_TRUE(m.short_window);
  expect_matches_truth(m, 0, truth, EnergySource::kCounter);
}

TEST(EnergyMeter, IntegratedPowerWhereThereIsNoCounter) {
  test::FakeNvmlEnv fake(1, 50, 1);
  test::ScopedEnv env;
  env.set("CNNERGY_FAKE_NVML_FAIL", "unsupported:nvmlDeviceGetTotalEnergyConsumption");
  auto nvml = open_fake();
  test::FakeTruth truth;
  truth.set_load(0, 0.5);
  SamplerOptions o;
  o.interval_ms = 25;
  auto sampler = std::make_shared<Sampler>(nvml, nullptr, o);
  EXPECT_FALSE(sampler->has_counter(0));
  EXPECT_TRUE(sampler->sensor_period_detected());  // from the power readings
  EnergyMeter meter(sampler);
  const auto id = meter.begin("integrated");
  std::this_thread::sleep_for(milliseconds(400));
  truth.set_load(0, 0.9);
  std::this_thread::sleep_for(milliseconds(400));
  expect_matches_truth(meter.end(id), 0, truth, EnergySource::kIntegratedPower);
}

TEST(EnergyMeter, SyncHookRunsBeforeEachStamp) {
  test::FakeNvmlEnv fake(1, 50, 1);
  auto sampler = std::make_shared<Sampler>(open_fake(), nullptr);
  EnergyMeter meter(sampler);
  int syncs = 0;
  // The hook stands for "wait until the GPU has finished": the window must include that wait.
  const SyncFn sync = [&] {
    ++syncs;
    std::this_thread::sleep_for(milliseconds(60));
  };
  const auto id = meter.begin("synced", sync);
  EXPECT_EQ(syncs, 1);
  const Measurement m = meter.end(id, sync);
  EXPECT_EQ(syncs, 2);
  EXPECT_GE(m.elapsed_ms, 59.0);
  EXPECT_LT(m.elapsed_ms, 1000.0);
}

TEST(EnergyMeter, CallerNeverWaitsForTheSlowCounter) {
  test::FakeNvmlEnv fake(2, 50, 40);  // a 40 ms counter read (10x the real one)
  SamplerOptions o;
  o.sensor_period_ms = 50;
  auto sampler = std::make_shared<Sampler>(open_fake(), nullptr, o);
  EnergyMeter meter(sampler);
  double worst_ms = 0;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto id = meter.begin();
    meter.close(id);
    worst_ms = std::max(
        worst_ms,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(milliseconds(7));
  }
  EXPECT_LT(worst_ms, 20.0);  // begin + close never include a 40 ms read
}

TEST(EnergyMeter, CpuEnergyFromRapl) {
  test::FakeNvmlEnv fake(1, 50, 1);
  test::TempDir sys;
  std::filesystem::create_directories(sys.file("intel-rapl:0"));
  test::write_file(sys.file("intel-rapl:0/name"), "package-0");
  test::write_file(sys.file("intel-rapl:0/max_energy_range_uj"), "1000000000");
  test::write_file(sys.file("intel-rapl:0/energy_uj"), "999000000");
  auto rapl = std::make_shared<RaplMeter>(sys.path());
  auto sampler = std::make_shared<Sampler>(open_fake(), rapl);
  EnergyMeter meter(sampler);
  const auto id = meter.begin("cpu");
  test::write_file(sys.file("intel-rapl:0/energy_uj"), "2500000");  // wrapped: +3.5 J
  const Measurement m = meter.end(id);
  ASSERT_TRUE(m.cpu_energy_mj);
  EXPECT_NEAR(*m.cpu_energy_mj, 3500.0, 1e-6);
}

TEST(EnergyMeter, TimeOnlyWithoutNvmlAndMisuseIsAnError) {
  SamplerOptions o;
  o.interval_ms = 10;
  auto sampler = std::make_shared<Sampler>(nullptr, nullptr, o);
  EnergyMeter meter(sampler);
  const auto id = meter.begin("time only");
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_THROW(meter.result(id), InvalidArgument);  // still open
  const Measurement m = meter.end(id);
  EXPECT_GE(m.elapsed_ms, 29.0);
  EXPECT_TRUE(m.gpus.empty());
  EXPECT_FALSE(m.gpu_energy_mj().has_value());
  EXPECT_FALSE(m.cpu_energy_mj.has_value());
  EXPECT_THROW(meter.close(id), InvalidArgument);  // already collected
  EXPECT_THROW(meter.result(12345), InvalidArgument);
  const auto again = meter.begin();
  meter.close(again);
  EXPECT_THROW(meter.close(again), InvalidArgument);  // closed twice
}
