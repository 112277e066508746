// Our own declarations of the slice of the NVML C API that cnnergy uses (no nvml.h: the library is
// loaded at run time so the tool builds and runs where no driver is installed). The fake NVML
// library implements exactly these, so both sides share one statement of the ABI.
#pragma once

#include <cstdint>

extern "C" {

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef int nvmlReturn_t;  // an enum in nvml.h; int-sized in the C ABI

enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_UNKNOWN = 999,
};

// nvmlClockType_t
enum : int { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };
// nvmlTemperatureSensors_t
enum : int { NVML_TEMPERATURE_GPU = 0 };
// nvmlValueType_t
enum : int {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
  NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
};

// Field ids for nvmlDeviceGetFieldValues (nvml.h, NVML_FI_*).
enum : unsigned { NVML_FI_DEV_POWER_AVERAGE = 185, NVML_FI_DEV_POWER_INSTANT = 186 };
// NVLink data throughput: cumulative KiB since the driver loaded, all links of the GPU.
enum : unsigned { NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139 };
// nvmlPcieUtilCounter_t for nvmlDeviceGetPcieThroughput (KB/s over a 20 ms window).
enum : int { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 };

// Clock event (throttle) reason bits, nvmlClocksEventReason* / nvmlClocksThrottleReason*.
enum : unsigned long long {
  kNvmlClocksEventGpuIdle = 0x1ull,
  kNvmlClocksEventApplicationsClocksSetting = 0x2ull,
  kNvmlClocksEventSwPowerCap = 0x4ull,
  kNvmlClocksEventHwSlowdown = 0x8ull,
  kNvmlClocksEventSyncBoost = 0x10ull,
  kNvmlClocksEventSwThermalSlowdown = 0x20ull,
  kNvmlClocksEventHwThermalSlowdown = 0x40ull,
  kNvmlClocksEventHwPowerBrakeSlowdown = 0x80ull,
  kNvmlClocksEventDisplayClockSetting = 0x100ull,
};

// Buffer sizes (NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE,
// NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE, NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE).
enum : unsigned { kNvmlNameBufferSize = 96, kNvmlUuidBufferSize = 96, kNvmlVersionBufferSize = 80 };

typedef union nvmlValue_st {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
  unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;  // microseconds since 1970
  long long latencyUsec;
  int valueType;  // nvmlValueType_t
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3 (and _v2; the unversioned call fills only
// the legacy fields, which is why we prefer the versioned symbols).
typedef struct nvmlPciInfo_st {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;     // percent of time a kernel was running
  unsigned int memory;  // percent of time memory was read or written
} nvmlUtilization_t;

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

}  // extern "C"

// Layout checks against the sizes nvml.h gives on x86-64 and aarch64 Linux.
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout");
static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
