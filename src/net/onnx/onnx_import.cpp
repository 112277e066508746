// The ONNX importer: parse, topological order (cycle check), constant folding, and the mapping of
// every supported operator onto GraphBuilder layers with the initialisers as initial weights.
#include "net/onnx/onnx_import.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "net/onnx/onnx_fold.hpp"

namespace cnnergy {
namespace {

using namespace onnx_import;
using Node = GraphBuilder::Node;
constexpr std::size_t kMaxModelBytes = std::size_t{2} << 30;  // protobuf's own 2 GiB message limit

const std::set<std::string>& runtime_ops() {
  static const std::set<std::string> ops = {
      "Conv", "BatchNormalization", "Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean", "Gemm",
      "MatMul", "Flatten", "Reshape", "Squeeze", "Add", "Sum", "Concat", "Dropout", "LRN", "Identity", "Softmax",
      "Clip", "Shape", "Pad"};
  return ops;
}

std::string supported_list() {
  std::string s;
  for (const auto& op : onnx_supported_ops()) s += (s.empty() ? "" : ", ") + op;
  return s;
}

struct Value {
  std::optional<ConstTensor> constant;
  Node node = -1;  // runtime tensor
  // A zero Pad of H, W not applied yet (top, left, bottom, right): the Conv or AveragePool reading
  // it takes it as its own padding; any other reader is refused.
  std::vector<std::int64_t> pending_pad;
};

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string name, std::string dir, const OnnxImportOptions& options)
      : model_(model), dir_(std::move(dir)), options_(options), result_{make_builder(std::move(name)), 0, {}} {}

  OnnxImport run() {
    const auto& g = model_.graph();
    for (const auto& t : g.initializer()) values_[t.name()].constant = read_tensor(t, dir_);
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
  void weight(const std::string& name, const std::vector<std::int64_t>& dims, std::vector<float> data) {
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
  void finish();

  const onnx::ModelProto& model_;
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
                                  std::int64_t sh, std::int64_t sw, std::int64_t dh, std::int64_t dw) {
  const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    auto total = [](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d) {
      const std::int64_t out = (in + s - 1) / s;
      return std::max<std::int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in);
    };
    const std::int64_t th = total(x.h(), kh, sh, dh), tw = total(x.w(), kw, sw, dw);
    const bool upper = auto_pad == "SAME_UPPER";
    const std::int64_t top = upper ? th / 2 : th - th / 2, left = upper ? tw / 2 : tw - tw / 2;
    return {top, left, th - top, tw - left};
  }
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    throw DataError(node_label(n) + ": unknown auto_pad '" + auto_pad + "'");
  if (auto_pad == "VALID") return {0, 0, 0, 0};
  auto pads = attr_ints(n, "pads").value_or(std::vector<std::int64_t>{0, 0, 0, 0});
  if (pads.size() != 4) throw NotSupported(node_label(n) + ": only 2-D spatial pads are supported");
  return pads;
}

void Importer::map_conv(const onnx::NodeProto& n) {
  std::vector<std::int64_t> extra;
  const Node x = runtime(n, 0, &extra);
  const Shape xs = shape(x);
  if (xs.rank() != 4) throw NotSupported(node_label(n) + ": only 2-D convolutions (4-D input) are supported");
  const ConstTensor& w = constant(n, 1, "weight");
  if (w.dims.size() != 4 || w.integer) throw NotSupported(node_label(n) + ": the weight must be a 4-D float tensor");
  ConvSpec s;
  s.out_channels = w.dims[0];
  s.kernel_h = w.dims[2];
  s.kernel_w = w.dims[3];
  if (auto ks = attr_ints(n, "kernel_shape"); ks && (ks->size() != 2 || (*ks)[0] != s.kernel_h || (*ks)[1] != s.kernel_w))
    throw DataError(node_label(n) + ": kernel_shape disagrees with the weight");
  const auto strides = attr_ints(n, "strides").value_or(std::vector<std::int64_t>{1, 1});
  const auto dil = attr_ints(n, "dilations").value_or(std::vector<std::int64_t>{1, 1});
  if (strides.size() != 2 || dil.size() != 2) throw DataError(node_label(n) + ": strides/dilations need 2 values");
  s.stride_h = strides[0];
  s.stride_w = strides[1];
  s.dilation_h = dil[0];
  s.dilation_w = dil[1];
  s.groups = attr_int(n, "group", 1);
  if (s.groups < 1 || xs.c() != w.dims[1] * s.groups)
    throw DataError(node_label(n) + ": weight " + Shape(w.dims).str() + " and group " + std::to_string(s.groups) +
                    " do not fit input " + xs.str());
  const auto p = pads_of(n, xs, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.dilation_h, s.dilation_w);
  s.pad_top = p[0];
  s.pad_left = p[1];
  s.pad_bottom = p[2];
  s.pad_right = p[3];
  if (!extra.empty()) {  // a zero Pad before it
    s.pad_top += extra[0];
    s.pad_left += extra[1];
    s.pad_bottom += extra[2];
    s.pad_right += extra[3];
  }
  s.bias = has_input(n, 2);
  const std::string name = layer_name(n);
  set_runtime(n, result_.builder.conv(x, name, s));
  weight(name + ".weight", w.dims, w.f);
  if (s.bias) {
    const ConstTensor& b = constant(n, 2, "bias");
    if (b.numel() != s.out_channels) throw DataError(node_label(n) + ": bias size differs from the output channels");
    weight(name + ".bias", {s.out_channels}, b.f);
  }
}

