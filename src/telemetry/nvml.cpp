// NVML loader and the reading half of GpuDevice (the control half is nvml_control.cpp). Symbols are
// resolved once at open; versioned entry points come first (nvmlInit_v2, ..._v2, PciInfo_v3) because
// the unversioned ones keep old semantics. Optional symbols may be absent: the reading is then empty.
#include "telemetry/nvml.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "core/errors.hpp"
#include "core/log.hpp"
#include "telemetry/nvml_api.hpp"
#include "telemetry/nvml_library.hpp"

namespace cnnergy::telemetry {

using nvml_detail::dev;

namespace {

std::optional<std::uint32_t> field_to_u32(const nvmlFieldValue_t& v) {
  if (v.nvmlReturn != NVML_SUCCESS) return std::nullopt;
  switch (v.valueType) {
    case NVML_VALUE_TYPE_DOUBLE:
      return static_cast<std::uint32_t>(v.value.dVal);
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      return v.value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      return static_cast<std::uint32_t>(v.value.ulVal);
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      return static_cast<std::uint32_t>(v.value.ullVal);
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      return static_cast<std::uint32_t>(v.value.sllVal);
    case NVML_VALUE_TYPE_SIGNED_INT:
      return static_cast<std::uint32_t>(v.value.siVal);
    case NVML_VALUE_TYPE_UNSIGNED_SHORT:
      return v.value.usVal;
    default:
      return std::nullopt;
  }
}

}  // namespace

// --- GpuDevice ----------------------------------------------------------------------------------

GpuDevice::GpuDevice(std::shared_ptr<const NvmlLibrary> lib, unsigned index, void* handle)
    : lib_(std::move(lib)), index_(index), handle_(handle) {
  if (!handle_) return;
  char buf[kNvmlNameBufferSize] = {};
  if (lib_->name && lib_->name(dev(handle_), buf, sizeof buf) == NVML_SUCCESS) name_ = buf;
  char ubuf[kNvmlUuidBufferSize] = {};
  if (lib_->uuid && lib_->uuid(dev(handle_), ubuf, sizeof ubuf) == NVML_SUCCESS) uuid_ = ubuf;
  nvmlPciInfo_t pci{};
  if (lib_->pci_info && lib_->pci_info(dev(handle_), &pci) == NVML_SUCCESS)
    pci_bus_id_ = pci.busId[0] ? pci.busId : pci.busIdLegacy;
}

std::optional<std::uint64_t> GpuDevice::energy_mj() const {
  unsigned long long v = 0;
  if (handle_ && lib_->total_energy && lib_->total_energy(dev(handle_), &v) == NVML_SUCCESS)
    return v;
  return std::nullopt;
}

std::optional<std::uint32_t> GpuDevice::power_mw() const {
  unsigned v = 0;
  if (handle_ && lib_->power_usage && lib_->power_usage(dev(handle_), &v) == NVML_SUCCESS) return v;
  return std::nullopt;
}

void GpuDevice::power_fields(std::optional<std::uint32_t>& instant_mw,
                             std::optional<std::uint32_t>& average_mw) const {
  instant_mw.reset();
  average_mw.reset();
  if (!handle_ || !lib_->field_values) return;
  nvmlFieldValue_t v[2] = {};
  v[0].fieldId = NVML_FI_DEV_POWER_INSTANT;
  v[1].fieldId = NVML_FI_DEV_POWER_AVERAGE;
  if (lib_->field_values(dev(handle_), 2, v) != NVML_SUCCESS) return;
  instant_mw = field_to_u32(v[0]);
  average_mw = field_to_u32(v[1]);
}

std::optional<std::uint32_t> GpuDevice::power_instant_mw() const {
  std::optional<std::uint32_t> instant, average;
  power_fields(instant, average);
  return instant;
}

std::optional<std::uint32_t> GpuDevice::power_average_mw() const {
  std::optional<std::uint32_t> instant, average;
  power_fields(instant, average);
  return average;
}

PowerLimits GpuDevice::power_limits() const {
  PowerLimits out;
  if (!handle_) return out;
  unsigned a = 0, b = 0;
  if (lib_->limit && lib_->limit(dev(handle_), &a) == NVML_SUCCESS) out.current_mw = a;
  if (lib_->enforced_limit && lib_->enforced_limit(dev(handle_), &a) == NVML_SUCCESS)
    out.enforced_mw = a;
  if (lib_->default_limit && lib_->default_limit(dev(handle_), &a) == NVML_SUCCESS)
    out.default_mw = a;
  if (lib_->limit_constraints && lib_->limit_constraints(dev(handle_), &a, &b) == NVML_SUCCESS) {
    out.min_mw = a;
    out.max_mw = b;
  }
  return out;
}

std::optional<std::uint32_t> GpuDevice::sm_clock_mhz() const {
  unsigned v = 0;
  if (handle_ && lib_->clock_info &&
      lib_->clock_info(dev(handle_), NVML_CLOCK_SM, &v) == NVML_SUCCESS)
    return v;
  return std::nullopt;
}

std::optional<std::uint32_t> GpuDevice::mem_clock_mhz() const {
  unsigned v = 0;
  if (handle_ && lib_->clock_info &&
      lib_->clock_info(dev(handle_), NVML_CLOCK_MEM, &v) == NVML_SUCCESS)
    return v;
  return std::nullopt;
}

ClockReadings GpuDevice::clocks() const {
  ClockReadings c;
  if (!handle_) return c;
  c.sm_mhz = sm_clock_mhz();
  c.mem_mhz = mem_clock_mhz();
  unsigned v = 0;
  if (lib_->max_clock_info && lib_->max_clock_info(dev(handle_), NVML_CLOCK_SM, &v) == NVML_SUCCESS)
    c.sm_max_mhz = v;
  if (lib_->max_clock_info &&
      lib_->max_clock_info(dev(handle_), NVML_CLOCK_MEM, &v) == NVML_SUCCESS)
    c.mem_max_mhz = v;
  if (lib_->app_clock && lib_->app_clock(dev(handle_), NVML_CLOCK_GRAPHICS, &v) == NVML_SUCCESS)
    c.app_sm_mhz = v;
  if (lib_->app_clock && lib_->app_clock(dev(handle_), NVML_CLOCK_MEM, &v) == NVML_SUCCESS)
    c.app_mem_mhz = v;
  return c;
}

namespace {
// Fetches a clock list whose length NVML reports through INSUFFICIENT_SIZE.
template <class Call>
std::vector<std::uint32_t> fetch_clock_list(Call call) {
  std::vector<unsigned> buf(512);
  for (int attempt = 0; attempt < 3; ++attempt) {
    unsigned count = static_cast<unsigned>(buf.size());
    const nvmlReturn_t rc = call(&count, buf.data());
    if (rc == NVML_SUCCESS) return std::vector<std::uint32_t>(buf.begin(), buf.begin() + count);
    if (rc != NVML_ERROR_INSUFFICIENT_SIZE || count <= buf.size()) return {};
    buf.resize(count);
  }
  return {};
}
}  // namespace

std::vector<std::uint32_t> GpuDevice::supported_mem_clocks_mhz() const {
  if (!handle_ || !lib_->supported_mem_clocks) return {};
  return fetch_clock_list(
      [&](unsigned* n, unsigned* out) { return lib_->supported_mem_clocks(dev(handle_), n, out); });
}

std::vector<std::uint32_t> GpuDevice::supported_sm_clocks_mhz(std::uint32_t mem_mhz) const {
  if (!handle_ || !lib_->supported_sm_clocks) return {};
  return fetch_clock_list([&](unsigned* n, unsigned* out) {
    return lib_->supported_sm_clocks(dev(handle_), mem_mhz, n, out);
  });
}

std::optional<Utilization> GpuDevice::utilization() const {
  nvmlUtilization_t u{};
  if (handle_ && lib_->utilization && lib_->utilization(dev(handle_), &u) == NVML_SUCCESS)
    return Utilization{u.gpu, u.memory};
  return std::nullopt;
}

std::optional<MemoryUsage> GpuDevice::memory() const {
  nvmlMemory_t m{};
  if (handle_ && lib_->memory && lib_->memory(dev(handle_), &m) == NVML_SUCCESS)
    return MemoryUsage{m.total, m.used};
  return std::nullopt;
}

std::optional<std::uint32_t> GpuDevice::temperature_c() const {
  unsigned t = 0;
  if (handle_ && lib_->temperature &&
      lib_->temperature(dev(handle_), NVML_TEMPERATURE_GPU, &t) == NVML_SUCCESS)
    return t;
  return std::nullopt;
}

std::optional<LinkThroughput> GpuDevice::pcie_throughput() const {
  unsigned tx = 0, rx = 0;
  if (!handle_ || !lib_->pcie_throughput) return std::nullopt;
  if (lib_->pcie_throughput(dev(handle_), NVML_PCIE_UTIL_TX_BYTES, &tx) != NVML_SUCCESS ||
      lib_->pcie_throughput(dev(handle_), NVML_PCIE_UTIL_RX_BYTES, &rx) != NVML_SUCCESS)
    return std::nullopt;
  return LinkThroughput{tx, rx};
}

std::optional<LinkCounters> GpuDevice::nvlink_data_kib() const {
  if (!handle_ || !lib_->field_values) return std::nullopt;
  nvmlFieldValue_t v[2] = {};
  v[0].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
  v[1].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
  if (lib_->field_values(dev(handle_), 2, v) != NVML_SUCCESS) return std::nullopt;
  if (v[0].nvmlReturn != NVML_SUCCESS || v[1].nvmlReturn != NVML_SUCCESS) return std::nullopt;
  auto as_u64 = [](const nvmlFieldValue_t& f) -> std::uint64_t {
    return f.valueType == NVML_VALUE_TYPE_UNSIGNED_LONG_LONG ? f.value.ullVal
           : f.valueType == NVML_VALUE_TYPE_UNSIGNED_LONG    ? f.value.ulVal
                                                             : f.value.uiVal;
  };
  return LinkCounters{as_u64(v[0]), as_u64(v[1])};
}

std::optional<std::uint64_t> GpuDevice::clock_event_reasons() const {
  unsigned long long r = 0;
  if (handle_ && lib_->event_reasons && lib_->event_reasons(dev(handle_), &r) == NVML_SUCCESS)
    return r;
  return std::nullopt;
}

GpuSnapshot GpuDevice::snapshot() const {
  GpuSnapshot s;
  s.energy_mj = energy_mj();
  s.power_mw = power_mw();
  power_fields(s.power_instant_mw, s.power_average_mw);
  s.limits = power_limits();
  s.clocks = clocks();
  s.utilization = utilization();
  s.memory = memory();
  s.temperature_c = temperature_c();
  s.clock_event_reasons = clock_event_reasons();
  return s;
}

GpuCapabilities GpuDevice::capabilities() const {
  GpuCapabilities c;
  if (!handle_) return c;
  c.energy_counter = energy_mj().has_value();
  std::optional<std::uint32_t> instant, average;
  power_fields(instant, average);
  c.power_instant = instant.has_value();
  c.power_average = average.has_value();
  c.power_usage = power_mw().has_value();
  const PowerLimits l = power_limits();
  c.power_limit_range = l.min_mw && l.max_mw && l.current_mw;
  const auto mem = supported_mem_clocks_mhz();
  c.supported_mem_clocks = mem.size();
  if (!mem.empty()) c.supported_sm_clocks = supported_sm_clocks_mhz(mem.front()).size();
  c.clock_event_reasons = clock_event_reasons().has_value();
  return c;
}

std::vector<std::string> decode_clock_event_reasons(std::uint64_t mask) {
  static constexpr std::pair<std::uint64_t, const char*> kNames[] = {
      {kNvmlClocksEventGpuIdle, "gpu_idle"},
      {kNvmlClocksEventApplicationsClocksSetting, "applications_clocks_setting"},
      {kNvmlClocksEventSwPowerCap, "sw_power_cap"},
      {kNvmlClocksEventHwSlowdown, "hw_slowdown"},
      {kNvmlClocksEventSyncBoost, "sync_boost"},
      {kNvmlClocksEventSwThermalSlowdown, "sw_thermal_slowdown"},
      {kNvmlClocksEventHwThermalSlowdown, "hw_thermal_slowdown"},
      {kNvmlClocksEventHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
      {kNvmlClocksEventDisplayClockSetting, "display_clock_setting"},
  };
  std::vector<std::string> out;
  std::uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (mask & bit) out.emplace_back(name);
  }
  if (mask & ~known) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "other(0x%llx)", static_cast<unsigned long long>(mask & ~known));
    out.emplace_back(buf);
  }
  return out;
}

