// EnergyProbe over NVML: a sampler thread plus energy-meter windows (telemetry), synchronised with
// the backend's device work. open_energy_probe() returns null (and says so once) where there is no
// driver, so every command still measures time.
#pragma once

#include <memory>
#include <vector>

#include "backend/ops.hpp"
#include "measure/energy_probe.hpp"

namespace cnnergy {

// Meters the GPU(s) the backend runs on: the NVML device with the backend's PCI bus id when known,
// otherwise NVML index = CUDA index when CUDA_VISIBLE_DEVICES is unset, otherwise every GPU.
// CPU backends are metered through RAPL where readable (no GPU energy). Returns null when nothing
// can be metered.
std::unique_ptr<EnergyProbe> open_energy_probe(Backend& backend);

}  // namespace cnnergy