void Importer::map_pool(const onnx::NodeProto& n) {
  std::vector<std::int64_t> extra;
  const Node x = runtime(n, 0, n.op_type() == "AveragePool" ? &extra : nullptr);
  const Shape xs = shape(x);
  if (xs.rank() != 4) throw NotSupported(node_label(n) + ": only 2-D pooling (4-D input) is supported");
  const auto ks = attr_ints(n, "kernel_shape");
  if (!ks || ks->size() != 2) throw DataError(node_label(n) + ": needs a 2-D kernel_shape");
  const auto strides = attr_ints(n, "strides").value_or(std::vector<std::int64_t>{1, 1});
  const auto dil = attr_ints(n, "dilations").value_or(std::vector<std::int64_t>{1, 1});
  if (strides.size() != 2) throw DataError(node_label(n) + ": strides need 2 values");
  if (dil != std::vector<std::int64_t>{1, 1}) throw NotSupported(node_label(n) + ": dilated pooling is not supported");
  if (n.output_size() > 1 && !n.output(1).empty() && consumers_[n.output(1)] > 0)
    throw NotSupported(node_label(n) + ": the Indices output is not supported");
  PoolSpec s;
  s.kernel_h = (*ks)[0];
  s.kernel_w = (*ks)[1];
  s.stride_h = strides[0];
  s.stride_w = strides[1];
  auto p = pads_of(n, xs, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, 1, 1);
  if (!extra.empty() && p != std::vector<std::int64_t>{0, 0, 0, 0})
    throw NotSupported(node_label(n) + ": a padded AveragePool after a Pad");
  if (!extra.empty()) p = extra;  // the padded zeros count in the average (count_include_pad)
  if (p[0] != p[2] || p[1] != p[3])
    throw NotSupported(node_label(n) + ": asymmetric pooling pads are not supported");
  s.pad_h = p[0];
  s.pad_w = p[1];
  s.ceil_mode = attr_int(n, "ceil_mode", 0) != 0;
  const std::string name = layer_name(n);
  if (n.op_type() == "MaxPool") {
    if (attr_int(n, "storage_order", 0) != 0) throw NotSupported(node_label(n) + ": storage_order 1");
    set_runtime(n, result_.builder.max_pool(x, name, s));
  } else {
    s.mode = (attr_int(n, "count_include_pad", 0) || !extra.empty()) ? PoolMode::kAvgIncludePad
                                                                      : PoolMode::kAvgExcludePad;
    set_runtime(n, result_.builder.avg_pool(x, name, s));
  }
}

