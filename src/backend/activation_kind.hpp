// The element-wise activations beyond ReLU (ONNX import of MobileNet, EfficientNet, RegNet, ...):
// which function and its two constants. Kept apart from ops.hpp so CUDA sources include only this.
#pragma once

namespace cnnergy {

enum class ActivationKind { kClip, kLeakyRelu, kSigmoid, kHardSigmoid, kHardSwish, kSilu };

struct ActivationDesc {
  ActivationKind kind = ActivationKind::kSigmoid;
  float alpha = 0.0f;  // Clip: min; LeakyRelu: slope below 0; HardSigmoid: alpha (slope)
  float beta = 0.0f;   // Clip: max; HardSigmoid: beta (offset)
};

}  // namespace cnnergy
