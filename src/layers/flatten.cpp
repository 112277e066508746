// Flatten (N, C, H, W) -> (N, C*H*W) in C, H, W order. On NCHW the executor makes the output a
// view of the input (no work); otherwise Backend::copy converts (an NHWC tensor copied into an
// NCHW-tagged one is transposed). 2-D inputs pass through.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class FlattenLayer final : public Layer {
 public:
  using Layer::Layer;

  std::string type() const override { return "flatten"; }
  LayerCategory category() const override { return LayerCategory::kOther; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<FlattenLayer>(name()); }
  // The flat view of an NCHW tensor is the same memory; an NHWC one is not, unless H = W = 1
  // (after global average pooling), where both layouts store the same bytes.
  InputAlias input_alias() const override {
    const Shape& x = input_shapes().at(0);
    const bool same_bytes = x.rank() == 2 || backend().layout() == Layout::kNCHW || x.h() * x.w() == 1;
    return same_bytes ? InputAlias::kView : InputAlias::kNone;
  }
  std::size_t private_bytes() const override { return scratch_.size_bytes(); }

  void forward(const ForwardContext& ctx) override {
    const Tensor& x = ctx.inputs[0];
    const Tensor& y = ctx.outputs[0];
    if (x.raw() == y.raw()) return;  // the executor made y a view of x
    backend().copy(x, as_input_shape(y));
  }

  void backward(const BackwardContext& ctx) override {
    const Tensor& dx = ctx.input_grads[0];
    if (!dx.defined()) return;
    const Tensor dy = as_input_shape(ctx.output_grads[0]);
    if (!ctx.accumulate[0]) {
      backend().copy(dy, dx);
    } else if (dx.layout() == dy.layout() || dx.shape().rank() != 4) {
      backend().accumulate(dy.with_layout(dx.layout()), dx);
    } else {  // accumulate with a layout change: convert first
      if (!scratch_.defined()) scratch_ = backend().alloc(dx.shape(), dx.dtype(), dx.layout());
      backend().copy(dy, scratch_);
      backend().accumulate(scratch_, dx);
    }
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    const Shape& x = in[0];
    if (x.rank() != 4 && x.rank() != 2) shape_error("needs a 4-D or 2-D input, got " + x.str());
    return {Shape{x.n(), x.per_sample()}};
  }
  // Data movement only (none at all as a view).
  Workload compute_workload() const override {
    Workload w;
    w.read_elements = input_shapes()[0].per_sample();
    w.written_elements = w.read_elements;
    return w;
  }

 private:
  // A 2-D (N, F) tensor seen as the NCHW-ordered input shape.
  Tensor as_input_shape(const Tensor& flat) const {
    return flat.reshaped(input_shapes()[0]).with_layout(Layout::kNCHW);
  }
  Tensor scratch_;
};

}  // namespace

std::unique_ptr<Layer> make_flatten_layer(const std::string& name) { return std::make_unique<FlattenLayer>(name); }

}  // namespace cnnergy