// Gemm (transA 0, alpha/beta folded into the weights) and MatMul (with the Add of a bias after it).
void Importer::map_fc(const onnx::NodeProto& n) {
  const Node x = runtime(n, 0);
  const Shape xs = shape(x);
  if (xs.rank() != 2) throw NotSupported(node_label(n) + ": needs a 2-D input (N, F), got " + xs.str());
  const ConstTensor& b = constant(n, 1, "weight");
  if (b.dims.size() != 2 || b.integer) throw NotSupported(node_label(n) + ": the weight must be a 2-D float matrix");
  const bool gemm = n.op_type() == "Gemm";
  if (gemm && attr_int(n, "transA", 0) != 0) throw NotSupported(node_label(n) + ": transA=1 is not supported");
  const bool trans_b = gemm && attr_int(n, "transB", 0) != 0;
  const std::int64_t f = trans_b ? b.dims[1] : b.dims[0], k = trans_b ? b.dims[0] : b.dims[1];
  if (f != xs[1]) throw DataError(node_label(n) + ": weight " + Shape(b.dims).str() + " does not fit input " + xs.str());
  const float alpha = gemm ? attr_float(n, "alpha", 1.0f) : 1.0f, beta = gemm ? attr_float(n, "beta", 1.0f) : 1.0f;
  std::vector<float> w(static_cast<std::size_t>(k * f));
  for (std::int64_t o = 0; o < k; ++o)
    for (std::int64_t i = 0; i < f; ++i)
      w[static_cast<std::size_t>(o * f + i)] =
          alpha * b.f[static_cast<std::size_t>(trans_b ? o * f + i : i * k + o)];
  // The bias: Gemm's C, or a MatMul whose only consumer is an Add of a constant of k values.
  const ConstTensor* bias = nullptr;
  std::string out = n.output(0);
  if (gemm && has_input(n, 2)) bias = &constant(n, 2, "bias C");
  if (!gemm && consumers_[out] == 1) {
    for (const auto& m : model_.graph().node())
      if (m.op_type() == "Add" && m.input_size() == 2 && (m.input(0) == out || m.input(1) == out)) {
        const std::string& other = m.input(0) == out ? m.input(1) : m.input(0);
        auto it = values_.find(other);
        if (it != values_.end() && it->second.constant && it->second.constant->numel() == k && !it->second.constant->integer) {
          bias = &*it->second.constant;
          skipped_.insert(m.output(0));
          out = m.output(0);
        }
      }
  }
  std::vector<float> bv;
  if (bias) {
    if (bias->integer || (bias->numel() != k && bias->numel() != 1))
      throw NotSupported(node_label(n) + ": bias of shape " + Shape(bias->dims).str() + " (needs " + std::to_string(k) + ")");
    for (std::int64_t o = 0; o < k; ++o) bv.push_back(beta * bias->f[bias->numel() == 1 ? 0 : static_cast<std::size_t>(o)]);
  }
  FcSpec spec;
  spec.out_features = k;
  spec.bias = bias != nullptr;
  const std::string name = layer_name(n);
  values_[out].node = result_.builder.fc(x, name, spec);
  weight(name + ".weight", {k, f}, std::move(w));
  if (bias) weight(name + ".bias", {k}, std::move(bv));
}

// Reshape/Flatten/Squeeze of the data: to (N, features) is a flatten, to the same shape nothing.
void Importer::map_reshape(const onnx::NodeProto& n) {
  const Node x = runtime(n, 0);
  const Shape xs = shape(x);
  std::vector<std::int64_t> target;
  if (n.op_type() == "Flatten") {
    const std::int64_t axis = normalize_axis(attr_int(n, "axis", 1), static_cast<std::int64_t>(xs.rank()), n);
    if (axis != 1) throw NotSupported(node_label(n) + ": Flatten with axis " + std::to_string(axis) + " (1 is supported)");
    target = {xs[0], xs.per_sample()};
  } else if (n.op_type() == "Squeeze") {
    std::vector<std::int64_t> axes = has_input(n, 1) ? constant(n, 1, "axes").ints()
                                                     : attr_ints(n, "axes").value_or(std::vector<std::int64_t>{});
    for (std::size_t k = 0; k < xs.rank(); ++k) {
      bool drop = axes.empty() ? (k > 0 && xs[k] == 1) : false;
      for (auto a : axes) drop = drop || normalize_axis(a, static_cast<std::int64_t>(xs.rank()), n) == static_cast<std::int64_t>(k);
      if (drop && k == 0) throw NotSupported(node_label(n) + ": squeezing the batch dimension");
      if (!drop) target.push_back(xs[k]);
    }
  } else {
    target = constant(n, 1, "shape").ints();
    std::int64_t known = 1, infer = -1;
    for (std::size_t k = 0; k < target.size(); ++k) {
      if (target[k] == 0 && attr_int(n, "allowzero", 0) == 0 && k < xs.rank()) target[k] = xs[k];
      if (target[k] == -1) infer = static_cast<std::int64_t>(k);
      else known *= target[k];
    }
    if (infer >= 0 && known > 0) target[static_cast<std::size_t>(infer)] = xs.numel() / known;
  }
  if (target.size() >= 1) target[0] = 1;  // the batch dimension, at batch 1 here
  if (Shape(target) == xs) {
    set_runtime(n, x);
  } else if (target.size() == 2 && target[1] == xs.per_sample() && (xs.rank() == 4 || xs.rank() == 2)) {
    set_runtime(n, result_.builder.flatten(x, layer_name(n)));
  } else {
    throw NotSupported(node_label(n) + ": reshaping " + xs.str() + " to " + Shape(target).str() +
                       " is not supported (only flattening to (N, features))");
  }
}

