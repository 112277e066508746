// The executor's description of its network for the memory planner (net/memory_plan.hpp): which
// tensors share storage, each storage group's live interval of steps, the gradients' intervals, the
// convolution workspaces and the outputs that could be recomputed (executor.hpp gives the rules).
#include <algorithm>
#include <numeric>

#include "net/executor.hpp"
#include "net/gradient_groups.hpp"

namespace cnnergy {
namespace {

std::size_t bytes_of(const Shape& s, DType t) { return static_cast<std::size_t>(s.numel()) * dtype_size_bytes(t); }

}  // namespace

Executor::MemoryDescription Executor::describe_memory(bool with_workspaces) const {
  const auto num_layers = static_cast<int>(layers_.size());
  const auto num_tensors = graph_.num_tensors();
  const DType dtype = backend_.dtype();
  const bool train = options_.training;
  const bool reuse = options_.reuse_memory;
  auto bwd_step = [&](int layer) { return 2 * num_layers - 1 - layer; };
  auto shape_of = [&](int t) { return graph_.tensor(t).shape.with_batch(options_.batch_size); };
  MemoryDescription d;
  d.request.num_layers = num_layers;
  d.request.reuse = reuse;

  // Storage groups: each activation is its own group unless a layer's output shares its input.
  std::vector<int>& group = d.group;
  group.resize(num_tensors);
  std::iota(group.begin(), group.end(), 0);
  for (int i = 0; i < num_layers; ++i) {
    const Layer& l = *layers_[static_cast<std::size_t>(i)];
    const auto& ins = graph_.layer_inputs(static_cast<std::size_t>(i));
    const auto& outs = graph_.layer_outputs(static_cast<std::size_t>(i));
    if (l.absorbed()) {  // the producer's output, fused: one tensor in every plan
      const int via = absorbed_output_of_[static_cast<std::size_t>(i)];  // an add: the convolution's input
      group[static_cast<std::size_t>(outs[0])] = group[static_cast<std::size_t>(via >= 0 ? via : ins[0])];
      continue;
    }
    if (const int t = forward_taken_output_of_[static_cast<std::size_t>(i)]; t >= 0) {  // a batch norm writes it
      group[static_cast<std::size_t>(outs[0])] = group[static_cast<std::size_t>(t)];
      continue;
    }
    if (!reuse || outs.size() != 1 || ins.size() != 1 || ins[0] == graph_.input_tensor()) continue;
    const int x = ins[0];
    const auto alias = l.input_alias();
    if (alias == Layer::InputAlias::kNone) continue;
    if (alias == Layer::InputAlias::kInPlace) {
      const GraphTensor& xt = graph_.tensor(x);
      const bool sole_reader = xt.consumers.size() == 1;
      const bool producer_keeps_output = train && layers_[static_cast<std::size_t>(xt.producer)]->needs_outputs_in_backward();
      bool x_shared = group[static_cast<std::size_t>(x)] != x;  // x is itself a view of something
      if (!sole_reader || producer_keeps_output || x_shared || x == graph_.logits_tensor()) continue;
    }
    group[static_cast<std::size_t>(outs[0])] = group[static_cast<std::size_t>(x)];
  }

  // Activation intervals per group: forward (producer to last forward reader) and backward (the
  // backward steps that read it), kept apart so that a recomputed group can drop between them.
  std::vector<ActivationSpan>& spans = d.request.groups;
  spans.assign(num_tensors, ActivationSpan{});
  // Batch-norm apply fusion: the batch norm's output group takes no memory; its input lives on
  // through the normalising pool's forward, which reads it.
  std::vector<char> unwritten_group(num_tensors, 0);
  std::vector<int> last_normalising_reader(num_tensors, -1);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (output_unwritten_[i])
      unwritten_group[static_cast<std::size_t>(group[static_cast<std::size_t>(graph_.layer_outputs(i)[0])])] = 1;
    if (const int x = normalised_input_of_[i]; x >= 0)
      last_normalising_reader[static_cast<std::size_t>(x)] = static_cast<int>(i);
  }
  for (std::size_t t = 1; t < num_tensors; ++t) {
    if (unwritten_group[static_cast<std::size_t>(group[t])]) continue;
    const GraphTensor& gt = graph_.tensor(static_cast<int>(t));
    ActivationSpan mine;
    mine.start = gt.producer;
    mine.forward_end = std::max(gt.producer, last_normalising_reader[t]);
    auto read_in_backward = [&](int layer) {
      mine.backward_start = std::min(mine.backward_start, bwd_step(layer));
      mine.backward_end = std::max(mine.backward_end, bwd_step(layer));
    };
    for (int c : gt.consumers) {
      mine.forward_end = std::max(mine.forward_end, c);
      if (train && layers_[static_cast<std::size_t>(c)]->needs_inputs_in_backward()) read_in_backward(c);
    }
    if (train && layers_[static_cast<std::size_t>(gt.producer)]->needs_outputs_in_backward()) read_in_backward(gt.producer);
    if (static_cast<int>(t) == graph_.logits_tensor()) read_in_backward(-1);  // readable after the iteration
    mine.bytes = bytes_of(shape_of(static_cast<int>(t)), dtype);
    const auto producer = static_cast<std::size_t>(gt.producer);
    if (!layers_[producer]->absorbed() && forward_taken_output_of_[producer] < 0)
      d.naive_bytes += mine.bytes;  // else the producer's
    ActivationSpan& g = spans[static_cast<std::size_t>(group[t])];
    if (!g.used) {
      g = mine;
      g.used = true;
      continue;
    }
    g.start = std::min(g.start, mine.start);
    g.forward_end = std::max(g.forward_end, mine.forward_end);
    g.backward_start = std::min(g.backward_start, mine.backward_start);
    g.backward_end = std::max(g.backward_end, mine.backward_end);
    g.bytes = std::max(g.bytes, mine.bytes);
  }
  spans[0].used = false;  // the network input: set_input's, never planned

