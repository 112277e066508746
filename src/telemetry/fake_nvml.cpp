// A simulated NVML driver (libnvidia-ml-fake.so): exports the NVML C symbols cnnergy uses and
// simulates N GPUs with a physical model, so every NVML-facing path is tested in CI without a GPU.
// Configuration (environment, read at nvmlInit): see docs/telemetry.md, "The fake NVML library".
//
// Model. Each GPU has a true power P(t) that is piecewise constant: it changes at sensor ticks
// (every CNNERGY_FAKE_NVML_UPDATE_MS, with a little deterministic noise and the load file re-read)
// and immediately when a setting or the load changes. P = idle + dyn_max * util * (f/f_max) *
// (V(f)/V_max)^2 + mem_w * util * (f_mem/f_mem_max), where the SM clock f is the highest supported
// clock at or below the target (max, locked or application clock) whose power fits the power limit
// (reason "SW power cap" when it had to come down). Sensors (energy counter, instant and 1 s
// average power, clocks, utilisation, temperature) are snapshots taken at the ticks, as on real
// hardware, and an energy-counter read sleeps CNNERGY_FAKE_NVML_ENERGY_READ_MS. Settings (power
// limit, locked and application clocks) persist in $CNNERGY_FAKE_NVML_STATE so a later process sees
// them. CNNERGY_FAKE_NVML_THERMAL adds a thermal model (fake_nvml_model.hpp, Thermal): temperature
// relaxing towards a power-dependent target, leakage power growing with it.
//
// A C-ABI driver has process-wide state by nature (nvmlInit/nvmlShutdown are global): it lives in
// one object behind one mutex, reached through fake(); nothing else in cnnergy keeps such state.
#include <chrono>
#include <thread>

#include "telemetry/fake_nvml_model.hpp"
#include "telemetry/nvml_api.hpp"

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {
using namespace cnnergy::fake_nvml;

// Common prologue of a per-device call: validates the handle, applies error injection and brings
// the simulation up to now. Returns the GPU or sets `rc`.
Gpu* enter(nvmlDevice_t device, const char* fn, nvmlReturn_t& rc) {
  FakeDriver& d = fake();
  rc = NVML_SUCCESS;
  if (d.init_count == 0) {
    rc = NVML_ERROR_UNINITIALIZED;
    return nullptr;
  }
  if (!device || device->index >= d.gpus.size() || &d.gpus[device->index].handle != device) {
    rc = NVML_ERROR_INVALID_ARGUMENT;
    return nullptr;
  }
  Gpu& g = d.gpus[device->index];
  if (g.lost)
    rc = NVML_ERROR_GPU_IS_LOST;
  else if (d.is_unsupported(fn))
    rc = NVML_ERROR_NOT_SUPPORTED;
  if (rc != NVML_SUCCESS) return nullptr;
  d.advance(now_ns());
  return &g;
}

nvmlReturn_t enter_set(nvmlDevice_t device, const char* fn, Gpu*& g) {
  nvmlReturn_t rc = NVML_SUCCESS;
  g = enter(device, fn, rc);
  if (!g) return rc;
  if (fake().cfg.set_not_supported) return NVML_ERROR_NOT_SUPPORTED;
  if (fake().cfg.set_no_permission) return NVML_ERROR_NO_PERMISSION;
  return NVML_SUCCESS;
}

nvmlReturn_t copy_string(const std::string& s, char* out, unsigned length) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t apply_settings(Gpu& g, const Settings& s) {
  FakeDriver& d = fake();
  g.settings = s;
  d.operating_point_changed(g, now_ns());
  d.save_settings(g);
  return NVML_SUCCESS;
}

bool is_supported_clock(const std::vector<unsigned>& list, unsigned mhz) {
  return std::find(list.begin(), list.end(), mhz) != list.end();
}

}  // namespace

#define LOCKED std::lock_guard<std::mutex> lock_(fake().mutex)
#define ENTER(fn)                  \
  LOCKED;                          \
  nvmlReturn_t rc_ = NVML_SUCCESS; \
  Gpu* g = enter(device, fn, rc_); \
  if (!g) return rc_

