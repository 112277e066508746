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
// Whether a pool kernel made with desc on the own kernels keeps its argmax: max pooling, keep_argmax,
// and windows whose positions fit a byte.
bool pool_argmax_fits(const Pool2dDesc& desc);
// Whether cuDNN normalises desc in this dtype and layout (then no ReLU can be fused into it).
bool batch_norm_uses_cudnn(const BatchNormDesc& desc, DType dtype, Layout layout);
std::unique_ptr<SoftmaxXentKernel> make_cuda_softmax_xent(std::shared_ptr<CudaContext> ctx,
                                                          const SoftmaxXentDesc& desc);

// channel_ops_cuda.cpp: the Backend methods of the same names (ops.hpp) for imported networks.
void cuda_activation_forward(CudaContext& ctx, const ActivationDesc& d, const Tensor& x, const Tensor& y);
void cuda_activation_backward(CudaContext& ctx, const ActivationDesc& d, const Tensor& x, const Tensor& dy,
                              const Tensor& dx, bool accumulate);
void cuda_mul_forward(CudaContext& ctx, const Tensor& a, const Tensor& b, const Tensor& y);
void cuda_mul_backward(CudaContext& ctx, const Tensor& a, const Tensor& b, const Tensor& dy, const Tensor& da,
                       bool accumulate_a, const Tensor& db, bool accumulate_b);
// y (+)= x * scale[c] + shift[c]; an undefined shift adds nothing (the backward: dx (+)= dy * scale).
void cuda_channel_affine(CudaContext& ctx, const Tensor& x, const Tensor& scale, const Tensor& shift,
                         const Tensor& y, bool accumulate);
void cuda_channel_shuffle(CudaContext& ctx, const Tensor& x, std::int64_t groups, const Tensor& y, bool accumulate);
// forward: part = whole[:, begin : ...]; else whole = that slice of part, zeros elsewhere (accumulate:
// whole[:, begin : ...] += part).
void cuda_channel_slice(CudaContext& ctx, const Tensor& whole, const Tensor& part, std::int64_t begin, bool forward,
                        bool accumulate);

}  // namespace cnnergy::cuda