// Pad: pads as an attribute (before opset 11) or an input (11+), axes as an input (18+); constant
// mode with value 0 over H, W only. All-zero pads are nothing; others wait for the Conv/AveragePool.
void Importer::map_pad(const onnx::NodeProto& n) {
  const Node x = runtime(n, 0);
  const auto rank = static_cast<std::int64_t>(shape(x).rank());
  if (attr_string(n, "mode", "constant") != "constant") throw NotSupported(node_label(n) + ": only constant padding");
  std::vector<std::int64_t> pads =
      has_input(n, 1) ? constant(n, 1, "pads").ints() : attr_ints(n, "pads").value_or(std::vector<std::int64_t>{});
  const float fill = has_input(n, 2) ? static_cast<float>(constant(n, 2, "constant_value").at(0)) : attr_float(n, "value", 0.0f);
  std::vector<std::int64_t> axes;
  if (has_input(n, 3)) axes = constant(n, 3, "axes").ints();
  else for (std::int64_t k = 0; k < rank; ++k) axes.push_back(k);
  if (pads.size() != 2 * axes.size()) throw DataError(node_label(n) + ": needs 2 pads per axis");
  std::vector<std::int64_t> begin(static_cast<std::size_t>(rank), 0), end(static_cast<std::size_t>(rank), 0);
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<std::size_t>(normalize_axis(axes[k], rank, n));
    begin[a] = pads[k];
    end[a] = pads[k + axes.size()];
  }
  bool zero = true;
  for (std::int64_t k = 0; k < rank; ++k) {
    if (begin[static_cast<std::size_t>(k)] < 0 || end[static_cast<std::size_t>(k)] < 0)
      throw NotSupported(node_label(n) + ": negative pads (cropping)");
    if ((begin[static_cast<std::size_t>(k)] || end[static_cast<std::size_t>(k)]) && (k < 2 || rank != 4))
      throw NotSupported(node_label(n) + ": padding other than H, W of a 4-D tensor");
    zero = zero && !begin[static_cast<std::size_t>(k)] && !end[static_cast<std::size_t>(k)];
  }
  set_runtime(n, x);
  if (zero) return;
  if (fill != 0.0f) throw NotSupported(node_label(n) + ": padding with " + std::to_string(fill) + " (0 is supported)");
  values_[n.output(0)].pending_pad = {begin[2], begin[3], end[2], end[3]};
}

