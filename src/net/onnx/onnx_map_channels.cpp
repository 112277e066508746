// ONNX import: activations beyond ReLU (Clip/ReLU6, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, and
// the fusions x * Sigmoid(x) -> SiLU and x * HardSigmoid(x) -> HardSwish that PyTorch exports for
// nn.SiLU and, before opset 14, nn.Hardswish), Add/Sub/Mul/Div (squeeze-and-excitation products and
// constants as a per-channel affine map), the channel shuffle's Transpose, and Split / Slice along
// channels (ShuffleNet v2).
#include <algorithm>
#include <cmath>
#include <limits>

#include "net/onnx/onnx_importer.hpp"

namespace cnnergy::onnx_import {

const onnx::NodeProto* Importer::sole_consumer(const std::string& name) {
  if (consumers_[name] != 1 || name == model_.graph().output(0).name()) return nullptr;
  for (const auto& m : model_.graph().node())
    for (const auto& i : m.input())
      if (i == name) return &m;
  return nullptr;
}

void Importer::map_activation(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  const Node x = runtime(n, 0);
  ActivationDesc d;
  if (op == "Clip") {  // attributes before opset 11, inputs from 11; absent bounds are infinite
    d.kind = ActivationKind::kClip;
    d.alpha = has_input(n, 1) ? static_cast<float>(constant(n, 1, "min").at(0)) : attr_float(n, "min", -INFINITY);
    d.beta = has_input(n, 2) ? static_cast<float>(constant(n, 2, "max").at(0)) : attr_float(n, "max", INFINITY);
    if (d.alpha == 0.0f && std::isinf(d.beta) && d.beta > 0)  // a ReLU
      return set_runtime(n, result_.builder.relu(x, layer_name(n)));
    if (!(d.alpha <= d.beta)) throw NotSupported(node_label(n) + ": Clip with min > max");
  } else if (op == "LeakyRelu") {
    d.kind = ActivationKind::kLeakyRelu;
    d.alpha = attr_float(n, "alpha", 0.01f);
  } else if (op == "Sigmoid") {
    d.kind = ActivationKind::kSigmoid;
  } else if (op == "HardSigmoid") {
    d.kind = ActivationKind::kHardSigmoid;
    d.alpha = attr_float(n, "alpha", 0.2f);
    d.beta = attr_float(n, "beta", 0.5f);
  } else {
    d.kind = ActivationKind::kHardSwish;
  }
  // x * Sigmoid(x) is SiLU; x * HardSigmoid(x; 1/6, 1/2) is HardSwish: one layer, the Mul skipped.
  const bool silu = d.kind == ActivationKind::kSigmoid;
  const bool hard_swish = d.kind == ActivationKind::kHardSigmoid && d.alpha == 1.0f / 6.0f && d.beta == 0.5f;
  if (silu || hard_swish) {
    const onnx::NodeProto* m = sole_consumer(n.output(0));
    if (m && m->op_type() == "Mul" && m->input_size() == 2 && (m->domain().empty() || m->domain() == "ai.onnx") &&
        ((m->input(0) == n.input(0) && m->input(1) == n.output(0)) ||
         (m->input(1) == n.input(0) && m->input(0) == n.output(0)))) {
      ActivationDesc fused;
      fused.kind = silu ? ActivationKind::kSilu : ActivationKind::kHardSwish;
      skipped_.insert(m->output(0));
      values_[m->output(0)].node = result_.builder.activation(x, layer_name(*m), fused);
      return;
    }
  }
  set_runtime(n, result_.builder.activation(x, layer_name(n), d));
}

// Add/Sub/Mul/Div. Two runtime tensors: Mul of one shape or by (N, C, 1, 1) (Add of two is mapped
// by the caller). One constant of 1 value or one per channel (shape (C, 1, 1) for 4-D, (C) for 2-D,
// leading ones allowed): a channel affine map, x * scale + shift.
void Importer::map_binary(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  if (n.input_size() != 2) throw DataError(node_label(n) + " needs 2 inputs");
  const bool c0 = value(n.input(0), n).constant.has_value(), c1 = value(n.input(1), n).constant.has_value();
  if (!c0 && !c1) {
    if (op != "Mul")
      throw NotSupported(node_label(n) + ": " + op + " of two tensors computed from the input (Add and Mul are "
                         "supported)");
    const Node a = runtime(n, 0), b = runtime(n, 1);
    const Shape as = shape(a), bs = shape(b);
    auto fits = [](const Shape& big, const Shape& small) {
      return big == small || (big.rank() == 4 && small.rank() == 4 && small.n() == big.n() && small.c() == big.c() &&
                              small.h() == 1 && small.w() == 1);
    };
    if (!fits(as, bs) && !fits(bs, as))
      throw NotSupported(node_label(n) + ": Mul of " + as.str() + " and " + bs.str() +
                         " (one shape, or (N, C, H, W) by (N, C, 1, 1), is supported)");
    return set_runtime(n, result_.builder.mul(a, b, layer_name(n)));
  }
  const int xi = c0 ? 1 : 0;
  const Node x = runtime(n, xi);
  const ConstTensor& c = constant(n, 1 - xi, "constant operand");
  const Shape xs = shape(x);
  if (c.integer) throw NotSupported(node_label(n) + ": an integer constant operand");
  // Which constant layouts broadcast per channel: trailing dims (C, 1, 1) for 4-D, (C) for 2-D.
  const std::int64_t channels = xs.rank() >= 2 ? xs[1] : 0;
  std::vector<std::int64_t> dims = c.dims;
  while (!dims.empty() && dims.front() == 1 && dims.size() > 1) dims.erase(dims.begin());
  const bool scalar = c.numel() == 1;
  const bool per_channel = (xs.rank() == 4 && dims == std::vector<std::int64_t>{channels, 1, 1}) ||
                           (xs.rank() == 2 && dims == std::vector<std::int64_t>{channels});
  if (!scalar && !(per_channel && c.dims.size() <= xs.rank()))
    throw NotSupported(node_label(n) + ": " + op + " by a constant of shape " + Shape(c.dims).str() + " on " +
                       xs.str() + " (a scalar or one value per channel is supported)");
  std::vector<float> scale(c.f.size(), 1.0f), shift(c.f.size(), 0.0f);
  for (std::size_t k = 0; k < c.f.size(); ++k) {
    const float v = c.f[k];
    if (op == "Mul") {
      scale[k] = v;
    } else if (op == "Add") {
      shift[k] = v;
    } else if (op == "Sub") {  // x - v, or v - x
      scale[k] = xi == 0 ? 1.0f : -1.0f;
      shift[k] = xi == 0 ? -v : v;
    } else {  // Div
      if (xi != 0) throw NotSupported(node_label(n) + ": a constant divided by a tensor");
      scale[k] = 1.0f / v;
    }
  }
  set_runtime(n, result_.builder.channel_affine(x, layer_name(n), std::move(scale), std::move(shift)));
}

// Transpose: the identity, or the middle step of a channel shuffle (perm 0 2 1 3 4 of a grouped view).
void Importer::map_transpose(const onnx::NodeProto& n) {
  if (!has_input(n, 0)) throw DataError(node_label(n) + " lacks input 0");
  const Value& in = value(n.input(0), n);
  const auto perm = attr_ints(n, "perm");
  if (in.shuffle_groups && !in.shuffle_transposed && perm == std::vector<std::int64_t>{0, 2, 1, 3, 4}) {
    Value v = in;
    v.shuffle_transposed = true;
    values_[n.output(0)] = v;
    return;
  }
  const Node x = runtime(n, 0);
  std::vector<std::int64_t> identity(shape(x).rank());
  for (std::size_t k = 0; k < identity.size(); ++k) identity[k] = static_cast<std::int64_t>(k);
  if (perm && *perm == identity) return set_runtime(n, x);
  throw NotSupported(node_label(n) + ": Transpose is supported only as the identity or in a channel shuffle "
                     "(Reshape to (N, g, C/g, H, W), Transpose 0 2 1 3 4, Reshape back)");
}

// Split along channels: one channel slice per output that something reads. Sizes from the split
// input (opset 13+), the split attribute (before 13), or equal parts (num_outputs at 18, or the
// number of outputs).
void Importer::map_split(const onnx::NodeProto& n) {
  const Node x = runtime(n, 0);
  const Shape xs = shape(x);
  const auto rank = static_cast<std::int64_t>(xs.rank());
  if (normalize_axis(attr_int(n, "axis", 0), rank, n) != 1 || (rank != 4 && rank != 2))
    throw NotSupported(node_label(n) + ": Split along an axis other than the channels of a 4-D or 2-D tensor");
  std::vector<std::int64_t> sizes =
      has_input(n, 1) ? constant(n, 1, "split").ints() : attr_ints(n, "split").value_or(std::vector<std::int64_t>{});
  const std::int64_t parts = n.output_size();
  if (sizes.empty()) {  // equal parts, the last one smaller where C does not divide (opset 18)
    const std::int64_t each = (xs[1] + parts - 1) / parts;
    for (std::int64_t k = 0, left = xs[1]; k < parts; ++k, left -= each) sizes.push_back(std::min(each, left));
  }
  std::int64_t total = 0;
  for (auto v : sizes) total += v;
  if (static_cast<std::int64_t>(sizes.size()) != parts || total != xs[1])
    throw DataError(node_label(n) + ": split sizes do not add up to the " + std::to_string(xs[1]) + " channels over " +
                    std::to_string(parts) + " outputs");
  const std::string name = layer_name(n);
  std::int64_t begin = 0;
  for (int k = 0; k < n.output_size(); ++k) {
    const std::string& out = n.output(k);
    const bool used = !out.empty() && (consumers_[out] > 0 || out == model_.graph().output(0).name());
    if (used && sizes[static_cast<std::size_t>(k)] == xs[1]) values_[out].node = x;
    else if (used) values_[out].node = result_.builder.channel_slice(x, name + "_" + std::to_string(k), begin,
                                                                     sizes[static_cast<std::size_t>(k)]);
    begin += sizes[static_cast<std::size_t>(k)];
  }
}

// Slice of the data along channels, step 1 (starts/ends/axes/steps as inputs from opset 10, as
// attributes before). Slices along other axes must cover them whole.
void Importer::map_slice(const onnx::NodeProto& n) {
  const Node x = runtime(n, 0);
  const Shape xs = shape(x);
  const auto rank = static_cast<std::int64_t>(xs.rank());
  auto list = [&](int k, const char* name) {
    return has_input(n, k) ? constant(n, k, name).ints() : attr_ints(n, name).value_or(std::vector<std::int64_t>{});
  };
  const auto starts = list(1, "starts"), ends = list(2, "ends");
  auto axes = list(3, "axes");
  const auto steps = list(4, "steps");
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (starts.size() != ends.size() || axes.size() != starts.size() || (!steps.empty() && steps.size() != axes.size()))
    throw DataError(node_label(n) + ": starts, ends, axes and steps differ in length");
  std::int64_t begin = 0, end = xs[1];
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const std::int64_t a = normalize_axis(axes[k], rank, n), dim = xs[static_cast<std::size_t>(a)];
    if (!steps.empty() && steps[k] != 1) throw NotSupported(node_label(n) + ": Slice with a step other than 1");
    auto clampi = [&](std::int64_t v) { return std::clamp(v < 0 ? v + dim : v, std::int64_t{0}, dim); };
    const std::int64_t b = clampi(starts[k]), e = clampi(ends[k]);
    if (a == 1) {
      begin = b;
      end = e;
    } else if (b != 0 || e != dim) {
      throw NotSupported(node_label(n) + ": Slice along axis " + std::to_string(a) + " (channels only)");
    }
  }
  if ((rank != 4 && rank != 2) || end <= begin)
    throw NotSupported(node_label(n) + ": Slice of " + xs.str() + " to channels [" + std::to_string(begin) + ", " +
                       std::to_string(end) + ")");
  if (begin == 0 && end == xs[1]) return set_runtime(n, x);
  set_runtime(n, result_.builder.channel_slice(x, layer_name(n), begin, end - begin));
}

}  // namespace cnnergy::onnx_import
