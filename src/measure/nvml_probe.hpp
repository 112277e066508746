// EnergyProbe over NVML: a sampler thread plus energy-meter windows (telemetry), synchronised with
// the backend's device work. open_energy_probe() returns null (and says so once) where there is no
// driver, so every command still measures time.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.hpp"
#include "measure/energy_probe.hpp"

namespace cnnergy {
namespace telemetry {
class Sampler;
class RaplMeter;
}

// Meters the GPU(s) the backend runs on: the NVML device with the backend's PCI bus id when known,
// otherwise NVML index = CUDA index when CUDA_VISIBLE_DEVICES is unset, otherwise every GPU.
// CPU backends are metered through RAPL where readable (no GPU energy). Returns null when nothing
// can be metered.
std::unique_ptr<EnergyProbe> open_energy_probe(Backend& backend);

// A probe over an existing sampler (a sweep keeps one sampler for all its trials); `sync` makes the
// device finish its queued work (empty for work that is not on a device, e.g. an external command).
// `rapl` (optional) adds the CPU's package/DRAM energy to each window's telemetry statistics.
std::unique_ptr<EnergyProbe> make_energy_probe(std::shared_ptr<telemetry::Sampler> sampler,
                                               std::function<void()> sync,
                                               std::shared_ptr<telemetry::RaplMeter> rapl = nullptr);

// The CPU as the metered device (`sweep --device cpu`): energy = RAPL package (+ DRAM where the
// kernel offers it) over each window; without readable RAPL, end() gives no energy and the window
// statistics say "unavailable" (utilisation from /proc/stat is still there).
std::unique_ptr<EnergyProbe> make_cpu_energy_probe(std::shared_ptr<telemetry::RaplMeter> rapl);

}  // namespace cnnergy
