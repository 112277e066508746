// ReLU layer on 4-D or 2-D activations. Backward reads only the output, so the executor may run
// it in place (output sharing the input's memory) when nothing else reads the input later. Where
// the producer fused it (Layer::fuse_relu), the layer is absorbed and runs nothing.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class ReluLayer final : public Layer {
 public:
  using Layer::Layer;

  std::string type() const override { return "relu"; }
  LayerCategory category() const override { return LayerCategory::kRelu; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<ReluLayer>(name()); }
  bool needs_outputs_in_backward() const override { return !absorbed(); }
  std::string describe() const override { return absorbed() ? "relu (fused into " + absorbed_into() + ")" : "relu"; }
  InputAlias input_alias() const override { return InputAlias::kInPlace; }  // relu_forward allows y == x
  bool gradient_in_place(std::size_t) const override { return true; }          // relu_backward allows dx == dy

  void forward(const ForwardContext& ctx) override {
    if (absorbed()) return;
    backend().relu_forward(ctx.inputs[0], ctx.outputs[0]);
  }
  void backward(const BackwardContext& ctx) override {
    if (absorbed() || !ctx.input_grads[0].defined()) return;
    backend().relu_backward(ctx.outputs[0], ctx.output_grads[0], ctx.input_grads[0], ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    return {in[0]};
  }
  // Eq. 4: one max per element; backward one compare-and-select per element.
  Workload compute_workload() const override {
    const std::int64_t e = input_shapes()[0].per_sample();
    Workload w;
    w.operations = e;
    w.flops_forward = e;
    w.flops_backward = input_grad_needed() ? e : 0;
    w.read_elements = e;
    w.written_elements = e;
    return w;
  }
};

}  // namespace

std::unique_ptr<Layer> make_relu_layer(const std::string& name) { return std::make_unique<ReluLayer>(name); }

}  // namespace cnnergy
