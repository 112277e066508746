// The dlopen'ed NVML symbol table and the error mapping shared by the reading half (nvml.cpp) and
// the control half (nvml_control.cpp) of GpuDevice. Internal to the telemetry library.
#pragma once

#include <initializer_list>
#include <string>

#include <dlfcn.h>

#include "core/errors.hpp"
#include "telemetry/nvml_api.hpp"

namespace cnnergy::telemetry {

// The resolved entry points. A null pointer means the loaded driver does not export the symbol.
class NvmlLibrary {
 public:
  void* dl = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*nvml_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*total_energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*power_usage)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*field_values)(nvmlDevice_t, int, nvmlFieldValue_t*) = nullptr;
  nvmlReturn_t (*limit)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*enforced_limit)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*default_limit)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*limit_constraints)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*set_limit)(nvmlDevice_t, unsigned) = nullptr;
  nvmlReturn_t (*clock_info)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*max_clock_info)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*app_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*supported_mem_clocks)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*supported_sm_clocks)(nvmlDevice_t, unsigned, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*event_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*pcie_throughput)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*set_locked_clocks)(nvmlDevice_t, unsigned, unsigned) = nullptr;
  nvmlReturn_t (*reset_locked_clocks)(nvmlDevice_t) = nullptr;
  nvmlReturn_t (*set_mem_locked_clocks)(nvmlDevice_t, unsigned, unsigned) = nullptr;
  nvmlReturn_t (*reset_mem_locked_clocks)(nvmlDevice_t) = nullptr;
  nvmlReturn_t (*set_app_clocks)(nvmlDevice_t, unsigned, unsigned) = nullptr;
  nvmlReturn_t (*reset_app_clocks)(nvmlDevice_t) = nullptr;
  bool initialised = false;

  NvmlLibrary() = default;
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;
  ~NvmlLibrary() {
    if (initialised && shutdown) shutdown();
    if (dl) dlclose(dl);
  }

  // First symbol of `names` that the library exports.
  template <class Fn>
  void resolve(Fn& fn, std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (void* p = dlsym(dl, n)) {
        fn = reinterpret_cast<Fn>(p);
        return;
      }
    }
    fn = nullptr;
  }

  std::string error(nvmlReturn_t rc) const {
    const char* s = error_string ? error_string(rc) : nullptr;
    return std::string(s ? s : "unknown NVML error") + " (NVML code " + std::to_string(rc) + ")";
  }
};

namespace nvml_detail {

// Maps an NVML result of a control or required call to a typed exception that records the call,
// the file and the line (the NVML member of the checking-macro family).
inline void check_nvml(const NvmlLibrary& lib, nvmlReturn_t rc, const char* call, const std::string& what,
                const char* file, int line) {
  if (rc == NVML_SUCCESS) return;
  const std::string where =
      std::string(" [") + call + " at " + file + ":" + std::to_string(line) + "]";
  const std::string detail = what + ": " + lib.error(rc) + where;
  switch (rc) {
    case NVML_ERROR_NO_PERMISSION:
      throw PermissionDenied(
          what +
          ": permission denied; changing GPU settings needs root or CAP_SYS_ADMIN "
          "(run with sudo, or grant the capability)" +
          where);
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      throw NotSupported(what + ": not supported by this GPU or driver" + where);
    case NVML_ERROR_INVALID_ARGUMENT:
      throw InvalidArgument(detail);
    default:
      throw DeviceError(detail);
  }
}

#define CNNERGY_NVML_CHECK(lib, call, what) \
  nvml_detail::check_nvml((lib), (call), #call, (what), __FILE__, __LINE__)

inline nvmlDevice_t dev(void* h) { return static_cast<nvmlDevice_t>(h); }

}  // namespace nvml_detail

}  // namespace cnnergy::telemetry
