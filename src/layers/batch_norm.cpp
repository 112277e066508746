// Batch normalisation per channel (4-D) or per feature (2-D): gamma and beta are trained fp32
// parameters (no weight decay by default); running mean/variance are fp32 buffers saved in
// checkpoints; the batch statistics saved for backward are private to the layer. A ReLU that is
// the output's sole consumer may be fused in (the executor asks; see Layer::fuse_relu), and so may
// the residual add that is (Layer::fuse_residual: forward then reads the add's other input as its
// second input and writes the add's output; the add's backward still runs, and leaves its ReLU's mask
// to this layer's backward where the executor arms Layer::take_residual_relu_backward). A max pool that
// is its output's only reader may take its normalisation (Layer::hand_on_normalisation): forward then
// computes the statistics and coefficients alone, and the pool applies them as it reads x.
#include <cmath>

#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class BatchNormLayer final : public Layer {
 public:
  BatchNormLayer(std::string name, const BatchNormSpec& spec) : Layer(std::move(name)), spec_(spec) {}

  std::string type() const override { return "batch_norm"; }
  LayerCategory category() const override { return LayerCategory::kNorm; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<BatchNormLayer>(name(), spec_); }
  LayerSpec spec() const override { return spec_; }
  bool needs_inputs_in_backward() const override { return true; }
  bool needs_outputs_in_backward() const override { return masks_add_relu_; }  // the add's ReLU mask
  std::size_t private_bytes() const override { return saved_mean_.size_bytes() + saved_inv_std_.size_bytes(); }
  std::string describe() const override {
    if (absorbed()) return "batch_norm (folded into " + absorbed_into() + ")";
    std::string what = "batch_norm";
    if (statistics_ != nullptr) what += " (statistics from its convolution)";
    if (desc_.residual) what += " + add";
    if (desc_.relu) what += " + relu";
    return normalisation_ != nullptr ? what + " (applied by the max pool after it)" : what;
  }

  bool fuse_relu(const Backend& backend) override {
    BatchNormDesc fused = desc_;
    fused.relu = true;
    if (bound() || !backend.fuses_batch_norm_relu(fused)) return false;
    desc_ = fused;
    return true;
  }

  // The add after this batch norm (its output's sole consumer), and that add's fused ReLU where
  // relu: forward then writes relu?(bn(x) + z) in one pass (Backend::fuses_batch_norm_residual).
  bool fuse_residual(const Backend& backend, bool relu) override {
    BatchNormDesc fused = desc_;
    fused.residual = true;
    fused.relu = relu;
    if (bound() || desc_.relu || desc_.residual || !backend.fuses_batch_norm_residual(fused)) return false;
    desc_ = fused;
    return true;
  }

  bool take_residual_relu_backward() override {
    if (bound() || !desc_.residual || !desc_.relu) return false;
    masks_add_relu_ = true;
    return true;
  }

  std::optional<BatchNormDesc> offer_normalisation() const override {
    if (bound() || absorbed() || desc_.residual || masks_add_relu_) return std::nullopt;
    return desc_;
  }
  void hand_on_normalisation(const std::shared_ptr<Normalisation>& link) override {
    if (bound() || link == nullptr) return;
    link->relu = desc_.relu;
    normalisation_ = link;
  }

  void use_statistics(const std::shared_ptr<BatchStatistics>& link) override {
    if (!bound()) statistics_ = link;
  }

  void init_parameters(Rng& rng) override {
    (void)rng;
    init_constant(0, 1.0f);  // gamma
    init_constant(1, 0.0f);  // beta
    backend().fill(buffers()[0].tensor, 0.0f);
    backend().fill(buffers()[1].tensor, 1.0f);
    refresh_working_copies();
  }

  bool inference_affine(std::vector<float>& scale, std::vector<float>& shift) const override {
    if (!bound()) return false;
    const std::int64_t c = desc_.c;
    auto download = [&](const Tensor& t) {
      Tensor host = Tensor::host(Shape{c});
      backend().download(t, host);
      return host;
    };
    const Tensor gamma = download(parameters()[0].master), beta = download(parameters()[1].master);
    const Tensor mean = download(buffers()[0].tensor), var = download(buffers()[1].tensor);
    const auto channels = static_cast<std::size_t>(c);
    scale.resize(channels);
    shift.resize(channels);
    for (std::size_t k = 0; k < channels; ++k) {
      const double s = static_cast<double>(gamma.f32()[k]) / std::sqrt(static_cast<double>(var.f32()[k]) + desc_.eps);
      scale[k] = static_cast<float>(s);
      shift[k] = static_cast<float>(static_cast<double>(beta.f32()[k]) - static_cast<double>(mean.f32()[k]) * s);
    }
    return true;
  }

  void forward(const ForwardContext& ctx) override {
    if (absorbed()) return;  // folded into the convolution before it (inference)
    const Tensor& gamma = parameters()[0].master;
    const Tensor& beta = parameters()[1].master;
    const Tensor& mean = buffers()[0].tensor;
    const Tensor& var = buffers()[1].tensor;
    const bool train = ctx.phase == Phase::kTrain;
    // The convolution's sums where its latest (training) forward wrote them.
    const Tensor* sums = statistics_ != nullptr && statistics_->written ? &statistics_->sums : nullptr;
    if (normalisation_ != nullptr) {  // the max pool after it applies them; no output written
      normalisation_->coefficients =
          train ? kernel_->training_coefficients(ctx.inputs[0], gamma, beta, mean, var, saved_mean_, saved_inv_std_, sums)
                : kernel_->inference_coefficients(gamma, beta, mean, var);
    } else if (desc_.residual) {  // the fused add's other input comes second (Executor)
      CNNERGY_CHECK(ctx.inputs.size() == 2, "batch norm with a fused residual add run without its second input");
      if (train)
        kernel_->forward_training_residual(ctx.inputs[0], ctx.inputs[1], gamma, beta, mean, var, ctx.outputs[0],
                                           saved_mean_, saved_inv_std_, sums);
      else
        kernel_->forward_inference_residual(ctx.inputs[0], ctx.inputs[1], gamma, beta, mean, var, ctx.outputs[0]);
    } else if (train) {
      kernel_->forward_training(ctx.inputs[0], gamma, beta, mean, var, ctx.outputs[0], saved_mean_, saved_inv_std_,
                                sums);
    } else {
      kernel_->forward_inference(ctx.inputs[0], gamma, beta, mean, var, ctx.outputs[0]);
    }
  }

  bool recomputes_output() const override {
    return bound() && !absorbed() && !desc_.residual && normalisation_ == nullptr &&
           backend().recomputes_batch_norm_output(desc_);
  }
  void recompute_output(const Tensor& input, const Tensor& output) override {
    kernel_->recompute_output(input, parameters()[0].master, parameters()[1].master, saved_mean_, saved_inv_std_,
                              output);
  }

  // The kernel always writes dgamma/dbeta; with no data gradient wanted (BN on the network
  // input) dx goes to a private scratch tensor.
  void backward(const BackwardContext& ctx) override {
    Tensor dx = ctx.input_grads[0];
    bool accumulate = ctx.accumulate[0];
    if (!dx.defined()) {
      if (!scratch_.defined()) scratch_ = backend().alloc(input_shapes()[0], backend().dtype(), backend().layout());
      dx = scratch_;
      accumulate = false;
    }
    const Tensor& dy = ctx.output_grads[0];
    if (masks_add_relu_) {  // dy masked in place, as the add would have (masking twice changes nothing)
      if (kernel_->backward_masking(ctx.inputs[0], ctx.outputs[0], dy, parameters()[0].master, saved_mean_,
                                    saved_inv_std_, dx, parameters()[0].grad, parameters()[1].grad, accumulate))
        return;
      backend().relu_backward(ctx.outputs[0], dy, dy, false);
    }
    kernel_->backward(ctx.inputs[0], dy, parameters()[0].master, parameters()[1].master, saved_mean_,
                      saved_inv_std_, dx, parameters()[0].grad, parameters()[1].grad, accumulate);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    const Shape& x = in[0];
    if (x.rank() != 4 && x.rank() != 2) shape_error("needs a 4-D or 2-D input, got " + x.str());
    if (spec_.eps <= 0.0 || spec_.momentum < 0.0 || spec_.momentum > 1.0)
      shape_error("needs eps > 0 and momentum in [0, 1]");
    desc_ = BatchNormDesc{x.n(), x.c(), x.h(), x.w(), spec_.eps, spec_.momentum};
    const Shape per_channel{x.c()};
    declare_parameter("gamma", per_channel, /*decay=*/false, /*backend_dtype=*/false);
    declare_parameter("beta", per_channel, /*decay=*/false, /*backend_dtype=*/false);
    declare_buffer("running_mean", per_channel);
    declare_buffer("running_var", per_channel);
    return {x};
  }

  // Eq. 6: 2 operations per element (subtract the mean, divide by the deviation). FLOPs in
  // training: 2 per element for the batch statistics, 4 to normalise, scale and shift; backward
  // about the same as forward (two reductions and the element-wise combination).
  Workload compute_workload() const override {
    const std::int64_t e = input_shapes()[0].per_sample();
    Workload w;
    w.operations = 2 * e;
    w.flops_forward = 6 * e;
    w.flops_backward = 6 * e;
    w.read_elements = e + 2 * desc_.c;
    w.written_elements = e;
    w.parameters = 2 * desc_.c;
    return w;
  }

  void create_kernels(Backend& backend) override {
    kernel_ = backend.make_batch_norm(desc_);
    saved_mean_ = backend.alloc(Shape{desc_.c}, DType::kF32);
    saved_inv_std_ = backend.alloc(Shape{desc_.c}, DType::kF32);
  }

 private:
  BatchNormSpec spec_;
  BatchNormDesc desc_;
  std::unique_ptr<BatchNormKernel> kernel_;
  Tensor saved_mean_, saved_inv_std_, scratch_;
  std::shared_ptr<BatchStatistics> statistics_;  // from the convolution before it (Layer::use_statistics)
  std::shared_ptr<Normalisation> normalisation_; // handed to the max pool after it (Layer::hand_on_normalisation)
  bool masks_add_relu_ = false;                  // take_residual_relu_backward
};

}  // namespace

std::unique_ptr<Layer> make_batch_norm_layer(const std::string& name, const BatchNormSpec& spec) {
  return std::make_unique<BatchNormLayer>(name, spec);
}

}  // namespace cnnergy
