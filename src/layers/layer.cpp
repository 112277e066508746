// The Layer base: setup bookkeeping, parameter/buffer allocation at bind time, initialisation
// helpers and error messages shared by every layer type.
#include "layers/layer.hpp"

#include <cmath>

#include "core/errors.hpp"

namespace cnnergy {

std::string_view category_name(LayerCategory c) {
  switch (c) {
    case LayerCategory::kConv: return "conv";
    case LayerCategory::kFc: return "fc";
    case LayerCategory::kPool: return "pool";
    case LayerCategory::kRelu: return "relu";
    case LayerCategory::kNorm: return "norm";
    case LayerCategory::kDropout: return "dropout";
    case LayerCategory::kEltwise: return "eltwise";
    case LayerCategory::kConcat: return "concat";
    case LayerCategory::kLoss: return "loss";
    case LayerCategory::kOther: return "other";
  }
  return "other";
}

void Layer::recompute_output(const Tensor& input, const Tensor& output) {
  (void)input;
  (void)output;
  throw InternalError("layer '" + name_ + "' (" + type() + ") cannot recompute its output");
}

std::vector<Shape> Layer::setup(std::span<const Shape> input_shapes) {
  if (bound()) throw InternalError("layer '" + name_ + "': setup() after bind()");
  for (const auto& s : input_shapes) {
    if (s.rank() == 0 || s.n() < 1) shape_error("batch size must be at least 1, got input " + s.str());
    for (auto d : s.dims())
      if (d < 1) shape_error("input " + s.str() + " has an empty dimension");
  }
  params_.clear();
  buffers_.clear();
  input_shapes_.assign(input_shapes.begin(), input_shapes.end());
  output_shapes_ = infer_shapes(input_shapes);
  for (const auto& s : output_shapes_)
    for (auto d : s.dims())
      if (d < 1) shape_error("output " + s.str() + " would be empty (input " + input_shapes_.at(0).str() + ")");
  workload_ = compute_workload();
  return output_shapes_;
}

std::int64_t Layer::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += p.shape.numel();
  return n;
}

std::size_t Layer::declare_parameter(const std::string& suffix, const Shape& shape, bool decay, bool backend_dtype) {
  Parameter p;
  p.name = name_ + "." + suffix;
  p.shape = shape;
  p.decay = decay;
  p.backend_dtype = backend_dtype;
  params_.push_back(std::move(p));
  return params_.size() - 1;
}

std::size_t Layer::declare_buffer(const std::string& suffix, const Shape& shape) {
  buffers_.push_back(StateBuffer{name_ + "." + suffix, shape, Tensor{}});
  return buffers_.size() - 1;
}

Backend& Layer::backend() const {
  if (!backend_) throw InternalError("layer '" + name_ + "' used before bind()");
  return *backend_;
}

void Layer::bind(Backend& backend, bool with_gradients) {
  if (bound()) throw InternalError("layer '" + name_ + "' bound twice");
  if (output_shapes_.empty() && input_shapes_.empty()) throw InternalError("layer '" + name_ + "': bind() before setup()");
  backend_ = &backend;
  with_gradients_ = with_gradients;
  const DType dtype = backend.dtype();
  for (auto& p : params_) {
    const bool working_copy = p.backend_dtype && dtype != DType::kF32;
    const Layout layout = backend.layout();
    p.master = backend.alloc(p.shape, DType::kF32, layout);
    backend.fill(p.master, 0.0f);
    if (working_copy) {
      p.working = backend.alloc(p.shape, dtype, layout);
      backend.fill(p.working, 0.0f);
    }
    if (!with_gradients) continue;
    p.grad = backend.alloc(p.shape, working_copy ? dtype : DType::kF32, layout);
    backend.fill(p.grad, 0.0f);
  }
  for (auto& b : buffers_) {
    b.tensor = backend.alloc(b.shape, DType::kF32);
    backend.fill(b.tensor, 0.0f);
  }
  try {
    create_kernels(backend);
  } catch (const NotSupported& e) {
    throw NotSupported("layer '" + name_ + "' (" + type() + ") cannot run on backend " + backend.name() + ": " +
                       e.what());
  }
}

void Layer::init_parameters(Rng& rng) {
  (void)rng;
  refresh_working_copies();
}

void Layer::refresh_working_copies() {
  for (auto& p : params_)
    if (p.working.defined()) backend().copy(p.master, p.working);
}

void Layer::shape_error(const std::string& message) const {
  throw ShapeError("layer '" + name_ + "' (" + type() + "): " + message);
}

void Layer::check_input_count(std::span<const Shape> inputs, std::size_t expected) const {
  if (inputs.size() != expected)
    shape_error("expects " + std::to_string(expected) + " input(s), got " + std::to_string(inputs.size()));
}

void Layer::upload_parameter(std::size_t i, const Tensor& host_f32_nchw) {
  Parameter& p = params_.at(i);
  const Tensor host = from_f32_nchw(host_f32_nchw, DType::kF32, p.master.layout());
  backend().upload(host, p.master);
}

void Layer::init_weight(std::size_t i, const WeightInit& init, std::int64_t fan_in, Rng& rng) {
  Tensor host = Tensor::host(params_.at(i).shape);
  const float stddev = init.kind == InitKind::kHeNormal
                           ? static_cast<float>(std::sqrt(2.0 / static_cast<double>(std::max<std::int64_t>(fan_in, 1))))
                           : init.stddev;
  rng.fill_normal(host.f32(), 0.0f, stddev);
  upload_parameter(i, host);
}

void Layer::init_constant(std::size_t i, float value) {
  backend().fill(params_.at(i).master, value);
}

}  // namespace cnnergy
