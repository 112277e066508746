// The energy path of the measurement code against the fake NVML device: windows metered through the
// sampler and the NVML probe while the simulated GPU runs at full load, per-phase energies by
// isolation, and the trainer's per-epoch joules — the plumbing that runs on real GPUs, in CI.
#include <gtest/gtest.h>

#include "data/dataset.hpp"
#include "measure/nvml_probe.hpp"
#include "measure/phase_energy.hpp"
#include "net/zoo/zoo.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/telemetry_test_util.hpp"
#include "train/fixed_batch.hpp"
#include "train/trainer.hpp"

using namespace cnnergy;

TEST(EnergyPlumbing, WindowsPhasesAndEpochsAreMeteredOnTheSimulatedGpu) {
  cnnergy::test::FakeNvmlEnv env(1, 50, 1);
  auto opened = telemetry::Nvml::open();
  ASSERT_TRUE(opened.nvml) << opened.unavailable_reason;
  cnnergy::test::FakeTruth truth;
  truth.set_load(0, 1.0);
  auto sampler = std::make_shared<telemetry::Sampler>(opened.nvml, nullptr, telemetry::SamplerOptions{});
  auto backend = create_backend(BackendOptions{});
  auto graph = build_model("lenet5");
  FixedBatchWorkload work(*graph, *backend, 16);
  Backend* b = backend.get();
  auto probe = make_energy_probe(sampler, [b] { b->synchronize(); });
  ASSERT_TRUE(probe);

  const WindowResult r = measure_windows(*backend, probe.get(), [&] { work.step(); }, WindowSpec{0.6, 3, 3, 1});
  ASSERT_TRUE(r.joules_per_iteration.has_value());
  ASSERT_EQ(r.windows.size(), 3u);
  const double true_w = truth.power_w(0);
  for (const auto& w : r.windows) {
    ASSERT_TRUE(w.energy.has_value());
    ASSERT_EQ(w.energy->per_device_joules.size(), 1u);
    const double watts = w.energy->joules / (w.elapsed_ms / 1e3);
    // Constant simulated load: the window's average power is the device's power, up to the sensor's
    // granularity (the reported uncertainty) and the fake's 1 % noise.
    EXPECT_NEAR(watts, true_w, 0.05 * true_w + w.energy->uncertainty_joules / (w.elapsed_ms / 1e3)) << true_w;
  }

  const auto phases = measure_phase_energy(work.executor(), work.solver(), probe.get(), {}, {}, WindowSpec{1.0, 3, 3, 1});
  ASSERT_TRUE(phases.energy_gap_vs_step.has_value());
  for (std::size_t i = 0; i < 3; ++i) ASSERT_TRUE(phases.phases[i].joules_per_iteration.has_value());
  EXPECT_GT(*phases.phases[0].joules_per_iteration, 0);
  // At constant power the energy closure equals the time closure, up to the sensor granularity the
  // windows report (the sum of the three windows behind the closure: forward+backward, update, step)
  // and a margin for the fake's 1 % power noise.
  const double closure_uncertainty = (phases.forward_backward.uncertainty_joules_per_iteration +
                                      phases.update.uncertainty_joules_per_iteration +
                                      phases.step.uncertainty_joules_per_iteration) /
                                     phases.step.joules_per_iteration->median;
  EXPECT_NEAR(*phases.energy_gap_vs_step, phases.time_gap_vs_step, 0.03 + closure_uncertainty)
      << "reported closure uncertainty " << closure_uncertainty;

  TrainConfig tc;
  tc.batch_size = 16;
  tc.epochs = 1;
  tc.max_iterations_per_epoch = 30;
  const auto rep = train(*graph, *backend, data::open_dataset("synthetic:1x28x28:classes=10:size=512:test_size=64"), tc,
                         probe.get(), {});
  ASSERT_TRUE(rep.total_joules.has_value());
  ASSERT_TRUE(rep.epochs.front().joules.has_value());
  // An epoch of 30 small CPU iterations lasts a fraction of a second: each end of its window is known
  // to about one sensor period (50 ms here) of full power, which bounds the average's error.
  const double seconds = rep.epochs.front().seconds;
  EXPECT_NEAR(rep.epochs.front().average_watts, true_w, 0.05 * true_w + 2 * 0.05 * true_w / seconds) << seconds;
}
