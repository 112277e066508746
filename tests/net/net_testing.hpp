// Helpers for the engine tests: a CPU backend, host <-> backend transfers, and the small
// branching graph (conv -> bn -> relu -> pool -> two branches -> add + concat -> lrn -> avg pool
// -> dropout -> fc -> loss) most tests run.
#pragma once

#include <memory>
#include <string>

#include "backend/ops.hpp"
#include "core/errors.hpp"
#include "common/tensor_testing.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "net/graph_builder.hpp"

namespace cnnergy::test {

inline std::unique_ptr<Backend> cpu_backend() {
  BackendOptions o;
  o.device = Device{};
  return create_backend(o);
}

// A backend tensor holding a host fp32 NCHW tensor's values (converted to the backend's type).
inline Tensor to_backend(Backend& b, const Tensor& host_f32) {
  const Layout layout = host_f32.shape().rank() == 4 ? b.layout() : Layout::kNCHW;
  Tensor dev = b.alloc(host_f32.shape(), host_f32.dtype() == DType::kI32 ? DType::kI32 : b.dtype(), layout);
  const Tensor host = host_f32.dtype() == DType::kI32 ? host_f32 : from_f32_nchw(host_f32, dev.dtype(), layout);
  b.upload(host, dev);
  return dev;
}

// A backend tensor's values as host fp32 NCHW.
inline Tensor to_host(Backend& b, const Tensor& dev) {
  Tensor host = Tensor::host(dev.shape(), dev.dtype(), dev.layout());
  b.download(dev, host);
  return dev.dtype() == DType::kI32 ? host : to_f32_nchw(host);
}

// The small branching network of the tests: 3x8x8 input, `classes` classes.
inline std::unique_ptr<Graph> small_graph(std::int64_t classes = 5, const std::string& name = "small", float drop = 0.3f) {
  GraphBuilder g(name, Shape{3, 8, 8}, classes);
  auto x = g.conv(g.input(), "conv1", ConvSpec::make(4, 3, 1, 1));
  x = g.batch_norm(x, "bn1");
  x = g.relu(x, "relu1");
  auto p = g.max_pool(x, "pool1", PoolSpec::make(2, 2));                 // 4x4x4
  auto a = g.relu(g.conv(p, "conv_a", ConvSpec::make(4, 3, 1, 1)), "relu_a");
  auto b = g.conv(p, "conv_b", ConvSpec::make(4, 1));
  auto s = g.add(a, b, "sum");
  auto c = g.concat({s, b}, "cat");                                       // 8x4x4, b read twice
  c = g.lrn(c, "lrn", LrnSpec{3, 1e-2, 0.75, 2.0});
  c = g.avg_pool(c, "pool2", PoolSpec::make(2, 2, 0, false, PoolMode::kAvgIncludePad));  // 8x2x2
  c = g.dropout(c, "drop", drop);
  auto logits = g.fc(c, "fc", classes);
  g.softmax_loss(logits);
  return g.build();
}

// Runs forward layer by layer (no new dropout masks) and returns the loss.
inline double forward_loss(Executor& ex) {
  for (std::size_t i = 0; i < ex.num_layers(); ++i) ex.forward_layer(i, Phase::kTrain);
  return ex.read_loss();
}

}  // namespace cnnergy::test
