// Constant folding of the shape-computing subgraphs PyTorch exports (Shape -> Gather -> Unsqueeze
// -> Concat -> Reshape chains, Constant nodes), and the attribute accessors the importer shares.
#include "net/onnx/onnx_fold.hpp"

#include <algorithm>
#include <cmath>

#include "core/errors.hpp"

namespace cnnergy::onnx_import {
namespace {

const ConstTensor& need(const std::vector<const ConstTensor*>& in, std::size_t k, const onnx::NodeProto& node) {
  if (k >= in.size() || !in[k]) throw DataError(node_label(node) + " lacks input " + std::to_string(k));
  return *in[k];
}

// Row-major strides of dims.
std::vector<std::int64_t> strides_of(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  for (std::size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

// Copies element `from` of src into element `to` of dst (same kind).
void copy_element(const ConstTensor& src, std::size_t from, ConstTensor& dst) {
  if (src.integer) dst.i.push_back(src.i[from]);
  else dst.f.push_back(src.f[from]);
}

ConstTensor empty_like(const ConstTensor& t, std::vector<std::int64_t> dims) {
  ConstTensor c;
  c.integer = t.integer;
  c.dims = std::move(dims);
  return c;
}

ConstTensor elementwise(const onnx::NodeProto& node, const ConstTensor& a, const ConstTensor& b) {
  // Numpy broadcasting of two constants.
  const std::size_t rank = std::max(a.dims.size(), b.dims.size());
  std::vector<std::int64_t> da(rank, 1), db(rank, 1), dout(rank);
  std::copy(a.dims.begin(), a.dims.end(), da.begin() + static_cast<std::ptrdiff_t>(rank - a.dims.size()));
  std::copy(b.dims.begin(), b.dims.end(), db.begin() + static_cast<std::ptrdiff_t>(rank - b.dims.size()));
  for (std::size_t k = 0; k < rank; ++k) {
    if (da[k] != db[k] && da[k] != 1 && db[k] != 1)
      throw DataError(node_label(node) + ": constant shapes do not broadcast");
    dout[k] = da[k] == 1 ? db[k] : da[k];
  }
  const std::int64_t n = checked_numel(dout, node_label(node));
  const auto sa = strides_of(da), sb = strides_of(db), so = strides_of(dout);
  const bool integer = a.integer && b.integer;
  ConstTensor out;
  out.integer = integer;
  out.dims = dout;
  const std::string& op = node.op_type();
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t ia = 0, ib = 0, rest = e;
    for (std::size_t k = 0; k < rank; ++k) {
      const std::int64_t idx = rest / so[k];
      rest %= so[k];
      if (da[k] != 1) ia += idx * sa[k];
      if (db[k] != 1) ib += idx * sb[k];
    }
    const double x = a.at(static_cast<std::size_t>(ia)), y = b.at(static_cast<std::size_t>(ib));
    if (integer) {
      const std::int64_t xi = a.i[static_cast<std::size_t>(ia)], yi = b.i[static_cast<std::size_t>(ib)];
      std::int64_t r = 0;
      if (op == "Add") r = xi + yi;
      else if (op == "Sub") r = xi - yi;
      else if (op == "Mul") r = xi * yi;
      else {
        if (yi == 0) throw DataError(node_label(node) + ": integer division by zero in a constant");
        r = xi / yi;
      }
      out.i.push_back(r);
    } else {
      double r = op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y : x / y;
      out.f.push_back(static_cast<float>(r));
    }
  }
  return out;
}

ConstTensor gather(const onnx::NodeProto& node, const ConstTensor& data, const ConstTensor& indices) {
  const auto rank = static_cast<std::int64_t>(data.dims.size());
  if (rank < 1) throw DataError(node_label(node) + ": Gather of a scalar");
  const std::int64_t axis = normalize_axis(attr_int(node, "axis", 0), rank, node);
  const auto idx = indices.ints();
  std::vector<std::int64_t> dout(data.dims.begin(), data.dims.begin() + axis);
  dout.insert(dout.end(), indices.dims.begin(), indices.dims.end());
  dout.insert(dout.end(), data.dims.begin() + axis + 1, data.dims.end());
  ConstTensor out = empty_like(data, dout);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t k = 0; k < axis; ++k) outer *= data.dims[static_cast<std::size_t>(k)];
  for (std::int64_t k = axis + 1; k < rank; ++k) inner *= data.dims[static_cast<std::size_t>(k)];
  const std::int64_t dim = data.dims[static_cast<std::size_t>(axis)];
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j : idx) {
      if (j < -dim || j >= dim) throw DataError(node_label(node) + ": Gather index " + std::to_string(j) + " out of range");
      if (j < 0) j += dim;
      for (std::int64_t r = 0; r < inner; ++r)
        copy_element(data, static_cast<std::size_t>((o * dim + j) * inner + r), out);
    }
  return out;
}

// 1-D (or any rank, sliced along the given axes) Slice of a constant.
ConstTensor slice(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  const ConstTensor& data = need(in, 0, node);
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (in.size() > 1) {
    starts = need(in, 1, node).ints();
    ends = need(in, 2, node).ints();
    if (in.size() > 3 && in[3]) axes = in[3]->ints();
    if (in.size() > 4 && in[4]) steps = in[4]->ints();
  } else {  // opset < 10: attributes
    starts = attr_ints(node, "starts").value_or(std::vector<std::int64_t>{});
    ends = attr_ints(node, "ends").value_or(std::vector<std::int64_t>{});
    axes = attr_ints(node, "axes").value_or(std::vector<std::int64_t>{});
  }
  const auto rank = static_cast<std::int64_t>(data.dims.size());
  if (starts.size() != ends.size()) throw DataError(node_label(node) + ": starts and ends differ in length");
  if (axes.empty())
    for (std::size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<std::int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    throw DataError(node_label(node) + ": starts, ends, axes and steps differ in length");
  std::vector<std::int64_t> b(static_cast<std::size_t>(rank), 0), st(static_cast<std::size_t>(rank), 1), dout = data.dims;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    const auto ax = static_cast<std::size_t>(normalize_axis(axes[k], rank, node));
    const std::int64_t d = data.dims[ax], step = steps[k];
    if (step == 0) throw DataError(node_label(node) + ": Slice step 0");
    auto clampi = [&](std::int64_t v, std::int64_t lo, std::int64_t hi) {
      if (v < 0) v += d;
      return std::clamp(v, lo, hi);
    };
    std::int64_t s = step > 0 ? clampi(starts[k], 0, d) : clampi(starts[k], -1, d - 1);
    std::int64_t e = step > 0 ? clampi(ends[k], 0, d) : clampi(ends[k], -1, d - 1);
    const std::int64_t len = step > 0 ? std::max<std::int64_t>(0, (e - s + step - 1) / step)
                                      : std::max<std::int64_t>(0, (s - e + (-step) - 1) / (-step));
    b[ax] = s;
    st[ax] = step;
    dout[ax] = len;
  }
  ConstTensor out = empty_like(data, dout);
  const std::int64_t n = checked_numel(dout, node_label(node));
  const auto so = strides_of(dout), si = strides_of(data.dims);
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t rest = e, src = 0;
    for (std::size_t k = 0; k < dout.size(); ++k) {
      const std::int64_t idx = rest / so[k];
      rest %= so[k];
      src += (b[k] + idx * st[k]) * si[k];
    }
    copy_element(data, static_cast<std::size_t>(src), out);
  }
  return out;
}

