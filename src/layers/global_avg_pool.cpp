// Global average pooling: (N, C, H, W) -> (N, C, 1, 1), the mean over each channel's H x W
// (ResNet, GoogLeNet, Inception heads). Runs as an average-pooling kernel with the whole input as
// its window.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class GlobalAvgPoolLayer final : public Layer {
 public:
  using Layer::Layer;

  std::string type() const override { return "global_avg_pool"; }
  LayerCategory category() const override { return LayerCategory::kPool; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<GlobalAvgPoolLayer>(name()); }
  // The pooling kernel contract passes x and y to backward (see pool.cpp).
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
    desc_ = Pool2dDesc{};
    desc_.n = x.n();
    desc_.c = x.c();
    desc_.h = x.h();
    desc_.w = x.w();
    desc_.kernel_h = desc_.stride_h = x.h();
    desc_.kernel_w = desc_.stride_w = x.w();
    desc_.mode = PoolMode::kAvgExcludePad;  // no padding: both modes agree
    return {Shape{x.n(), x.c(), 1, 1}};
  }

  // Eq. 3 with the window = the whole input: H*W*C adds, plus C divisions.
  Workload compute_workload() const override {
    Workload w;
    w.operations = desc_.c * desc_.h * desc_.w;
    w.flops_forward = w.operations + desc_.c;
    w.flops_backward = input_grad_needed() ? w.operations : 0;
    w.read_elements = w.operations;
    w.written_elements = desc_.c;
    return w;
  }

  void create_kernels(Backend& backend) override { kernel_ = backend.make_pool(desc_); }

 private:
  Pool2dDesc desc_;
  std::unique_ptr<PoolKernel> kernel_;
};

}  // namespace

std::unique_ptr<Layer> make_global_avg_pool_layer(const std::string& name) {
  return std::make_unique<GlobalAvgPoolLayer>(name);
}

}  // namespace cnnergy
