// Problem sources of the convolution study: strict parsing of `--problem` text, the li2016 preset
// (Li et al. 2016, Table I) and the distinct convolutions of a zoo model.
#include "convbench/problem.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "core/errors.hpp"
#include "net/graph.hpp"
#include "net/zoo/zoo.hpp"

namespace cnnergy::convbench {
namespace {

constexpr const char* kKeys = "n, c, h, w, k, r, s, stride, pad, groups, dilation";

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::int64_t parse_value(const std::string& key, const std::string& value, std::int64_t min_value) {
  std::int64_t v = 0;
  const char* first = value.data();
  const char* last = first + value.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (value.empty() || ec != std::errc() || ptr != last)
    throw InvalidArgument("--problem: " + key + "='" + value + "' is not an integer");
  if (v < min_value)
    throw InvalidArgument("--problem: " + key + "=" + value + " must be >= " + std::to_string(min_value));
  if (v > (std::int64_t{1} << 31))
    throw InvalidArgument("--problem: " + key + "=" + value + " is out of range (at most 2^31)");
  return v;
}

ConvProblem make_problem(std::int64_t n, std::int64_t c, std::int64_t hw, std::int64_t k, std::int64_t rs,
                         std::int64_t stride, std::int64_t pad, std::string source) {
  ConvProblem p;
  Conv2dDesc& d = p.desc;
  d.n = n;
  d.c = c;
  d.h = d.w = hw;
  d.k = k;
  d.r = d.s = rs;
  d.stride_h = d.stride_w = stride;
  d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = pad;
  d.bias = false;
  p.id = problem_id(d);
  p.source = std::move(source);
  return p;
}

}  // namespace

std::string problem_id(const Conv2dDesc& d) {
  std::string s = "n=" + std::to_string(d.n) + ",c=" + std::to_string(d.c) + ",h=" + std::to_string(d.h) +
                  ",w=" + std::to_string(d.w) + ",k=" + std::to_string(d.k) + ",r=" + std::to_string(d.r) +
                  ",s=" + std::to_string(d.s);
  if (d.stride_h == d.stride_w) s += ",stride=" + std::to_string(d.stride_h);
  else s += ",stride_h=" + std::to_string(d.stride_h) + ",stride_w=" + std::to_string(d.stride_w);
  if (d.pad_top == d.pad_bottom && d.pad_top == d.pad_left && d.pad_top == d.pad_right)
    s += ",pad=" + std::to_string(d.pad_top);
  else
    s += ",pad_top=" + std::to_string(d.pad_top) + ",pad_bottom=" + std::to_string(d.pad_bottom) +
         ",pad_left=" + std::to_string(d.pad_left) + ",pad_right=" + std::to_string(d.pad_right);
  if (d.groups != 1) s += ",groups=" + std::to_string(d.groups);
  if (d.dilation_h != 1 || d.dilation_w != 1) {
    if (d.dilation_h == d.dilation_w) s += ",dilation=" + std::to_string(d.dilation_h);
    else s += ",dilation_h=" + std::to_string(d.dilation_h) + ",dilation_w=" + std::to_string(d.dilation_w);
  }
  return s;
}

ConvProblem parse_problem(std::string_view text) {
  static const std::set<std::string> known = {"n", "c", "h", "w", "k", "r", "s", "stride", "pad", "groups", "dilation"};
  std::map<std::string, std::int64_t> values;
  std::size_t start = 0;
  const std::string all(text);
  if (trim(all).empty()) throw InvalidArgument("--problem: empty (expected " + std::string(kKeys) + " as key=value)");
  while (start <= all.size()) {
    const std::size_t comma = all.find(',', start);
    const std::string item = trim(all.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? all.size() + 1 : comma + 1;
    if (item.empty()) throw InvalidArgument("--problem '" + all + "': empty item between commas");
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw InvalidArgument("--problem '" + all + "': '" + item + "' is not key=value (keys: " + kKeys + ")");
    const std::string key = trim(item.substr(0, eq));
    const std::string value = trim(item.substr(eq + 1));
    if (!known.count(key))
      throw InvalidArgument("--problem: unknown key '" + key + "' (keys: " + std::string(kKeys) + ")");
    if (values.count(key)) throw InvalidArgument("--problem: key '" + key + "' given twice");
    values[key] = parse_value(key, value, key == "pad" ? 0 : 1);
  }
  for (const char* required : {"n", "c", "h", "w", "k", "r", "s"})
    if (!values.count(required))
      throw InvalidArgument("--problem '" + all + "': missing key '" + required + "' (n, c, h, w, k, r, s are required)");
  const auto get = [&](const char* key, std::int64_t fallback) {
    const auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  };
  ConvProblem p = make_problem(values["n"], values["c"], 1, values["k"], 1, get("stride", 1), get("pad", 0),
                               "command line");
  p.desc.h = values["h"];
  p.desc.w = values["w"];
  p.desc.r = values["r"];
  p.desc.s = values["s"];
  p.desc.groups = get("groups", 1);
  p.desc.dilation_h = p.desc.dilation_w = get("dilation", 1);
  p.id = problem_id(p.desc);
  return p;
}

std::optional<std::string> problem_rule(const Conv2dDesc& d) {
  if (d.c % d.groups != 0 || d.k % d.groups != 0)
    return "groups=" + std::to_string(d.groups) + " must divide the input channels c=" + std::to_string(d.c) +
           " and the output channels k=" + std::to_string(d.k);
  const std::int64_t extent_h = d.dilation_h * (d.r - 1) + 1;
  const std::int64_t extent_w = d.dilation_w * (d.s - 1) + 1;
  const std::int64_t padded_h = d.h + d.pad_top + d.pad_bottom;
  const std::int64_t padded_w = d.w + d.pad_left + d.pad_right;
  if (extent_h > padded_h || extent_w > padded_w)
    return "empty output: the " + std::to_string(d.r) + "x" + std::to_string(d.s) + " kernel (extent " +
           std::to_string(extent_h) + "x" + std::to_string(extent_w) + " with dilation) is larger than the padded input " +
           std::to_string(padded_h) + "x" + std::to_string(padded_w);
  return std::nullopt;
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"li2016"};
  return names;
}

std::int64_t li2016_memory_scale(std::size_t total_bytes) {
  constexpr double kK40cBytes = 12e9;  // Li et al. 2016, Section 3: the K40c's 12 GB
  std::int64_t scale = 1;
  while (total_bytes > 0 && static_cast<double>(total_bytes) >= kK40cBytes * static_cast<double>(2 * scale)) scale *= 2;
  return scale;
}

std::vector<ConvProblem> preset_problems(std::string_view name, std::int64_t memory_scale) {
  if (name != "li2016") {
    std::string all;
    for (const auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
    throw InvalidArgument("unknown --preset '" + std::string(name) + "' (choose one of: " + all + ")");
  }
  if (memory_scale < 1) throw InvalidArgument("preset memory scale must be >= 1");
  // Li et al. 2016, Table I: (b, i, f, k, s) = mini-batch, square input size, filters, square kernel,
  // stride. The paper gives neither input channels nor padding: C = 3 for Conv1 (an image input),
  // C = f for the others (channels in = out, as in the layers they stand for), no padding.
  struct Row {
    const char* layer;
    std::int64_t b, i, f, k, s, c;
  };
  constexpr Row kTable[] = {
      {"Conv1", 128, 128, 96, 11, 1, 3},   {"Conv2", 128, 128, 96, 3, 1, 96}, {"Conv3", 128, 32, 128, 9, 1, 128},
      {"Conv4", 128, 16, 128, 7, 1, 128}, {"Conv5", 128, 13, 384, 3, 1, 384},
  };
  std::vector<ConvProblem> out;
  for (const Row& r : kTable)
    out.push_back(make_problem(r.b * memory_scale, r.c, r.i, r.f, r.k, r.s, 0,
                               std::string("Li et al. 2016 Table I ") + r.layer +
                                   (memory_scale > 1 ? " (batch x" + std::to_string(memory_scale) + ")" : "")));
  return out;
}

std::vector<ConvProblem> model_problems(std::string_view model, std::int64_t batch) {
  if (batch < 1) throw InvalidArgument("--batch must be >= 1");
  const auto graph = build_model(model);
  std::vector<ConvProblem> out;
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < graph->num_layers(); ++i) {
    const Layer& layer = graph->layer(i);
    const auto desc = layer.conv_problem();
    if (!desc) continue;
    Conv2dDesc d = *desc;
    d.n = batch;
    d.bias = false;
    const std::string id = problem_id(d);
    auto it = index.find(id);
    if (it == index.end()) {
      ConvProblem p;
      p.desc = d;
      p.id = id;
      p.source = std::string(model);
      p.backward_data_used = false;
      it = index.emplace(id, out.size()).first;
      out.push_back(std::move(p));
    }
    ConvProblem& p = out[it->second];
    p.layers.push_back(layer.name());
    p.backward_data_used = p.backward_data_used || layer.input_grad_needed();
  }
  if (out.empty()) throw InvalidArgument("model '" + std::string(model) + "' has no convolution");
  return out;
}

double problem_flops(const Conv2dDesc& d) {
  return 2.0 * static_cast<double>(d.n) * static_cast<double>(d.k) * static_cast<double>(d.c / d.groups) *
         static_cast<double>(d.r) * static_cast<double>(d.s) * static_cast<double>(d.out_h()) *
         static_cast<double>(d.out_w());
}

std::size_t weight_bytes(const Conv2dDesc& d, std::size_t dtype_bytes) {
  return static_cast<std::size_t>(d.k * (d.c / d.groups) * d.r * d.s) * dtype_bytes;
}

std::size_t problem_tensor_bytes(const Conv2dDesc& d, std::size_t dtype_bytes) {
  const auto x = static_cast<std::size_t>(d.n * d.c * d.h * d.w);
  const auto y = static_cast<std::size_t>(d.n * d.k * std::max<std::int64_t>(d.out_h(), 0) *
                                          std::max<std::int64_t>(d.out_w(), 0));
  return (x + y) * dtype_bytes + weight_bytes(d, dtype_bytes);
}

}  // namespace cnnergy::convbench
