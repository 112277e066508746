// A network as a DAG of layers in topological order (the order they were added), with tensor ids,
// producers and consumers, shapes at batch 1, parameter counts and per-layer/total workload.
// Built by GraphBuilder; executors bind it to a backend at a batch size (net/executor.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/shape.hpp"
#include "layers/layer.hpp"
#include "layers/workload.hpp"

namespace cnnergy {

// Initial values of parameters and state buffers by name ("<layer>.weight", "<layer>.running_mean"),
// host fp32 in logical NCHW order: an imported model's weights (ONNX initialisers). Executors apply
// them after the seeded initialisation, so every command trains from / infers with them.
using InitialValues = std::map<std::string, Tensor>;

struct GraphTensor {
  int id = 0;
  std::string name;            // the producing layer's name ("input" for the network input)
  Shape shape;                 // at batch 1
  int producer = -1;           // layer index; -1 for the network input
  std::vector<int> consumers;  // layer indices, ascending
  bool needs_grad = false;     // a trained parameter lies upstream: backward computes its gradient
};

struct GraphLayer {
  std::unique_ptr<Layer> layer;  // set up at batch 1
  std::vector<int> inputs;       // tensor ids
  std::vector<int> outputs;      // tensor ids (none for the loss layer)
};

class Graph {
 public:
  Graph(std::string model_name, Shape input_per_sample, std::int64_t num_classes, std::vector<GraphLayer> layers,
        std::vector<GraphTensor> tensors, int logits_tensor, int loss_layer);

  const std::string& model_name() const { return model_name_; }
  const Shape& input_per_sample() const { return input_per_sample_; }  // C, H, W
  std::int64_t num_classes() const { return num_classes_; }

  std::size_t num_layers() const { return layers_.size(); }
  const Layer& layer(std::size_t i) const { return *layers_.at(i).layer; }
  const std::vector<int>& layer_inputs(std::size_t i) const { return layers_.at(i).inputs; }
  const std::vector<int>& layer_outputs(std::size_t i) const { return layers_.at(i).outputs; }
  // Index of the layer with this name; throws InvalidArgument listing nothing (names are many).
  std::size_t layer_index(const std::string& name) const;

  std::size_t num_tensors() const { return tensors_.size(); }
  const GraphTensor& tensor(int id) const { return tensors_.at(static_cast<std::size_t>(id)); }
  int input_tensor() const { return 0; }
  int logits_tensor() const { return logits_tensor_; }
  int loss_layer() const { return loss_layer_; }  // index of the softmax loss layer

  // Imported weights (empty for zoo models, whose weights come from the seed or a checkpoint).
  const InitialValues& initial_values() const;
  void set_initial_values(std::shared_ptr<const InitialValues> values) { initial_values_ = std::move(values); }

  std::int64_t parameter_count() const;
  const Workload& layer_workload(std::size_t i) const { return layer(i).workload(); }  // per sample
  Workload total_workload() const;                                                    // per sample

 private:
  std::string model_name_;
  Shape input_per_sample_;
  std::int64_t num_classes_;
  std::vector<GraphLayer> layers_;
  std::vector<GraphTensor> tensors_;
  int logits_tensor_;
  int loss_layer_;
  std::shared_ptr<const InitialValues> initial_values_;
};

}  // namespace cnnergy
