// Gradient storage groups of the executor's memory plan (see gradient_groups.hpp).
#include "net/gradient_groups.hpp"

#include <algorithm>
#include <numeric>

namespace cnnergy {
namespace {

// Layer indices of the other consumers of a shared input: their backward accumulates into the
// group's buffer, from `last` (backward runs in reverse layer order) down to `first`.
struct Window {
  int tensor = -1;
  int first = 0, last = 0;
};

class Groups {
 public:
  Groups(const GradientGroupInputs& in) : in_(in), parent_(in.graph->num_tensors()), windows_(parent_.size()) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }

  int root(int t) const {
    while (parent_[static_cast<std::size_t>(t)] != t) t = parent_[static_cast<std::size_t>(t)];
    return t;
  }

  // `t`'s group joins `into`'s group.
  void unite(int t, int into, const Window* window = nullptr) {
    const int a = root(t), b = root(into);
    if (a == b) return;
    parent_[static_cast<std::size_t>(a)] = b;
    auto& wb = windows_[static_cast<std::size_t>(b)];
    auto& wa = windows_[static_cast<std::size_t>(a)];
    wb.insert(wb.end(), wa.begin(), wa.end());
    wa.clear();
    if (window != nullptr) wb.push_back(*window);
  }

  // Whether the groups of `t` and `into` may become one with `window`'s accumulations into t: every
  // member's backward activity (its producer reads its gradient, its consumers write it) lies wholly
  // before or wholly after every accumulation window of the united group, except the window's own
  // tensor, whose gradient is the one being summed.
  bool can_unite(int t, int into, const Window& window) const {
    const int a = root(t), b = root(into);
    if (a == b) return false;
    std::vector<Window> all = windows_[static_cast<std::size_t>(a)];
    const auto& wb = windows_[static_cast<std::size_t>(b)];
    all.insert(all.end(), wb.begin(), wb.end());
    all.push_back(window);
    const Graph& g = *in_.graph;
    for (std::size_t u = 1; u < parent_.size(); ++u) {
      const int r = root(static_cast<int>(u));
      if ((r != a && r != b) || !in_.has_grad(static_cast<int>(u))) continue;
      const GraphTensor& gt = g.tensor(static_cast<int>(u));
      for (const Window& w : all) {
        if (w.tensor == static_cast<int>(u)) continue;
        const bool before = gt.producer > w.last;         // done before the first accumulation
        const bool after = gt.consumers.back() < w.first;  // starts after the last one
        if (!before && !after) return false;
      }
    }
    return true;
  }

  std::vector<int> roots() const {
    std::vector<int> out(parent_.size());
    for (std::size_t t = 0; t < out.size(); ++t) out[t] = root(static_cast<int>(t));
    return out;
  }

 private:
  const GradientGroupInputs& in_;
  std::vector<int> parent_;
  std::vector<std::vector<Window>> windows_;  // by root
};

}  // namespace

std::vector<int> plan_gradient_groups(const GradientGroupInputs& in) {
  const Graph& g = *in.graph;
  const auto& layers = *in.layers;
  Groups groups(in);
  auto shareable = [&](std::size_t i, std::size_t j, int out) {
    const auto& ins = g.layer_inputs(i);
    const int t = ins[j];
    return layers[i]->gradient_in_place(j) && in.has_grad(t) && std::count(ins.begin(), ins.end(), t) == 1 &&
           in.same_shape(t, out);
  };
  // Absorbed ReLUs, and inputs with this layer as their sole consumer.
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& ins = g.layer_inputs(i);
    const auto& outs = g.layer_outputs(i);
    if (outs.size() != 1 || !in.has_grad(outs[0])) continue;
    if (layers[i]->absorbed()) {
      if (in.has_grad(ins[0])) groups.unite(ins[0], outs[0]);
      continue;
    }
    if (!in.reuse) continue;
    for (std::size_t j = 0; j < ins.size(); ++j)
      if (shareable(i, j, outs[0]) && g.tensor(ins[j]).consumers.size() == 1) groups.unite(ins[j], outs[0]);
  }
  if (!in.reuse) return groups.roots();
  // Inputs this layer reads last of several consumers (the residual shortcut at its add).
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& ins = g.layer_inputs(i);
    const auto& outs = g.layer_outputs(i);
    if (outs.size() != 1 || !in.has_grad(outs[0]) || layers[i]->absorbed()) continue;
    for (std::size_t j = 0; j < ins.size(); ++j) {
      const auto& consumers = g.tensor(ins[j]).consumers;
      if (consumers.size() < 2 || consumers.back() != static_cast<int>(i) || !shareable(i, j, outs[0])) continue;
      const Window w{ins[j], consumers.front(), consumers[consumers.size() - 2]};
      if (groups.can_unite(ins[j], outs[0], w)) groups.unite(ins[j], outs[0], &w);
    }
  }
  return groups.roots();
}

}  // namespace cnnergy
