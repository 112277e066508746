// Inverted dropout: in training keeps each element with probability 1-p and scales it by
// 1/(1-p) (mask drawn from the executor's per-iteration seed); in evaluation the identity.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class DropoutLayer final : public Layer {
 public:
  DropoutLayer(std::string name, float p) : Layer(std::move(name)), p_(p) {}

  std::string type() const override { return "dropout"; }
  LayerCategory category() const override { return LayerCategory::kDropout; }
  std::string describe() const override { return "dropout " + std::to_string(p_).substr(0, 4); }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<DropoutLayer>(name(), p_); }
  LayerSpec spec() const override { return DropoutSpec{p_}; }
  std::size_t private_bytes() const override { return mask_.size_bytes(); }

  void forward(const ForwardContext& ctx) override {
    if (ctx.phase == Phase::kTrain) {
      backend().dropout_forward(ctx.inputs[0], p_, ctx.seed, mask_, ctx.outputs[0]);
      mask_valid_ = true;
    } else {
      backend().copy(ctx.inputs[0], ctx.outputs[0]);
    }
  }
  void backward(const BackwardContext& ctx) override {
    if (!ctx.input_grads[0].defined()) return;
    if (!mask_valid_) throw InternalError("layer '" + name() + "': backward without a training forward");
    backend().dropout_backward(ctx.output_grads[0], mask_, ctx.input_grads[0], ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    if (!(p_ >= 0.0f && p_ < 1.0f)) shape_error("drop probability must be in [0, 1), got " + std::to_string(p_));
    return {in[0]};
  }
  // Eq. 5: one multiplication per element, forward and backward.
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
  void create_kernels(Backend& backend) override {
    mask_ = backend.alloc(input_shapes()[0], backend.dtype(), backend.layout());
  }

 private:
  float p_;
  Tensor mask_;
  bool mask_valid_ = false;
};

}  // namespace

std::unique_ptr<Layer> make_dropout_layer(const std::string& name, float p) {
  return std::make_unique<DropoutLayer>(name, p);
}

}  // namespace cnnergy
