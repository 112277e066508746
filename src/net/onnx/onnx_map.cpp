// ONNX import: the mapping of Conv, MaxPool/AveragePool, Gemm/MatMul, Flatten/Reshape/Squeeze and
// Pad onto our layers (the Importer is in onnx_importer.hpp).
#include <algorithm>

#include "net/onnx/onnx_importer.hpp"

namespace cnnergy::onnx_import {

std::vector<std::int64_t> pads_of(const onnx::NodeProto& n, const Shape& x, std::int64_t kh, std::int64_t kw,
                                  std::int64_t sh, std::int64_t sw, std::int64_t dh, std::int64_t dw) {
  const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    auto total = [](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d) {
      const std::int64_t out = (in + s - 1) / s;
      return std::max<std::int64_t>(0, (out - 1) * s + (k - 1) * d + 1 - in);
    };
    const std::int64_t th = total(x.h(), kh, sh, dh), tw = total(x.w(), kw, sw, dw);
    const bool upper = auto_pad == "SAME_UPPER";
    const std::int64_t top = upper ? th / 2 : th - th / 2, left = upper ? tw / 2 : tw - tw / 2;
    return {top, left, th - top, tw - left};
  }
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    throw DataError(node_label(n) + ": unknown auto_pad '" + auto_pad + "'");
  if (auto_pad == "VALID") return {0, 0, 0, 0};
  auto pads = attr_ints(n, "pads").value_or(std::vector<std::int64_t>{0, 0, 0, 0});
  if (pads.size() != 4) throw NotSupported(node_label(n) + ": only 2-D spatial pads are supported");
  return pads;
}

void Importer::map_conv(const onnx::NodeProto& n) {
  std::vector<std::int64_t> extra;
  const Node x = runtime(n, 0, &extra);
  const Shape xs = shape(x);
  if (xs.rank() != 4) throw NotSupported(node_label(n) + ": only 2-D convolutions (4-D input) are supported");
  const ConstTensor& w = constant(n, 1, "weight");
  if (w.dims.size() != 4 || w.integer) throw NotSupported(node_label(n) + ": the weight must be a 4-D float tensor");
  ConvSpec s;
  s.out_channels = w.dims[0];
  s.kernel_h = w.dims[2];
  s.kernel_w = w.dims[3];
  if (auto ks = attr_ints(n, "kernel_shape"); ks && (ks->size() != 2 || (*ks)[0] != s.kernel_h || (*ks)[1] != s.kernel_w))
    throw DataError(node_label(n) + ": kernel_shape disagrees with the weight");
  const auto strides = attr_ints(n, "strides").value_or(std::vector<std::int64_t>{1, 1});
  const auto dil = attr_ints(n, "dilations").value_or(std::vector<std::int64_t>{1, 1});
  if (strides.size() != 2 || dil.size() != 2) throw DataError(node_label(n) + ": strides/dilations need 2 values");
  s.stride_h = strides[0];
  s.stride_w = strides[1];
  s.dilation_h = dil[0];
  s.dilation_w = dil[1];
  s.groups = attr_int(n, "group", 1);
  if (s.groups < 1 || xs.c() != w.dims[1] * s.groups)
    throw DataError(node_label(n) + ": weight " + Shape(w.dims).str() + " and group " + std::to_string(s.groups) +
                    " do not fit input " + xs.str());
  const auto p = pads_of(n, xs, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.dilation_h, s.dilation_w);
  s.pad_top = p[0];
  s.pad_left = p[1];
  s.pad_bottom = p[2];
  s.pad_right = p[3];
  if (!extra.empty()) {  // a zero Pad before it
    s.pad_top += extra[0];
    s.pad_left += extra[1];
    s.pad_bottom += extra[2];
    s.pad_right += extra[3];
  }
  s.bias = has_input(n, 2);
  const std::string name = layer_name(n);
  set_runtime(n, result_.builder.conv(x, name, s));
  weight(name + ".weight", w.dims, w.f);
  if (s.bias) {
    const ConstTensor& b = constant(n, 2, "bias");
    if (b.numel() != s.out_channels) throw DataError(node_label(n) + ": bias size differs from the output channels");
    weight(name + ".bias", {s.out_channels}, b.f);
  }
}

