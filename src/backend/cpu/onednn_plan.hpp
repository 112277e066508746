// A whole-network oneDNN inference plan for the CPU: a list of steps over numbered values, run with
// the activations in oneDNN's blocked layouts from the first layer to the last (at most one reorder
// in and one out), residual adds fused into the convolution before them as a `sum` post-op where liveness allows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.hpp"

namespace cnnergy::cpu {

// One operation. Values are numbered 0..num_values-1; value 0 is the network input (fp32 NCHW).
struct PlanStep {
  enum class Kind { kConv, kPool, kAdd, kRelu, kLinear };
  Kind kind = Kind::kConv;
  std::string name;              // the layer's, for describe() and errors
  std::vector<int> inputs;       // value ids (kAdd: two)
  int output = -1;               // value id
  Conv2dDesc conv;               // kConv (conv.relu is ignored: see relu_after)
  Pool2dDesc pool;               // kPool (global average pooling: kernel = the input's H x W)
  std::int64_t out_features = 0; // kLinear: y = x w^T + b over the input flattened per sample
  // kConv (K, C/g, R, S) / kLinear (out, in), plain fp32; read again by refresh_weights().
  const float* weights = nullptr;
  const float* bias = nullptr;     // (K) / (out) or nullptr
  bool relu_after = false;       // y = max(0, op(...)) (a ReLU the executor fused into this layer)
};

struct PlanSpec {
  std::int64_t n = 1, c = 1, h = 1, w = 1;  // the input
  int num_values = 1;
  int logits_value = -1;         // written out as plain (N, everything else) fp32
  std::int64_t logits_per_sample = 0;
  std::vector<PlanStep> steps;   // in an order where every input is produced before it is read
};

// Whether the plan can be made at all: onednn_available() (conv_onednn_cpu.hpp).

class OnednnPlan {
 public:
  // nullptr and *why_not set when oneDNN is absent from the build or has no primitive for a step.
  static std::unique_ptr<OnednnPlan> create(const PlanSpec& spec, std::string* why_not);
  virtual ~OnednnPlan() = default;
  // images: fp32 NCHW (n, c, h, w); logits: fp32 (n, logits_per_sample). Waits for the result.
  virtual void run(const float* images, float* logits) = 0;
  // Reorders the weights again from the same pointers (after their values changed).
  virtual void refresh_weights() = 0;
  // "N primitives (conv x A, of which B with the residual add fused, pool x C, ...), M buffers, X MiB".
  virtual std::string describe() const = 0;
  virtual std::size_t fused_adds() const = 0;
};

}  // namespace cnnergy::cpu
