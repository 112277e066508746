// Which tensors' gradients share one buffer in the executor's memory plan (executor.hpp gives the
// rules; this is their implementation). A layer whose backward hands its output gradient on (add)
// or computes the input gradient in place (ReLU: Layer::gradient_in_place) may give an input the
// output gradient's storage:
// * when it is the input's sole consumer (nothing else writes that gradient), always;
// * when other, earlier layers also consume the input (a residual shortcut: the add and the block's
//   first convolution read it) and this layer is its last consumer, i.e. the first to write its
//   gradient in backward order; the others then accumulate into the shared buffer. That is allowed
//   only where the plan stays exact: every other tensor in the two groups is touched in backward
//   either entirely before the first of those accumulations (it reads the gradient as this layer
//   handed it on) or entirely after the last (it reads the finished sum), and the same holds for the
//   accumulation windows of shortcuts already merged into either group.
// Absorbed ReLUs (ReLU fusion) always share their producer's output gradient.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "layers/layer.hpp"
#include "net/graph.hpp"

namespace cnnergy {

struct GradientGroupInputs {
  const Graph* graph = nullptr;
  const std::vector<std::unique_ptr<Layer>>* layers = nullptr;  // bound, index-aligned with the graph
  bool reuse = true;                                              // ExecutorOptions::reuse_memory
  std::function<bool(int)> has_grad;                              // tensor id -> gets a gradient
  std::function<bool(int, int)> same_shape;                       // tensor ids -> same shape at the batch
};

// For every tensor id, the id of its group's root (itself when it shares with nobody).
std::vector<int> plan_gradient_groups(const GradientGroupInputs& in);

}  // namespace cnnergy
