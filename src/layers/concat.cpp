// Concatenation along channels (4-D) or features (2-D): Inception blocks. Backward splits the
// output gradient; inputs whose gradients must be accumulated (or are not wanted) go through a
// private scratch tensor, because the kernel takes one accumulate flag for all inputs.
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

class ConcatLayer final : public Layer {
 public:
  using Layer::Layer;

  std::string type() const override { return "concat"; }
  LayerCategory category() const override { return LayerCategory::kConcat; }
  std::size_t num_inputs() const override { return 0; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<ConcatLayer>(name()); }
  std::size_t private_bytes() const override {
    std::size_t b = 0;
    for (const auto& t : scratch_) b += t.size_bytes();
    return b;
  }

  void forward(const ForwardContext& ctx) override { backend().concat_forward(ctx.inputs, ctx.outputs[0]); }

  void backward(const BackwardContext& ctx) override {
    const std::size_t n = ctx.input_grads.size();
    bool uniform = true;
    for (std::size_t i = 0; i < n; ++i)
      uniform = uniform && ctx.input_grads[i].defined() && ctx.accumulate[i] == ctx.accumulate[0];
    if (uniform) {
      backend().concat_backward(ctx.output_grads[0], ctx.input_grads, ctx.accumulate[0]);
      return;
    }
    // Mixed: overwrite the plain targets directly, split the rest into scratch then accumulate.
    if (scratch_.empty())
      for (const auto& s : input_shapes()) scratch_.push_back(backend().alloc(s, backend().dtype(), backend().layout()));
    std::vector<Tensor> targets(n);
    for (std::size_t i = 0; i < n; ++i)
      targets[i] = ctx.input_grads[i].defined() && !ctx.accumulate[i] ? ctx.input_grads[i] : scratch_[i];
    backend().concat_backward(ctx.output_grads[0], targets, false);
    for (std::size_t i = 0; i < n; ++i)
      if (ctx.input_grads[i].defined() && ctx.accumulate[i]) backend().accumulate(scratch_[i], ctx.input_grads[i]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    if (in.empty()) shape_error("needs at least one input");
    const Shape& first = in[0];
    if (first.rank() != 4 && first.rank() != 2) shape_error("needs 4-D or 2-D inputs, got " + first.str());
    std::int64_t channels = 0;
    for (const auto& s : in) {
      const bool fits = s.rank() == first.rank() && s.n() == first.n() && s.h() == first.h() && s.w() == first.w();
      if (!fits)
        shape_error("inputs disagree: " + first.str() + " vs " + s.str() +
                    " (all but the channel dimension must match)");
      channels += s.c();
    }
    Shape out = first;
    out[1] = channels;
    return {out};
  }
  // Data movement only: no operations; reads and writes every element once.
  Workload compute_workload() const override {
    Workload w;
    for (const auto& s : input_shapes()) w.read_elements += s.per_sample();
    w.written_elements = output_shapes()[0].per_sample();
    return w;
  }

 private:
  std::vector<Tensor> scratch_;
};

}  // namespace

std::unique_ptr<Layer> make_concat_layer(const std::string& name) { return std::make_unique<ConcatLayer>(name); }

}  // namespace cnnergy
