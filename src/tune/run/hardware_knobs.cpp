// Device limits for knob validation, and HardwareKnobs: per-trial power limit and clocks through the
// journaled KnobController.
#include <algorithm>

#include "core/errors.hpp"
#include "telemetry/knobs.hpp"
#include "telemetry/nvml.hpp"
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

DeviceLimits query_device_limits(const telemetry::Nvml* nvml, unsigned gpu) {
  DeviceLimits l;
  if (!nvml) return l;
  l.gpu_count = static_cast<std::int64_t>(nvml->device_count());
  if (gpu >= nvml->device_count()) return l;
  const auto& d = nvml->device(gpu);
  const auto p = d.power_limits();
  if (p.min_mw) l.power_limit_min_w = *p.min_mw / 1000;
  if (p.max_mw) l.power_limit_max_w = *p.max_mw / 1000;
  if (p.default_mw) l.power_limit_default_w = *p.default_mw / 1000;
  const auto mems = d.supported_mem_clocks_mhz();
  for (auto m : mems) l.supported_mem_clocks_mhz.push_back(m);
  if (!mems.empty())
    for (auto c : d.supported_sm_clocks_mhz(mems.front())) l.supported_sm_clocks_mhz.push_back(c);
  std::sort(l.supported_sm_clocks_mhz.begin(), l.supported_sm_clocks_mhz.end());
  std::sort(l.supported_mem_clocks_mhz.begin(), l.supported_mem_clocks_mhz.end());
  return l;
}

HardwareKnobs::HardwareKnobs(std::shared_ptr<const telemetry::Nvml> nvml, std::vector<unsigned> gpus, bool dry_run,
                             bool handle_signals)
    : nvml_(std::move(nvml)), gpus_(std::move(gpus)) {
  if (!nvml_) throw NotSupported("power-limit and clock knobs need NVML (no NVIDIA driver found)");
  telemetry::KnobOptions o;
  o.dry_run = dry_run;
  o.handle_signals = handle_signals;
  controller_ = std::make_unique<telemetry::KnobController>(nvml_, o);
}

HardwareKnobs::HardwareKnobs(std::unique_ptr<telemetry::KnobControl> control, std::vector<unsigned> gpus)
    : gpus_(std::move(gpus)), controller_(std::move(control)) {
  if (!controller_) throw InternalError("HardwareKnobs without a knob control");
}

HardwareKnobs::~HardwareKnobs() = default;  // the controller restores everything

bool HardwareKnobs::touches_hardware(const TrialSpec& trial) {
  for (Knob k : {Knob::kPowerLimit, Knob::kSmClock, Knob::kMemClock})
    if (trial.find(k)) return true;
  return false;
}

void HardwareKnobs::apply(const TrialSpec& trial) {
  // Back to the original settings first, so a knob left at "default" really is the default.
  controller_->restore();
  for (unsigned g : gpus_) {
    if (const auto* v = trial.find(Knob::kPowerLimit); v && v->number)
      controller_->set_power_limit_w(g, static_cast<double>(*v->number));
    if (const auto* v = trial.find(Knob::kSmClock); v && v->number)
      controller_->lock_sm_clocks(g, static_cast<std::uint32_t>(*v->number), static_cast<std::uint32_t>(*v->number));
    if (const auto* v = trial.find(Knob::kMemClock); v && v->number)
      controller_->set_memory_clock(g, static_cast<std::uint32_t>(*v->number));
  }
}

}  // namespace cnnergy::tune