void Importer::map_node(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    throw NotSupported(node_label(n) + " is in domain '" + n.domain() + "'; supported operators (default domain): " +
                       supported_list());
  if (n.output_size() < 1) throw DataError(node_label(n) + " has no output");
  if (skipped_.count(n.output(0))) return;
  // Constant folding: every present input constant (or Shape of a runtime tensor).
  bool all_const = true;
  std::vector<const ConstTensor*> in;
  for (const auto& name : n.input()) {
    if (name.empty()) {
      in.push_back(nullptr);
      continue;
    }
    const Value& v = value(name, n);
    all_const = all_const && v.constant.has_value();
    in.push_back(v.constant ? &*v.constant : nullptr);
  }
  if (op == "Shape") {
    if (n.input_size() < 1) throw DataError(node_label(n) + " has no input");
    const Value& v = value(n.input(0), n);
    std::vector<std::int64_t> dims = v.constant ? v.constant->dims : shape(v.node).dims();
    std::int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", static_cast<std::int64_t>(dims.size()));
    const auto r = static_cast<std::int64_t>(dims.size());
    start = std::clamp(start < 0 ? start + r : start, std::int64_t{0}, r);
    end = std::clamp(end < 0 ? end + r : end, std::int64_t{0}, r);
    std::vector<std::int64_t> part(dims.begin() + start, dims.begin() + std::max(start, end));
    const auto len = static_cast<std::int64_t>(part.size());
    values_[n.output(0)].constant = ConstTensor::of_ints(std::move(part), {len});
    return;
  }
  if (all_const && foldable(op)) {
    auto outs = fold(n, in, dir_);
    for (std::size_t k = 0; k < outs.size() && static_cast<int>(k) < n.output_size(); ++k)
      values_[n.output(static_cast<int>(k))].constant = std::move(outs[k]);
    return;
  }
  if (foldable(op) && !runtime_ops().count(op))
    throw NotSupported(node_label(n) + ": operator " + op + " is supported on constants only (shape computations "
                       "folded at import), not on the data flowing from the model input");
  if (!runtime_ops().count(op) || op == "Shape")
    throw NotSupported(node_label(n) + ": operator " + op + " is not supported. Supported operators: " +
                       supported_list());
  if (op == "Conv") return map_conv(n);
  if (op == "MaxPool" || op == "AveragePool") return map_pool(n);
  if (op == "Gemm" || op == "MatMul") return map_fc(n);
  if (op == "Flatten" || op == "Reshape" || op == "Squeeze") return map_reshape(n);
  if (op == "Identity") return set_runtime(n, runtime(n, 0));
  if (op == "Pad") return map_pad(n);
  if (op == "Relu") return set_runtime(n, result_.builder.relu(runtime(n, 0), layer_name(n)));
  if (op == "Clip") {  // a ReLU when min is 0 and max absent/infinite (attributes before opset 11, inputs after)
    const float lo = has_input(n, 1) ? static_cast<float>(constant(n, 1, "min").at(0)) : attr_float(n, "min", -INFINITY);
    const float hi = has_input(n, 2) ? static_cast<float>(constant(n, 2, "max").at(0)) : attr_float(n, "max", INFINITY);
    if (lo != 0.0f || !std::isinf(hi))
      throw NotSupported(node_label(n) + ": Clip to [" + std::to_string(lo) + ", " + std::to_string(hi) +
                         "] (only [0, inf), a ReLU, is supported; ReLU6 is not yet)");
    return set_runtime(n, result_.builder.relu(runtime(n, 0), layer_name(n)));
  }
  if (op == "GlobalAveragePool") return set_runtime(n, result_.builder.global_avg_pool(runtime(n, 0), layer_name(n)));
  if (op == "ReduceMean") {
    const Node x = runtime(n, 0);
    auto axes = has_input(n, 1) ? constant(n, 1, "axes").ints() : attr_ints(n, "axes").value_or(std::vector<std::int64_t>{});
    for (auto& a : axes) a = normalize_axis(a, static_cast<std::int64_t>(shape(x).rank()), n);
    std::sort(axes.begin(), axes.end());
    if (shape(x).rank() != 4 || axes != std::vector<std::int64_t>{2, 3})
      throw NotSupported(node_label(n) + ": ReduceMean is supported over H, W of a 4-D tensor only");
    const std::string name = layer_name(n);
    Node y = result_.builder.global_avg_pool(x, name);
    if (attr_int(n, "keepdims", 1) == 0) y = result_.builder.flatten(y, name + "_flatten");
    return set_runtime(n, y);
  }
  if (op == "BatchNormalization") {
    if (attr_int(n, "training_mode", 0) != 0) throw NotSupported(node_label(n) + ": training_mode=1 exports");
    const Node x = runtime(n, 0);
    BatchNormSpec s;
    s.eps = attr_float(n, "epsilon", 1e-5f);
    s.momentum = 1.0 - attr_float(n, "momentum", 0.9f);  // ONNX keeps `momentum` of the running value
    const std::string name = layer_name(n);
    const std::int64_t c = shape(x)[1];
    set_runtime(n, result_.builder.batch_norm(x, name, s));
    const char* names[] = {"gamma", "beta", "running_mean", "running_var"};
    for (int k = 0; k < 4; ++k) {
      const ConstTensor& t = constant(n, k + 1, names[k]);
      if (t.numel() != c || t.integer) throw DataError(node_label(n) + ": " + names[k] + " needs " + std::to_string(c) + " floats");
      weight(name + "." + names[k], {c}, t.f);
    }
    return;
  }
  if (op == "Add" || op == "Sum") {
    if (n.input_size() < 1) throw DataError(node_label(n) + " has no input");
    Node acc = runtime(n, 0);
    const std::string name = layer_name(n);
    for (int k = 1; k < n.input_size(); ++k)
      acc = result_.builder.add(acc, runtime(n, k), k == 1 ? name : name + "_" + std::to_string(k));
    return set_runtime(n, acc);
  }
  if (op == "Concat") {
    std::vector<Node> xs;
    for (int k = 0; k < n.input_size(); ++k) xs.push_back(runtime(n, k));
    if (normalize_axis(attr_int(n, "axis", 1), static_cast<std::int64_t>(shape(xs[0]).rank()), n) != 1)
      throw NotSupported(node_label(n) + ": Concat along an axis other than channels (1)");
    return set_runtime(n, xs.size() == 1 ? xs[0] : result_.builder.concat(xs, layer_name(n)));
  }
  if (op == "Dropout") {
    if (n.output_size() > 1 && !n.output(1).empty() && consumers_[n.output(1)] > 0)
      throw NotSupported(node_label(n) + ": the mask output is not supported");
    const float p = has_input(n, 1) ? static_cast<float>(constant(n, 1, "ratio").at(0)) : attr_float(n, "ratio", 0.5f);
    const Node x = runtime(n, 0);
    return set_runtime(n, p == 0.0f ? x : result_.builder.dropout(x, layer_name(n), p));
  }
  if (op == "LRN") {
    LrnSpec s;
    s.size = attr_int(n, "size", 0);
    s.alpha = attr_float(n, "alpha", 1e-4f);
    s.beta = attr_float(n, "beta", 0.75f);
    s.k = attr_float(n, "bias", 1.0f);
    return set_runtime(n, result_.builder.lrn(runtime(n, 0), layer_name(n), s));
  }
  if (op == "Softmax") {  // only as the model's last node: the loss takes the logits before it
    if (n.output(0) != model_.graph().output(0).name())
      throw NotSupported(node_label(n) + ": Softmax is supported only as the model's output");
    dropped_softmax_ = n.name();
    return set_runtime(n, runtime(n, 0));
  }
  throw InternalError("operator " + op + " listed but not mapped");
}

