// Softmax + cross-entropy loss on (N, classes) logits with int32 labels: the network's last
// layer. It produces no graph tensor; the mean loss (fp32, 1) and the probabilities (fp32, N x K)
// stay on the device until the executor is asked for them.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class SoftmaxLossLayer final : public LossLayer {
 public:
  using LossLayer::LossLayer;

  std::string type() const override { return "softmax_loss"; }
  LayerCategory category() const override { return LayerCategory::kLoss; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<SoftmaxLossLayer>(name()); }
  std::size_t private_bytes() const override {
    return probs_.size_bytes() + loss_.size_bytes() + scratch_.size_bytes();
  }
  const Tensor& loss() const override { return loss_; }
  const Tensor& probabilities() const override { return probs_; }

  void forward(const ForwardContext& ctx) override {
    if (!ctx.labels || !ctx.labels->defined()) throw InvalidArgument("layer '" + name() + "': no labels were set");
    kernel_->forward(ctx.inputs[0], *ctx.labels, probs_, loss_);
  }

  void backward(const BackwardContext& ctx) override {
    if (!ctx.labels || !ctx.labels->defined()) throw InvalidArgument("layer '" + name() + "': no labels were set");
    const Tensor& dx = ctx.input_grads[0];
    if (!dx.defined()) return;
    if (!ctx.accumulate[0]) {
      kernel_->backward(probs_, *ctx.labels, ctx.loss_scale, dx);
      return;
    }
    if (!scratch_.defined()) scratch_ = backend().alloc(input_shapes()[0], backend().dtype());
    kernel_->backward(probs_, *ctx.labels, ctx.loss_scale, scratch_);
    backend().accumulate(scratch_, dx);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    if (in[0].rank() != 2) shape_error("needs 2-D logits (N, classes), got " + in[0].str());
    if (in[0][1] < 2) shape_error("needs at least 2 classes, got " + std::to_string(in[0][1]));
    desc_ = SoftmaxXentDesc{in[0].n(), in[0][1]};
    return {};
  }
  // Eq. 7: exponential, add and division per class. Backward: one subtract-and-scale per class.
  Workload compute_workload() const override {
    Workload w;
    w.operations = 3 * desc_.classes;
    w.flops_forward = 3 * desc_.classes;
    w.flops_backward = input_grad_needed() ? 2 * desc_.classes : 0;
    w.read_elements = desc_.classes;
    w.written_elements = desc_.classes;
    return w;
  }
  void create_kernels(Backend& backend) override {
    kernel_ = backend.make_softmax_xent(desc_);
    probs_ = backend.alloc(Shape{desc_.n, desc_.classes}, DType::kF32);
    loss_ = backend.alloc(Shape{1}, DType::kF32);
  }

 private:
  SoftmaxXentDesc desc_;
  std::unique_ptr<SoftmaxXentKernel> kernel_;
  Tensor probs_, loss_, scratch_;
};

}  // namespace

std::unique_ptr<Layer> make_softmax_loss_layer(const std::string& name) {
  return std::make_unique<SoftmaxLossLayer>(name);
}

}  // namespace cnnergy
