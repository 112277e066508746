// GraphBuilder: adds layers one call at a time, running each layer's shape inference at batch 1
// immediately (so a bad layer is reported by name where it is added), then checks the whole graph
// in build().
#include "net/graph_builder.hpp"

#include <map>
#include <set>
#include <utility>

#include "core/errors.hpp"
#include "net/graph.hpp"

namespace cnnergy {

struct GraphBuilder::State {
  std::string model_name;
  Shape input_per_sample;
  std::int64_t num_classes = 0;
  std::vector<GraphLayer> layers;
  std::vector<GraphTensor> tensors;
  std::set<std::string> names;
  int logits = -1;
  int loss_layer = -1;
  std::map<std::string, Tensor> initial_values;

  void check_node(Node x, const std::string& layer_name) const {
    if (x < 0 || static_cast<std::size_t>(x) >= tensors.size())
      throw InvalidArgument("layer '" + layer_name + "': unknown input node " + std::to_string(x));
    if (x == logits && loss_layer >= 0)
      throw InvalidArgument("layer '" + layer_name + "': the logits are already consumed by the loss");
  }

  // Sets the layer up at batch 1 and records it; returns its output tensor ids.
  std::vector<int> add(std::unique_ptr<Layer> layer, const std::vector<Node>& inputs) {
    if (loss_layer >= 0) throw InvalidArgument("layer '" + layer->name() + "' added after the loss");
    if (layer->name().empty()) throw InvalidArgument("a layer of type " + layer->type() + " has no name");
    if (names.count(layer->name())) throw InvalidArgument("two layers are named '" + layer->name() + "'");
    if (inputs.empty()) throw InvalidArgument("layer '" + layer->name() + "' has no input");
    std::vector<Shape> shapes;
    bool grad_in = false;
    for (Node x : inputs) {
      check_node(x, layer->name());
      shapes.push_back(tensors[static_cast<std::size_t>(x)].shape);
    }
    grad_in = tensors[static_cast<std::size_t>(inputs[0])].needs_grad;
    layer->set_input_grad_needed(grad_in);
    const std::vector<Shape> outs = layer->setup(shapes);
    bool grad_out = layer->parameter_count() > 0;
    for (Node x : inputs) grad_out = grad_out || tensors[static_cast<std::size_t>(x)].needs_grad;

    const int index = static_cast<int>(layers.size());
    GraphLayer gl;
    gl.inputs.assign(inputs.begin(), inputs.end());
    for (Node x : inputs) {
      auto& consumers = tensors[static_cast<std::size_t>(x)].consumers;
      if (consumers.empty() || consumers.back() != index) consumers.push_back(index);
    }
    for (const auto& s : outs) {
      GraphTensor t;
      t.id = static_cast<int>(tensors.size());
      t.name = layer->name();
      if (outs.size() > 1) t.name.append(".").append(std::to_string(gl.outputs.size()));
      t.shape = s;
      t.producer = index;
      t.needs_grad = grad_out;
      gl.outputs.push_back(t.id);
      tensors.push_back(std::move(t));
    }
    names.insert(layer->name());
    gl.layer = std::move(layer);
    layers.push_back(std::move(gl));
    return layers.back().outputs;
  }

