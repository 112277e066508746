// Convolution layer (grouped, strided, padded, dilated), weight (K, C/g, R, S) and optional bias
// (K). Kernels come from Backend::make_conv with the layer's algorithm choice (ConvSpec::algo).
#include <algorithm>

#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class ConvLayer final : public Layer {
 public:
  ConvLayer(std::string name, const ConvSpec& spec) : Layer(std::move(name)), spec_(spec) {}

  std::string type() const override { return "conv"; }
  LayerCategory category() const override { return LayerCategory::kConv; }
  std::string describe() const override {
    std::string s = "conv " + std::to_string(spec_.out_channels) + " " + std::to_string(spec_.kernel_h) + "x" +
                    std::to_string(spec_.kernel_w) + " /" + std::to_string(spec_.stride_h);
    if (spec_.pad_top || spec_.pad_left) s += " pad " + std::to_string(spec_.pad_top);
    if (spec_.groups > 1) s += " groups " + std::to_string(spec_.groups);
    if (spec_.dilation_h > 1 || spec_.dilation_w > 1) s += " dilation " + std::to_string(spec_.dilation_h);
    if (desc_.residual) s += " + residual add";
    if (desc_.statistics) s += " + batch-norm statistics";
    if (desc_.relu) s += " + relu";
    return s;
  }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<ConvLayer>(name(), spec_); }
  LayerSpec spec() const override { return spec_; }
  bool needs_inputs_in_backward() const override { return true; }  // weight gradient reads x
  std::optional<ConvAlgoInfo> conv_algorithms() const override {
    if (!kernel_) return std::nullopt;
    return kernel_->info();
  }
  std::size_t workspace_bound(bool /*backward*/) const override { return kernel_ ? kernel_->workspace_bound() : 0; }
  bool epilogue_fused() const override { return kernel_ && kernel_->epilogue_fused(); }
  std::optional<Conv2dDesc> conv_problem() const override { return desc_; }
  std::vector<Tensor> eval_weights() const override {
    if (folded_bn_ != nullptr) return {folded_weight_, folded_bias_};
    return {parameters()[0].value(), bias_value()};
  }

  void init_parameters(Rng& rng) override {
    const auto fan_in = (desc_.c / desc_.groups) * desc_.r * desc_.s;
    init_weight(0, spec_.init, fan_in, rng);
    if (spec_.bias) init_constant(1, spec_.init.bias_value);
    refresh_working_copies();
  }

  // A convolution with a bias takes the ReLU after it (or after its folded batch norm) where the
  // backend's kernel clamps in its bias pass or fused epilogue (the executor offers it here; see
  // net/executor.hpp). In training, backward first masks the output gradient by the output, in place:
  // that buffer is the fused ReLU's output gradient, which nothing else reads afterwards.
  bool fuse_relu(const Backend& backend) override {
    Conv2dDesc fused = desc_;
    fused.relu = true;
    if (folded_bn_ != nullptr) fused.bias = true;  // what bind() asks for: the batch norm's shift
    if (bound() || !fused.bias || desc_.relu || desc_.residual || !backend.fuses_conv_relu(fused)) return false;
    desc_ = fused;
    return true;
  }
  bool needs_outputs_in_backward() const override { return desc_.relu && !relu_mask_left_; }  // the fused ReLU's mask
  void leave_relu_mask() override { relu_mask_left_ = desc_.relu; }

  bool relu_fused() const override { return desc_.relu; }

  bool fuse_residual(const Backend& backend, bool relu) override {
    Conv2dDesc fused = desc_;
    fused.residual = true;
    fused.relu = relu;
    fused.bias = true;  // a folded batch norm gives the convolution a bias
    if (bound() || folded_bn_ == nullptr || desc_.relu || desc_.residual || !backend.fuses_conv_residual(fused))
      return false;
    desc_ = fused;
    return true;
  }

  bool offer_statistics(const Backend& backend, const std::shared_ptr<BatchStatistics>& link) override {
    Conv2dDesc fused = desc_;
    fused.statistics = true;
    if (bound() || desc_.bias || desc_.relu || desc_.residual || desc_.statistics || folded_bn_ != nullptr ||
        !backend.fuses_conv_statistics(fused))
      return false;
    desc_ = fused;
    statistics_ = link;
    return true;
  }

  bool absorb_batch_norm(Layer& batch_norm) override {
    if (bound() || folded_bn_ != nullptr) return false;
    folded_bn_ = &batch_norm;
    return true;
  }

  // Folded weights w' = w * scale[k] and bias b' = b * scale[k] + shift[k] (fp32 on the host, then
  // converted into the backend's dtype and layout like a parameter's working copy).
  void fold_absorbed() override {
    if (folded_bn_ == nullptr) return;
    std::vector<float> scale, shift;
    if (!folded_bn_->inference_affine(scale, shift) || scale.size() != static_cast<std::size_t>(desc_.k))
      throw InternalError("layer '" + name() + "': the folded batch norm gave no per-channel map");
    const Parameter& w = parameters()[0];
    Tensor host_w = Tensor::host(w.master.shape(), DType::kF32, w.master.layout());
    backend().download(w.master, host_w);
    Tensor nchw = to_f32_nchw(host_w);
    const std::size_t per_k = static_cast<std::size_t>(nchw.numel() / desc_.k);
    auto wv = nchw.f32();
    for (std::size_t k = 0; k < scale.size(); ++k)
      for (std::size_t j = 0; j < per_k; ++j) wv[k * per_k + j] *= scale[k];
    Tensor host_b = Tensor::host(Shape{desc_.k});
    if (spec_.bias) backend().download(parameters()[1].master, host_b);
    for (std::size_t k = 0; k < scale.size(); ++k)
      host_b.f32()[k] = (spec_.bias ? host_b.f32()[k] * scale[k] : 0.0f) + shift[k];
    const Tensor master_w = backend().alloc(w.master.shape(), DType::kF32, w.master.layout());
    backend().upload(from_f32_nchw(nchw, DType::kF32, w.master.layout()), master_w);
    backend().copy(master_w, folded_weight_);
    const Tensor master_b = backend().alloc(Shape{desc_.k}, DType::kF32);
    backend().upload(host_b, master_b);
    backend().copy(master_b, folded_bias_);
    backend().synchronize();  // the host tensors above are freed on return
    if (kernel_) kernel_->hold_weights();  // folded_weight_ changes only here
  }

  void forward(const ForwardContext& ctx) override {
    if (desc_.residual) {  // the executor passes the add's other input second
      if (ctx.inputs.size() != 2) throw InternalError("layer '" + name() + "': the fused residual add's input is missing");
      kernel_->forward_residual(ctx.inputs[0], folded_weight_, folded_bias_, ctx.inputs[1], ctx.outputs[0]);
      return;
    }
    if (folded_bn_ != nullptr) {
      kernel_->forward(ctx.inputs[0], folded_weight_, folded_bias_, ctx.outputs[0]);
      return;
    }
    if (statistics_ != nullptr && ctx.phase == Phase::kTrain) {  // the batch norm reads the sums in training only
      statistics_->written =
          kernel_->forward_statistics(ctx.inputs[0], parameters()[0].value(), ctx.outputs[0], statistics_->sums);
      return;
    }
    kernel_->forward(ctx.inputs[0], parameters()[0].value(), bias_value(), ctx.outputs[0]);
  }
  std::size_t private_bytes() const override {
    return folded_weight_.size_bytes() + folded_bias_.size_bytes() +
           (statistics_ != nullptr ? statistics_->sums.size_bytes() : 0);
  }

  void backward(const BackwardContext& ctx) override {
    if (desc_.residual || folded_bn_ != nullptr)
      throw InternalError("layer '" + name() + "': a folded convolution (inference) runs no backward");
    const Tensor& dy = ctx.output_grads[0];
    // The fused ReLU's gradient, in place; with a bias, where the backend can, in the same pass as
    // the bias gradient (the kernel then leaves the bias alone).
    // Where the max pool reading the output applied the mask (leave_relu_mask), dy is masked already.
    const bool mask = desc_.relu && !relu_mask_left_;
    const bool mask_with_bias = mask && spec_.bias && backend().fuses_relu_bias_grad();
    if (mask_with_bias)
      backend().relu_backward_bias_grad(ctx.outputs[0], dy, parameters()[1].grad);
    else if (mask)
      backend().relu_backward(ctx.outputs[0], dy, dy, false);
    kernel_->backward_filter(ctx.inputs[0], dy, parameters()[0].grad,
                             spec_.bias && !mask_with_bias ? parameters()[1].grad : Tensor{});
    if (ctx.input_grads[0].defined())
      kernel_->backward_data(dy, parameters()[0].value(), ctx.input_grads[0], ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    const Shape& x = in[0];
    if (x.rank() != 4) shape_error("needs a 4-D input (N, C, H, W), got " + x.str());
    const ConvSpec& s = spec_;
    if (s.out_channels < 1 || s.kernel_h < 1 || s.kernel_w < 1 || s.stride_h < 1 || s.stride_w < 1 ||
        s.dilation_h < 1 || s.dilation_w < 1 || s.groups < 1 || s.pad_top < 0 || s.pad_bottom < 0 ||
        s.pad_left < 0 || s.pad_right < 0)
      shape_error("hyper-parameters out of range (sizes, strides, dilations, groups >= 1; pads >= 0)");
    if (x.c() % s.groups != 0 || s.out_channels % s.groups != 0)
      shape_error("groups " + std::to_string(s.groups) + " must divide input channels " + std::to_string(x.c()) +
                  " and output channels " + std::to_string(s.out_channels));
    desc_ = Conv2dDesc{};
    desc_.n = x.n();
    desc_.c = x.c();
    desc_.h = x.h();
    desc_.w = x.w();
    desc_.k = s.out_channels;
    desc_.r = s.kernel_h;
    desc_.s = s.kernel_w;
    desc_.stride_h = s.stride_h;
    desc_.stride_w = s.stride_w;
    desc_.pad_top = s.pad_top;
    desc_.pad_bottom = s.pad_bottom;
    desc_.pad_left = s.pad_left;
    desc_.pad_right = s.pad_right;
    desc_.dilation_h = s.dilation_h;
    desc_.dilation_w = s.dilation_w;
    desc_.groups = s.groups;
    desc_.bias = s.bias;
    const auto span_h = x.h() + s.pad_top + s.pad_bottom - s.dilation_h * (s.kernel_h - 1) - 1;
    const auto span_w = x.w() + s.pad_left + s.pad_right - s.dilation_w * (s.kernel_w - 1) - 1;
    if (span_h < 0 || span_w < 0)
      shape_error("output would be empty: " + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) +
                  " kernel does not fit the padded input " + x.str());
    declare_parameter("weight", desc_.weight_shape(), /*decay=*/true, /*backend_dtype=*/true);
    if (s.bias) declare_parameter("bias", Shape{s.out_channels}, /*decay=*/false, /*backend_dtype=*/true);
    return {desc_.output_shape()};
  }

  Workload compute_workload() const override {
    const std::int64_t out_pos = desc_.out_h() * desc_.out_w();
    const std::int64_t weights = desc_.k * (desc_.c / desc_.groups) * desc_.r * desc_.s;
    const std::int64_t macs = weights * out_pos;  // Eq. 1 with ch_in per group
    const std::int64_t bias_adds = spec_.bias ? desc_.k * out_pos : 0;
    Workload w;
    w.operations = macs + bias_adds;
    w.flops_forward = 2 * macs + bias_adds;
    w.flops_backward = 2 * macs /*weight grad*/ + (input_grad_needed() ? 2 * macs : 0) + bias_adds;
    w.read_elements = desc_.c * desc_.h * desc_.w + weights + (spec_.bias ? desc_.k : 0);
    w.written_elements = desc_.k * out_pos;
    w.parameters = weights + (spec_.bias ? desc_.k : 0);
    return w;
  }

  void create_kernels(Backend& backend) override {
    Conv2dDesc desc = desc_;
    desc.data_gradient = input_grad_needed();
    if (folded_bn_ != nullptr) {  // the folded convolution always has a bias: the batch norm's shift
      desc.bias = true;
      folded_weight_ = backend.alloc(desc_.weight_shape(), backend.dtype(), backend.layout());
      folded_bias_ = backend.alloc(Shape{desc_.k}, backend.dtype(), backend.layout());
    }
    kernel_ = backend.make_conv(desc, spec_.algo);
    if (statistics_ != nullptr) statistics_->sums = backend.alloc(Shape{2 * desc_.k}, DType::kF32);
  }

 private:
  Tensor bias_value() const { return spec_.bias ? parameters()[1].value() : Tensor{}; }

  ConvSpec spec_;
  Conv2dDesc desc_;
  std::unique_ptr<ConvKernel> kernel_;
  Layer* folded_bn_ = nullptr;       // the absorbed eval-mode batch norm (inference executors)
  bool relu_mask_left_ = false;      // the max pool reading the output applies the fused ReLU's mask (leave_relu_mask)
  Tensor folded_weight_, folded_bias_;
  std::shared_ptr<BatchStatistics> statistics_;  // the batch norm after it takes its statistics from here
};

}  // namespace

std::unique_ptr<Layer> make_conv_layer(const std::string& name, const ConvSpec& spec) {
  return std::make_unique<ConvLayer>(name, spec);
}

}  // namespace cnnergy