  // Gradient storage groups (gradient_groups.hpp): an input's gradient shares its layer's output
  // gradient where the layer allows it (Layer::gradient_in_place: ReLU, add) and the plan stays
  // exact: the layer is the input's sole consumer, or its last one (the residual shortcut).
  auto has_grad = [&](int t) {
    const GraphTensor& gt = graph_.tensor(t);
    return t != graph_.input_tensor() && gt.needs_grad && !gt.consumers.empty();
  };
  d.gradient.assign(num_tensors, -1);
  if (train) {
    GradientGroupInputs gi;
    gi.graph = &graph_;
    gi.layers = &layers_;
    gi.reuse = reuse;
    gi.has_grad = has_grad;
    gi.same_shape = [&](int a, int b) { return shape_of(a) == shape_of(b); };
    const std::vector<int> grad_root = plan_gradient_groups(gi);
    // Gradient intervals: from the first consumer's backward (the highest consumer index) to the
    // producer's backward, united over a storage group.
    std::vector<PlanInterval>& grads = d.request.gradients;
    std::vector<int> group_gradient(num_tensors, -1);
    for (std::size_t t = 1; t < num_tensors; ++t) {
      if (!has_grad(static_cast<int>(t))) continue;
      const GraphTensor& gt = graph_.tensor(static_cast<int>(t));
      const std::size_t bytes = bytes_of(shape_of(static_cast<int>(t)), dtype);
      if (!layers_[static_cast<std::size_t>(gt.consumers.back())]->absorbed()) d.naive_bytes += bytes;  // else its output's
      const PlanInterval mine{bwd_step(gt.consumers.back()), bwd_step(gt.producer), bytes, 0};
      int& item = group_gradient[static_cast<std::size_t>(grad_root[t])];
      if (item < 0) {
        item = static_cast<int>(grads.size());
        grads.push_back(mine);
        d.gradient_labels.push_back("gradient of the output of " + layers_[static_cast<std::size_t>(gt.producer)]->name());
      } else {
        PlanInterval& it = grads[static_cast<std::size_t>(item)];
        it.start = std::min(it.start, mine.start);
        it.end = std::max(it.end, mine.end);
        it.bytes = std::max(it.bytes, mine.bytes);
      }
      d.gradient[t] = item;
    }
  }

  // Convolution workspaces (conv_workspace_in_arena): the most a layer's forward / backward call
  // asks, known once the algorithms are resolved (the constructor resolves them before planning).
  if (with_workspaces && train && reuse && options_.conv_workspace_in_arena) {
    d.request.forward_workspace_bytes.assign(layers_.size(), 0);
    d.request.backward_workspace_bytes.assign(layers_.size(), 0);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      d.request.forward_workspace_bytes[i] = layers_[i]->workspace_bound(false);
      d.request.backward_workspace_bytes[i] = layers_[i]->workspace_bound(true);
    }
  }
  return d;
}

// Groups whose producer can write them again from its input (Layer::recomputes_output: a batch norm
// without a fused add, a pooling layer) and whose other members are the outputs of ReLUs absorbed
// into it, so that what backward reads is exactly what the producer writes. The logits and the
// network input never.
std::vector<RecomputeOption> Executor::recompute_options(const MemoryDescription& d) const {
  std::vector<RecomputeOption> out;
  const auto num_tensors = graph_.num_tensors();
  const std::vector<int>& group = d.group;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = *layers_[i];
    const auto& ins = graph_.layer_inputs(i);
    const auto& outs = graph_.layer_outputs(i);
    // The input must still be there when the output is rebuilt: a layer that reads its input in its
    // own backward keeps it live until then, after every reader of its output.
    if (!l.recomputes_output() || !l.needs_inputs_in_backward() || ins.size() != 1 || outs.size() != 1 ||
        forward_taken_output_of_[i] >= 0)
      continue;
    const int t = outs[0];
    const int g = group[static_cast<std::size_t>(t)];
    if (t == graph_.logits_tensor()) continue;
    bool clean = true;
    for (std::size_t u = 1; u < num_tensors && clean; ++u) {
      if (group[u] != g || static_cast<int>(u) == t) continue;
      const auto producer = static_cast<std::size_t>(graph_.tensor(static_cast<int>(u)).producer);
      const Layer& p = *layers_[producer];
      clean = p.absorbed() && p.absorbed_into() == l.name() && absorbed_output_of_[producer] < 0 &&
              static_cast<int>(u) != graph_.logits_tensor();
    }
    if (!clean) continue;
    const Shape input_shape = graph_.tensor(ins[0]).shape.with_batch(options_.batch_size);
    out.push_back(RecomputeOption{static_cast<int>(i), ins[0], group[static_cast<std::size_t>(ins[0])], g,
                                  bytes_of(input_shape, backend_.dtype())});
  }
  return out;
}

}  // namespace cnnergy
