// Local response normalisation across channels (AlexNet/CaffeNet/GoogLeNet):
// y = x / (k + alpha/size * sum of x^2 over `size` neighbouring channels)^beta.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class LrnLayer final : public Layer {
 public:
  LrnLayer(std::string name, const LrnSpec& spec) : Layer(std::move(name)), spec_(spec) {}

  std::string type() const override { return "lrn"; }
  LayerCategory category() const override { return LayerCategory::kNorm; }
  std::string describe() const override { return "lrn size " + std::to_string(spec_.size); }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<LrnLayer>(name(), spec_); }
  LayerSpec spec() const override { return spec_; }
  bool needs_inputs_in_backward() const override { return true; }
  bool needs_outputs_in_backward() const override { return true; }

  void forward(const ForwardContext& ctx) override { kernel_->forward(ctx.inputs[0], ctx.outputs[0]); }
  void backward(const BackwardContext& ctx) override {
    if (!ctx.input_grads[0].defined()) return;
    kernel_->backward(ctx.inputs[0], ctx.outputs[0], ctx.output_grads[0], ctx.input_grads[0], ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    const Shape& x = in[0];
    if (x.rank() != 4) shape_error("needs a 4-D input (N, C, H, W), got " + x.str());
    if (spec_.size < 1 || spec_.size % 2 == 0) shape_error("size must be odd and >= 1, got " + std::to_string(spec_.size));
    if (spec_.k <= 0.0 || spec_.alpha < 0.0 || spec_.beta < 0.0) shape_error("needs k > 0, alpha >= 0, beta >= 0");
    desc_ = LrnDesc{x.n(), x.c(), x.h(), x.w(), spec_.size, spec_.alpha, spec_.beta, spec_.k};
    return {x};
  }
  // Not in Castro et al. 2019: (size + 3) per element (size square-and-adds, then scale, power, divide);
  // backward about twice the forward (the window sum of dy*y/scale terms, then the product).
  Workload compute_workload() const override {
    const std::int64_t e = input_shapes()[0].per_sample();
    Workload w;
    w.operations = (spec_.size + 3) * e;
    w.flops_forward = w.operations;
    w.flops_backward = input_grad_needed() ? 2 * w.operations : 0;
    w.read_elements = e;
    w.written_elements = e;
    return w;
  }
  void create_kernels(Backend& backend) override { kernel_ = backend.make_lrn(desc_); }

 private:
  LrnSpec spec_;
  LrnDesc desc_;
  std::unique_ptr<LrnKernel> kernel_;
};

}  // namespace

std::unique_ptr<Layer> make_lrn_layer(const std::string& name, const LrnSpec& spec) {
  return std::make_unique<LrnLayer>(name, spec);
}

}  // namespace cnnergy
