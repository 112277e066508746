// ONNX export (onnx_export.hpp): one node per layer in the graph's topological order (a short chain
// for hard_swish, silu, channel_shuffle, channel_affine), named after the layer, reading and writing
// tensors named after their producing layers; parameters and batch-norm statistics become
// initialisers under their cnnergy names ("conv1.weight"), a layer's constants under "layer.what".
#include "net/onnx/onnx_export.hpp"

#include <onnx/onnx_pb.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>
#include <variant>

#include "core/build_info.hpp"
#include "core/errors.hpp"
#include "core/tensor.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"

namespace cnnergy {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& values) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (auto v : values) a->add_ints(v);
}
void attr_int(onnx::NodeProto* n, const std::string& name, std::int64_t value) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}
void attr_float(onnx::NodeProto* n, const std::string& name, double value) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(static_cast<float>(value));
}

void value_info(onnx::ValueInfoProto* v, const std::string& name, std::int64_t batch, const std::vector<std::int64_t>& rest) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* b = t->mutable_shape()->add_dim();
  if (batch > 0) b->set_dim_value(batch);
  else b->set_dim_param("batch");
  for (auto d : rest) t->mutable_shape()->add_dim()->set_dim_value(d);
}

class Exporter {
 public:
  Exporter(Executor& executor, const OnnxExportOptions& options)
      : executor_(executor), graph_(executor.graph()), options_(options) {
    for (Parameter* p : executor_.parameters()) sources_[p->name] = &p->master;
    for (StateBuffer* b : executor_.buffers()) sources_[b->name] = &b->tensor;
  }

  onnx::ModelProto run(OnnxExportSummary& summary) {
    onnx::ModelProto model;
    model.set_ir_version(kOnnxExportIrVersion);
    model.set_producer_name("cnnergy");
    model.set_producer_version(build::kVersion);
    model.set_doc_string("cnnergy model " + graph_.model_name() + ": the inference graph, ending in the logits");
    auto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOnnxExportOpset);
    g_ = model.mutable_graph();
    g_->set_name(graph_.model_name());
    if (options_.input_name.empty() || options_.output_name.empty() || options_.input_name == options_.output_name)
      throw InvalidArgument("ONNX export: the input and output need two different, non-empty names");
    if (options_.batch < 0) throw InvalidArgument("ONNX export: batch must be >= 1, or 0 for a symbolic batch");
    const auto& in_dims = graph_.input_per_sample().dims();
    value_info(g_->add_input(), options_.input_name, options_.batch, {in_dims.begin(), in_dims.end()});
    used_.insert(options_.input_name);
    used_.insert(options_.output_name);
    names_.assign(graph_.num_tensors(), "");
    names_[static_cast<std::size_t>(graph_.input_tensor())] = options_.input_name;

