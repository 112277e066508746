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

#include "net/onnx/onnx_importer.hpp"

namespace cnnergy {
namespace onnx_import {

const std::set<std::string>& runtime_ops() {
  static const std::set<std::string> ops = {
      "Conv", "BatchNormalization", "Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean", "Gemm",
      "MatMul", "Flatten", "Reshape", "Squeeze", "Add", "Sum", "Concat", "Dropout", "LRN", "Identity", "Softmax",
      "Clip", "Shape", "Pad", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Mul", "Sub", "Div", "Transpose",
      "Split", "Slice"};
  return ops;
}

std::string supported_list() {
  std::string s;
  for (const auto& op : onnx_supported_ops()) s += (s.empty() ? "" : ", ") + op;
  return s;
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
  if (op == "Clip" || op == "LeakyRelu" || op == "Sigmoid" || op == "HardSigmoid" || op == "HardSwish")
    return map_activation(n);
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    bool both_runtime = op == "Add";
    for (int k = 0; k < 2 && both_runtime; ++k) both_runtime = has_input(n, k) && !value(n.input(k), n).constant;
    if (!both_runtime) return map_binary(n);
  }
  if (op == "Transpose") return map_transpose(n);
  if (op == "Split") return map_split(n);
  if (op == "Slice") return map_slice(n);
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

}  // namespace onnx_import

namespace {
using namespace onnx_import;
constexpr std::size_t kMaxModelBytes = std::size_t{2} << 30;  // protobuf's own 2 GiB message limit
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

namespace {

onnx::ModelProto parse_model(const std::string& bytes, const std::string& model_name) {
  onnx::ModelProto model;
  if (bytes.size() > kMaxModelBytes || !model.ParseFromString(bytes))
    throw DataError("model " + model_name + " is not an ONNX model (protobuf parse failed: not ONNX, or truncated)");
  return model;
}

OnnxImport import_model(onnx::ModelProto& model, const std::string& model_name, const std::string& model_dir,
                        const OnnxImportOptions& options) {
  if (!model.has_graph() || model.graph().node_size() == 0)
    throw DataError("model " + model_name + " is not an ONNX model (no graph or no nodes)");
  for (const auto& o : model.opset_import())
    if ((o.domain().empty() || o.domain() == "ai.onnx") && (o.version() < 7 || o.version() > 21))
      throw NotSupported("model " + model_name + " uses opset " + std::to_string(o.version()) + "; 7 to 21 are supported");
  Importer importer(model, model_name, model_dir, options);
  return importer.run();
}

}  // namespace

OnnxImport import_onnx_bytes(const std::string& bytes, const std::string& model_name, const std::string& model_dir,
                             const OnnxImportOptions& options) {
  onnx::ModelProto model = parse_model(bytes, model_name);
  return import_model(model, model_name, model_dir, options);
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
  onnx::ModelProto model = parse_model(bytes, p.stem().string());
  std::string().swap(bytes);  // the file's bytes are in the protobuf now
  return import_model(model, p.stem().string(), p.parent_path().string(), options);
}

}  // namespace cnnergy

