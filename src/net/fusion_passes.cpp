// The executor's fusion passes, run once when it binds a graph (executor.hpp gives the rules): batch
// norms folded into convolutions, ReLUs into their producers, residual adds into the layer before them,
// statistics from convolutions, argmax keeping and ReLU masks in max pools, and batch norms applied by
// the max pool after them. Each pass offers a layer what the graph allows; the layer (with its
// backend) takes it or not.
#include <memory>
#include <optional>

#include "net/executor.hpp"

namespace cnnergy {

// A batch norm whose input is the only output of a layer and read by nothing else is offered to
// that layer (a convolution folds it into its weights and bias).
void Executor::fold_batch_norms() {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& bn = *layers_[i];
    const auto& ins = graph_.layer_inputs(i);
    if (bn.type() != "batch_norm" || ins.size() != 1) continue;
    const GraphTensor& xt = graph_.tensor(ins[0]);
    if (ins[0] == graph_.input_tensor() || ins[0] == graph_.logits_tensor() || xt.producer < 0 ||
        xt.consumers.size() != 1 || graph_.layer_outputs(static_cast<std::size_t>(xt.producer)).size() != 1)
      continue;
    Layer& producer = *layers_[static_cast<std::size_t>(xt.producer)];
    if (producer.absorbed() || !producer.absorb_batch_norm(bn)) continue;
    bn.absorb_into(producer.name());
    ++memory_.folded_batch_norms;
  }
  folds_pending_ = memory_.folded_batch_norms > 0;
}

// A ReLU whose input is the only output of a layer and read by nothing else is offered to that layer.
void Executor::fuse_relus() {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& relu = *layers_[i];
    const auto& ins = graph_.layer_inputs(i);
    if (relu.type() != "relu" || ins.size() != 1) continue;
    const int x = ins[0];
    const GraphTensor& xt = graph_.tensor(x);
    if (x == graph_.input_tensor() || x == graph_.logits_tensor() || xt.producer < 0 || xt.consumers.size() != 1 ||
        graph_.layer_outputs(static_cast<std::size_t>(xt.producer)).size() != 1)
      continue;
    Layer* producer = layers_[static_cast<std::size_t>(xt.producer)].get();
    if (producer->absorbed()) {
      // A batch norm folded into the convolution before it (the convolution's sole consumer): the
      // convolution is offered the ReLU; conv -> (bn) -> relu is one chain, planned as one tensor.
      const int conv = producer->type() == "batch_norm" ? absorber_of(static_cast<std::size_t>(xt.producer)) : -1;
      if (conv < 0) continue;
      producer = layers_[static_cast<std::size_t>(conv)].get();
    }
    if (producer->absorbed() || !producer->fuse_relu(backend_)) continue;
    relu.absorb_into(producer->name());
    ++memory_.fused_relus;
  }
}

int Executor::absorber_of(std::size_t i) const {
  const auto& ins = graph_.layer_inputs(i);
  if (!layers_[i]->absorbed() || ins.size() != 1) return -1;
  const int p = graph_.tensor(ins[0]).producer;
  if (p < 0 || layers_[static_cast<std::size_t>(p)]->name() != layers_[i]->absorbed_into()) return -1;
  return p;
}

