// The sampler thread against the fake driver: sensor-period detection, interval validation,
// timestamped samples in a bounded ring, statistics, and working without NVML.
#include <gtest/gtest.h>

#include <thread>

#include "core/errors.hpp"
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
}  // namespace

TEST(Sampler, DetectsTheSensorUpdatePeriod) {
  for (double period : {50.0, 100.0}) {
    test::FakeNvmlEnv fake(1, period, 4);
    Sampler s(open_fake(), nullptr);
    EXPECT_TRUE(s.sensor_period_detected());
    EXPECT_NEAR(s.sensor_period_ms(), period, 0.1 * period);
    EXPECT_DOUBLE_EQ(s.interval_ms(), s.sensor_period_ms());  // the default interval
  }
}

TEST(Sampler, RejectsBadIntervals) {
  test::FakeNvmlEnv fake(1);
  auto nvml = open_fake();
  for (double bad : {0.0, -5.0, 0.5, 1e9}) {
    SamplerOptions o;
    o.interval_ms = bad;
    EXPECT_THROW(Sampler(nvml, nullptr, o), InvalidArgument) << bad;
  }
  SamplerOptions o;
  o.sensor_period_ms = 50;
  o.gpus = {5};
  EXPECT_THROW(Sampler(nvml, nullptr, o), InvalidArgument);
  EXPECT_THROW(Sampler(nullptr, nullptr, o), NotSupported);
}

TEST(Sampler, TimestampedSamplesInABoundedRing) {
  test::FakeNvmlEnv fake(2, 20, 1);
  SamplerOptions o;
  o.interval_ms = 5;
  o.sensor_period_ms = 20;
  o.capacity = 16;
  Sampler s(open_fake(), nullptr, o);
  ASSERT_EQ(s.gpu_count(), 2u);
  ASSERT_TRUE(test::wait_until([&] { return s.stats().samples >= 40; }, std::chrono::seconds(10)));
  const auto samples = s.samples();
  ASSERT_EQ(samples.size(), 16u);
  for (std::size_t i = 1; i < samples.size(); ++i) {
    EXPECT_GT(samples[i].t_ns, samples[i - 1].t_ns);
    for (std::size_t g = 0; g < 2; ++g) {
      EXPECT_GT(samples[i].gpus[g].t_ns, samples[i - 1].gpus[g].t_ns);
      EXPECT_GE(samples[i].gpus[g].integrated_mj, samples[i - 1].gpus[g].integrated_mj);
      ASSERT_TRUE(samples[i].gpus[g].power_mw && samples[i].gpus[g].energy_mj &&
                  samples[i].gpus[g].sm_mhz);
      EXPECT_TRUE(samples[i].gpus[g].power_is_instant);
    }
  }
  EXPECT_EQ(s.latest()->t_ns, samples.back().t_ns);
  const auto pts = s.counter_points(0);
  ASSERT_GE(pts.size(), 3u);
  for (std::size_t i = 1; i < pts.size(); ++i) EXPECT_GT(pts[i].energy_mj, pts[i - 1].energy_mj);
  s.stop();
  s.stop();  // idempotent
}

TEST(Sampler, StatisticsReportReadCosts) {
  test::FakeNvmlEnv fake(1, 20, 8);  // an 8 ms energy-counter read
  SamplerOptions o;
  o.interval_ms = 20;
  o.sensor_period_ms = 20;
  Sampler s(open_fake(), nullptr, o);
  ASSERT_TRUE(test::wait_until([&] { return s.stats().samples >= 8; }, std::chrono::seconds(10)));
  const SamplerStats st = s.stats();
  EXPECT_GE(st.counter_reads, 8u);
  EXPECT_GE(st.counter_read_mean_ms, 7.5);
  EXPECT_GE(st.counter_read_max_ms, st.counter_read_mean_ms);
  EXPECT_GT(st.power_reads, 0u);
  EXPECT_LT(st.power_read_mean_us, 5000.0);
  EXPECT_GE(st.round_mean_ms, 7.5);
  EXPECT_EQ(st.interval_ms, 20.0);
  EXPECT_FALSE(st.sensor_period_detected);
}

TEST(Sampler, ListenersSeeEverySample) {
  test::FakeNvmlEnv fake(1, 20, 1);
  SamplerOptions o;
  o.interval_ms = 10;
  o.sensor_period_ms = 20;
  Sampler s(open_fake(), nullptr, o);
  std::atomic<int> seen{0};
  const int token = s.add_listener([&](const Sample& x) {
    EXPECT_EQ(x.gpus.size(), 1u);
    ++seen;
  });
  ASSERT_TRUE(test::wait_until([&] { return seen.load() >= 5; }, std::chrono::seconds(10)));
  s.remove_listener(token);
  const int after = seen.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(seen.load(), after);
}

TEST(Sampler, RunsWithoutNvml) {
  SamplerOptions o;
  o.interval_ms = 5;
  Sampler s(nullptr, nullptr, o);
  EXPECT_EQ(s.gpu_count(), 0u);
  EXPECT_FALSE(s.sensor_period_detected());
  ASSERT_TRUE(test::wait_until([&] { return s.stats().samples >= 3; }, std::chrono::seconds(10)));
  EXPECT_TRUE(s.latest()->gpus.empty());
}
