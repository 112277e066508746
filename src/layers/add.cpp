// Element-wise sum of two tensors of one shape (ResNet shortcuts). Backward hands the output
// gradient to both inputs: nothing to do where the executor let an input's gradient share the output
// gradient's memory (gradient_in_place), else a copy, or an accumulation where another consumer
// already wrote. It takes the ReLU after it (Layer::fuse_relu): forward writes max(0, a + b), and
// backward masks the output gradient by its output (once, in place, where an input shares it; where
// every input shares it and the batch norm that took this add's forward takes the mask too,
// Layer::leave_relu_backward, that batch norm's backward masks it instead).
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
  bool needs_outputs_in_backward() const override { return relu_; }  // the ReLU's mask
  std::string describe() const override {
    const std::string what = relu_ ? "add + relu" : "add";
    return absorbed() ? what + " (fused into " + absorbed_into() + ")" : what;
  }
  bool fuse_relu(const Backend&) override {
    if (bound()) return false;
    relu_ = true;
    return true;
  }
  bool relu_fused() const override { return relu_; }
  void leave_relu_backward() override { mask_left_ = true; }

  void forward(const ForwardContext& ctx) override {
    if (absorbed()) return;  // the convolution before it adds (inference: Layer::fuse_residual)
    if (relu_)
      backend().add_relu_forward(ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
    else
      backend().add_forward(ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
  }
  void backward(const BackwardContext& ctx) override {
    const Tensor& dy = ctx.output_grads[0];
    auto shares_dy = [&](std::size_t i) {
      const Tensor& dx = ctx.input_grads[i];
      return dx.defined() && !ctx.accumulate[i] && dx.buffer() == dy.buffer() && dx.offset_bytes() == dy.offset_bytes();
    };
    const bool in_place = shares_dy(0) || shares_dy(1);
    // With the ReLU: the masked gradient either replaces dy where an input shares it, or is
    // written (or added) into each input's gradient directly. Left to the batch norm only where no
    // input gradient is written here (every one shares dy or is not wanted).
    bool left = mask_left_;
    for (std::size_t i = 0; i < 2; ++i) left = left && (!ctx.input_grads[i].defined() || shares_dy(i));
    if (relu_ && in_place && !left) backend().relu_backward(ctx.outputs[0], dy, dy, false);
    for (std::size_t i = 0; i < 2; ++i) {
      const Tensor& dx = ctx.input_grads[i];
      if (!dx.defined() || shares_dy(i)) continue;
      if (relu_ && !in_place)
        backend().relu_backward(ctx.outputs[0], dy, dx, ctx.accumulate[i]);
      else if (ctx.accumulate[i])
        backend().accumulate(dy, dx);
      else
        backend().copy(dy, dx);
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

 private:
  bool relu_ = false;
  bool mask_left_ = false;  // leave_relu_backward
};

}  // namespace

std::unique_ptr<Layer> make_add_layer(const std::string& name) { return std::make_unique<AddLayer>(name); }

}  // namespace cnnergy
