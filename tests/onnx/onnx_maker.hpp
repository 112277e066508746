// Test helpers: small ONNX models written with the protobuf API (a node list, initialisers, one
// float input and output), and running an imported model on the CPU backend.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/onnx/onnx_import.hpp"
#include "net/net_testing.hpp"

namespace cnnergy::test {

struct OnnxMaker {
  onnx::ModelProto model;
  onnx::GraphProto* graph = nullptr;

  explicit OnnxMaker(std::int64_t opset = 13) {
    model.set_ir_version(8);
    auto* o = model.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    graph = model.mutable_graph();
    graph->set_name("test");
  }
  void value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::int64_t>& dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void input(const std::string& name, const std::vector<std::int64_t>& dims) { value_info(graph->add_input(), name, dims); }
  void output(const std::string& name, const std::vector<std::int64_t>& dims) { value_info(graph->add_output(), name, dims); }
  static void fill(onnx::TensorProto* t, const std::string& name, const std::vector<std::int64_t>& dims,
                   const std::vector<float>& values) {
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
  }
  void init(const std::string& name, const std::vector<std::int64_t>& dims, const std::vector<float>& values) {
    fill(graph->add_initializer(), name, dims, values);
  }
  void init_ints(const std::string& name, const std::vector<std::int64_t>& values) {
    auto* t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                        const std::string& name = "") {
    auto* n = graph->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph->node_size()) : name);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  static void attr_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_float(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  }
  std::string bytes() const { return model.SerializeAsString(); }
  void save(const std::string& path) const {
    std::ofstream f(path, std::ios::binary);
    f << bytes();
  }
};

// Runs an imported model in eval mode on the CPU at `batch`; input values in NCHW order.
inline std::vector<float> run_cpu(OnnxImport&& imp, std::int64_t batch, const std::vector<float>& x) {
  auto graph = imp.builder.build();
  auto backend = cpu_backend();
  ExecutorOptions o;
  o.batch_size = batch;
  o.training = false;
  Executor exec(*graph, *backend, o);
  exec.initialize_parameters(1);
  Tensor host = Tensor::host(graph->tensor(graph->input_tensor()).shape.with_batch(batch));
  std::copy(x.begin(), x.end(), host.f32().begin());
  exec.set_input(to_backend(*backend, host), Tensor{});
  exec.forward(Phase::kEval);
  const Tensor out = to_host(*backend, exec.logits());
  return {out.f32().begin(), out.f32().end()};
}

}  // namespace cnnergy::test