void Importer::map_pool(const onnx::NodeProto& n) {
  std::vector<std::int64_t> extra;
  const Node x = runtime(n, 0, n.op_type() == "AveragePool" ? &extra : nullptr);
  const Shape xs = shape(x);
  if (xs.rank() != 4) throw NotSupported(node_label(n) + ": only 2-D pooling (4-D input) is supported");
  const auto ks = attr_ints(n, "kernel_shape");
  if (!ks || ks->size() != 2) throw DataError(node_label(n) + ": needs a 2-D kernel_shape");
  const auto strides = attr_ints(n, "strides").value_or(std::vector<std::int64_t>{1, 1});
  const auto dil = attr_ints(n, "dilations").value_or(std::vector<std::int64_t>{1, 1});
  if (strides.size() != 2) throw DataError(node_label(n) + ": strides need 2 values");
  if (dil != std::vector<std::int64_t>{1, 1}) throw NotSupported(node_label(n) + ": dilated pooling is not supported");
  if (n.output_size() > 1 && !n.output(1).empty() && consumers_[n.output(1)] > 0)
    throw NotSupported(node_label(n) + ": the Indices output is not supported");
  PoolSpec s;
  s.kernel_h = (*ks)[0];
  s.kernel_w = (*ks)[1];
  s.stride_h = strides[0];
  s.stride_w = strides[1];
  auto p = pads_of(n, xs, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, 1, 1);
  if (!extra.empty() && p != std::vector<std::int64_t>{0, 0, 0, 0})
    throw NotSupported(node_label(n) + ": a padded AveragePool after a Pad");
  if (!extra.empty()) p = extra;  // the padded zeros count in the average (count_include_pad)
  if (p[0] != p[2] || p[1] != p[3])
    throw NotSupported(node_label(n) + ": asymmetric pooling pads are not supported");
  s.pad_h = p[0];
  s.pad_w = p[1];
  s.ceil_mode = attr_int(n, "ceil_mode", 0) != 0;
  const std::string name = layer_name(n);
  if (n.op_type() == "MaxPool") {
    if (attr_int(n, "storage_order", 0) != 0) throw NotSupported(node_label(n) + ": storage_order 1");
    set_runtime(n, result_.builder.max_pool(x, name, s));
  } else {
    s.mode = (attr_int(n, "count_include_pad", 0) || !extra.empty()) ? PoolMode::kAvgIncludePad
                                                                      : PoolMode::kAvgExcludePad;
    set_runtime(n, result_.builder.avg_pool(x, name, s));
  }
}

