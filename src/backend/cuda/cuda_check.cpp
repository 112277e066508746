// Turns CUDA, cuDNN and cuBLAS failures into the library's typed errors, with the failing
// expression, its file and line, and (for memory) how much the device has left.
#include "backend/cuda/cuda_check.hpp"

#include <cstdio>
#include <string>

#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

std::string where(const char* expr, const char* file, int line) {
  return std::string(expr) + " at " + file + ":" + std::to_string(line);
}

}  // namespace

std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.1f %s", v, units[u]);
  return std::string(text) + " (" + std::to_string(bytes) + " bytes)";
}

DeviceMemoryInfo device_memory_info() noexcept {
  DeviceMemoryInfo info;
  if (cudaMemGetInfo(&info.free_bytes, &info.total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: this query is advisory
    return {};
  }
  return info;
}

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // a non-sticky error must not poison the next check
  const std::string what = "CUDA error " + std::string(cudaGetErrorName(status)) + " (" +
                           cudaGetErrorString(status) + ") in " + where(expr, file, line);
  if (status == cudaErrorMemoryAllocation) {
    const DeviceMemoryInfo mem = device_memory_info();
    throw OutOfMemory(what + "; device memory free: " + format_bytes(mem.free_bytes) + " of " +
                      format_bytes(mem.total_bytes));
  }
  throw DeviceError(what);
}

void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file, int line) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  std::string what =
      "cuDNN error " + std::string(cudnnGetErrorString(status)) + " in " + where(expr, file, line);
  if (detail[0] != '\0') what += ": " + std::string(detail);
  if (status == CUDNN_STATUS_ALLOC_FAILED) throw OutOfMemory(what);
  throw DeviceError(what);
}

void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  const std::string what = "cuBLAS error " + std::string(cublasGetStatusName(status)) + " (" +
                           cublasGetStatusString(status) + ") in " + where(expr, file, line);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(what);
  throw DeviceError(what);
}

}  // namespace cnnergy::cuda
