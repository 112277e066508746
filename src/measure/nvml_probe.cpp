// NvmlEnergyProbe: one EnergyMeter window per begin()/end(), GPU energy summed over the metered GPUs.
#include "measure/nvml_probe.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/log.hpp"
#include "telemetry/energy_meter.hpp"
#include "telemetry/nvml.hpp"
#include "telemetry/rapl.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/trial_stats.hpp"

namespace cnnergy {

namespace {

class NvmlEnergyProbe final : public EnergyProbe {
 public:
  NvmlEnergyProbe(std::function<void()> sync, std::shared_ptr<telemetry::Sampler> sampler,
                  std::shared_ptr<telemetry::RaplMeter> rapl)
      : sync_(std::move(sync)), sampler_(std::move(sampler)), meter_(sampler_), recorder_(sampler_, std::move(rapl)) {}

  void begin() override {
    id_ = meter_.begin("window", sync_);
    recorder_.begin();
  }

  std::optional<ProbeReading> end() override {
    // The statistics window closes first: the meter's end waits for the sampler to pass the window,
    // and samples of that wait (the device already idle) are not the window's.
    if (sync_) sync_();
    telemetry_ = recorder_.end().to_json().dump();
    const auto m = meter_.end(id_, sync_);
    const auto e = m.gpu_energy_mj();
    if (!e) return std::nullopt;
    ProbeReading r;
    r.joules = *e / 1e3;
    r.uncertainty_joules = m.gpu_uncertainty_mj().value_or(0) / 1e3;
    r.average_watts = m.elapsed_ms > 0 ? r.joules / (m.elapsed_ms / 1e3) : 0;
    for (const auto& g : m.gpus) {
      r.peak_watts += g.peak_power_mw.value_or(0) / 1e3;
      r.per_device_joules.push_back(g.energy_mj.value_or(0) / 1e3);
    }
    r.short_window = m.short_window;
    if (!m.gpus.empty()) source_ = std::string("nvml ") + telemetry::to_string(m.gpus.front().source);
    return r;
  }

  std::string source() const override { return source_; }
  double sensor_period_ms() const override { return sampler_->sensor_period_ms(); }
  std::string window_telemetry_json() const override { return telemetry_; }

  // Three sensor periods (at least 300 ms) of quiet; the first period is skipped because a power
  // reading lags the true power by up to one period.
  std::optional<double> measure_idle_power_w() override {
    if (sync_) sync_();
    const double period_ms = sampler_->sensor_period_ms();
    const double wait_ms = std::max(300.0, 3 * period_ms);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait_ms));
    return recorder_.recent_power_w(wait_ms - period_ms);
  }

 private:
  std::function<void()> sync_;
  std::shared_ptr<telemetry::Sampler> sampler_;
  telemetry::EnergyMeter meter_;
  telemetry::TelemetryRecorder recorder_;
  std::string telemetry_;
  telemetry::EnergyMeter::WindowId id_ = 0;
  std::string source_ = "nvml";
};

// "0000:3B:00.0" (CUDA) and "00000000:3b:00.0" (NVML) name the same device: compare bus:device.function.
std::string bus_device_function(const std::string& pci) {
  const auto colon = pci.find(':');
  std::string s = colon == std::string::npos ? pci : pci.substr(colon + 1);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::unique_ptr<EnergyProbe> open_energy_probe(Backend& backend) {
  if (!backend.device().is_cuda()) return nullptr;
  auto opened = telemetry::Nvml::open();
  if (!opened.nvml) {
    log_warn("no GPU energy: " + opened.unavailable_reason + " (measuring time only)");
    return nullptr;
  }
  telemetry::SamplerOptions so;
  const std::string bus = bus_device_function(backend.pci_bus_id());
  for (std::size_t i = 0; i < opened.nvml->device_count() && !bus.empty(); ++i)
    if (bus_device_function(opened.nvml->device(i).pci_bus_id()) == bus) so.gpus = {static_cast<unsigned>(i)};
  const unsigned cuda_index = static_cast<unsigned>(backend.device().index);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (so.gpus.empty() && (!visible || !*visible) && cuda_index < opened.nvml->device_count()) so.gpus = {cuda_index};
  auto sampler = std::make_shared<telemetry::Sampler>(opened.nvml, nullptr, so);
  if (sampler->gpu_count() == 0) return nullptr;
  Backend* b = &backend;
  return std::make_unique<NvmlEnergyProbe>([b] { b->synchronize(); }, std::move(sampler), nullptr);
}

std::unique_ptr<EnergyProbe> make_energy_probe(std::shared_ptr<telemetry::Sampler> sampler, std::function<void()> sync,
                                               std::shared_ptr<telemetry::RaplMeter> rapl) {
  if (!sampler || sampler->gpu_count() == 0) return nullptr;
  return std::make_unique<NvmlEnergyProbe>(std::move(sync), std::move(sampler), std::move(rapl));
}

namespace {

class CpuEnergyProbe final : public EnergyProbe {
 public:
  explicit CpuEnergyProbe(std::shared_ptr<telemetry::RaplMeter> rapl) : rapl_(rapl), recorder_(nullptr, rapl) {}

  void begin() override { recorder_.begin(); }

  std::optional<ProbeReading> end() override {
    const telemetry::WindowTelemetry w = recorder_.end();
    telemetry_ = w.to_json().dump();
    if (!w.cpu.package_energy_j) return std::nullopt;
    ProbeReading r;
    r.joules = *w.cpu.package_energy_j + w.cpu.dram_energy_j.value_or(0);
    r.per_device_joules = {r.joules};
    r.average_watts = w.elapsed_ms > 0 ? r.joules / (w.elapsed_ms / 1e3) : 0;
    r.peak_watts = r.average_watts;  // RAPL gives energy only: the window's mean is all we know
    r.uncertainty_joules = 1e-6 * static_cast<double>(rapl_->domains().size());  // 1 uJ counters
    return r;
  }

  std::string source() const override { return rapl_->has_dram() ? "rapl package+dram" : "rapl package"; }
  double sensor_period_ms() const override { return 1.0; }
  std::string window_telemetry_json() const override { return telemetry_; }

 private:
  std::shared_ptr<telemetry::RaplMeter> rapl_;
  telemetry::TelemetryRecorder recorder_;
  std::string telemetry_;
};

}  // namespace

std::unique_ptr<EnergyProbe> make_cpu_energy_probe(std::shared_ptr<telemetry::RaplMeter> rapl) {
  if (!rapl) rapl = std::make_shared<telemetry::RaplMeter>();
  if (!rapl->available()) log_info("CPU energy unavailable: no readable RAPL counters (measuring time and utilisation)");
  return std::make_unique<CpuEnergyProbe>(std::move(rapl));
}

}  // namespace cnnergy
