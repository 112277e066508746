// Graph queries: layer lookup, parameter count and workload totals.
#include "net/graph.hpp"

#include "core/errors.hpp"

namespace cnnergy {

Graph::Graph(std::string model_name, Shape input_per_sample, std::int64_t num_classes, std::vector<GraphLayer> layers,
             std::vector<GraphTensor> tensors, int logits_tensor, int loss_layer)
    : model_name_(std::move(model_name)),
      input_per_sample_(std::move(input_per_sample)),
      num_classes_(num_classes),
      layers_(std::move(layers)),
      tensors_(std::move(tensors)),
      logits_tensor_(logits_tensor),
      loss_layer_(loss_layer) {
  CNNERGY_CHECK(!tensors_.empty() && tensors_[0].producer == -1, "tensor 0 must be the network input");
  CNNERGY_CHECK(loss_layer_ >= 0 && static_cast<std::size_t>(loss_layer_) < layers_.size(), "no loss layer");
}

std::size_t Graph::layer_index(const std::string& name) const {
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].layer->name() == name) return i;
  throw InvalidArgument("model " + model_name_ + " has no layer named '" + name + "'");
}

const InitialValues& Graph::initial_values() const {
  static const InitialValues kNone;
  return initial_values_ ? *initial_values_ : kNone;
}

std::int64_t Graph::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& l : layers_) n += l.layer->parameter_count();
  return n;
}

Workload Graph::total_workload() const {
  Workload w;
  for (const auto& l : layers_) w += l.layer->workload();
  return w;
}

}  // namespace cnnergy
