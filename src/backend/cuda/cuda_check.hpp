// The one checking macro family of the CUDA backend: CNNERGY_CUDA_CALL(expr) checks a CUDA runtime,
// cuDNN or cuBLAS status (the overload picks the library) and throws a typed error that records the
// expression, file and line; CNNERGY_CUDA_LAUNCH_CHECK(name) checks a kernel launch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

namespace cnnergy::cuda {

// OutOfMemory for cudaErrorMemoryAllocation (with the device's free memory), DeviceError otherwise.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file,
                                   int line);
// NotSupported is not used here: callers that can fall back test the status themselves.
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file,
                                    int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file,
                                     int line);

inline void check_status(cudaError_t s, const char* expr, const char* file, int line) {
  if (s != cudaSuccess) throw_cuda_error(s, expr, file, line);
}
inline void check_status(cudnnStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS) throw_cudnn_error(s, expr, file, line);
}
inline void check_status(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_cublas_error(s, expr, file, line);
}

// "12.5 GiB (13421772800 bytes)": sizes in error messages.
std::string format_bytes(std::size_t bytes);
// Free and total memory of the current device ({0, 0} when the query fails; never throws).
struct DeviceMemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};
DeviceMemoryInfo device_memory_info() noexcept;

}  // namespace cnnergy::cuda

#define CNNERGY_CUDA_CALL(expr) ::cnnergy::cuda::check_status((expr), #expr, __FILE__, __LINE__)
// After every <<<...>>>: launch-configuration errors surface here, not at some later call.
#define CNNERGY_CUDA_LAUNCH_CHECK(kernel_name)                                                 \
  ::cnnergy::cuda::check_status(cudaGetLastError(), "launch of kernel " kernel_name, __FILE__, \
                                __LINE__)
