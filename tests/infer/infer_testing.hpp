// Shared by the inference tests: a model's eval-mode forward through the training executor (the
// reference), and batch-norm statistics and affine parameters made non-trivial so that folding them
// into the convolutions is really exercised (fresh weights have mean 0, variance 1, gamma 1, beta 0).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/ops.hpp"
#include "common/tensor_testing.hpp"
#include "core/rng.hpp"
#include "net/executor.hpp"

namespace cnnergy::test {

// The CPU backend the inference tests compare against (and run on, in CI).
inline std::unique_ptr<Backend> cpu_backend() {
  BackendOptions o;
  o.device = Device{DeviceKind::kCpu, 0};
  return create_backend(o);
}

// Random running statistics and gamma/beta for every batch norm of `ex`, the same for the same seed
// on every backend (drawn in layer order).
inline void randomize_batch_norms(Executor& ex, std::uint64_t seed) {
  Rng rng(seed);
  Backend& backend = ex.backend();
  auto set = [&](const Tensor& dst, float lo, float hi) {
    const Tensor host = random_tensor(dst.shape(), rng, lo, hi);
    backend.upload(host, dst);
  };
  for (std::size_t i = 0; i < ex.num_layers(); ++i) {
    Layer& l = ex.layer(i);
    if (l.type() != "batch_norm") continue;
    // gamma / sqrt(variance) stays within about [0.35, 1]: a random model's activations then stay
    // in fp16's range through ResNet-50's 16 residual blocks (with gamma up to 1.5 and variance down
    // to 0.25 they grew past 65504 and the fp16 reference itself overflowed on an H100).
    set(l.parameters()[0].master, 0.5f, 1.0f);    // gamma
    set(l.parameters()[1].master, -0.5f, 0.5f);   // beta
    set(l.buffers()[0].tensor, -0.5f, 0.5f);      // running mean
    set(l.buffers()[1].tensor, 1.0f, 2.0f);       // running variance
  }
  backend.synchronize();
}

}  // namespace cnnergy::test