// --- Nvml ---------------------------------------------------------------------------------------

Nvml::OpenResult Nvml::open(const NvmlOptions& options) {
  std::optional<std::string> explicit_path = options.library_path;
  if (!explicit_path) {
    if (const char* env = std::getenv("CNNERGY_NVML_LIBRARY"); env && *env) explicit_path = env;
  }
  const std::string path = explicit_path.value_or("libnvidia-ml.so.1");
  const std::string origin = options.library_path ? "NVML library '" + path + "'"
                             : explicit_path      ? "CNNERGY_NVML_LIBRARY='" + path + "'"
                                                  : "'" + path + "'";

  auto lib = std::make_shared<NvmlLibrary>();
  dlerror();
  lib->dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib->dl) {
    const char* err = dlerror();
    if (explicit_path)
      throw InvalidArgument(origin + " cannot be loaded: " + (err ? err : "unknown dlopen error") +
                            " (point it at libnvidia-ml.so.1, or unset it)");
    return {nullptr, "no NVIDIA driver found (" + path + " not loadable): measuring time only"};
  }
  lib->resolve(lib->init, {"nvmlInit_v2", "nvmlInit"});
  lib->resolve(lib->shutdown, {"nvmlShutdown"});
  lib->resolve(lib->error_string, {"nvmlErrorString"});
  lib->resolve(lib->device_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  lib->resolve(lib->handle_by_index,
               {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  if (!lib->init || !lib->shutdown || !lib->device_count || !lib->handle_by_index) {
    throw InvalidArgument(origin +
                          " is not an NVML library: it does not export nvmlInit, nvmlShutdown, "
                          "nvmlDeviceGetCount and nvmlDeviceGetHandleByIndex");
  }
  lib->resolve(lib->driver_version, {"nvmlSystemGetDriverVersion"});
  lib->resolve(lib->nvml_version, {"nvmlSystemGetNVMLVersion"});
  lib->resolve(lib->name, {"nvmlDeviceGetName"});
  lib->resolve(lib->uuid, {"nvmlDeviceGetUUID"});
  lib->resolve(lib->pci_info,
               {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"});
  lib->resolve(lib->total_energy, {"nvmlDeviceGetTotalEnergyConsumption"});
  lib->resolve(lib->power_usage, {"nvmlDeviceGetPowerUsage"});
  lib->resolve(lib->field_values, {"nvmlDeviceGetFieldValues"});
  lib->resolve(lib->limit, {"nvmlDeviceGetPowerManagementLimit"});
  lib->resolve(lib->enforced_limit, {"nvmlDeviceGetEnforcedPowerLimit"});
  lib->resolve(lib->default_limit, {"nvmlDeviceGetPowerManagementDefaultLimit"});
  lib->resolve(lib->limit_constraints, {"nvmlDeviceGetPowerManagementLimitConstraints"});
  lib->resolve(lib->set_limit, {"nvmlDeviceSetPowerManagementLimit"});
  lib->resolve(lib->clock_info, {"nvmlDeviceGetClockInfo"});
  lib->resolve(lib->max_clock_info, {"nvmlDeviceGetMaxClockInfo"});
  lib->resolve(lib->app_clock, {"nvmlDeviceGetApplicationsClock"});
  lib->resolve(lib->supported_mem_clocks, {"nvmlDeviceGetSupportedMemoryClocks"});
  lib->resolve(lib->supported_sm_clocks, {"nvmlDeviceGetSupportedGraphicsClocks"});
  lib->resolve(lib->event_reasons, {"nvmlDeviceGetCurrentClocksEventReasons",
                                    "nvmlDeviceGetCurrentClocksThrottleReasons"});
  lib->resolve(lib->utilization, {"nvmlDeviceGetUtilizationRates"});
  lib->resolve(lib->memory, {"nvmlDeviceGetMemoryInfo"});
  lib->resolve(lib->temperature, {"nvmlDeviceGetTemperature"});
  lib->resolve(lib->pcie_throughput, {"nvmlDeviceGetPcieThroughput"});
  lib->resolve(lib->set_locked_clocks, {"nvmlDeviceSetGpuLockedClocks"});
  lib->resolve(lib->reset_locked_clocks, {"nvmlDeviceResetGpuLockedClocks"});
  lib->resolve(lib->set_mem_locked_clocks, {"nvmlDeviceSetMemoryLockedClocks"});
  lib->resolve(lib->reset_mem_locked_clocks, {"nvmlDeviceResetMemoryLockedClocks"});
  lib->resolve(lib->set_app_clocks, {"nvmlDeviceSetApplicationsClocks"});
  lib->resolve(lib->reset_app_clocks, {"nvmlDeviceResetApplicationsClocks"});

  const nvmlReturn_t rc = lib->init();
  if (rc != NVML_SUCCESS)
    return {nullptr, "NVML could not initialise (" + lib->error(rc) + "): measuring time only"};
  lib->initialised = true;

  std::shared_ptr<Nvml> nvml(new Nvml());
  nvml->library_path_ = path;
  char buf[kNvmlVersionBufferSize] = {};
  if (lib->driver_version && lib->driver_version(buf, sizeof buf) == NVML_SUCCESS)
    nvml->driver_version_ = buf;
  std::memset(buf, 0, sizeof buf);
  if (lib->nvml_version && lib->nvml_version(buf, sizeof buf) == NVML_SUCCESS)
    nvml->nvml_version_ = buf;
  unsigned count = 0;
  CNNERGY_NVML_CHECK(*lib, lib->device_count(&count), "counting GPUs");
  nvml->lib_ = lib;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t h = nullptr;
    const nvmlReturn_t hrc = lib->handle_by_index(i, &h);
    if (hrc != NVML_SUCCESS) {
      log_warn("GPU " + std::to_string(i) + " is not accessible: " + lib->error(hrc));
      h = nullptr;
    }
    nvml->devices_.emplace_back(lib, i, h);
  }
  return {nvml, ""};
}

const GpuDevice& Nvml::device(std::size_t i) const {
  if (i >= devices_.size())
    throw InvalidArgument("no GPU " + std::to_string(i) + " (NVML sees " +
                          std::to_string(devices_.size()) + ")");
  return devices_[i];
}

const GpuDevice* Nvml::find_by_uuid(const std::string& uuid) const {
  for (const auto& d : devices_)
    if (!d.lost() && d.uuid() == uuid) return &d;
  return nullptr;
}

}  // namespace cnnergy::telemetry
