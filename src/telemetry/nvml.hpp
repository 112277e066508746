// NVML loaded at run time: the library handle (dlopen + nvmlInit, RAII), the set of GPUs it sees,
// and typed per-GPU queries. An unsupported reading is an empty optional, never an error; control
// calls map NVML errors to the typed exceptions of core/errors.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cnnergy::telemetry {

class NvmlLibrary;  // the dlopen'ed symbol table (nvml.cpp)

struct PowerLimits {
  std::optional<std::uint32_t> current_mw;   // nvmlDeviceGetPowerManagementLimit
  std::optional<std::uint32_t> enforced_mw;  // nvmlDeviceGetEnforcedPowerLimit
  std::optional<std::uint32_t> default_mw;
  std::optional<std::uint32_t> min_mw, max_mw;
};

struct ClockReadings {
  std::optional<std::uint32_t> sm_mhz, mem_mhz;
  std::optional<std::uint32_t> sm_max_mhz, mem_max_mhz;
  std::optional<std::uint32_t> app_sm_mhz, app_mem_mhz;  // application clocks (targets)
};

struct MemoryUsage {
  std::uint64_t total_bytes = 0, used_bytes = 0;
};

struct Utilization {
  std::uint32_t gpu_percent = 0, memory_percent = 0;
};

// PCIe throughput over NVML's 20 ms window (KB/s), and cumulative NVLink data counters (KiB).
struct LinkThroughput {
  std::uint32_t tx_kb_per_s = 0, rx_kb_per_s = 0;
};
struct LinkCounters {
  std::uint64_t tx_kib = 0, rx_kib = 0;
};

// One reading of everything cheap and the energy counter, for `cnnergy devices` and reports.
struct GpuSnapshot {
  std::optional<std::uint64_t> energy_mj;
  std::optional<std::uint32_t> power_mw;  // nvmlDeviceGetPowerUsage (1 s average on Ampere+)
  std::optional<std::uint32_t> power_average_mw;  // field NVML_FI_DEV_POWER_AVERAGE
  std::optional<std::uint32_t> power_instant_mw;  // field NVML_FI_DEV_POWER_INSTANT
  PowerLimits limits;
  ClockReadings clocks;
  std::optional<Utilization> utilization;
  std::optional<MemoryUsage> memory;
  std::optional<std::uint32_t> temperature_c;
  std::optional<std::uint64_t> clock_event_reasons;
};

// What a GPU offers, as far as can be told without changing anything.
struct GpuCapabilities {
  bool energy_counter = false, power_instant = false, power_average = false, power_usage = false;
  bool power_limit_range = false;  // limits readable, so a limit can be validated
  std::size_t supported_sm_clocks = 0, supported_mem_clocks = 0;
  bool clock_event_reasons = false;
};

class GpuDevice {
 public:
  GpuDevice(std::shared_ptr<const NvmlLibrary> lib, unsigned index, void* handle);

  unsigned index() const { return index_; }
  bool lost() const { return handle_ == nullptr; }  // the handle could not be obtained
  const std::string& name() const { return name_; }
  const std::string& uuid() const { return uuid_; }
  const std::string& pci_bus_id() const { return pci_bus_id_; }

  // Readings: empty when the GPU or the driver does not support them (or the symbol is absent).
  std::optional<std::uint64_t> energy_mj() const;  // slow on real hardware (~4 ms): sampler only
  std::optional<std::uint32_t> power_mw() const;
  std::optional<std::uint32_t> power_instant_mw() const;
  std::optional<std::uint32_t> power_average_mw() const;
  // Instant and average power from one nvmlDeviceGetFieldValues call (cheaper than two).
  void power_fields(std::optional<std::uint32_t>& instant_mw,
                    std::optional<std::uint32_t>& average_mw) const;
  PowerLimits power_limits() const;
  std::optional<std::uint32_t> sm_clock_mhz() const;
  std::optional<std::uint32_t> mem_clock_mhz() const;
  ClockReadings clocks() const;
  std::vector<std::uint32_t> supported_mem_clocks_mhz() const;  // descending, empty if unknown
  std::vector<std::uint32_t> supported_sm_clocks_mhz(std::uint32_t mem_mhz) const;  // descending
  std::optional<Utilization> utilization() const;
  std::optional<MemoryUsage> memory() const;
  std::optional<std::uint32_t> temperature_c() const;
  std::optional<std::uint64_t> clock_event_reasons() const;
  // Link traffic: empty where the GPU or driver has no such reading (no NVLink, old driver). The
  // PCIe call samples for 20 ms inside the driver: the sampler reads it only when asked to.
  std::optional<LinkThroughput> pcie_throughput() const;
  std::optional<LinkCounters> nvlink_data_kib() const;
  GpuSnapshot snapshot() const;
  GpuCapabilities capabilities() const;

  // Control (throw PermissionDenied, NotSupported, InvalidArgument or DeviceError). Used by
  // KnobController, which journals first; nothing else should call these.
  void set_power_limit_mw(std::uint32_t limit_mw) const;
  void set_locked_sm_clocks(std::uint32_t min_mhz, std::uint32_t max_mhz) const;
  void reset_locked_sm_clocks() const;
  void set_locked_mem_clocks(std::uint32_t min_mhz, std::uint32_t max_mhz) const;
  void reset_locked_mem_clocks() const;
  bool has_mem_locked_clocks() const;  // the driver exports nvmlDeviceSetMemoryLockedClocks
  void set_application_clocks(std::uint32_t mem_mhz, std::uint32_t sm_mhz) const;
  void reset_application_clocks() const;

 private:
  std::shared_ptr<const NvmlLibrary> lib_;
  unsigned index_;
  void* handle_;
  std::string name_, uuid_, pci_bus_id_;
};

// Names of the bits set in a clock-event (throttle) reason mask, e.g. {"sw_power_cap"}.
std::vector<std::string> decode_clock_event_reasons(std::uint64_t mask);

// Where NVML is loaded from: CNNERGY_NVML_LIBRARY if set, otherwise libnvidia-ml.so.1.
struct NvmlOptions {
  std::optional<std::string> library_path;  // overrides the environment
};

// An initialised NVML and the GPUs it sees. Open with Nvml::open(); destroying the last reference
// (devices hold one too) shuts NVML down and unloads the library.
class Nvml {
 public:
  struct OpenResult {
    std::shared_ptr<Nvml> nvml;      // null when there is no driver
    std::string unavailable_reason;  // why, when nvml is null (say it once, then measure time only)
  };
  // No driver (default library absent, driver not loaded, no GPU) -> nvml null with a reason.
  // A path given explicitly (option or CNNERGY_NVML_LIBRARY) that is missing or is not NVML ->
  // InvalidArgument naming the path and what is wrong.
  static OpenResult open(const NvmlOptions& options = {});

  std::size_t device_count() const { return devices_.size(); }
  const GpuDevice& device(std::size_t i) const;
  const std::vector<GpuDevice>& devices() const { return devices_; }
  const std::string& driver_version() const { return driver_version_; }
  const std::string& nvml_version() const { return nvml_version_; }
  const std::string& library_path() const { return library_path_; }
  // The device with this UUID, or nullptr.
  const GpuDevice* find_by_uuid(const std::string& uuid) const;

 private:
  Nvml() = default;
  std::shared_ptr<const NvmlLibrary> lib_;
  std::vector<GpuDevice> devices_;
  std::string driver_version_, nvml_version_, library_path_;
};

}  // namespace cnnergy::telemetry
