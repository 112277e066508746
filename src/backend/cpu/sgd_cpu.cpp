// Momentum SGD on the CPU, PyTorch-style (no dampening): g' = g * inv_grad_scale + wd * w;
// v = momentum * v + g'; w -= lr * v; then the working copy (if any) is refreshed from the master.
// An overflowed fp16 step (skip_if_nonzero holding non-zero) changes nothing.
#include <string>

#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

void sgd_update(const Tensor& master, const Tensor& grad, const Tensor& momentum,
                const Tensor& working, const SgdStep& step, const Tensor& skip_if_nonzero) {
  constexpr std::string_view kOp = "sgd_update";
  const std::int64_t count = master.defined() ? master.numel() : 0;
  check_f32(master, kOp, "master", count);
  check_f32(grad, kOp, "grad", count);
  if (momentum.defined()) {
    check_f32(momentum, kOp, "momentum buffer", count);
  } else if (step.momentum != 0.0f) {
    throw InvalidArgument("sgd_update: momentum " + std::to_string(step.momentum) +
                          " needs a momentum buffer");
  }
  if (working.defined()) {
    if (!working.device().is_cpu() || working.dtype() == DType::kI32 || working.numel() != count)
      throw InvalidArgument("sgd_update: working copy must be a host float tensor of " +
                            std::to_string(count) + " elements, got " + working.describe());
  }
  if (skip_if_nonzero.defined()) {
    check_i32(skip_if_nonzero, kOp, "skip flag", 1);
    if (skip_if_nonzero.data<std::int32_t>()[0] != 0) return;
  }
  float* w = mf32(master);
  const float* g = cf32(grad);
  float* v = momentum.defined() ? mf32(momentum) : nullptr;
  for (std::int64_t i = 0; i < count; ++i) {
    const float gi = g[i] * step.inv_grad_scale + step.weight_decay * w[i];
    float update = gi;
    if (v) {
      v[i] = step.momentum * v[i] + gi;
      update = v[i];
    }
    w[i] -= step.learning_rate * update;
  }
  if (!working.defined() || working.raw() == master.raw()) return;
  switch (working.dtype()) {
    case DType::kF32:
      for (std::int64_t i = 0; i < count; ++i) working.data<float>()[i] = w[i];
      break;
    case DType::kF16:
      for (std::int64_t i = 0; i < count; ++i)
        working.data<std::uint16_t>()[i] = float_to_half_bits(w[i]);
      break;
    case DType::kBF16:
      for (std::int64_t i = 0; i < count; ++i)
        working.data<std::uint16_t>()[i] = float_to_bf16_bits(w[i]);
      break;
    case DType::kI32:
      break;  // rejected above
  }
}

}  // namespace cnnergy::cpu