// Gemm (transA 0, alpha/beta folded into the weights) and MatMul (with the Add of a bias after it).
void Importer::map_fc(const onnx::NodeProto& n) {
  const Node x = runtime(n, 0);
  const Shape xs = shape(x);
  if (xs.rank() != 2) throw NotSupported(node_label(n) + ": needs a 2-D input (N, F), got " + xs.str());
  const ConstTensor& b = constant(n, 1, "weight");
  if (b.dims.size() != 2 || b.integer) throw NotSupported(node_label(n) + ": the weight must be a 2-D float matrix");
  const bool gemm = n.op_type() == "Gemm";
  if (gemm && attr_int(n, "transA", 0) != 0) throw NotSupported(node_label(n) + ": transA=1 is not supported");
  const bool trans_b = gemm && attr_int(n, "transB", 0) != 0;
  const std::int64_t f = trans_b ? b.dims[1] : b.dims[0], k = trans_b ? b.dims[0] : b.dims[1];
  if (f != xs[1]) throw DataError(node_label(n) + ": weight " + Shape(b.dims).str() + " does not fit input " + xs.str());
  const float alpha = gemm ? attr_float(n, "alpha", 1.0f) : 1.0f, beta = gemm ? attr_float(n, "beta", 1.0f) : 1.0f;
  std::vector<float> w(static_cast<std::size_t>(k * f));
  for (std::int64_t o = 0; o < k; ++o)
    for (std::int64_t i = 0; i < f; ++i)
      w[static_cast<std::size_t>(o * f + i)] =
          alpha * b.f[static_cast<std::size_t>(trans_b ? o * f + i : i * k + o)];
  // The bias: Gemm's C, or a MatMul whose only consumer is an Add of a constant of k values.
  const ConstTensor* bias = nullptr;
  std::string out = n.output(0);
  if (gemm && has_input(n, 2)) bias = &constant(n, 2, "bias C");
  if (!gemm && consumers_[out] == 1) {
    for (const auto& m : model_.graph().node())
      if (m.op_type() == "Add" && m.input_size() == 2 && (m.input(0) == out || m.input(1) == out)) {
        const std::string& other = m.input(0) == out ? m.input(1) : m.input(0);
        auto it = values_.find(other);
        if (it != values_.end() && it->second.constant && it->second.constant->numel() == k && !it->second.constant->integer) {
          bias = &*it->second.constant;
          skipped_.insert(m.output(0));
          out = m.output(0);
        }
      }
  }
  std::vector<float> bv;
  if (bias) {
    if (bias->integer || (bias->numel() != k && bias->numel() != 1))
      throw NotSupported(node_label(n) + ": bias of shape " + Shape(bias->dims).str() + " (needs " + std::to_string(k) + ")");
    for (std::int64_t o = 0; o < k; ++o) bv.push_back(beta * bias->f[bias->numel() == 1 ? 0 : static_cast<std::size_t>(o)]);
  }
  FcSpec spec;
  spec.out_features = k;
  spec.bias = bias != nullptr;
  const std::string name = layer_name(n);
  values_[out].node = result_.builder.fc(x, name, spec);
  weight(name + ".weight", {k, f}, std::move(w));
  if (bias) weight(name + ".bias", {k}, std::move(bv));
}

// Reshape/Flatten/Squeeze of the data: to (N, features) is a flatten, to the same shape nothing.
void Importer::map_reshape(const onnx::NodeProto& n) {
  if (!has_input(n, 0)) throw DataError(node_label(n) + " lacks input 0");
  const Value& in = value(n.input(0), n);
  const std::int64_t groups = in.shuffle_groups;
  const bool transposed = in.shuffle_transposed;
  const Node x = groups ? in.node : runtime(n, 0);
  const Shape xs = shape(x);
  std::vector<std::int64_t> target;
  if (n.op_type() == "Flatten") {
    const std::int64_t axis = normalize_axis(attr_int(n, "axis", 1), static_cast<std::int64_t>(xs.rank()), n);
    if (axis != 1) throw NotSupported(node_label(n) + ": Flatten with axis " + std::to_string(axis) + " (1 is supported)");
    target = {xs[0], xs.per_sample()};
  } else if (n.op_type() == "Squeeze") {
    std::vector<std::int64_t> axes = has_input(n, 1) ? constant(n, 1, "axes").ints()
                                                     : attr_ints(n, "axes").value_or(std::vector<std::int64_t>{});
    for (std::size_t k = 0; k < xs.rank(); ++k) {
      bool drop = axes.empty() ? (k > 0 && xs[k] == 1) : false;
      for (auto a : axes) drop = drop || normalize_axis(a, static_cast<std::int64_t>(xs.rank()), n) == static_cast<std::int64_t>(k);
      if (drop && k == 0) throw NotSupported(node_label(n) + ": squeezing the batch dimension");
      if (!drop) target.push_back(xs[k]);
    }
  } else {
    target = constant(n, 1, "shape").ints();
    std::int64_t known = 1, infer = -1;
    for (std::size_t k = 0; k < target.size(); ++k) {
      if (target[k] == 0 && attr_int(n, "allowzero", 0) == 0 && k < xs.rank()) target[k] = xs[k];
      if (target[k] == -1) infer = static_cast<std::int64_t>(k);
      else known *= target[k];
    }
    if (infer >= 0 && known > 0) target[static_cast<std::size_t>(infer)] = xs.numel() / known;
  }
  if (target.size() >= 1) target[0] = 1;  // the batch dimension, at batch 1 here
  if (groups) {  // the end of a channel shuffle: back to (N, C, H, W)
    if (!transposed || !(Shape(target) == xs))
      throw NotSupported(node_label(n) + ": reshaping the grouped view of " + xs.str() + " to " +
                         Shape(target).str() + " (only the channel shuffle's Transpose, then (N, C, H, W), is supported)");
    return set_runtime(n, result_.builder.channel_shuffle(x, layer_name(n), groups));
  }
  if (target.size() == 5 && xs.rank() == 4 && target[1] > 0 && target[2] > 0 && target[1] <= xs[1] &&
      target[2] <= xs[1] && target[1] * target[2] == xs[1] &&
      target[3] == xs[2] && target[4] == xs[3]) {  // (N, g, C/g, H, W): a channel shuffle begins
    Value& v = values_[n.output(0)];
    v.node = x;
    v.shuffle_groups = target[1];
    return;
  }
  if (Shape(target) == xs) {
    set_runtime(n, x);
  } else if (target.size() == 2 && target[1] == xs.per_sample() && (xs.rank() == 4 || xs.rank() == 2)) {
    set_runtime(n, result_.builder.flatten(x, layer_name(n)));
  } else {
    throw NotSupported(node_label(n) + ": reshaping " + xs.str() + " to " + Shape(target).str() +
                       " is not supported (only flattening to (N, features))");
  }
}

