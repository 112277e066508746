// User-facing hyper-parameters of each layer type, as written in model definitions (zoo, ONNX).
// Sizes that depend on the input (channels in, spatial size) are derived in Layer::setup.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "backend/ops.hpp"

namespace cnnergy {

// How a conv/fc layer's weights start. He (Kaiming) normal with fan-in suits layers followed by
// ReLU; kGaussian is Caffe's fixed-stddev gaussian (AlexNet/CaffeNet definitions). Biases start
// at bias_value (0 unless a model definition says otherwise).
enum class InitKind { kHeNormal, kGaussian };
struct WeightInit {
  InitKind kind = InitKind::kHeNormal;
  float stddev = 0.01f;  // kGaussian only
  float bias_value = 0.0f;
  static WeightInit gaussian(float stddev, float bias_value = 0.0f) { return {InitKind::kGaussian, stddev, bias_value}; }
};

struct ConvSpec {
  std::int64_t out_channels = 1;
  std::int64_t kernel_h = 3, kernel_w = 3;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
  bool bias = true;
  ConvAlgoChoice algo;  // per-layer override of the run's algorithm policy
  WeightInit init;

  // Square kernel, symmetric padding.
  static ConvSpec make(std::int64_t out, std::int64_t kernel, std::int64_t stride = 1, std::int64_t pad = 0,
                       std::int64_t groups = 1, bool bias = true) {
    ConvSpec s;
    s.out_channels = out;
    s.kernel_h = s.kernel_w = kernel;
    s.stride_h = s.stride_w = stride;
    s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = pad;
    s.groups = groups;
    s.bias = bias;
    return s;
  }
};

struct FcSpec {
  std::int64_t out_features = 1;
  bool bias = true;
  WeightInit init;
};

struct PoolSpec {
  std::int64_t kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  PoolMode mode = PoolMode::kMax;
  static PoolSpec make(std::int64_t kernel, std::int64_t stride, std::int64_t pad = 0, bool ceil_mode = false,
                       PoolMode mode = PoolMode::kMax) {
    PoolSpec s;
    s.kernel_h = s.kernel_w = kernel;
    s.stride_h = s.stride_w = stride;
    s.pad_h = s.pad_w = pad;
    s.ceil_mode = ceil_mode;
    s.mode = mode;
    return s;
  }
};

struct LrnSpec {
  std::int64_t size = 5;
  double alpha = 1e-4, beta = 0.75, k = 1.0;
};

struct BatchNormSpec {
  double eps = 1e-5;
  double momentum = 0.1;
};

struct DropoutSpec {
  float p = 0.5f;  // probability of zeroing an element in training
};

struct ChannelShuffleSpec {
  std::int64_t groups = 1;
};

struct ChannelSliceSpec {
  std::int64_t begin = 0, count = 1;  // channels [begin, begin + count)
};

struct ChannelAffineSpec {  // y = x * scale[c] + shift[c]; one value, or one per channel
  std::vector<float> scale, shift;
};

// A layer's hyper-parameters as its model definition gave them (Layer::spec()), for exporters
// (net/onnx/onnx_export.hpp); monostate for layers that have none (relu, add, mul, concat, flatten...).
// The activations beyond ReLU give their ActivationDesc (backend/activation_kind.hpp).
using LayerSpec = std::variant<std::monostate, ConvSpec, FcSpec, PoolSpec, LrnSpec, BatchNormSpec, DropoutSpec,
                               ActivationDesc, ChannelShuffleSpec, ChannelSliceSpec, ChannelAffineSpec>;

}  // namespace cnnergy
