// The project's own CUDA convolutions beside cuDNN (docs/convolutions.md): direct, explicit
// im2col + cuBLAS GEMM, implicit GEMM (tensor cores), FFT (cuFFT) and Winograd F(2x2,3x3)/F(4x4,3x3), chosen per direction by the names
// "own:<implementation>" in ConvAlgoChoice or run-wide by the policy "own:<implementation>".
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "backend/cuda/conv_algos.hpp"
#include "backend/cuda/cuda_context.hpp"
#include "backend/ops.hpp"

namespace cnnergy::cuda {

// The implementations' names without the "own:" prefix (what --conv-algo own:NAME and the
// convolution benchmark accept): direct, im2col_gemm, implicit_gemm, fft, winograd.
std::span<const char* const> own_conv_implementations();
// Names accepted besides those five: winograd_2x2 (F(2x2,3x3); "winograd" is F(4x4,3x3)).
std::span<const char* const> own_conv_aliases();

inline constexpr const char* kOwnConvPrefix = "own:";
// Whether `name` has the "own:" prefix (known or not).
bool has_own_prefix(const std::string& name);
// The implementation of "own:NAME"; InvalidArgument listing the valid names when NAME is unknown.
std::string own_conv_implementation(const std::string& name);

// ---- internal: one implementation for one problem -------------------------------------------
// The numerics of a problem: the context's activation dtype, TF32 allowed, the layout.
struct OwnConvProblem {
  Conv2dDesc d;
  DType dtype = DType::kF32;
  bool tf32 = false;
  bool nhwc = false;
};

// Every pointer is a device pointer in the problem's dtype and layout (weights K,C/g,R,S in NCHW,
// K,R,S,C/g in NHWC). Bias is added and its gradient reduced by the caller (OwnConvKernel).
class OwnConvAlgo {
 public:
  virtual ~OwnConvAlgo() = default;
  // "" when this implementation runs `dir` for the problem; otherwise the rule that excludes it.
  virtual std::string unsupported(ConvDirection dir) const = 0;
  // Extra device memory one call of `dir` allocates (column buffers, spectra, transformed tiles).
  virtual std::size_t workspace_bytes(ConvDirection dir) const = 0;
  virtual void forward(const void* x, const void* w, void* y) = 0;
  virtual void backward_data(const void* dy, const void* w, void* dx, bool accumulate) = 0;
  virtual void backward_filter(const void* x, const void* dy, void* dw) = 0;
};

// Factories (own_conv_direct.cu, own_conv_im2col.cu, own_conv_implicit_gemm.cu,
// own_conv_fft.cu, own_conv_winograd.cu). They never throw for
// a shape they cannot run: unsupported() says so.
std::unique_ptr<OwnConvAlgo> make_own_direct(std::shared_ptr<CudaContext> ctx,
                                             const OwnConvProblem& p);
std::unique_ptr<OwnConvAlgo> make_own_im2col_gemm(std::shared_ptr<CudaContext> ctx,
                                                  const OwnConvProblem& p);
std::unique_ptr<OwnConvAlgo> make_own_implicit_gemm(std::shared_ptr<CudaContext> ctx,
                                                    const OwnConvProblem& p);
std::unique_ptr<OwnConvAlgo> make_own_fft(std::shared_ptr<CudaContext> ctx, const OwnConvProblem& p);
// tile_m = 4: F(4x4,3x3); tile_m = 2: F(2x2,3x3).
std::unique_ptr<OwnConvAlgo> make_own_winograd(std::shared_ptr<CudaContext> ctx,
                                               const OwnConvProblem& p, int tile_m);

// The CUDA backend's convolution: cuDNN (conv_cudnn.hpp) for every direction whose choice is a
// cuDNN policy or name, an own implementation where it is "own:NAME". A layer's explicit own name
// that cannot run the shape throws NotSupported stating the rule; the run-wide policy "own:NAME"
// falls back per direction to cuDNN's "auto" with a note (NotSupported when fallback is off).
std::unique_ptr<ConvKernel> make_cuda_conv(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& desc,
                                           const ConvAlgoChoice& choice);

}  // namespace cnnergy::cuda
