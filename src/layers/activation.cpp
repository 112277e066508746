// Element-wise activations beyond ReLU, for imported networks: Clip (ReLU6), LeakyRelu, Sigmoid,
// HardSigmoid, HardSwish and SiLU (Swish; the Sigmoid-then-Mul that PyTorch exports). One layer
// type per function, one class for all (backend/activation_kind.hpp). Backward reads the input,
// so the output is never written over it; the input gradient may share the output gradient.
#include <cstdio>

#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class ActivationLayer final : public Layer {
 public:
  ActivationLayer(std::string name, const ActivationDesc& desc) : Layer(std::move(name)), desc_(desc) {}

  std::string type() const override { return activation_type_name(desc_.kind); }
  LayerSpec spec() const override { return desc_; }
  LayerCategory category() const override { return LayerCategory::kRelu; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<ActivationLayer>(name(), desc_); }
  bool needs_inputs_in_backward() const override { return true; }
  bool gradient_in_place(std::size_t) const override { return true; }  // activation_backward allows dx == dy
  std::string describe() const override {
    char buf[96];
    switch (desc_.kind) {
      case ActivationKind::kClip:
        std::snprintf(buf, sizeof buf, "clip [%g, %g]", desc_.alpha, desc_.beta);
        return buf;
      case ActivationKind::kLeakyRelu:
        std::snprintf(buf, sizeof buf, "leaky_relu (alpha %g)", desc_.alpha);
        return buf;
      case ActivationKind::kHardSigmoid:
        std::snprintf(buf, sizeof buf, "hard_sigmoid (alpha %g, beta %g)", desc_.alpha, desc_.beta);
        return buf;
      default:
        return type();
    }
  }

  void forward(const ForwardContext& ctx) override {
    backend().activation_forward(desc_, ctx.inputs[0], ctx.outputs[0]);
  }
  void backward(const BackwardContext& ctx) override {
    if (!ctx.input_grads[0].defined()) return;
    backend().activation_backward(desc_, ctx.inputs[0], ctx.output_grads[0], ctx.input_grads[0], ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    if (desc_.kind == ActivationKind::kClip && !(desc_.alpha <= desc_.beta))
      shape_error("clip range [" + std::to_string(desc_.alpha) + ", " + std::to_string(desc_.beta) + "] is empty");
    return {in[0]};
  }
  // Operations per element (the counting of workload.hpp: one per arithmetic step or comparison):
  // clip 2 (two compares), leaky ReLU 2 (compare, multiply), sigmoid 4 (negate, exp, add, divide),
  // hard sigmoid 4 (multiply, add, two compares), hard swish 5 (divide, add, two compares, multiply),
  // SiLU 5 (the sigmoid's 4 and a multiply). Backward: the derivative's steps and the product with
  // dy, counted as the forward's plus one.
  Workload compute_workload() const override {
    const std::int64_t e = input_shapes()[0].per_sample();
    std::int64_t per = 2;
    switch (desc_.kind) {
      case ActivationKind::kClip:
      case ActivationKind::kLeakyRelu:
        per = 2;
        break;
      case ActivationKind::kSigmoid:
      case ActivationKind::kHardSigmoid:
        per = 4;
        break;
      case ActivationKind::kHardSwish:
      case ActivationKind::kSilu:
        per = 5;
        break;
    }
    Workload w;
    w.operations = per * e;
    w.flops_forward = per * e;
    w.flops_backward = input_grad_needed() ? (per + 1) * e : 0;
    w.read_elements = e;
    w.written_elements = e;
    return w;
  }

 private:
  ActivationDesc desc_;
};

}  // namespace

std::string activation_type_name(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kClip: return "clip";
    case ActivationKind::kLeakyRelu: return "leaky_relu";
    case ActivationKind::kSigmoid: return "sigmoid";
    case ActivationKind::kHardSigmoid: return "hard_sigmoid";
    case ActivationKind::kHardSwish: return "hard_swish";
    case ActivationKind::kSilu: return "silu";
  }
  return "activation";
}

std::unique_ptr<Layer> make_activation_layer(const std::string& name, const ActivationDesc& desc) {
  return std::make_unique<ActivationLayer>(name, desc);
}

}  // namespace cnnergy
