// Element-wise sum of two tensors of one shape (ResNet shortcuts). Backward hands the output
// gradient to both inputs: nothing to do where the executor let an input's gradient share the output
// gradient's memory (gradient_in_place), else a copy, or an accumulation where another consumer
// already wrote.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class AddLayer final : public Layer {
 public:
  using Layer::Layer;

  std::string type() const override { return "add"; }
  LayerCategory category() const override { return LayerCategory::kEltwise; }
  std::size_t num_inputs() const override { return 2; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<AddLayer>(name()); }
  bool gradient_in_place(std::size_t) const override { return true; }

  void forward(const ForwardContext& ctx) override {
    backend().add_forward(ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
  }
  void backward(const BackwardContext& ctx) override {
    for (std::size_t i = 0; i < 2; ++i) {
      const Tensor& dx = ctx.input_grads[i];
      const Tensor& dy = ctx.output_grads[0];
      if (!dx.defined()) continue;
      if (!ctx.accumulate[i] && dx.buffer() == dy.buffer() && dx.offset_bytes() == dy.offset_bytes()) continue;
      if (ctx.accumulate[i])
        backend().accumulate(ctx.output_grads[0], dx);
      else
        backend().copy(ctx.output_grads[0], dx);
    }
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 2);
    if (!(in[0] == in[1])) shape_error("inputs disagree: " + in[0].str() + " vs " + in[1].str());
    return {in[0]};
  }
  // One add per output element; backward copies (0 FLOPs counted).
  Workload compute_workload() const override {
    const std::int64_t e = input_shapes()[0].per_sample();
    Workload w;
    w.operations = e;
    w.flops_forward = e;
    w.read_elements = 2 * e;
    w.written_elements = e;
    return w;
  }
};

}  // namespace

std::unique_ptr<Layer> make_add_layer(const std::string& name) { return std::make_unique<AddLayer>(name); }

}  // namespace cnnergy
