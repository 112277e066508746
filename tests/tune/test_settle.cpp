// The settling rule on synthetic readings (a heating GPU is not settled, a steady noisy one is, a
// window not yet covered is still watched), and the wait on the fake NVML device with its thermal
// model: a GPU put under load heats with the model's time constant, leaks more and clocks lower at
// its power cap, and the wait ends once the temperature is near its steady state.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "telemetry/nvml.hpp"
#include "telemetry/settle.hpp"
#include "telemetry/sampler.hpp"

using namespace cnnergy;
using namespace cnnergy::telemetry;

namespace {

std::vector<SettleSample> series(double t0, double t1, double dt, const std::function<SettleSample(double)>& f) {
  std::vector<SettleSample> out;
  for (double t = t0; t <= t1 + 1e-9; t += dt) out.push_back(f(t));
  return out;
}

}  // namespace

TEST(SettleRule, HeatingIsNotSettledSteadyNoiseIsAndAShortWindowIsWatched) {
  const SettleRule rule;  // 1 s window, 0.1 C/s, 1 %/s
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0, 0.03);
  // Heating towards 70 C with a 20 s time constant, 5 s after the load started: about 1.6 C/s.
  const auto heating = series(0, 5, 0.1, [&](double t) {
    return SettleSample{t, std::floor(70 - 40 * std::exp(-t / 20)), 500 * (1 + noise(rng))};
  });
  auto c = check_settled(heating, rule);
  EXPECT_FALSE(c.settled);
  ASSERT_TRUE(c.temp_slope_c_per_s);
  EXPECT_GT(*c.temp_slope_c_per_s, 0.5);
  EXPECT_NE(c.reason.find("temperature"), std::string::npos) << c.reason;
  // Steady: whole degrees, power with 3 % noise per sample (a real GPU under load swings like this).
  const auto steady = series(0, 5, 0.1, [&](double t) { return SettleSample{t, 68.0, 500 * (1 + noise(rng))}; });
  c = check_settled(steady, rule);
  EXPECT_TRUE(c.settled) << c.reason;
  // Power still falling by 5 %/s (a clock coming down): not settled, and the reason says power.
  const auto falling = series(0, 5, 0.1, [&](double t) { return SettleSample{t, 68.0, 500 * (1 - 0.05 * t)}; });
  c = check_settled(falling, rule);
  EXPECT_FALSE(c.settled);
  EXPECT_NE(c.reason.find("power"), std::string::npos) << c.reason;
  // Half a second after the change: the window is not covered yet.
  c = check_settled(series(0, 0.5, 0.1, [](double t) { return SettleSample{t, 60.0, 400.0}; }), rule);
  EXPECT_FALSE(c.settled);
  EXPECT_NE(c.reason.find("watching"), std::string::npos) << c.reason;
  EXPECT_FALSE(check_settled({}, rule).settled);
}

TEST(SettleRule, TheFakeThermalDeviceHeatsUnderLoadAndTheWaitEndsNearItsSteadyState) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cnnergy_settle_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "load") << "0\n";
  ::setenv("CNNERGY_NVML_LIBRARY", CNNERGY_TEST_FAKE_NVML, 1);
  ::setenv("CNNERGY_FAKE_NVML_GPUS", "1", 1);
  ::setenv("CNNERGY_FAKE_NVML_UPDATE_MS", "20", 1);
  ::setenv("CNNERGY_FAKE_NVML_ENERGY_READ_MS", "0", 1);
  ::setenv("CNNERGY_FAKE_NVML_THERMAL", "1.0,0.06,1.5", 1);  // tau 1 s, 0.06 C/W, 1.5 W/C of leakage
  ::setenv("CNNERGY_FAKE_NVML_LOAD_FILE", (dir / "load").c_str(), 1);
  ::setenv("CNNERGY_FAKE_NVML_STATE", (dir / "state").c_str(), 1);
  {
    auto opened = telemetry::Nvml::open();
    ASSERT_TRUE(opened.nvml) << opened.unavailable_reason;
    telemetry::SamplerOptions so;
    so.sensor_period_ms = 20;
    so.interval_ms = 20;
    auto sampler = std::make_shared<telemetry::Sampler>(opened.nvml, nullptr, so);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto idle = sampler->latest();
    ASSERT_TRUE(idle && idle->gpus.at(0).temperature_c);
    EXPECT_LT(*idle->gpus[0].temperature_c, 40u);  // idle: 30 C + 0.06 C/W * 75 W, plus a little leakage
    {
      std::ofstream(dir / "load.tmp") << "1\n";
      std::filesystem::rename(dir / "load.tmp", dir / "load");
    }
    const std::int64_t since = telemetry::steady_now_ns();
    SettleRule rule;
    rule.window_s = 0.5;
    rule.max_wait_s = 20;
    const SettleResult r = wait_until_settled(sampler, since, rule);
    EXPECT_TRUE(r.settled) << r.describe();
    EXPECT_TRUE(r.observed);
    EXPECT_GT(r.waited_s, 1.0) << "it had to heat first: " << r.describe();  // a few time constants
    const auto hot = sampler->samples_from(since);
    ASSERT_GT(hot.size(), 10u);
    const auto& first = hot[std::min<std::size_t>(3, hot.size() - 1)].gpus.at(0);
    const auto& last = hot.back().gpus.at(0);
    ASSERT_TRUE(first.temperature_c && last.temperature_c && first.sm_mhz && last.sm_mhz);
    // At the 700 W cap: 30 + 0.06 * 700 = 72 C in steady state; the wait ends within a few degrees of it.
    EXPECT_GE(*last.temperature_c, 67u) << r.describe();
    EXPECT_LE(*last.temperature_c, 73u);
    EXPECT_LT(*first.temperature_c + 10, *last.temperature_c);
    // Leakage grew with the temperature, so the capped GPU clocks lower hot than cold.
    EXPECT_LT(*last.sm_mhz, *first.sm_mhz);
    EXPECT_NE(r.describe().find("settled in"), std::string::npos) << r.describe();
  }
  std::filesystem::remove_all(dir);
}
