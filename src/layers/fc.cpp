// Fully connected layer: y = x W^T + b on 2-D (N, in) inputs (the builder flattens 4-D inputs
// first), weight (out, in), optional bias (out).
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class FcLayer final : public Layer {
 public:
  FcLayer(std::string name, const FcSpec& spec) : Layer(std::move(name)), spec_(spec) {}

  std::string type() const override { return "fc"; }
  LayerCategory category() const override { return LayerCategory::kFc; }
  std::string describe() const override { return "fc " + std::to_string(spec_.out_features); }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<FcLayer>(name(), spec_); }
  LayerSpec spec() const override { return spec_; }
  std::vector<Tensor> eval_weights() const override {
    return {parameters()[0].value(), spec_.bias ? parameters()[1].value() : Tensor{}};
  }
  bool needs_inputs_in_backward() const override { return true; }  // weight gradient reads x

  void init_parameters(Rng& rng) override {
    init_weight(0, spec_.init, desc_.in_features, rng);
    if (spec_.bias) init_constant(1, spec_.init.bias_value);
    refresh_working_copies();
  }

  void forward(const ForwardContext& ctx) override {
    kernel_->forward(ctx.inputs[0], parameters()[0].value(), bias_value(), ctx.outputs[0]);
  }

  void backward(const BackwardContext& ctx) override {
    kernel_->backward_filter(ctx.inputs[0], ctx.output_grads[0], parameters()[0].grad,
                             spec_.bias ? parameters()[1].grad : Tensor{});
    if (ctx.input_grads[0].defined())
      kernel_->backward_data(ctx.output_grads[0], parameters()[0].value(), ctx.input_grads[0], ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    if (in[0].rank() != 2) shape_error("needs a 2-D input (N, features), got " + in[0].str() + "; flatten first");
    if (spec_.out_features < 1) shape_error("out_features must be at least 1");
    desc_ = LinearDesc{in[0].n(), in[0][1], spec_.out_features, spec_.bias};
    declare_parameter("weight", Shape{desc_.out_features, desc_.in_features}, /*decay=*/true, /*backend_dtype=*/true);
    if (spec_.bias) declare_parameter("bias", Shape{desc_.out_features}, /*decay=*/false, /*backend_dtype=*/true);
    return {Shape{desc_.n, desc_.out_features}};
  }

  Workload compute_workload() const override {
    const std::int64_t macs = desc_.in_features * desc_.out_features;  // Eq. 2
    const std::int64_t bias = spec_.bias ? desc_.out_features : 0;
    Workload w;
    w.operations = macs;
    w.flops_forward = 2 * macs + bias;
    w.flops_backward = 2 * macs + (input_grad_needed() ? 2 * macs : 0) + bias;
    w.read_elements = desc_.in_features + macs + bias;
    w.written_elements = desc_.out_features;
    w.parameters = macs + bias;
    return w;
  }

  void create_kernels(Backend& backend) override { kernel_ = backend.make_linear(desc_); }

 private:
  Tensor bias_value() const { return spec_.bias ? parameters()[1].value() : Tensor{}; }

  FcSpec spec_;
  LinearDesc desc_;
  std::unique_ptr<LinearKernel> kernel_;
};

}  // namespace

std::unique_ptr<Layer> make_fc_layer(const std::string& name, const FcSpec& spec) {
  return std::make_unique<FcLayer>(name, spec);
}

}  // namespace cnnergy
