// The builder API the model zoo (and ONNX import) uses to describe a network as a DAG of layers.
// Each call adds one layer and returns the id of the tensor it produces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/activation_kind.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "layers/specs.hpp"

namespace cnnergy {

class Graph;  // net/graph.hpp

class GraphBuilder {
 public:
  using Node = int;

  // input_per_sample: C, H, W of one sample (a batch dimension is added at build time).
  GraphBuilder(std::string model_name, Shape input_per_sample, std::int64_t num_classes);
  ~GraphBuilder();
  GraphBuilder(GraphBuilder&&) noexcept;
  GraphBuilder& operator=(GraphBuilder&&) noexcept;

  Node input() const;
  // For importers that learn the class count from the graph (before softmax_loss); >= 2.
  void set_num_classes(std::int64_t num_classes);
  std::int64_t num_classes() const;
  const Shape& input_per_sample() const;

  Node conv(Node x, const std::string& name, const ConvSpec& spec);
  Node fc(Node x, const std::string& name, std::int64_t out_features, bool bias = true);  // flattens 4-D input
  Node fc(Node x, const std::string& name, const FcSpec& spec);  // same, with the weight init choice
  Node max_pool(Node x, const std::string& name, const PoolSpec& spec);
  Node avg_pool(Node x, const std::string& name, const PoolSpec& spec);
  Node global_avg_pool(Node x, const std::string& name);
  Node relu(Node x, const std::string& name);
  Node lrn(Node x, const std::string& name, const LrnSpec& spec);
  Node batch_norm(Node x, const std::string& name, const BatchNormSpec& spec = {});
  Node dropout(Node x, const std::string& name, float p);
  Node add(Node a, Node b, const std::string& name);
  Node concat(const std::vector<Node>& xs, const std::string& name);
  Node flatten(Node x, const std::string& name);
  // Operators of imported networks (ONNX): activations beyond ReLU, a product of two tensors (the
  // second of the first's shape or (N, C, 1, 1)), channel shuffle, a slice of channels
  // [begin, begin + count), and a constant per-channel affine map.
  Node activation(Node x, const std::string& name, const ActivationDesc& desc);
  Node mul(Node a, Node b, const std::string& name);
  Node channel_shuffle(Node x, const std::string& name, std::int64_t groups);
  Node channel_slice(Node x, const std::string& name, std::int64_t begin, std::int64_t count);
  Node channel_affine(Node x, const std::string& name, std::vector<float> scale, std::vector<float> shift);
  // Marks `logits` (N, num_classes) as the output and adds the softmax cross-entropy loss.
  void softmax_loss(Node logits, const std::string& name = "loss");

  // Sets the initial value of a parameter or state buffer (host fp32, logical NCHW; see
  // InitialValues in graph.hpp). build() checks every name and shape against the layers.
  void set_initial_value(const std::string& name, Tensor host_f32);

  // Validates (shape inference at batch 1 with the declared input) and returns the graph.
  // Throws ShapeError naming the layer whose output would be empty or whose inputs disagree.
  std::unique_ptr<Graph> build();

  // Shape of a node at batch 1 (N, C, H, W or N, F), for model definitions that need it.
  const Shape& shape(Node x) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cnnergy
