// Internal to the ONNX importer: the Importer that walks one model (values by tensor name, the
// runtime tensors' GraphBuilder nodes, constants) and maps each node. onnx_import.cpp drives it and
// maps the simple operators; onnx_map.cpp maps Conv, pooling, Gemm/MatMul, reshapes and Pad.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "net/onnx/onnx_fold.hpp"
#include "net/onnx/onnx_import.hpp"

namespace cnnergy::onnx_import {

using Node = GraphBuilder::Node;

const std::set<std::string>& runtime_ops();
std::string supported_list();

struct Value {
  std::optional<ConstTensor> constant;
  Node node = -1;  // runtime tensor
  // A zero Pad of H, W not applied yet (top, left, bottom, right): the Conv or AveragePool reading
  // it takes it as its own padding; any other reader is refused.
  std::vector<std::int64_t> pending_pad;
  // A channel shuffle under way (ShuffleNet's Reshape -> Transpose -> Reshape): the 4-D runtime
  // tensor `node` viewed as (N, groups, C / groups, H, W), then (transposed) with the two group axes
  // swapped. Only the Transpose and the Reshape back to 4-D may read it.
  std::int64_t shuffle_groups = 0;
  bool shuffle_transposed = false;
};

class Importer {
 public:
  Importer(onnx::ModelProto& model, std::string name, std::string dir, const OnnxImportOptions& options)
      : model_(model), dir_(std::move(dir)), options_(options), result_{make_builder(std::move(name)), 0, {}} {}

  OnnxImport run() {
    const auto& g = model_.graph();
    // Decoded once; the protobuf's copy of the bytes is released at once (large models).
    for (auto& t : *model_.mutable_graph()->mutable_initializer()) {
      values_[t.name()].constant = read_tensor(t, dir_);
      std::string().swap(*t.mutable_raw_data());
      t.clear_float_data();
    }
    const auto order = topological_order();
    for (int k : order) {
      const auto& n = g.node(k);
      for (const auto& o : n.output()) consumers_[o];
      for (const auto& i : n.input()) ++consumers_[i];
    }
    for (int k : order) map_node(g.node(k));
    finish();
    return std::move(result_);
  }

 private:
  GraphBuilder make_builder(std::string name) {
    const auto& g = model_.graph();
    if (g.output_size() != 1)
      throw NotSupported("model " + name + " has " + std::to_string(g.output_size()) + " outputs; one is supported");
    std::set<std::string> inits;
    for (const auto& t : g.initializer()) inits.insert(t.name());
    const onnx::ValueInfoProto* in = nullptr;
    for (const auto& v : g.input())
      if (!inits.count(v.name())) {
        if (in) throw NotSupported("model " + name + " has several inputs ('" + in->name() + "', '" + v.name() +
                                   "'); one image input is supported");
        in = &v;
      }
    if (!in) throw DataError("model " + name + " has no input");
    input_name_ = in->name();
    if (!in->type().has_tensor_type()) throw NotSupported("input '" + input_name_ + "' is not a tensor");
    const auto& tt = in->type().tensor_type();
    if (tt.elem_type() != onnx::TensorProto::FLOAT && tt.elem_type() != 0)
      throw NotSupported("input '" + input_name_ + "' has element type " + std::to_string(tt.elem_type()) +
                         "; float is supported");
    const auto& shp = tt.shape();
    if (shp.dim_size() != 4 && shp.dim_size() != 2)
      throw NotSupported("input '" + input_name_ + "' has rank " + std::to_string(shp.dim_size()) +
                         "; (N, C, H, W) or (N, F) is supported");
    if (shp.dim(0).has_dim_value()) result_.declared_batch = shp.dim(0).dim_value();
    std::vector<std::int64_t> dims;
    for (int k = 1; k < shp.dim_size(); ++k) {
      const auto& d = shp.dim(k);
      if (!d.has_dim_value() || d.dim_value() < 1) {
        if (!options_.input)
          throw InvalidArgument("input '" + input_name_ + "' has a dynamic dimension " + std::to_string(k) + " ('" +
                                d.dim_param() + "'); give its size with --input " +
                                (shp.dim_size() == 4 ? "CxHxW" : "F"));
        dims.push_back(0);
      } else {
        dims.push_back(d.dim_value());
      }
    }
    if (options_.input) {
      if (static_cast<int>(options_.input->rank()) != shp.dim_size() - 1)
        throw InvalidArgument("model " + name + ": --input " + options_.input->str() + " has the wrong rank for input '" +
                              input_name_ + "'");
      dims.assign(options_.input->dims().begin(), options_.input->dims().end());
    }
    return GraphBuilder(name, Shape(dims), 2);
  }

  std::vector<int> topological_order() {
    const auto& g = model_.graph();
    std::map<std::string, int> producer;
    for (int k = 0; k < g.node_size(); ++k)
      for (const auto& o : g.node(k).output())
        if (!o.empty() && !producer.emplace(o, k).second)
          throw DataError("tensor '" + o + "' is produced by two nodes");
    std::vector<int> state(static_cast<std::size_t>(g.node_size()), 0), order;
    // Iterative depth-first search: 1 = on the stack (a revisit is a cycle), 2 = done.
    for (int root = 0; root < g.node_size(); ++root) {
      if (state[static_cast<std::size_t>(root)]) continue;
      std::vector<std::pair<int, int>> stack{{root, 0}};
      state[static_cast<std::size_t>(root)] = 1;
      while (!stack.empty()) {
        auto& [k, next] = stack.back();
        const auto& n = g.node(k);
        if (next < n.input_size()) {
          auto it = producer.find(n.input(next++));
          if (it == producer.end()) continue;
          auto& st = state[static_cast<std::size_t>(it->second)];
          if (st == 1) throw DataError("the graph has a cycle through " + node_label(g.node(it->second)));
          if (st == 0) {
            st = 1;
            stack.push_back({it->second, 0});
          }
        } else {
          state[static_cast<std::size_t>(k)] = 2;
          order.push_back(k);
          stack.pop_back();
        }
      }
    }
    return order;
  }

