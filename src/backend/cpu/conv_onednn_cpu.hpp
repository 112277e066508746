// The CPU convolution's oneDNN forward path (Debian's libdnnl-dev, found at configure time; the
// compile definition CNNERGY_HAVE_ONEDNN): one primitive per problem, created once, weights
// reordered to oneDNN's preferred layout (once while they are held), bias and ReLU as post-ops.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "backend/cpu/cpu_common.hpp"
#include "backend/ops.hpp"

namespace cnnergy::cpu {

// True when this build links oneDNN.
bool onednn_available();

class OnednnConvForward {
 public:
  // nullptr when oneDNN is absent from the build or has no implementation for the problem (the
  // caller falls back to im2col_gemm). relu: y = max(0, conv + bias) (a post-op).
  static std::unique_ptr<OnednnConvForward> create(const Conv2dDesc& desc, bool relu,
                                                   std::shared_ptr<Workspace> workspace);
  virtual ~OnednnConvForward() = default;

  // x NCHW, w (K, C/g, R, S), b (K) or nullptr when the descriptor has no bias, y NCHW.
  virtual void forward(const float* x, const float* w, const float* b, float* y) = 0;
  // From now until the next call, forward() is given the same weights with the same values: the
  // reordered copy is kept (keyed on the weights' address) instead of being redone per call.
  virtual void hold_weights() = 0;
  // oneDNN's implementation name (e.g. "jit:avx2") and the layouts it runs in, for info().
  virtual std::string describe() const = 0;
  // The shared workspace this path asks for per call (reordered input, output, weights not held).
  virtual std::size_t workspace_bytes() const = 0;
};

}  // namespace cnnergy::cpu