void Importer::finish() {
  const std::string& out = model_.graph().output(0).name();
  auto it = values_.find(out);
  if (it == values_.end() || it->second.constant)
    throw NotSupported("the model output '" + out + "' is not computed from the input");
  Node y = it->second.node;
  if (shape(y).rank() == 4) y = result_.builder.flatten(y, "output_flatten");
  result_.builder.set_num_classes(shape(y)[1]);
  if (options_.classes && *options_.classes != shape(y)[1])
    throw InvalidArgument("model " + model_.graph().name() + " has " + std::to_string(shape(y)[1]) +
                          " outputs; --classes " + std::to_string(*options_.classes) + " differs");
  result_.builder.softmax_loss(y, "loss");
  if (!dropped_softmax_.empty())
    result_.notes.push_back("the final Softmax '" + dropped_softmax_ + "' is left out: outputs are its input logits");
}

}  // namespace

const std::vector<std::string>& onnx_supported_ops() {
  static const std::vector<std::string> ops = [] {
    std::set<std::string> s = runtime_ops();
    for (const char* op : {"Constant", "Gather", "Unsqueeze", "Cast", "Slice", "Sub", "Mul", "Div", "ConstantOfShape"})
      s.insert(op);
    return std::vector<std::string>(s.begin(), s.end());
  }();
  return ops;
}

bool is_onnx_model_name(std::string_view name) {
  return name.starts_with("onnx:") || (name.size() > 5 && name.ends_with(".onnx"));
}

std::string onnx_path_of(std::string_view name) {
  return std::string(name.starts_with("onnx:") ? name.substr(5) : name);
}

OnnxImport import_onnx_bytes(const std::string& bytes, const std::string& model_name, const std::string& model_dir,
                             const OnnxImportOptions& options) {
  onnx::ModelProto model;
  if (bytes.size() > kMaxModelBytes || !model.ParseFromString(bytes))
    throw DataError("model " + model_name + " is not an ONNX model (protobuf parse failed: not ONNX, or truncated)");
  if (!model.has_graph() || model.graph().node_size() == 0)
    throw DataError("model " + model_name + " is not an ONNX model (no graph or no nodes)");
  for (const auto& o : model.opset_import())
    if ((o.domain().empty() || o.domain() == "ai.onnx") && (o.version() < 7 || o.version() > 21))
      throw NotSupported("model " + model_name + " uses opset " + std::to_string(o.version()) + "; 7 to 21 are supported");
  Importer importer(model, model_name, model_dir, options);
  return importer.run();
}

OnnxImport import_onnx_file(const std::string& path, const OnnxImportOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw DataError("cannot read ONNX model " + path + ": " + ec.message());
  if (size > kMaxModelBytes) throw DataError("ONNX model " + path + " is larger than 2 GiB (use external data)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot open ONNX model " + path);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (!in) throw DataError("reading ONNX model " + path + " failed");
  const fs::path p(path);
  return import_onnx_bytes(bytes, p.stem().string(), p.parent_path().string(), options);
}

}  // namespace cnnergy