  Node add_one(std::unique_ptr<Layer> layer, const std::vector<Node>& inputs) {
    const auto outs = add(std::move(layer), inputs);
    CNNERGY_CHECK(outs.size() == 1, "layer with one output expected");
    return outs[0];
  }
};

GraphBuilder::GraphBuilder(std::string model_name, Shape input_per_sample, std::int64_t num_classes)
    : state_(std::make_unique<State>()) {
  if (model_name.empty()) throw InvalidArgument("a model needs a name");
  if (input_per_sample.rank() != 3 && input_per_sample.rank() != 1)
    throw ShapeError("model " + model_name + ": input per sample must be C x H x W (or F), got " +
                     input_per_sample.str());
  for (auto d : input_per_sample.dims())
    if (d < 1) throw ShapeError("model " + model_name + ": input " + input_per_sample.str() + " has an empty dimension");
  if (num_classes < 2) throw InvalidArgument("model " + model_name + ": needs at least 2 classes");
  state_->model_name = std::move(model_name);
  state_->input_per_sample = input_per_sample;
  state_->num_classes = num_classes;
  std::vector<std::int64_t> dims{1};
  dims.insert(dims.end(), input_per_sample.dims().begin(), input_per_sample.dims().end());
  GraphTensor in;
  in.id = 0;
  in.name = "input";
  in.shape = Shape(dims);
  state_->tensors.push_back(std::move(in));
}

GraphBuilder::~GraphBuilder() = default;
GraphBuilder::GraphBuilder(GraphBuilder&&) noexcept = default;
GraphBuilder& GraphBuilder::operator=(GraphBuilder&&) noexcept = default;

namespace {
void require(const void* s) {
  if (!s) throw InternalError("GraphBuilder used after build()");
}
}  // namespace

GraphBuilder::Node GraphBuilder::input() const { return 0; }
void GraphBuilder::set_num_classes(std::int64_t num_classes) {
  require(state_.get());
  if (num_classes < 2) throw InvalidArgument("model " + state_->model_name + ": needs at least 2 classes");
  if (state_->loss_layer >= 0) throw InvalidArgument("model " + state_->model_name + ": class count set after the loss");
  state_->num_classes = num_classes;
}
std::int64_t GraphBuilder::num_classes() const {
  require(state_.get());
  return state_->num_classes;
}
const Shape& GraphBuilder::input_per_sample() const {
  require(state_.get());
  return state_->input_per_sample;
}
const Shape& GraphBuilder::shape(Node x) const {
  require(state_.get());
  if (x < 0 || static_cast<std::size_t>(x) >= state_->tensors.size())
    throw InvalidArgument("unknown node " + std::to_string(x));
  return state_->tensors[static_cast<std::size_t>(x)].shape;
}

GraphBuilder::Node GraphBuilder::conv(Node x, const std::string& name, const ConvSpec& spec) {
  require(state_.get());
  return state_->add_one(make_conv_layer(name, spec), {x});
}

GraphBuilder::Node GraphBuilder::fc(Node x, const std::string& name, std::int64_t out_features, bool bias) {
  FcSpec spec;
  spec.out_features = out_features;
  spec.bias = bias;
  return fc(x, name, spec);
}

GraphBuilder::Node GraphBuilder::fc(Node x, const std::string& name, const FcSpec& spec) {
  require(state_.get());
  state_->check_node(x, name);
  if (shape(x).rank() == 4) x = flatten(x, name + "_flatten");
  return state_->add_one(make_fc_layer(name, spec), {x});
}

GraphBuilder::Node GraphBuilder::max_pool(Node x, const std::string& name, const PoolSpec& spec) {
  require(state_.get());
  PoolSpec s = spec;
  s.mode = PoolMode::kMax;
  return state_->add_one(make_pool_layer(name, s), {x});
}

GraphBuilder::Node GraphBuilder::avg_pool(Node x, const std::string& name, const PoolSpec& spec) {
  require(state_.get());
  PoolSpec s = spec;
  if (s.mode == PoolMode::kMax) s.mode = PoolMode::kAvgIncludePad;
  return state_->add_one(make_pool_layer(name, s), {x});
}

GraphBuilder::Node GraphBuilder::global_avg_pool(Node x, const std::string& name) {
  require(state_.get());
  return state_->add_one(make_global_avg_pool_layer(name), {x});
}

GraphBuilder::Node GraphBuilder::relu(Node x, const std::string& name) {
  require(state_.get());
  return state_->add_one(make_relu_layer(name), {x});
}

GraphBuilder::Node GraphBuilder::lrn(Node x, const std::string& name, const LrnSpec& spec) {
  require(state_.get());
  return state_->add_one(make_lrn_layer(name, spec), {x});
}

GraphBuilder::Node GraphBuilder::batch_norm(Node x, const std::string& name, const BatchNormSpec& spec) {
  require(state_.get());
  return state_->add_one(make_batch_norm_layer(name, spec), {x});
}

GraphBuilder::Node GraphBuilder::dropout(Node x, const std::string& name, float p) {
  require(state_.get());
  return state_->add_one(make_dropout_layer(name, p), {x});
}

GraphBuilder::Node GraphBuilder::add(Node a, Node b, const std::string& name) {
  require(state_.get());
  return state_->add_one(make_add_layer(name), {a, b});
}

GraphBuilder::Node GraphBuilder::concat(const std::vector<Node>& xs, const std::string& name) {
  require(state_.get());
  return state_->add_one(make_concat_layer(name), xs);
}

GraphBuilder::Node GraphBuilder::flatten(Node x, const std::string& name) {
  require(state_.get());
  return state_->add_one(make_flatten_layer(name), {x});
}

GraphBuilder::Node GraphBuilder::activation(Node x, const std::string& name, const ActivationDesc& desc) {
  require(state_.get());
  return state_->add_one(make_activation_layer(name, desc), {x});
}

GraphBuilder::Node GraphBuilder::mul(Node a, Node b, const std::string& name) {
  require(state_.get());
  state_->check_node(a, name);
  state_->check_node(b, name);
  // The full-size operand goes first (the layer broadcasts its second input).
  if (shape(a).numel() < shape(b).numel()) std::swap(a, b);
  return state_->add_one(make_mul_layer(name), {a, b});
}

GraphBuilder::Node GraphBuilder::channel_shuffle(Node x, const std::string& name, std::int64_t groups) {
  require(state_.get());
  return state_->add_one(make_channel_shuffle_layer(name, groups), {x});
}

GraphBuilder::Node GraphBuilder::channel_slice(Node x, const std::string& name, std::int64_t begin,
                                               std::int64_t count) {
  require(state_.get());
  return state_->add_one(make_channel_slice_layer(name, begin, count), {x});
}

GraphBuilder::Node GraphBuilder::channel_affine(Node x, const std::string& name, std::vector<float> scale,
                                                std::vector<float> shift) {
  require(state_.get());
  return state_->add_one(make_channel_affine_layer(name, std::move(scale), std::move(shift)), {x});
}

void GraphBuilder::softmax_loss(Node logits, const std::string& name) {
  require(state_.get());
  State& s = *state_;
  if (s.loss_layer >= 0) throw InvalidArgument("model " + s.model_name + " already has a loss layer");
  s.check_node(logits, name);
  const Shape& shape = s.tensors[static_cast<std::size_t>(logits)].shape;
  if (shape.rank() != 2 || shape[1] != s.num_classes)
    throw ShapeError("layer '" + name + "' (softmax_loss): logits must be (N, " + std::to_string(s.num_classes) +
                     "), got " + shape.str());
  s.add(make_softmax_loss_layer(name), {logits});
  s.logits = logits;
  s.loss_layer = static_cast<int>(s.layers.size()) - 1;
}

void GraphBuilder::set_initial_value(const std::string& name, Tensor host_f32) {
  require(state_.get());
  if (host_f32.dtype() != DType::kF32 || host_f32.device().kind != DeviceKind::kCpu)
    throw InternalError("initial value '" + name + "' must be a host fp32 tensor");
  state_->initial_values[name] = std::move(host_f32);
}

std::unique_ptr<Graph> GraphBuilder::build() {
  require(state_.get());
  State& s = *state_;
  if (s.loss_layer < 0) throw InvalidArgument("model " + s.model_name + " has no loss layer (call softmax_loss)");
  // Every tensor must be read by someone: a dangling branch would get no gradient.
  for (const auto& t : s.tensors)
    if (t.consumers.empty())
      throw InvalidArgument("model " + s.model_name + ": the output of '" + t.name + "' is never used");
  if (!s.initial_values.empty()) {
    std::map<std::string, Shape> declared;
    for (const auto& l : s.layers) {
      for (const auto& p : l.layer->parameters()) declared[p.name] = p.shape;
      for (const auto& b : l.layer->buffers()) declared[b.name] = b.shape;
    }
    for (const auto& [name, value] : s.initial_values) {
      auto it = declared.find(name);
      if (it == declared.end())
        throw InvalidArgument("model " + s.model_name + ": an initial value names '" + name +
                              "', which no layer declares");
      if (!(it->second == value.shape()))
        throw ShapeError("model " + s.model_name + ": initial value '" + name + "' is " + value.shape().str() +
                         ", the layer declares " + it->second.str());
    }
  }
  auto graph = std::make_unique<Graph>(s.model_name, s.input_per_sample, s.num_classes, std::move(s.layers),
                                       std::move(s.tensors), s.logits, s.loss_layer);
  if (!s.initial_values.empty())
    graph->set_initial_values(std::make_shared<const InitialValues>(std::move(s.initial_values)));
  state_.reset();
  return graph;
}

}  // namespace cnnergy