// An add whose input t is a batch norm's only output, read by nothing else, is offered to the layer
// that then computes it: with folding, the convolution the batch norm was folded into; without, the
// batch norm itself. The add's other input z must be computed before that layer, which reads it in
// forward. Folded (inference), the add is absorbed and runs nothing; otherwise only its forward is
// taken, and its backward still runs.
void Executor::fuse_residuals() {
  const bool folded = options_.fold_batch_norm;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& add = *layers_[i];
    const auto& ins = graph_.layer_inputs(i);
    if (add.type() != "add" || add.absorbed() || ins.size() != 2 || ins[0] == ins[1]) continue;
    for (std::size_t j = 0; j < 2; ++j) {
      const int t = ins[j], z = ins[1 - j];
      const GraphTensor& tt = graph_.tensor(t);
      if (t == graph_.input_tensor() || tt.producer < 0 || tt.consumers.size() != 1 ||
          graph_.layer_outputs(static_cast<std::size_t>(tt.producer)).size() != 1)
        continue;
      const Layer& bn = *layers_[static_cast<std::size_t>(tt.producer)];
      const auto& bn_ins = graph_.layer_inputs(static_cast<std::size_t>(tt.producer));
      if (bn.type() != "batch_norm" || bn.absorbed() != folded || bn_ins.size() != 1) continue;
      int taker = tt.producer;
      if (folded) {  // only a folded convolution has a bias to add z beside
        taker = graph_.tensor(bn_ins[0]).producer;
        if (taker < 0 || layers_[static_cast<std::size_t>(taker)]->name() != bn.absorbed_into()) continue;
      }
      if (graph_.tensor(z).producer >= taker) continue;  // z must exist when the taker runs (-1: the input)
      Layer& layer = *layers_[static_cast<std::size_t>(taker)];
      if (!layer.fuse_residual(backend_, add.relu_fused())) continue;
      if (folded) {
        add.absorb_into(layer.name());
        absorbed_output_of_[i] = t;
      } else {
        forward_taken_output_of_[i] = t;
      }
      residual_input_[static_cast<std::size_t>(taker)] = z;
      ++memory_.fused_residuals;
      // Its backward too, where nothing runs backward between the add and the batch norm.
      if (!folded && options_.training && options_.fuse_residual_backward && add.relu_fused() &&
          static_cast<std::size_t>(taker) + 1 == i && layer.take_residual_relu_backward()) {
        add.leave_relu_backward();
        ++memory_.fused_residual_masks;
      }
      break;
    }
  }
}

// A max pool whose input nothing else reads in backward may keep its argmax from forward
// (Layer::offer_argmax_keeping), and its input then dies after forward. Where another layer reads
// that memory in backward anyway (VGG's convolutions keep their fused ReLU's output), the argmax
// bytes would only add to the peak: the pool reads its input again instead. Walks through absorbed
// producers (a ReLU fused into the layer before it) to the layer that writes the memory.
std::vector<std::pair<std::size_t, std::size_t>> Executor::offer_argmax_keeping() {
  // Whether tensor t's memory is read in backward by a layer other than `reader`.
  auto read_by_others = [&](auto&& self, int t, std::size_t reader) -> bool {
    const GraphTensor& gt = graph_.tensor(t);
    if (t == graph_.input_tensor() || t == graph_.logits_tensor() || gt.producer < 0) return true;
    for (int c : gt.consumers)
      if (static_cast<std::size_t>(c) != reader && layers_[static_cast<std::size_t>(c)]->needs_inputs_in_backward())
        return true;
    const auto producer = static_cast<std::size_t>(gt.producer);
    const Layer& p = *layers_[producer];
    if (p.needs_outputs_in_backward() || forward_taken_output_of_[producer] >= 0) return true;
    if (!p.absorbed()) return false;
    const auto& ins = graph_.layer_inputs(producer);
    return ins.size() != 1 || self(self, ins[0], producer);
  };
  // The convolution whose fused ReLU output tensor t is (through the absorbed ReLU layer), where that
  // output is read by `reader` alone and the ReLU's mask is the only reason the convolution reads its
  // output in backward; -1 otherwise.
  auto relu_convolution = [&](int t, std::size_t reader) -> int {
    const GraphTensor& gt = graph_.tensor(t);
    if (t == graph_.input_tensor() || t == graph_.logits_tensor() || gt.producer < 0 || gt.consumers.size() != 1 ||
        static_cast<std::size_t>(gt.consumers[0]) != reader)
      return -1;
    const auto relu = static_cast<std::size_t>(gt.producer);
    if (!layers_[relu]->absorbed() || graph_.layer_inputs(relu).size() != 1) return -1;
    const int x = graph_.layer_inputs(relu)[0];
    const GraphTensor& xt = graph_.tensor(x);
    if (x == graph_.input_tensor() || xt.producer < 0 || xt.consumers.size() != 1) return -1;
    const auto conv = static_cast<std::size_t>(xt.producer);
    const Layer& c = *layers_[conv];
    if (c.type() != "conv" || c.absorbed() || !c.relu_fused() || graph_.layer_outputs(conv).size() != 1 ||
        forward_taken_output_of_[conv] >= 0 || absorber_of(relu) != static_cast<int>(conv))
      return -1;
    return static_cast<int>(conv);
  };
  std::vector<std::pair<std::size_t, std::size_t>> relu_mask_offers;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& pool = *layers_[i];
    const auto& ins = graph_.layer_inputs(i);
    if (pool.type() != "max_pool" || ins.size() != 1) continue;
    if (!read_by_others(read_by_others, ins[0], i)) {
      pool.offer_argmax_keeping();
      continue;
    }
    if (!options_.pool_relu_mask) continue;
    if (const int conv = relu_convolution(ins[0], i); conv >= 0 && pool.offer_relu_mask(backend_))
      relu_mask_offers.emplace_back(static_cast<std::size_t>(conv), i);
  }
  return relu_mask_offers;
}

