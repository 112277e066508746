// Chooses and creates a backend for a device; the only place that knows which backends exist.
#include <string>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/ops.hpp"
#include "core/errors.hpp"
#ifdef CNNERGY_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace cnnergy {

void ConvKernel::forward_residual(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  throw NotSupported("conv2d: this backend's convolution takes no fused residual add (Backend::fuses_conv_residual)");
}

bool ConvKernel::forward_statistics(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& sums) {
  (void)sums;
  forward(x, w, Tensor(), y);
  return false;
}

void PoolKernel::forward_normalised(const Tensor&, const NormalisationMap&, bool, const Tensor&) {
  throw NotSupported("pool2d: this backend's pooling applies no batch norm's normalisation (Backend::fuses_batch_norm_pool)");
}

NormalisationMap BatchNormKernel::training_coefficients(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                       const Tensor&, const Tensor&, const Tensor&, const Tensor*) {
  throw NotSupported("batch_norm: this backend's batch norm hands no normalisation on (Backend::fuses_batch_norm_pool)");
}

NormalisationMap BatchNormKernel::inference_coefficients(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  throw NotSupported("batch_norm: this backend's batch norm hands no normalisation on (Backend::fuses_batch_norm_pool)");
}

void Backend::relu_backward_bias_grad(const Tensor&, const Tensor&, const Tensor&) {
  throw NotSupported("relu_backward_bias_grad: this backend runs a ReLU's backward and the bias gradient as two "
                     "passes (Backend::fuses_relu_bias_grad)");
}

void Backend::sgd_update_all(std::span<const SgdUpdate> updates, const SgdStep& step, const Tensor& skip_if_nonzero) {
  SgdStep each = step;
  for (const SgdUpdate& u : updates) {
    each.weight_decay = u.weight_decay;
    sgd_update(u.master, u.grad, u.momentum, u.working, each, skip_if_nonzero);
  }
}

void BatchNormKernel::check_residual_given(bool given) const {
  if (given != residual_)
    throw InvalidArgument(residual_ ? "batch_norm: a kernel made with a fused residual add needs its residual input"
                                    : "batch_norm: a residual input needs a kernel made with BatchNormDesc::residual");
}

bool cuda_backend_built() {
#ifdef CNNERGY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef CNNERGY_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::unique_ptr<Backend> create_backend(const BackendOptions& options) {
  if (options.device.is_cpu()) return cpu::create_cpu_backend(options);
#ifdef CNNERGY_HAVE_CUDA
  return cuda::create_cuda_backend(options);
#else
  throw NotSupported("device " + options.device.str() + " requested, but this cnnergy was built without CUDA");
#endif
}

}  // namespace cnnergy
