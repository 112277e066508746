// Factories for the CUDA backend's layer kernels (internal to the backend): cuDNN convolution,
// cuBLAS fully connected, and pooling / LRN / batch norm / softmax cross-entropy (cuDNN where it
// matches the contract, own kernels otherwise).
#pragma once

#include <memory>
#include <string>

#include "backend/cuda/cuda_context.hpp"
#include "backend/ops.hpp"

namespace cnnergy::cuda {

// conv_cudnn.cpp (the policy check is in conv_algos.hpp)
std::unique_ptr<ConvKernel> make_cudnn_conv(std::shared_ptr<CudaContext> ctx,
                                            const Conv2dDesc& desc, const ConvAlgoChoice& choice);

// linear_cublas.cpp
std::unique_ptr<LinearKernel> make_cublas_linear(std::shared_ptr<CudaContext> ctx,
                                                 const LinearDesc& desc);

// layers_cuda.cpp
std::unique_ptr<PoolKernel> make_cuda_pool(std::shared_ptr<CudaContext> ctx,
                                           const Pool2dDesc& desc);
std::unique_ptr<LrnKernel> make_cuda_lrn(std::shared_ptr<CudaContext> ctx, const LrnDesc& desc);
std::unique_ptr<BatchNormKernel> make_cuda_batch_norm(std::shared_ptr<CudaContext> ctx,
                                                      const BatchNormDesc& desc);
// Whether cuDNN normalises desc in this dtype and layout (then no ReLU can be fused into it).
bool batch_norm_uses_cudnn(const BatchNormDesc& desc, DType dtype, Layout layout);
std::unique_ptr<SoftmaxXentKernel> make_cuda_softmax_xent(std::shared_ptr<CudaContext> ctx,
                                                          const SoftmaxXentDesc& desc);

}  // namespace cnnergy::cuda