  const Value& value(const std::string& name, const onnx::NodeProto& node) {
    if (name == input_name_) {
      input_value_.node = result_.builder.input();
      return input_value_;
    }
    auto it = values_.find(name);
    if (it == values_.end()) throw DataError(node_label(node) + " reads '" + name + "', which nothing produces");
    return it->second;
  }
  bool has_input(const onnx::NodeProto& n, int k) const { return k < n.input_size() && !n.input(k).empty(); }
  const ConstTensor& constant(const onnx::NodeProto& n, int k, const std::string& what) {
    if (!has_input(n, k)) throw DataError(node_label(n) + " lacks its " + what);
    const Value& v = value(n.input(k), n);
    if (!v.constant)
      throw NotSupported(node_label(n) + ": its " + what + " ('" + n.input(k) + "') must be a constant (initialiser)");
    return *v.constant;
  }
  Node runtime(const onnx::NodeProto& n, int k, std::vector<std::int64_t>* pad = nullptr) {
    if (!has_input(n, k)) throw DataError(node_label(n) + " lacks input " + std::to_string(k));
    const Value& v = value(n.input(k), n);
    if (v.constant)
      throw NotSupported(node_label(n) + ": input '" + n.input(k) + "' is a constant; this op is mapped only on "
                         "the data flowing from the model input");
    if (v.shuffle_groups)
      throw NotSupported(node_label(n) + " reads '" + n.input(k) + "', a 5-D view of a 4-D tensor; only the channel "
                         "shuffle pattern (Reshape to (N, g, C/g, H, W), Transpose 0 2 1 3 4, Reshape back) is supported");
    if (!v.pending_pad.empty()) {
      if (!pad) throw NotSupported(node_label(n) + " reads a padded tensor ('" + n.input(k) + "'); a Pad is supported "
                                   "only before a Conv or an AveragePool");
      *pad = v.pending_pad;
    }
    return v.node;
  }
  void set_runtime(const onnx::NodeProto& n, Node x) { values_[n.output(0)].node = x; }
  std::string layer_name(const onnx::NodeProto& n) {
    std::string base = n.name().empty() ? n.op_type() : n.name();
    for (char& c : base)
      if (c == '/' || c == ':' || c == ' ') c = '_';
    while (!base.empty() && base.front() == '_') base.erase(base.begin());
    if (base.empty()) base = n.op_type();
    std::string name = base;
    for (int k = 2; used_names_.count(name); ++k) name = base + "_" + std::to_string(k);
    used_names_.insert(name);
    return name;
  }
  Shape shape(Node x) const { return result_.builder.shape(x); }
  void weight(const std::string& name, const std::vector<std::int64_t>& dims, const std::vector<float>& data) {
    if (options_.random_init) return;
    Tensor t = Tensor::host(Shape(dims));
    std::copy(data.begin(), data.end(), t.f32().begin());
    result_.builder.set_initial_value(name, std::move(t));
  }

  void map_node(const onnx::NodeProto& n);
  void map_conv(const onnx::NodeProto& n);
  void map_pool(const onnx::NodeProto& n);
  void map_fc(const onnx::NodeProto& n);
  void map_reshape(const onnx::NodeProto& n);
  void map_pad(const onnx::NodeProto& n);
  // onnx_map_channels.cpp: activations (with the SiLU / HardSwish fusions), binary arithmetic,
  // the channel shuffle's Transpose, Split and Slice along channels.
  void map_activation(const onnx::NodeProto& n);
  void map_binary(const onnx::NodeProto& n);
  void map_transpose(const onnx::NodeProto& n);
  void map_split(const onnx::NodeProto& n);
  void map_slice(const onnx::NodeProto& n);
  // The node that reads tensor `name`, when it is its only reader (nullptr otherwise).
  const onnx::NodeProto* sole_consumer(const std::string& name);
  void finish();

  onnx::ModelProto& model_;
  std::string dir_;
  OnnxImportOptions options_;
  std::string input_name_;  // before result_: make_builder() sets it while result_ is built
  OnnxImport result_;
  Value input_value_;
  std::map<std::string, Value> values_;
  std::map<std::string, int> consumers_;
  std::set<std::string> used_names_;
  std::set<std::string> skipped_;  // Add nodes fused into a MatMul
  std::string dropped_softmax_;
};

// "pads" of a Conv/Pool: [top, left, bottom, right] from pads or auto_pad.
std::vector<std::int64_t> pads_of(const onnx::NodeProto& n, const Shape& x, std::int64_t kh, std::int64_t kw,
                                  std::int64_t sh, std::int64_t sw, std::int64_t dh, std::int64_t dw);

}  // namespace cnnergy::onnx_import
