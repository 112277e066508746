// A strided convolution over few input channels run space-to-depth (BackendOptions::conv_space_to_depth):
// the input's S x S blocks become channels, so the stride-S convolution over C channels is a stride-1
// convolution over C*S*S (padded to a multiple of 8) with a ceil(R/S) x ceil(Sk/S) kernel. Same sums,
// aligned channels: cuDNN then needs no padding pass and runs its tensor-core kernels at full tiles.
#pragma once

#include <memory>
#include <optional>

#include "backend/cuda/cuda_context.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/ops.hpp"

namespace cnnergy::cuda {

// The rearranged geometry where the rearrangement applies (NHWC, groups 1, no dilation, equal
// strides >= 2, C not a multiple of 8 and C*S*S <= 64, no residual add); nullopt otherwise.
std::optional<kernels::SpaceToDepthGeom> space_to_depth_geometry(const Conv2dDesc& d, Layout layout);
// The stride-1 convolution over the rearranged input (bias and ReLU as in `d`).
Conv2dDesc space_to_depth_desc(const Conv2dDesc& d, const kernels::SpaceToDepthGeom& g);

// Forward runs whichever of the plain convolution and the rearranged one measured faster on the
// layer's first forward outside a CUDA-graph capture (both timed on the layer's operands, the
// rearrangement's passes included). The weight gradient likewise, on the first backward_filter: the
// plain one, or the rearranged convolution's over the input rearranged again (the call's x) mapped
// back to the original taps (kernels::space_to_depth_weights_grad). The data gradient is always the
// plain convolution's (a first layer seldom needs one).
std::unique_ptr<ConvKernel> make_space_to_depth_conv(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& d,
                                                     const kernels::SpaceToDepthGeom& g,
                                                     std::unique_ptr<ConvKernel> plain,
                                                     std::unique_ptr<ConvKernel> rearranged);

}  // namespace cnnergy::cuda
