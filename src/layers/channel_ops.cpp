// Channel-wise layers of imported networks: channel shuffle (ShuffleNet's Reshape-Transpose-Reshape),
// a channel slice (Split / Slice along channels; a Split is one slice layer per output) and a
// constant per-channel affine map y = x * scale[c] + shift[c] (Mul/Add/Sub/Div by a constant).
#include <cstdio>

#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace cnnergy {
namespace {

void check_channels(const Layer& l, const Shape& x) {
  if (x.rank() != 4 && x.rank() != 2)
    throw ShapeError("layer '" + l.name() + "' (" + l.type() + "): needs a 4-D or 2-D input, got " + x.str());
}

class ChannelShuffleLayer final : public Layer {
 public:
  ChannelShuffleLayer(std::string name, std::int64_t groups) : Layer(std::move(name)), groups_(groups) {}
  std::string type() const override { return "channel_shuffle"; }
  LayerSpec spec() const override { return ChannelShuffleSpec{groups_}; }
  LayerCategory category() const override { return LayerCategory::kOther; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<ChannelShuffleLayer>(name(), groups_); }
  std::string describe() const override { return "channel_shuffle (" + std::to_string(groups_) + " groups)"; }

  void forward(const ForwardContext& ctx) override {
    backend().channel_shuffle(ctx.inputs[0], groups_, ctx.outputs[0], false);
  }
  void backward(const BackwardContext& ctx) override {  // the inverse permutation: C / groups groups
    if (!ctx.input_grads[0].defined()) return;
    backend().channel_shuffle(ctx.output_grads[0], input_shapes()[0][1] / groups_, ctx.input_grads[0],
                              ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    check_channels(*this, in[0]);
    if (groups_ < 1 || in[0][1] % groups_ != 0)
      shape_error(std::to_string(in[0][1]) + " channels do not split into " + std::to_string(groups_) + " groups");
    return {in[0]};
  }
  // Data movement only (0 operations, as concat).
  Workload compute_workload() const override {
    const std::int64_t e = input_shapes()[0].per_sample();
    Workload w;
    w.read_elements = e;
    w.written_elements = e;
    return w;
  }

 private:
  std::int64_t groups_;
};

class ChannelSliceLayer final : public Layer {
 public:
  ChannelSliceLayer(std::string name, std::int64_t begin, std::int64_t count)
      : Layer(std::move(name)), begin_(begin), count_(count) {}
  std::string type() const override { return "channel_slice"; }
  LayerSpec spec() const override { return ChannelSliceSpec{begin_, count_}; }
  LayerCategory category() const override { return LayerCategory::kConcat; }
  std::unique_ptr<Layer> clone() const override { return std::make_unique<ChannelSliceLayer>(name(), begin_, count_); }
  std::string describe() const override {
    return "channel_slice [" + std::to_string(begin_) + ", " + std::to_string(begin_ + count_) + ")";
  }

  void forward(const ForwardContext& ctx) override {
    backend().channel_slice_forward(ctx.inputs[0], begin_, ctx.outputs[0]);
  }
  void backward(const BackwardContext& ctx) override {
    if (!ctx.input_grads[0].defined()) return;
    backend().channel_slice_backward(ctx.output_grads[0], begin_, ctx.input_grads[0], ctx.accumulate[0]);
  }

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    check_channels(*this, in[0]);
    if (begin_ < 0 || count_ < 1 || begin_ + count_ > in[0][1])
      shape_error("channels [" + std::to_string(begin_) + ", " + std::to_string(begin_ + count_) + ") are outside " +
                  in[0].str());
    std::vector<std::int64_t> dims = in[0].dims();
    dims[1] = count_;
    return {Shape(dims)};
  }
  // Data movement only.
  Workload compute_workload() const override {
    const std::int64_t e = output_shapes()[0].per_sample();
    Workload w;
    w.read_elements = e;
    w.written_elements = e;
    return w;
  }

 private:
  std::int64_t begin_, count_;
};

class ChannelAffineLayer final : public Layer {
 public:
  ChannelAffineLayer(std::string name, std::vector<float> scale, std::vector<float> shift)
      : Layer(std::move(name)), scale_(std::move(scale)), shift_(std::move(shift)) {}
  std::string type() const override { return "channel_affine"; }
  LayerSpec spec() const override { return ChannelAffineSpec{scale_, shift_}; }
  LayerCategory category() const override { return LayerCategory::kEltwise; }
  std::unique_ptr<Layer> clone() const override {
    return std::make_unique<ChannelAffineLayer>(name(), scale_, shift_);
  }
  std::string describe() const override {
    char buf[96];
    if (scale_.size() == 1 && shift_.size() == 1) {
      std::snprintf(buf, sizeof buf, "channel_affine (x * %g + %g)", scale_[0], shift_[0]);
      return buf;
    }
    return "channel_affine (per-channel constants)";
  }
  std::size_t private_bytes() const override { return (scale_.size() + shift_.size()) * sizeof(float); }

  void forward(const ForwardContext& ctx) override {
    backend().channel_affine_forward(ctx.inputs[0], scale_dev_, shift_dev_, ctx.outputs[0]);
  }
  void backward(const BackwardContext& ctx) override {
    if (!ctx.input_grads[0].defined()) return;
    backend().channel_affine_backward(ctx.output_grads[0], scale_dev_, ctx.input_grads[0], ctx.accumulate[0]);
  }
  bool gradient_in_place(std::size_t) const override { return true; }  // dx[j] from dy[j]

 protected:
  std::vector<Shape> infer_shapes(std::span<const Shape> in) override {
    check_input_count(in, 1);
    check_channels(*this, in[0]);
    const auto c = static_cast<std::size_t>(in[0][1]);
    for (const auto* v : {&scale_, &shift_})
      if (v->size() != 1 && v->size() != c)
        shape_error("needs 1 or " + std::to_string(c) + " constants, got " + std::to_string(v->size()));
    return {in[0]};
  }
  // A multiply and an add per element; backward a multiply.
  Workload compute_workload() const override {
    const std::int64_t e = input_shapes()[0].per_sample();
    Workload w;
    w.operations = 2 * e;
    w.flops_forward = 2 * e;
    w.flops_backward = input_grad_needed() ? e : 0;
    w.read_elements = e + static_cast<std::int64_t>(scale_.size() + shift_.size());
    w.written_elements = e;
    return w;
  }
  void create_kernels(Backend& backend) override {
    scale_dev_ = upload(backend, scale_);
    shift_dev_ = upload(backend, shift_);
  }

 private:
  static Tensor upload(Backend& backend, const std::vector<float>& v) {
    const Shape s{static_cast<std::int64_t>(v.size())};
    Tensor host = Tensor::host(s);
    std::copy(v.begin(), v.end(), host.f32().begin());
    Tensor dev = backend.alloc(s, DType::kF32);
    backend.upload(host, dev);
    return dev;
  }
  std::vector<float> scale_, shift_;
  Tensor scale_dev_, shift_dev_;
};

}  // namespace

std::unique_ptr<Layer> make_channel_shuffle_layer(const std::string& name, std::int64_t groups) {
  return std::make_unique<ChannelShuffleLayer>(name, groups);
}
std::unique_ptr<Layer> make_channel_slice_layer(const std::string& name, std::int64_t begin, std::int64_t count) {
  return std::make_unique<ChannelSliceLayer>(name, begin, count);
}
std::unique_ptr<Layer> make_channel_affine_layer(const std::string& name, std::vector<float> scale,
                                                 std::vector<float> shift) {
  return std::make_unique<ChannelAffineLayer>(name, std::move(scale), std::move(shift));
}

}  // namespace cnnergy
