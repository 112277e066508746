// A results store filled from the simulated device, for the report tests: a power-cap sweep with
// phases and layers, a batch x precision sweep with a failure, an out-of-memory trial and a skip, and
// user-supplied strings that try to inject markup (every one must come out escaped).
#pragma once

#include <cmath>
#include <string>

#include "core/rng.hpp"
#include "tune/plan.hpp"
#include "tune/sim_device.hpp"
#include "tune/store.hpp"

namespace cnnergy::report::testing {

inline const std::string kEvil = "<script>alert('x')</script>";
inline const std::string kEvilImg = "<img src=x onerror=alert(1)>";

// A measurement of the simulated device at `cap_w` with `batch` samples per iteration and noise.
inline tune::TrialMeasurement simulated(Rng& rng, const tune::SimDeviceModel& dev, double cap_w, double batch, bool profile) {
  tune::TrialMeasurement m;
  m.samples_per_iteration = batch;
  m.flops_per_iteration = 2.4e10 * batch;
  m.accuracy = 0.9 - 0.0002 * batch + 0.005 * rng.uniform(-1.f, 1.f);
  const double scale = batch / 128.0;
  for (int r = 0; r < 3; ++r) {
    tune::Repetition rep;
    rep.iterations = 40;
    rep.elapsed_ms = dev.time_at_cap_ms(cap_w) * scale * 40 * (1 + 0.005 * rng.normal(0.f, 1.f));
    rep.energy_mj = {dev.energy_at_cap_mj(cap_w) * scale * 40 * (1 + 0.005 * rng.normal(0.f, 1.f))};
    rep.peak_power_w = dev.power_at_cap_w(cap_w) * 1.08;
    rep.energy_source = "counter";
    m.repetitions.push_back(rep);
  }
  if (profile) {
    const double t = dev.time_at_cap_ms(cap_w) * scale, e = dev.energy_at_cap_mj(cap_w) * scale;
    const double share[] = {0.08, 0.30, 0.55, 0.07};
    const char* names[] = {"load", "forward", "backward", "update"};
    for (int p = 0; p < 4; ++p) m.phases.push_back({names[p], t * share[p], t * share[p] * 0.02, e * share[p], e * share[p] * 0.03});
    const char* types[] = {"conv", "relu", "pool", "conv", "relu", "conv", "relu", "fc", "softmax_loss"};
    for (int l = 0; l < 9; ++l) {
      const double w = (l % 2 == 0 ? 3.0 : 0.5) * (1 + l % 3);
      m.layers.push_back({l, std::string(types[l]) + std::to_string(l) + (l == 7 ? kEvilImg : ""), types[l], w * t / 60,
                          2 * w * t / 60, std::optional<double>(w * e / 50), w * 1e9});
    }
  }
  return m;
}

// Fills `store` with two sweeps; returns the first sweep's id.
inline std::int64_t fill_store(tune::ResultStore& store, Rng& rng) {
  using namespace cnnergy::tune;
  SimDeviceModel dev;
  dev.dynamic_power_w = 700;

  // Sweep 1: power limit 200..700 W, 25 W steps, with phases and layers.
  SweepDefinition d1;
  d1.workload = "model=resnet50 " + kEvil;
  d1.space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "200:700:25", {}));
  d1.reference = d1.space.default_reference({});
  SweepRecord s1{0, d1.key(), "", "cnnergy sweep --model resnet50 --power-limit 200:700:25 # " + kEvil, d1.workload,
                 host_environment(), ""};
  s1.environment.gpu_names = {"NVIDIA H200 " + kEvilImg};
  s1.environment.driver_version = "580.65";
  s1.environment.cudnn_version = "9.19";
  s1.environment.extra["note"] = kEvil;
  const auto id1 = store.add_sweep(s1);
  for (const auto& t : d1.space.trials(d1.reference)) {
    TrialRecord rec{t, TrialStatus::kOk, "", simulated(rng, dev, static_cast<double>(*t.knobs[0].value.number), 128, true), "", ""};
    store.write_trial(id1, rec);
  }

  // Sweep 2: batch x precision x power limit, with a failure, an out-of-memory trial and a skip.
  SweepDefinition d2;
  d2.workload = "command=./train.sh";
  d2.space.set(Knob::kBatch, parse_knob_values(Knob::kBatch, "64,128,256", {}));
  d2.space.set(Knob::kPrecision, parse_knob_values(Knob::kPrecision, "fp32,bf16", {}));
  d2.space.set(Knob::kPowerLimit, parse_knob_values(Knob::kPowerLimit, "300:700:100", {}));
  d2.reference = d2.space.default_reference({});
  const auto id2 = store.add_sweep(SweepRecord{0, d2.key(), "", "cnnergy sweep -- ./train.sh", d2.workload, host_environment(), ""});
  for (const auto& t : d2.space.trials(d2.reference)) {
    const double batch = static_cast<double>(*t.find(Knob::kBatch)->number);
    const double cap = static_cast<double>(*t.find(Knob::kPowerLimit)->number);
    const bool bf16 = t.find(Knob::kPrecision)->text == "bf16";
    TrialRecord rec{t, TrialStatus::kOk, "", {}, "", ""};
    if (batch == 256 && !bf16 && cap == 300) {
      rec.status = TrialStatus::kDoesNotFit;
      rec.error_message = "needs 151 GiB, 139 GiB free";
    } else if (batch == 128 && bf16 && cap == 500) {
      rec.status = TrialStatus::kFailed;
      rec.error_message = "external command exited with code 3: " + kEvil + ",\"quoted\"\nsecond line";
    } else {
      SimDeviceModel dv = dev;
      if (bf16) dv.time_at_fmax_ms *= 0.55;
      rec.measurement = simulated(rng, dv, cap, batch, false);
    }
    store.write_trial(id2, rec);
  }

  // Sweep 3: a knob value that is markup (a foreign or tampered database; the CLI would refuse it).
  KnobSpace space3;
  space3.set(Knob::kConvAlgo, {KnobValue::of_text("winograd"), KnobValue::of_text(kEvil)});
  const auto id3 = store.add_sweep(SweepRecord{0, "sw-evil", "", "x", "conv " + kEvil, host_environment(), kEvil});
  for (const auto& t : space3.trials(space3.default_reference({})))
    store.write_trial(id3, TrialRecord{t, TrialStatus::kOk, "", simulated(rng, dev, 700, 64, false), "", ""});
  return id1;
}

}  // namespace cnnergy::report::testing