// A max pool whose input only it reads and that was offered its argmax (offer_argmax_keeping: nothing
// reads that input in backward), where the input is a batch norm's output (through the ReLU fused into
// it) and the layers between the two run nothing: the batch norm offers the pool its normalisation.
// Taken, the pool reads the batch norm's input, and the batch norm's output is never written.
void Executor::fuse_normalisations() {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& pool = *layers_[i];
    const auto& ins = graph_.layer_inputs(i);
    if (pool.type() != "max_pool" || ins.size() != 1) continue;
    const GraphTensor& tt = graph_.tensor(ins[0]);
    if (ins[0] == graph_.input_tensor() || tt.producer < 0 || tt.consumers.size() != 1) continue;
    auto b = static_cast<std::size_t>(tt.producer);
    if (layers_[b]->absorbed()) {  // the ReLU fused into the batch norm: its input is the batch norm's output
      const int bn = absorber_of(b);
      if (bn < 0 || graph_.tensor(graph_.layer_inputs(b)[0]).consumers.size() != 1) continue;
      b = static_cast<std::size_t>(bn);
    }
    Layer& bn = *layers_[b];
    const auto& bn_ins = graph_.layer_inputs(b);
    if (bn.type() != "batch_norm" || bn_ins.size() != 1 || graph_.layer_outputs(b).size() != 1 ||
        forward_taken_output_of_[b] >= 0 || residual_input_[b] >= 0)
      continue;
    bool between_run = false;  // the batch norm's input must be as the batch norm read it
    for (std::size_t k = b + 1; k < i; ++k) between_run = between_run || !layers_[k]->absorbed();
    if (between_run) continue;
    const std::optional<BatchNormDesc> desc = bn.offer_normalisation();
    if (!desc) continue;
    auto link = std::make_shared<Layer::Normalisation>();
    if (!pool.take_normalisation(backend_, *desc, link)) continue;
    bn.hand_on_normalisation(link);
    normalised_input_of_[i] = bn_ins[0];
    output_unwritten_[b] = 1;
    ++memory_.normalising_pools;
  }
}

// A training batch norm whose input is a convolution's only output, read by nothing else, is given
// the convolution's statistics where the backend offers them (Backend::fuses_conv_statistics).
void Executor::fuse_statistics() {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& bn = *layers_[i];
    const auto& ins = graph_.layer_inputs(i);
    if (bn.type() != "batch_norm" || bn.absorbed() || ins.size() != 1) continue;
    const GraphTensor& xt = graph_.tensor(ins[0]);
    if (ins[0] == graph_.input_tensor() || xt.producer < 0 || xt.consumers.size() != 1 ||
        graph_.layer_outputs(static_cast<std::size_t>(xt.producer)).size() != 1)
      continue;
    Layer& conv = *layers_[static_cast<std::size_t>(xt.producer)];
    if (conv.type() != "conv" || conv.absorbed()) continue;
    auto link = std::make_shared<Layer::BatchStatistics>();
    if (!conv.offer_statistics(backend_, link)) continue;
    bn.use_statistics(link);
    statistics_links_.push_back(link);
    ++memory_.conv_statistics;
  }
}

}  // namespace cnnergy
