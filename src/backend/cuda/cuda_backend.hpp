// The CUDA backend: cuDNN for convolution, pooling, LRN and batch norm; cuBLAS(Lt) for fully
// connected layers; own kernels for the element-wise rest. Included only when CUDA was built.
#pragma once

#include <memory>

#include "backend/ops.hpp"

namespace cnnergy::cuda {

int device_count();  // 0 without driver or GPU (never throws)
std::unique_ptr<Backend> create_cuda_backend(const BackendOptions& options);

}  // namespace cnnergy::cuda