// --- library ------------------------------------------------------------------------------------
FAKE_API nvmlReturn_t nvmlInit() {
  LOCKED;
  return fake().init();
}
#ifndef CNNERGY_FAKE_NVML_MINIMAL
FAKE_API nvmlReturn_t nvmlInit_v2() {
  LOCKED;
  return fake().init();
}
#endif
FAKE_API nvmlReturn_t nvmlShutdown() {
  LOCKED;
  if (fake().init_count == 0) return NVML_ERROR_UNINITIALIZED;
  --fake().init_count;
  return NVML_SUCCESS;
}
FAKE_API const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}
FAKE_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  LOCKED;
  if (fake().init_count == 0) return NVML_ERROR_UNINITIALIZED;
  return copy_string("580.95.05-fake", version, length);
}
FAKE_API nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned length) {
  LOCKED;
  if (fake().init_count == 0) return NVML_ERROR_UNINITIALIZED;
  return copy_string("13.580.95.05-fake", version, length);
}

static nvmlReturn_t get_count(unsigned* count) {
  LOCKED;
  if (fake().init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(fake().gpus.size());
  return NVML_SUCCESS;
}
static nvmlReturn_t get_handle(unsigned index, nvmlDevice_t* device) {
  LOCKED;
  FakeDriver& d = fake();
  if (d.init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= d.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.gpus[index].lost) return NVML_ERROR_GPU_IS_LOST;
  *device = &d.gpus[index].handle;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetCount(unsigned* count) { return get_count(count); }
FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, nvmlDevice_t* device) {
  return get_handle(index, device);
}
#ifndef CNNERGY_FAKE_NVML_MINIMAL
FAKE_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) { return get_count(count); }
FAKE_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  return get_handle(index, device);
}
#endif

// --- identity -----------------------------------------------------------------------------------
FAKE_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  ENTER("nvmlDeviceGetName");
  return copy_string(fake().cfg.name, name, length);
}
FAKE_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  ENTER("nvmlDeviceGetUUID");
  return copy_string(g->uuid, uuid, length);
}
static nvmlReturn_t fill_pci(nvmlDevice_t device, nvmlPciInfo_t* pci, const char* fn) {
  ENTER(fn);
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(pci, 0, sizeof *pci);
  pci->bus = 0x18 + 0x10 * g->handle.index;
  pci->pciDeviceId = 0x233510de;
  std::snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return fill_pci(device, pci, "nvmlDeviceGetPciInfo");
}
#ifndef CNNERGY_FAKE_NVML_MINIMAL
FAKE_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return fill_pci(device, pci, "nvmlDeviceGetPciInfo_v3");
}
#endif

