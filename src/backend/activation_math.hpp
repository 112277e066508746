// The element-wise activations of ops.hpp (ActivationDesc) as one set of scalar formulas that the CPU
// reference and the CUDA kernels both compile (host and device), so the two backends compute the same
// function and the same derivative; only rounding to the storage type differs.
#pragma once

#include <cmath>

#include "backend/activation_kind.hpp"

#if defined(__CUDACC__)
#define CNNERGY_HOST_DEVICE __host__ __device__
#else
#define CNNERGY_HOST_DEVICE
#endif

namespace cnnergy::activation {

CNNERGY_HOST_DEVICE inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// f(x). Clip to [alpha, beta] (ReLU6: [0, 6]); LeakyRelu x or alpha x; HardSigmoid
// max(0, min(1, alpha x + beta)); HardSwish x * max(0, min(1, x / 6 + 1/2)) (ONNX's definition);
// SiLU (Swish) x * sigmoid(x). A NaN stays NaN except through Clip's comparisons (as fminf/fmaxf).
CNNERGY_HOST_DEVICE inline float forward(ActivationKind kind, float alpha, float beta, float x) {
  switch (kind) {
    case ActivationKind::kClip:
      return x < alpha ? alpha : (x > beta ? beta : x);
    case ActivationKind::kLeakyRelu:
      return x >= 0.0f ? x : alpha * x;
    case ActivationKind::kSigmoid:
      return sigmoid(x);
    case ActivationKind::kHardSigmoid: {
      const float v = alpha * x + beta;
      return v <= 0.0f ? 0.0f : (v >= 1.0f ? 1.0f : v);
    }
    case ActivationKind::kHardSwish: {
      const float v = x / 6.0f + 0.5f;
      return x * (v <= 0.0f ? 0.0f : (v >= 1.0f ? 1.0f : v));
    }
    case ActivationKind::kSilu:
      return x * sigmoid(x);
  }
  return x;
}

// f'(x), from the input x. At the kinks the derivative of the piece on the outside is taken:
// Clip and HardSigmoid pass the gradient strictly inside (PyTorch's hardtanh / hardsigmoid);
// HardSwish uses x / 3 + 1/2 on [-3, 3] (PyTorch's hardswish_backward).
CNNERGY_HOST_DEVICE inline float derivative(ActivationKind kind, float alpha, float beta, float x) {
  switch (kind) {
    case ActivationKind::kClip:
      return (x > alpha && x < beta) ? 1.0f : 0.0f;
    case ActivationKind::kLeakyRelu:
      return x > 0.0f ? 1.0f : alpha;
    case ActivationKind::kSigmoid: {
      const float s = sigmoid(x);
      return s * (1.0f - s);
    }
    case ActivationKind::kHardSigmoid: {
      const float v = alpha * x + beta;
      return (v > 0.0f && v < 1.0f) ? alpha : 0.0f;
    }
    case ActivationKind::kHardSwish:
      return x < -3.0f ? 0.0f : (x <= 3.0f ? x / 3.0f + 0.5f : 1.0f);
    case ActivationKind::kSilu: {
      const float s = sigmoid(x);
      return s * (1.0f + x * (1.0f - s));
    }
  }
  return 1.0f;
}

}  // namespace cnnergy::activation
