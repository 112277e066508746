// Max and average pooling layers (type "max_pool" / "avg_pool" by PoolSpec::mode), with Caffe's
// ceil-mode output size when asked.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class PoolLayer final : public Layer {
 public:
  PoolLayer(std::string name, const PoolSpec& spec) : Layer(std::move(name)), spec_(spec) {}

  std::string type() const override { return spec_.mode == PoolMode::kMax ? "max_pool" : "avg_pool"; }
  LayerCategory category() const override { return LayerCategory::kPool; }
  std::string describe() const override {
    std::string s = type() + " " + std::to_string(spec_.kernel_h) + "x" + std::to_string(spec_.kernel_w) + " /" +
                    std::to_string(spec_.stride_h);
    if (spec_.pad_h || spec_.pad_w) s += " pad " + std::to_string(spec_.pad_h);
    if (spec_.ceil_mode) s += " ceil";
    return normalisation_ != nullptr ? s + " (normalising the batch norm's input)" : s;
  }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<PoolLayer>(name(), spec_); }
  LayerSpec spec() const override { return spec_; }
  // Max pooling finds the arg-max from x and y, unless its kernel kept it in forward; average pooling
  // needs neither, but the kernel contract passes both, so keep them (cuDNN reads them for every mode).
  bool needs_inputs_in_backward() const override { return !keeps_argmax(); }
  bool needs_outputs_in_backward() const override { return !keeps_argmax() || applies_relu_mask(); }

  // With a batch norm's normalisation (Layer::take_normalisation) the input is the batch norm's.
  void forward(const ForwardContext& ctx) override {
    if (normalisation_ != nullptr)
      kernel_->forward_normalised(ctx.inputs[0], normalisation_->coefficients, normalisation_->relu, ctx.outputs[0]);
    else
      kernel_->forward(ctx.inputs[0], ctx.outputs[0]);
  }
  // Pooling is a function of its input alone: running forward again writes the same output (not
  // where its input is a batch norm's, normalised as read: nothing rebuilds it; the executor never
  // asks, as such a pool keeps its argmax).
  bool recomputes_output() const override { return bound() && normalisation_ == nullptr; }
  void recompute_output(const Tensor& input, const Tensor& output) override { kernel_->forward(input, output); }
  std::size_t workspace_bound(bool backward) const override { return backward && kernel_ ? kernel_->workspace_bound() : 0; }
  void backward(const BackwardContext& ctx) override {
    if (!ctx.input_grads[0].defined()) return;
    kernel_->backward(ctx.inputs[0], ctx.outputs[0], ctx.output_grads[0], ctx.input_grads[0], ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    const Shape& x = in[0];
    if (x.rank() != 4) shape_error("needs a 4-D input (N, C, H, W), got " + x.str());
    const PoolSpec& s = spec_;
    if (s.kernel_h < 1 || s.kernel_w < 1 || s.stride_h < 1 || s.stride_w < 1 || s.pad_h < 0 || s.pad_w < 0)
      shape_error("kernel and stride must be >= 1 and padding >= 0");
    if (s.pad_h >= s.kernel_h || s.pad_w >= s.kernel_w) shape_error("padding must be smaller than the window");
    if (x.h() + 2 * s.pad_h < s.kernel_h || x.w() + 2 * s.pad_w < s.kernel_w)
      shape_error("output would be empty: window " + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) +
                  " larger than the padded input " + x.str());
    desc_ = Pool2dDesc{};
    desc_.n = x.n();
    desc_.c = x.c();
    desc_.h = x.h();
    desc_.w = x.w();
    desc_.kernel_h = s.kernel_h;
    desc_.kernel_w = s.kernel_w;
    desc_.stride_h = s.stride_h;
    desc_.stride_w = s.stride_w;
    desc_.pad_h = s.pad_h;
    desc_.pad_w = s.pad_w;
    desc_.ceil_mode = s.ceil_mode;
    desc_.mode = s.mode;
    return {desc_.output_shape()};
  }

  // Eq. 3: window * output elements (one max or add each); average pooling adds one division per
  // output. Backward routes or spreads each output gradient over its window: about the same.
  Workload compute_workload() const override {
    const std::int64_t out = desc_.c * desc_.out_h() * desc_.out_w();
    Workload w;
    w.operations = desc_.kernel_h * desc_.kernel_w * out;
    w.flops_forward = w.operations + (spec_.mode == PoolMode::kMax ? 0 : out);
    w.flops_backward = input_grad_needed() ? w.flops_forward : 0;
    w.read_elements = desc_.c * desc_.h * desc_.w;
    w.written_elements = out;
    return w;
  }

  void create_kernels(Backend& backend) override {
    Pool2dDesc d = desc_;
    d.keep_argmax = argmax_offered_ && with_gradients() && input_grad_needed() && d.mode == PoolMode::kMax;
    d.normalised = normalisation_ != nullptr;
    d.relu_mask = relu_mask_offered_ && d.keep_argmax && !d.normalised;
    kernel_ = backend.make_pool(d);
  }
  void offer_argmax_keeping() override { argmax_offered_ = !bound(); }
  bool offer_relu_mask(const Backend& backend) override {
    if (bound() || !input_grad_needed() || spec_.mode != PoolMode::kMax) return false;
    Pool2dDesc d = desc_;
    d.keep_argmax = true;
    d.relu_mask = true;
    if (!backend.pools_relu_mask(d)) return false;
    argmax_offered_ = relu_mask_offered_ = true;
    return true;
  }
  bool applies_relu_mask() const override { return kernel_ && kernel_->applies_relu_mask(); }
  bool take_normalisation(const Backend& backend, const BatchNormDesc& batch_norm,
                          const std::shared_ptr<Normalisation>& link) override {
    if (bound() || link == nullptr || !argmax_offered_ || !input_grad_needed() || spec_.mode != PoolMode::kMax)
      return false;
    Pool2dDesc d = desc_;
    d.keep_argmax = true;
    d.normalised = true;
    if (!backend.fuses_batch_norm_pool(batch_norm, d)) return false;
    normalisation_ = link;
    return true;
  }
  bool keeps_argmax() const { return kernel_ && kernel_->keeps_argmax(); }

 private:
  PoolSpec spec_;
  Pool2dDesc desc_;
  std::unique_ptr<PoolKernel> kernel_;
  bool argmax_offered_ = false;  // Layer::offer_argmax_keeping
  bool relu_mask_offered_ = false;  // ... with the ReLU before it (Pool2dDesc::relu_mask)
  std::shared_ptr<Normalisation> normalisation_;  // a batch norm's, applied as the input is read (Layer::take_normalisation)
};

}  // namespace

std::unique_ptr<Layer> make_pool_layer(const std::string& name, const PoolSpec& spec) {
  return std::make_unique<PoolLayer>(name, spec);
}

}  // namespace cnnergy