// Pad: pads as an attribute (before opset 11) or an input (11+), axes as an input (18+); constant
// mode with value 0 over H, W only. All-zero pads are nothing; others wait for the Conv/AveragePool.
void Importer::map_pad(const onnx::NodeProto& n) {
  const Node x = runtime(n, 0);
  const auto rank = static_cast<std::int64_t>(shape(x).rank());
  if (attr_string(n, "mode", "constant") != "constant") throw NotSupported(node_label(n) + ": only constant padding");
  std::vector<std::int64_t> pads =
      has_input(n, 1) ? constant(n, 1, "pads").ints() : attr_ints(n, "pads").value_or(std::vector<std::int64_t>{});
  const float fill = has_input(n, 2) ? static_cast<float>(constant(n, 2, "constant_value").at(0)) : attr_float(n, "value", 0.0f);
  std::vector<std::int64_t> axes;
  if (has_input(n, 3)) axes = constant(n, 3, "axes").ints();
  else for (std::int64_t k = 0; k < rank; ++k) axes.push_back(k);
  if (pads.size() != 2 * axes.size()) throw DataError(node_label(n) + ": needs 2 pads per axis");
  std::vector<std::int64_t> begin(static_cast<std::size_t>(rank), 0), end(static_cast<std::size_t>(rank), 0);
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const auto a = static_cast<std::size_t>(normalize_axis(axes[k], rank, n));
    begin[a] = pads[k];
    end[a] = pads[k + axes.size()];
  }
  bool zero = true;
  for (std::int64_t k = 0; k < rank; ++k) {
    if (begin[static_cast<std::size_t>(k)] < 0 || end[static_cast<std::size_t>(k)] < 0)
      throw NotSupported(node_label(n) + ": negative pads (cropping)");
    if ((begin[static_cast<std::size_t>(k)] || end[static_cast<std::size_t>(k)]) && (k < 2 || rank != 4))
      throw NotSupported(node_label(n) + ": padding other than H, W of a 4-D tensor");
    zero = zero && !begin[static_cast<std::size_t>(k)] && !end[static_cast<std::size_t>(k)];
  }
  set_runtime(n, x);
  if (zero) return;
  if (fill != 0.0f) throw NotSupported(node_label(n) + ": padding with " + std::to_string(fill) + " (0 is supported)");
  values_[n.output(0)].pending_pad = {begin[2], begin[3], end[2], end[3]};
}

}  // namespace cnnergy::onnx_import