// --- power and energy ---------------------------------------------------------------------------
#ifndef CNNERGY_FAKE_NVML_MINIMAL
FAKE_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                          unsigned long long* energy_mj) {
  int cost_us = 0;
  {
    ENTER("nvmlDeviceGetTotalEnergyConsumption");
    if (!energy_mj) return NVML_ERROR_INVALID_ARGUMENT;
    *energy_mj = g->sensors.energy_mj;
    cost_us = fake().cfg.energy_read_us;
  }
  // The slow part of a real read happens outside the lock so that power reads are not held up.
  if (cost_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(cost_us));
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                               nvmlFieldValue_t* values) {
  ENTER("nvmlDeviceGetFieldValues");
  if (count < 0 || (count > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
  const long long stamp_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  for (int i = 0; i < count; ++i) {
    nvmlFieldValue_t& v = values[i];
    v.timestamp = stamp_us;
    v.latencyUsec = 0;
    v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v.nvmlReturn = NVML_SUCCESS;
    const double nvlink = fake().cfg.nvlink_peak_kib_s;
    if (v.fieldId == NVML_FI_DEV_POWER_INSTANT) {
      v.value.uiVal = g->sensors.power_instant_mw;
    } else if (v.fieldId == NVML_FI_DEV_POWER_AVERAGE) {
      v.value.uiVal = g->sensors.power_average_mw;
    } else if (nvlink > 0 && (v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ||
                              v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)) {
      v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
      v.value.ullVal = static_cast<unsigned long long>(
          v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? g->nvlink_tx_kib : g->nvlink_rx_kib);
    } else
      v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
  }
  return NVML_SUCCESS;
}
#endif
FAKE_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* power_mw) {
  ENTER("nvmlDeviceGetPowerUsage");
  if (!power_mw) return NVML_ERROR_INVALID_ARGUMENT;
  *power_mw = g->sensors.power_average_mw;  // a 1 s average, as on Ampere and newer
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned* limit_mw) {
  ENTER("nvmlDeviceGetPowerManagementLimit");
  if (!limit_mw) return NVML_ERROR_INVALID_ARGUMENT;
  *limit_mw = g->settings.power_limit_mw;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned* limit_mw) {
  ENTER("nvmlDeviceGetEnforcedPowerLimit");
  if (!limit_mw) return NVML_ERROR_INVALID_ARGUMENT;
  *limit_mw = g->settings.power_limit_mw;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                               unsigned* limit_mw) {
  ENTER("nvmlDeviceGetPowerManagementDefaultLimit");
  if (!limit_mw) return NVML_ERROR_INVALID_ARGUMENT;
  *limit_mw = fake().cfg.limit_default_mw;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                                   unsigned* min_mw,
                                                                   unsigned* max_mw) {
  ENTER("nvmlDeviceGetPowerManagementLimitConstraints");
  if (!min_mw || !max_mw) return NVML_ERROR_INVALID_ARGUMENT;
  *min_mw = fake().cfg.limit_min_mw;
  *max_mw = fake().cfg.limit_max_mw;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned limit_mw) {
  LOCKED;
  Gpu* g = nullptr;
  if (nvmlReturn_t rc = enter_set(device, "nvmlDeviceSetPowerManagementLimit", g);
      rc != NVML_SUCCESS)
    return rc;
  if (limit_mw < fake().cfg.limit_min_mw || limit_mw > fake().cfg.limit_max_mw)
    return NVML_ERROR_INVALID_ARGUMENT;
  Settings s = g->settings;
  s.power_limit_mw = limit_mw;
  return apply_settings(*g, s);
}

// --- clocks -------------------------------------------------------------------------------------
FAKE_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned* mhz) {
  ENTER("nvmlDeviceGetClockInfo");
  if (!mhz) return NVML_ERROR_INVALID_ARGUMENT;
  if (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM)
    *mhz = g->sensors.sm_mhz;
  else if (type == NVML_CLOCK_MEM)
    *mhz = g->sensors.mem_mhz;
  else
    return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned* mhz) {
  ENTER("nvmlDeviceGetMaxClockInfo");
  if (!mhz) return NVML_ERROR_INVALID_ARGUMENT;
  if (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM)
    *mhz = fake().cfg.sm_clocks.back();
  else if (type == NVML_CLOCK_MEM)
    *mhz = fake().cfg.mem_clocks.back();
  else
    return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, int type, unsigned* mhz) {
  ENTER("nvmlDeviceGetApplicationsClock");
  if (!mhz) return NVML_ERROR_INVALID_ARGUMENT;
  const Settings& s = g->settings;
  if (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM)
    *mhz = s.app_sm_mhz ? s.app_sm_mhz : fake().cfg.sm_clocks.back();
  else if (type == NVML_CLOCK_MEM)
    *mhz = s.app_mem_mhz ? s.app_mem_mhz : fake().cfg.mem_clocks.back();
  else
    return NVML_ERROR_NOT_SUPPORTED;
  return NVML_SUCCESS;
}
static nvmlReturn_t copy_list(const std::vector<unsigned>& list, unsigned* count, unsigned* out) {
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned n = static_cast<unsigned>(list.size());
  if (!out || *count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  // NVML lists clocks from the highest down.
  std::copy(list.rbegin(), list.rend(), out);
  *count = n;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned* count,
                                                         unsigned* mhz) {
  ENTER("nvmlDeviceGetSupportedMemoryClocks");
  return copy_list(fake().cfg.mem_clocks, count, mhz);
}
FAKE_API nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned mem_mhz,
                                                           unsigned* count, unsigned* mhz) {
  ENTER("nvmlDeviceGetSupportedGraphicsClocks");
  if (!is_supported_clock(fake().cfg.mem_clocks, mem_mhz)) return NVML_ERROR_NOT_FOUND;
  return copy_list(fake().cfg.sm_clocks, count, mhz);
}
static nvmlReturn_t event_reasons(nvmlDevice_t device, unsigned long long* reasons,
                                  const char* fn) {
  ENTER(fn);
  if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = g->sensors.reasons;
  return NVML_SUCCESS;
}
#ifndef CNNERGY_FAKE_NVML_MINIMAL
FAKE_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                             unsigned long long* reasons) {
  return event_reasons(device, reasons, "nvmlDeviceGetCurrentClocksEventReasons");
}
#endif
FAKE_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                unsigned long long* reasons) {
  return event_reasons(device, reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
}
FAKE_API nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned min_mhz,
                                                   unsigned max_mhz) {
  LOCKED;
  Gpu* g = nullptr;
  if (nvmlReturn_t rc = enter_set(device, "nvmlDeviceSetGpuLockedClocks", g); rc != NVML_SUCCESS)
    return rc;
  if (min_mhz > max_mhz || max_mhz == 0) return NVML_ERROR_INVALID_ARGUMENT;
  Settings s = g->settings;
  s.sm_lock_min = min_mhz, s.sm_lock_max = max_mhz;
  return apply_settings(*g, s);
}
FAKE_API nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device) {
  LOCKED;
  Gpu* g = nullptr;
  if (nvmlReturn_t rc = enter_set(device, "nvmlDeviceResetGpuLockedClocks", g); rc != NVML_SUCCESS)
    return rc;
  Settings s = g->settings;
  s.sm_lock_min = s.sm_lock_max = 0;
  return apply_settings(*g, s);
}
#ifndef CNNERGY_FAKE_NVML_MINIMAL
FAKE_API nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device, unsigned min_mhz,
                                                      unsigned max_mhz) {
  LOCKED;
  Gpu* g = nullptr;
  if (nvmlReturn_t rc = enter_set(device, "nvmlDeviceSetMemoryLockedClocks", g); rc != NVML_SUCCESS)
    return rc;
  if (min_mhz > max_mhz || !is_supported_clock(fake().cfg.mem_clocks, max_mhz))
    return NVML_ERROR_INVALID_ARGUMENT;
  Settings s = g->settings;
  s.mem_lock_min = min_mhz, s.mem_lock_max = max_mhz;
  return apply_settings(*g, s);
}
FAKE_API nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device) {
  LOCKED;
  Gpu* g = nullptr;
  if (nvmlReturn_t rc = enter_set(device, "nvmlDeviceResetMemoryLockedClocks", g);
      rc != NVML_SUCCESS)
    return rc;
  Settings s = g->settings;
  s.mem_lock_min = s.mem_lock_max = 0;
  return apply_settings(*g, s);
}
#endif
FAKE_API nvmlReturn_t nvmlDeviceSetApplicationsClocks(nvmlDevice_t device, unsigned mem_mhz,
                                                      unsigned sm_mhz) {
  LOCKED;
  Gpu* g = nullptr;
  if (nvmlReturn_t rc = enter_set(device, "nvmlDeviceSetApplicationsClocks", g); rc != NVML_SUCCESS)
    return rc;
  if (!is_supported_clock(fake().cfg.mem_clocks, mem_mhz) ||
      !is_supported_clock(fake().cfg.sm_clocks, sm_mhz))
    return NVML_ERROR_INVALID_ARGUMENT;
  Settings s = g->settings;
  s.app_mem_mhz = mem_mhz == fake().cfg.mem_clocks.back() ? 0 : mem_mhz;
  s.app_sm_mhz = sm_mhz == fake().cfg.sm_clocks.back() ? 0 : sm_mhz;
  return apply_settings(*g, s);
}
FAKE_API nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t device) {
  LOCKED;
  Gpu* g = nullptr;
  if (nvmlReturn_t rc = enter_set(device, "nvmlDeviceResetApplicationsClocks", g);
      rc != NVML_SUCCESS)
    return rc;
  Settings s = g->settings;
  s.app_mem_mhz = s.app_sm_mhz = 0;
  return apply_settings(*g, s);
}