    for (std::size_t i = 0; i < graph_.num_layers(); ++i) {
      if (static_cast<int>(i) == graph_.loss_layer()) continue;  // the inference graph ends in the logits
      map_layer(i);
    }
    // The logits as the model output: (batch, classes), flattened if a layer left them 4-D.
    const int logits = graph_.logits_tensor();
    const Shape& ls = graph_.tensor(logits).shape;
    auto* last = last_node_for_tensor(logits);
    if (ls.rank() == 2 && last) {
      for (auto& o : *last->mutable_output())
        if (o == names_[static_cast<std::size_t>(logits)]) o = options_.output_name;
    } else {
      auto* f = node("Flatten", graph_.tensor(logits).name + ".to_logits", {name_of(logits)}, options_.output_name);
      attr_int(f, "axis", 1);
    }
    value_info(g_->add_output(), options_.output_name, options_.batch, {graph_.num_classes()});
    summary.nodes = static_cast<std::size_t>(g_->node_size());
    summary.initializers = static_cast<std::size_t>(g_->initializer_size());
    summary.values = values_;
    const std::size_t size = model.ByteSizeLong();
    if (size > static_cast<std::size_t>(INT_MAX))
      throw DataError("model " + graph_.model_name() + " needs " + std::to_string(size >> 20) +
                      " MiB as ONNX, beyond protobuf's 2 GiB limit of one file (external data is not written)");
    summary.bytes = size;
    return model;
  }

 private:
  onnx::NodeProto* node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                        const std::string& output) {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    n->add_output(output);
    return n;
  }
  onnx::NodeProto* last_node_for_tensor(int id) {
    for (int k = g_->node_size() - 1; k >= 0; --k)
      for (const auto& o : g_->node(k).output())
        if (o == names_[static_cast<std::size_t>(id)]) return g_->mutable_node(k);
    return nullptr;
  }
  const std::string& name_of(int id) const {
    const std::string& n = names_.at(static_cast<std::size_t>(id));
    if (n.empty()) throw InternalError("ONNX export: tensor " + std::to_string(id) + " read before it is written");
    return n;
  }
  // A fresh tensor name from `base` (a layer name): unique in the graph.
  std::string fresh(const std::string& wanted) {
    const std::string base = wanted.empty() ? "t" : wanted;
    std::string name = base;
    for (int k = 2; used_.count(name); ++k) name = base + "_" + std::to_string(k);
    used_.insert(name);
    return name;
  }
  // An initialiser with the executor's value of parameter or buffer `name` (fp32, logical NCHW).
  std::string initializer(const std::string& name) {
    auto it = sources_.find(name);
    if (it == sources_.end()) throw InternalError("ONNX export: no parameter or buffer named '" + name + "'");
    const Tensor& t = *it->second;
    Tensor host = Tensor::host(t.shape(), t.dtype(), t.layout());
    executor_.backend().download(t, host);
    const Tensor f = to_f32_nchw(host);
    auto* p = g_->add_initializer();
    p->set_name(fresh(name));  // the checkpoint name, unless a tensor took it (the importer reads by position)
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : f.shape().dims()) p->add_dims(d);
    const auto values = f.f32();
    p->set_raw_data(values.data(), values.size_bytes());
    values_ += static_cast<std::int64_t>(values.size());
    return p->name();
  }
  std::string scalar_initializer(const std::string& name, float value) {
    auto* p = g_->add_initializer();
    p->set_name(fresh(name));
    p->set_data_type(onnx::TensorProto::FLOAT);
    p->add_float_data(value);
    return p->name();
  }

  std::string float_initializer(const std::string& name, const std::vector<std::int64_t>& dims,
                                const std::vector<float>& values) {
    auto* p = g_->add_initializer();
    p->set_name(fresh(name));
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) p->add_dims(d);
    for (float v : values) p->add_float_data(v);
    return p->name();
  }
  std::string int64_initializer(const std::string& name, const std::vector<std::int64_t>& values) {
    auto* p = g_->add_initializer();
    p->set_name(fresh(name));
    p->set_data_type(onnx::TensorProto::INT64);
    p->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) p->add_int64_data(v);
    return p->name();
  }

  // The activations beyond ReLU. HardSwish is opset 14 and SiLU no operator: both as the
  // activation then a Mul by x, the pattern PyTorch writes at opset 13 and our importer fuses back.
  void map_activation(const std::string& n, const ActivationDesc& d, const std::string& x, const std::string& out) {
    switch (d.kind) {
      case ActivationKind::kClip:  // min and max as inputs from opset 11 (infinite bounds written as such)
        node("Clip", n, {x, scalar_initializer(n + ".min", d.alpha), scalar_initializer(n + ".max", d.beta)}, out);
        return;
      case ActivationKind::kLeakyRelu:
        attr_float(node("LeakyRelu", n, {x}, out), "alpha", d.alpha);
        return;
      case ActivationKind::kSigmoid:
        node("Sigmoid", n, {x}, out);
        return;
      case ActivationKind::kHardSigmoid: {
        auto* h = node("HardSigmoid", n, {x}, out);
        attr_float(h, "alpha", d.alpha);
        attr_float(h, "beta", d.beta);
        return;
      }
      case ActivationKind::kHardSwish: {  // x * HardSigmoid(x; 1/6, 1/2) = x * clamp(x + 3, 0, 6) / 6
        const std::string gate = fresh(n + ".hard_sigmoid");
        auto* h = node("HardSigmoid", gate, {x}, gate);
        attr_float(h, "alpha", 1.0 / 6.0);
        attr_float(h, "beta", 0.5);
        node("Mul", n, {x, gate}, out);
        return;
      }
      case ActivationKind::kSilu: {  // x * Sigmoid(x)
        const std::string gate = fresh(n + ".sigmoid");
        node("Sigmoid", gate, {x}, gate);
        node("Mul", n, {x, gate}, out);
        return;
      }
    }
    throw InternalError("ONNX export: activation '" + n + "' of an unknown kind");
  }

  void map_layer(std::size_t i) {
    const Layer& l = graph_.layer(i);
    const std::string& type = l.type();
    const auto& in_ids = graph_.layer_inputs(i);
    const auto& out_ids = graph_.layer_outputs(i);
    if (out_ids.size() != 1)
      throw NotSupported("layer '" + l.name() + "' (" + type + ") has " + std::to_string(out_ids.size()) +
                         " outputs; the ONNX export maps layers of one output");
    std::vector<std::string> in;
    for (int id : in_ids) in.push_back(name_of(id));
    const int out_id = out_ids[0];
    const std::string out = fresh(graph_.tensor(out_id).name);
    names_[static_cast<std::size_t>(out_id)] = out;
    const LayerSpec spec = l.spec();
    const std::string& n = l.name();

    if (type == "conv") {
      const auto& s = std::get<ConvSpec>(spec);
      in.push_back(initializer(n + ".weight"));
      if (s.bias) in.push_back(initializer(n + ".bias"));
      auto* c = node("Conv", n, in, out);
      attr_ints(c, "kernel_shape", {s.kernel_h, s.kernel_w});
      attr_ints(c, "strides", {s.stride_h, s.stride_w});
      attr_ints(c, "pads", {s.pad_top, s.pad_left, s.pad_bottom, s.pad_right});
      attr_ints(c, "dilations", {s.dilation_h, s.dilation_w});
      attr_int(c, "group", s.groups);
    } else if (type == "fc") {
      const auto& s = std::get<FcSpec>(spec);
      if (graph_.tensor(in_ids[0]).shape.rank() != 2) {  // our fc flattens a 4-D input itself; Gemm does not
        const std::string flat = fresh(n + ".flatten");
        attr_int(node("Flatten", flat, {in[0]}, flat), "axis", 1);
        in[0] = flat;
      }
      in.push_back(initializer(n + ".weight"));  // (out, in): Gemm with transB
      if (s.bias) in.push_back(initializer(n + ".bias"));
      attr_int(node("Gemm", n, in, out), "transB", 1);
    } else if (type == "max_pool" || type == "avg_pool") {
      const auto& s = std::get<PoolSpec>(spec);
      auto* p = node(s.mode == PoolMode::kMax ? "MaxPool" : "AveragePool", n, in, out);
      attr_ints(p, "kernel_shape", {s.kernel_h, s.kernel_w});
      attr_ints(p, "strides", {s.stride_h, s.stride_w});
      attr_ints(p, "pads", {s.pad_h, s.pad_w, s.pad_h, s.pad_w});
      attr_int(p, "ceil_mode", s.ceil_mode ? 1 : 0);
      if (s.mode != PoolMode::kMax) attr_int(p, "count_include_pad", s.mode == PoolMode::kAvgIncludePad ? 1 : 0);
    } else if (type == "batch_norm") {
      const auto& s = std::get<BatchNormSpec>(spec);
      for (const char* k : {".gamma", ".beta", ".running_mean", ".running_var"}) in.push_back(initializer(n + k));
      auto* b = node("BatchNormalization", n, in, out);
      attr_float(b, "epsilon", s.eps);
      attr_float(b, "momentum", 1.0 - s.momentum);  // ONNX's momentum weighs the running value
    } else if (type == "lrn") {
      const auto& s = std::get<LrnSpec>(spec);
      auto* r = node("LRN", n, in, out);
      attr_int(r, "size", s.size);
      attr_float(r, "alpha", s.alpha);
      attr_float(r, "beta", s.beta);
      attr_float(r, "bias", s.k);
    } else if (type == "dropout") {
      in.push_back(scalar_initializer(n + ".ratio", std::get<DropoutSpec>(spec).p));
      node("Dropout", n, in, out);  // no training_mode input: inference, the identity
    } else if (std::holds_alternative<ActivationDesc>(spec)) {
      map_activation(n, std::get<ActivationDesc>(spec), in[0], out);
    } else if (type == "mul") {
      node("Mul", n, in, out);  // one shape, or (N, C, H, W) by (N, C, 1, 1): ONNX broadcasting
    } else if (type == "channel_shuffle") {  // ShuffleNet's Reshape -> Transpose -> Reshape
      const auto g = std::get<ChannelShuffleSpec>(spec).groups;
      const Shape& xs = graph_.tensor(in_ids[0]).shape;
      if (xs.rank() != 4)
        throw NotSupported("layer '" + n + "' (channel_shuffle) of a " + std::to_string(xs.rank()) +
                           "-D tensor: the ONNX export maps the shuffle of (N, C, H, W)");
      // 0 keeps the batch dimension (Reshape's allowzero 0), so a symbolic batch stays symbolic.
      const std::string grouped = fresh(n + ".grouped"), swapped = fresh(n + ".transposed");
      node("Reshape", grouped, {in[0], int64_initializer(n + ".grouped_shape", {0, g, xs[1] / g, xs[2], xs[3]})},
           grouped);
      attr_ints(node("Transpose", swapped, {grouped}, swapped), "perm", {0, 2, 1, 3, 4});
      node("Reshape", n, {swapped, int64_initializer(n + ".shape", {0, xs[1], xs[2], xs[3]})}, out);
    } else if (type == "channel_slice") {  // Slice along axis 1, starts/ends/axes as inputs (opset 10+)
      const auto& s = std::get<ChannelSliceSpec>(spec);
      node("Slice", n,
           {in[0], int64_initializer(n + ".starts", {s.begin}), int64_initializer(n + ".ends", {s.begin + s.count}),
            int64_initializer(n + ".axes", {1})},
           out);
    } else if (type == "channel_affine") {  // x * scale + shift, constants (1, C, 1, 1) or (1, C), or (1)
      const auto& s = std::get<ChannelAffineSpec>(spec);
      const Shape& xs = graph_.tensor(in_ids[0]).shape;
      auto dims = [&](std::size_t count) {
        if (count == 1) return std::vector<std::int64_t>{1};
        std::vector<std::int64_t> d(xs.rank(), 1);
        d[1] = static_cast<std::int64_t>(count);
        return d;
      };
      const std::string scaled = fresh(n + ".scaled");
      node("Mul", n + ".scale", {in[0], float_initializer(n + ".scale", dims(s.scale.size()), s.scale)}, scaled);
      node("Add", n, {scaled, float_initializer(n + ".shift", dims(s.shift.size()), s.shift)}, out);
    } else if (type == "relu") {
      node("Relu", n, in, out);
    } else if (type == "global_avg_pool") {
      node("GlobalAveragePool", n, in, out);
    } else if (type == "add") {
      node("Add", n, in, out);
    } else if (type == "concat") {
      attr_int(node("Concat", n, in, out), "axis", 1);
    } else if (type == "flatten") {
      attr_int(node("Flatten", n, in, out), "axis", 1);
    } else {
      std::string mapped;
      for (const auto& m : onnx_export_mapping()) mapped += (mapped.empty() ? "" : ", ") + m;
      throw NotSupported("layer '" + n + "' of type '" + type + "' has no ONNX mapping; mapped types: " + mapped);
    }
  }

  Executor& executor_;
  const Graph& graph_;
  OnnxExportOptions options_;
  onnx::GraphProto* g_ = nullptr;
  std::map<std::string, const Tensor*> sources_;
  std::vector<std::string> names_;  // ONNX tensor name by graph tensor id
  std::set<std::string> used_;
  std::int64_t values_ = 0;
};

}  // namespace

