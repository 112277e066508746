// Element-wise product of two tensors: of one shape, or a 4-D tensor times a (N, C, 1, 1) one
// broadcast over H, W (squeeze-and-excitation in MobileNet v3, EfficientNet, RegNet-Y). Both inputs
// get gradients: da = dy * b, db = dy * a (summed over H, W when broadcast). The second input may
// come first in the graph (scale * x); the layer always takes the full-size tensor as input 0.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class MulLayer final : public Layer {
 public:
  using Layer::Layer;

  std::string type() const override { return "mul"; }
  LayerCategory category() const override { return LayerCategory::kEltwise; }
  std::size_t num_inputs() const override { return 2; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<MulLayer>(name()); }
  bool needs_inputs_in_backward() const override { return true; }
  // da is computed element by element from dy (after db, which reads dy): it may share dy.
  bool gradient_in_place(std::size_t input) const override { return input == 0; }
  std::string describe() const override { return broadcast_ ? "mul (channel scale)" : "mul"; }

  void forward(const ForwardContext& ctx) override {
    backend().mul_forward(ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
  }
  void backward(const BackwardContext& ctx) override {
    if (!ctx.input_grads[0].defined() && !ctx.input_grads[1].defined()) return;
    backend().mul_backward(ctx.inputs[0], ctx.inputs[1], ctx.output_grads[0], ctx.input_grads[0], ctx.accumulate[0],
                           ctx.input_grads[1], ctx.accumulate[1]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 2);
    const Shape& a = in[0];
    const Shape& b = in[1];
    broadcast_ = !(a == b);
    if (broadcast_ && !(a.rank() == 4 && b.rank() == 4 && b.n() == a.n() && b.c() == a.c() && b.h() == 1 &&
                        b.w() == 1))
      shape_error("input 1 " + b.str() + " is neither input 0's shape " + a.str() + " nor (N, C, 1, 1)");
    return {a};
  }
  // One multiply per output element; backward two per element (da, db) and, broadcast, the sum.
  Workload compute_workload() const override {
    const std::int64_t e = input_shapes()[0].per_sample();
    const std::int64_t eb = input_shapes()[1].per_sample();
    Workload w;
    w.operations = e;
    w.flops_forward = e;
    w.flops_backward = 2 * e + (broadcast_ ? e : 0);
    w.read_elements = e + eb;
    w.written_elements = e;
    return w;
  }

 private:
  bool broadcast_ = false;
};

}  // namespace

std::unique_ptr<Layer> make_mul_layer(const std::string& name) { return std::make_unique<MulLayer>(name); }

}  // namespace cnnergy