// --- utilisation, memory, temperature ----------------------------------------------------------
FAKE_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* util) {
  ENTER("nvmlDeviceGetUtilizationRates");
  if (!util) return NVML_ERROR_INVALID_ARGUMENT;
  util->gpu = g->sensors.util_gpu;
  util->memory = g->sensors.util_mem;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  ENTER("nvmlDeviceGetMemoryInfo");
  if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
  memory->total = fake().cfg.memory_total_mib << 20;
  memory->used = g->sensors.mem_used_bytes;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}
FAKE_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned* celsius) {
  ENTER("nvmlDeviceGetTemperature");
  if (!celsius || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *celsius = g->sensors.temperature_c;
  return NVML_SUCCESS;
}

#ifndef CNNERGY_FAKE_NVML_MINIMAL
FAKE_API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned* kb_per_s) {
  ENTER("nvmlDeviceGetPcieThroughput");
  if (!kb_per_s || (counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES))
    return NVML_ERROR_INVALID_ARGUMENT;
  *kb_per_s = counter == NVML_PCIE_UTIL_TX_BYTES ? g->sensors.pcie_tx_kb_s : g->sensors.pcie_rx_kb_s;
  return NVML_SUCCESS;
}
#endif

// --- simulation control and ground truth (not NVML; tests reach these with dlsym) --------------
// True energy of GPU `index` at steady-clock time `steady_ns` (not later than now), in mJ.
FAKE_API int cnnergy_fake_nvml_true_energy_mj(unsigned index, long long steady_ns,
                                              double* energy_mj) {
  LOCKED;
  FakeDriver& d = fake();
  const std::int64_t now = now_ns();
  if (d.init_count == 0 || index >= d.gpus.size() || !energy_mj || steady_ns > now) return -1;
  d.advance(now);
  const auto& h = d.gpus[index].history;
  auto it = std::upper_bound(h.begin(), h.end(), steady_ns,
                             [](long long t, const Segment& s) { return t < s.t_ns; });
  if (it == h.begin()) return -1;  // before the kept history
  --it;
  *energy_mj = it->energy_mj + it->power_w * static_cast<double>(steady_ns - it->t_ns) * 1e-6;
  return 0;
}
// Sets the simulated utilisation (0..1) of GPU `index` from now on.
FAKE_API int cnnergy_fake_nvml_set_load(unsigned index, double load) {
  LOCKED;
  FakeDriver& d = fake();
  if (d.init_count == 0 || index >= d.gpus.size()) return -1;
  d.advance(now_ns());
  d.gpus[index].load = load;
  d.operating_point_changed(d.gpus[index], now_ns());
  return 0;
}
// The true power now (W), before sensor quantisation.
FAKE_API int cnnergy_fake_nvml_true_power_w(unsigned index, double* power_w) {
  LOCKED;
  FakeDriver& d = fake();
  if (d.init_count == 0 || index >= d.gpus.size() || !power_w) return -1;
  d.advance(now_ns());
  *power_w = d.gpus[index].history.back().power_w;
  return 0;
}
// Locked SM and memory clocks (0, 0 when not locked): NVML itself has no getter for them.
FAKE_API int cnnergy_fake_nvml_locked_clocks(unsigned index, unsigned* sm_min, unsigned* sm_max,
                                             unsigned* mem_min, unsigned* mem_max) {
  LOCKED;
  FakeDriver& d = fake();
  if (d.init_count == 0 || index >= d.gpus.size()) return -1;
  d.advance(now_ns());
  const Settings& s = d.gpus[index].settings;
  *sm_min = s.sm_lock_min, *sm_max = s.sm_lock_max, *mem_min = s.mem_lock_min,
  *mem_max = s.mem_lock_max;
  return 0;
}