const std::vector<std::string>& onnx_export_mapping() {
  static const std::vector<std::string> m = {
      "conv: Conv",          "batch_norm: BatchNormalization", "relu: Relu",       "max_pool: MaxPool",
      "avg_pool: AveragePool", "global_avg_pool: GlobalAveragePool", "lrn: LRN",   "fc: (Flatten +) Gemm",
      "flatten: Flatten",    "add: Add",                        "concat: Concat",   "dropout: Dropout",
      "clip: Clip",          "leaky_relu: LeakyRelu",           "sigmoid: Sigmoid", "hard_sigmoid: HardSigmoid",
      "hard_swish: HardSigmoid + Mul", "silu: Sigmoid + Mul",      "mul: Mul",
      "channel_shuffle: Reshape + Transpose + Reshape", "channel_slice: Slice", "channel_affine: Mul + Add",
      "softmax_loss: left out (the graph ends in the logits)"};
  return m;
}

std::string export_onnx_bytes(Executor& executor, const OnnxExportOptions& options, OnnxExportSummary* summary) {
  OnnxExportSummary s;
  const onnx::ModelProto model = Exporter(executor, options).run(s);
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw InternalError("ONNX export: serialising the model failed");
  if (summary) *summary = s;
  return bytes;
}

void check_onnx_output_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw InvalidArgument("the ONNX output path is empty");
  if (fs::is_directory(path, ec))
    throw DataError("cannot write ONNX file " + path + ": it is a directory (give a file name, e.g. " +
                    (fs::path(path) / "model.onnx").string() + ")");
  const bool existed = fs::exists(path, ec);
  {
    std::ofstream probe(path, std::ios::app | std::ios::binary);
    if (!probe) throw DataError("cannot write ONNX file " + path + ": " + std::strerror(errno));
  }
  if (!existed) fs::remove(path, ec);
}

OnnxExportSummary export_onnx_file(Executor& executor, const std::string& path, const OnnxExportOptions& options) {
  namespace fs = std::filesystem;
  check_onnx_output_path(path);
  OnnxExportSummary s;
  {
    const onnx::ModelProto model = Exporter(executor, options).run(s);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    bool ok = false;
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw DataError("cannot write ONNX file " + tmp + ": " + std::strerror(errno));
      ok = model.SerializeToOstream(&out);
      out.close();
      ok = ok && out.good();
    }
    std::error_code ec;
    if (!ok) {
      fs::remove(tmp, ec);
      throw DataError("writing ONNX file " + path + " failed (disk full?)");
    }
    fs::rename(tmp, path, ec);
    if (ec) {
      const std::string why = ec.message();
      fs::remove(tmp, ec);
      throw DataError("cannot write ONNX file " + path + ": " + why);
    }
  }
  return s;
}

}  // namespace cnnergy
