// RAII owners for every CUDA, cuDNN and cuBLAS handle and descriptor the backend creates: each is
// created in its constructor (throwing on failure) and destroyed exactly once; move-only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <utility>

#include "backend/cuda/cuda_check.hpp"

namespace cnnergy::cuda {

// Owns one handle of type H: Create(&h) in the constructor, Destroy(h) in the destructor. Errors
// while destroying are ignored: a destructor cannot throw, and at process exit the driver may
// already be gone (cudaErrorCudartUnloading).
template <typename H, auto Create, auto Destroy>
class UniqueHandle {
 public:
  UniqueHandle() { CNNERGY_CUDA_CALL(Create(&handle_)); }
  ~UniqueHandle() { reset(); }
  UniqueHandle(UniqueHandle&& other) noexcept : handle_(std::exchange(other.handle_, H{})) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, H{});
    }
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  H get() const { return handle_; }
  operator H() const { return handle_; }  // NOLINT: handles are passed to C APIs everywhere

 private:
  void reset() noexcept {
    if (handle_ != H{}) {
      (void)Destroy(handle_);
      handle_ = H{};
    }
  }
  H handle_{};
};

namespace detail {
// Non-blocking streams do not synchronise with the legacy default stream, so work that some other
// library enqueues on stream 0 does not serialise with ours.
inline cudaError_t create_stream(cudaStream_t* s) {
  return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
}
inline cudaError_t create_timing_event(cudaEvent_t* e) {
  return cudaEventCreateWithFlags(e, cudaEventDefault);
}
}  // namespace detail

using Stream = UniqueHandle<cudaStream_t, detail::create_stream, cudaStreamDestroy>;
using Event = UniqueHandle<cudaEvent_t, detail::create_timing_event, cudaEventDestroy>;
using CudnnHandle = UniqueHandle<cudnnHandle_t, cudnnCreate, cudnnDestroy>;
using CublasHandle = UniqueHandle<cublasHandle_t, cublasCreate, cublasDestroy>;
using TensorDescriptor = UniqueHandle<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                      cudnnDestroyTensorDescriptor>;
using FilterDescriptor = UniqueHandle<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                      cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    UniqueHandle<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                 cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor = UniqueHandle<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                       cudnnDestroyPoolingDescriptor>;
using LrnDescriptor =
    UniqueHandle<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;

}  // namespace cnnergy::cuda