std::vector<std::int64_t> axes_input_or_attr(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in) {
  if (in.size() > 1 && in[1]) return in[1]->ints();
  return attr_ints(node, "axes").value_or(std::vector<std::int64_t>{});
}

}  // namespace

std::string node_label(const onnx::NodeProto& node) {
  return "node '" + node.name() + "' (" + node.op_type() + ")";
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::int64_t attr_int(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback) {
  const auto* a = find_attr(node, name);
  return a ? a->i() : fallback;
}

float attr_float(const onnx::NodeProto& node, const std::string& name, float fallback) {
  const auto* a = find_attr(node, name);
  return a ? a->f() : fallback;
}

std::string attr_string(const onnx::NodeProto& node, const std::string& name, const std::string& fallback) {
  const auto* a = find_attr(node, name);
  return a ? a->s() : fallback;
}

std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& node, const std::string& name) {
  const auto* a = find_attr(node, name);
  if (!a) return std::nullopt;
  return std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
}

std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, const onnx::NodeProto& node) {
  if (axis < -rank || axis >= rank)
    throw DataError(node_label(node) + ": axis " + std::to_string(axis) + " out of range for rank " +
                    std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

bool foldable(const std::string& op) {
  static const std::vector<std::string> kOps = {"Constant", "Identity", "Gather", "Unsqueeze", "Squeeze",
                                                "Concat", "Cast", "Slice", "Reshape", "Add", "Sub", "Mul",
                                                "Div", "ConstantOfShape"};
  return std::find(kOps.begin(), kOps.end(), op) != kOps.end();
}

std::vector<ConstTensor> fold(const onnx::NodeProto& node, const std::vector<const ConstTensor*>& in,
                              const std::string& model_dir) {
  const std::string& op = node.op_type();
  if (op == "Constant") {
    if (const auto* a = find_attr(node, "value")) return {read_tensor(a->t(), model_dir)};
    if (const auto* a = find_attr(node, "value_float")) return {ConstTensor::of_floats({a->f()}, {})};
    if (const auto* a = find_attr(node, "value_floats"))
      return {ConstTensor::of_floats({a->floats().begin(), a->floats().end()}, {a->floats_size()})};
    if (const auto* a = find_attr(node, "value_int")) return {ConstTensor::of_ints({a->i()}, {})};
    if (const auto* a = find_attr(node, "value_ints"))
      return {ConstTensor::of_ints({a->ints().begin(), a->ints().end()}, {a->ints_size()})};
    throw NotSupported(node_label(node) + ": only tensor, float(s) and int(s) values are supported");
  }
  if (op == "Identity") return {need(in, 0, node)};
  if (op == "Gather") return {gather(node, need(in, 0, node), need(in, 1, node))};
  if (op == "Slice") return {slice(node, in)};
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div")
    return {elementwise(node, need(in, 0, node), need(in, 1, node))};
  if (op == "Cast") {
    ConstTensor t = need(in, 0, node);
    const auto to = attr_int(node, "to", onnx::TensorProto::FLOAT);
    const bool to_float = to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE ||
                          to == onnx::TensorProto::FLOAT16 || to == onnx::TensorProto::BFLOAT16;
    if (to_float && t.integer) return {ConstTensor::of_floats(std::vector<float>(t.i.begin(), t.i.end()), t.dims)};
    if (!to_float && !t.integer) return {ConstTensor::of_ints(t.ints(), t.dims)};
    return {t};
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    ConstTensor t = need(in, 0, node);
    auto axes = axes_input_or_attr(node, in);
    if (op == "Unsqueeze") {
      const auto rank = static_cast<std::int64_t>(t.dims.size() + axes.size());
      for (auto& a : axes) a = normalize_axis(a, rank, node);
      std::sort(axes.begin(), axes.end());
      for (auto a : axes) t.dims.insert(t.dims.begin() + a, 1);
    } else {
      const auto rank = static_cast<std::int64_t>(t.dims.size());
      std::vector<std::int64_t> dims;
      for (std::int64_t k = 0; k < rank; ++k) {
        bool drop = axes.empty() && t.dims[static_cast<std::size_t>(k)] == 1;
        for (auto a : axes) drop = drop || normalize_axis(a, rank, node) == k;
        if (!drop) dims.push_back(t.dims[static_cast<std::size_t>(k)]);
      }
      t.dims = dims;
    }
    return {t};
  }
  if (op == "Concat") {
    const ConstTensor& first = need(in, 0, node);
    const auto rank = static_cast<std::int64_t>(first.dims.size());
    const std::int64_t axis = normalize_axis(attr_int(node, "axis", 0), rank, node);
    if (axis != 0 && rank != 1) throw NotSupported(node_label(node) + ": folding Concat supports axis 0 only");
    ConstTensor out = empty_like(first, first.dims);
    out.dims[0] = 0;
    for (std::size_t k = 0; k < in.size(); ++k) {
      const ConstTensor& t = need(in, k, node);
      if (t.dims.size() != first.dims.size() || t.integer != first.integer)
        throw DataError(node_label(node) + ": constant inputs differ in rank or type");
      for (std::size_t e = 0; e < t.size(); ++e) copy_element(t, e, out);
      out.dims[0] += t.dims.empty() ? 1 : t.dims[0];
    }
    return {out};
  }
  if (op == "Reshape") {
    ConstTensor t = need(in, 0, node);
    auto shape = need(in, 1, node).ints();
    std::int64_t known = 1, infer = -1;
    for (std::size_t k = 0; k < shape.size(); ++k) {
      if (shape[k] == 0 && k < t.dims.size()) shape[k] = t.dims[k];
      if (shape[k] == -1) {
        if (infer >= 0) throw DataError(node_label(node) + ": two -1 dimensions");
        infer = static_cast<std::int64_t>(k);
      } else if (shape[k] < 0) {
        throw DataError(node_label(node) + ": negative dimension in the target shape");
      } else {
        known *= shape[k];
      }
    }
    const std::int64_t n = static_cast<std::int64_t>(t.size());
    if (infer >= 0) {
      if (known == 0 || n % known != 0) throw DataError(node_label(node) + ": cannot infer the -1 dimension");
      shape[static_cast<std::size_t>(infer)] = n / known;
    }
    if (checked_numel(shape, node_label(node)) != n) throw DataError(node_label(node) + ": element count changes");
    t.dims = shape;
    return {t};
  }
  if (op == "ConstantOfShape") {
    const auto dims = need(in, 0, node).ints();
    const auto n = static_cast<std::size_t>(checked_numel(dims, node_label(node)));
    if (n > (std::size_t{1} << 26)) throw NotSupported(node_label(node) + ": constant of more than 2^26 elements");
    ConstTensor value = ConstTensor::of_floats({0.0f}, {1});
    if (const auto* a = find_attr(node, "value")) value = read_tensor(a->t(), model_dir);
    if (value.size() != 1) throw DataError(node_label(node) + ": value must hold one element");
    if (value.integer) return {ConstTensor::of_ints(std::vector<std::int64_t>(n, value.i[0]), dims)};
    return {ConstTensor::of_floats(std::vector<float>(n, value.f[0]), dims)};
  }
  throw NotSupported(node_label(node) + ": cannot be evaluated on constants");
}

}  // namespace cnnergy::onnx_import
