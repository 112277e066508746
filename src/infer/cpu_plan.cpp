// make_cpu_plan: one PlanStep per layer that runs (absorbed batch norms and ReLUs, flatten and
// eval-mode dropout become aliases of their input), or the first layer that has no oneDNN step.
#include "infer/cpu_plan.hpp"

#include <algorithm>
#include <variant>

#include "backend/cpu/conv_onednn_cpu.hpp"
#include "net/graph.hpp"

namespace cnnergy {

std::int64_t cpu_plan_chunk(const Graph& graph, std::int64_t batch, std::size_t budget_bytes) {
  std::int64_t largest = 1;
  for (std::size_t t = 0; t < graph.num_tensors(); ++t)
    largest = std::max(largest, graph.tensor(static_cast<int>(t)).shape.numel());
  const auto per_sample = static_cast<std::size_t>(largest) * sizeof(float);
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(budget_bytes / per_sample), 1, batch);
}

CpuPlanChoice make_cpu_plan(const Executor& ex, std::int64_t plan_batch) {
  CpuPlanChoice out;
  const std::int64_t nb = plan_batch > 0 ? plan_batch : ex.batch_size();
  const Backend& be = ex.backend();
  if (be.name() != "cpu" || be.dtype() != DType::kF32 || be.layout() != Layout::kNCHW) {
    out.reason = "the backend is not the fp32 NCHW CPU one";
    return out;
  }
  if (ex.training()) {
    out.reason = "a training executor";
    return out;
  }
  if (!cpu::onednn_available()) {
    out.reason = "this build has no oneDNN";
    return out;
  }
  const Graph& g = ex.graph();
  std::vector<int> alias(g.num_tensors(), -1);
  auto resolve = [&](int v) {
    while (alias[static_cast<std::size_t>(v)] >= 0) v = alias[static_cast<std::size_t>(v)];
    return v;
  };
  cpu::PlanSpec spec;
  const Shape in = g.tensor(g.input_tensor()).shape.with_batch(nb);
  if (in.rank() != 4) {
    out.reason = "the input is not (N, C, H, W)";
    return out;
  }
  spec.n = in[0], spec.c = in[1], spec.h = in[2], spec.w = in[3];
  spec.num_values = static_cast<int>(g.num_tensors());
  auto unsupported = [&](const Layer& l, const std::string& why) {
    out.reason = "layer '" + l.name() + "' (" + l.type() + ") " + why;
    return std::move(out);
  };
  for (std::size_t i = 0; i < g.num_layers(); ++i) {
    const Layer& l = ex.layer(i);
    const auto& ins = g.layer_inputs(i);
    const auto& outs = g.layer_outputs(i);
    const std::string type = l.type();
    if (type == "softmax_loss") continue;
    if (outs.size() != 1) return unsupported(l, "has " + std::to_string(outs.size()) + " outputs");
    const int o = outs[0];
    if (l.absorbed() || type == "flatten" || type == "dropout") {
      if (ins.size() != 1) return unsupported(l, "is an alias of several inputs");
      alias[static_cast<std::size_t>(o)] = resolve(ins[0]);
      if (l.absorbed() && type == "relu") {  // fused into its producer: that step's relu_after
        for (std::size_t j = 0; j < spec.steps.size(); ++j)
          if (spec.steps[j].name == l.absorbed_into()) spec.steps[j].relu_after = true;
      }
      continue;
    }
    cpu::PlanStep st;
    st.name = l.name();
    st.output = o;
    for (int v : ins) st.inputs.push_back(resolve(v));
    if (type == "conv") {
      st.kind = cpu::PlanStep::Kind::kConv;
      st.conv = *l.conv_problem();
      st.conv.n = nb;
      st.relu_after = st.conv.relu;
      const auto w = l.eval_weights();
      st.weights = w.at(0).data<float>();
      st.bias = w.size() > 1 && w[1].defined() ? w[1].data<float>() : nullptr;
      st.conv.bias = st.bias != nullptr;
    } else if (type == "fc") {
      st.kind = cpu::PlanStep::Kind::kLinear;
      st.out_features = std::get<FcSpec>(l.spec()).out_features;
      const auto w = l.eval_weights();
      st.weights = w.at(0).data<float>();
      st.bias = w.size() > 1 && w[1].defined() ? w[1].data<float>() : nullptr;
    } else if (type == "max_pool" || type == "avg_pool" || type == "global_avg_pool") {
      st.kind = cpu::PlanStep::Kind::kPool;
      const Shape& x = l.input_shapes().at(0);
      Pool2dDesc& p = st.pool;
      p.n = nb, p.c = x[1], p.h = x[2], p.w = x[3];
      if (type == "global_avg_pool") {
        p.kernel_h = p.stride_h = p.h;
        p.kernel_w = p.stride_w = p.w;
        p.mode = PoolMode::kAvgExcludePad;
      } else {
        const LayerSpec ls = l.spec();
        const PoolSpec& s = std::get<PoolSpec>(ls);
        p.kernel_h = s.kernel_h, p.kernel_w = s.kernel_w, p.stride_h = s.stride_h, p.stride_w = s.stride_w;
        p.pad_h = s.pad_h, p.pad_w = s.pad_w, p.ceil_mode = s.ceil_mode, p.mode = s.mode;
      }
    } else if (type == "add") {
      if (ins.size() != 2) return unsupported(l, "adds " + std::to_string(ins.size()) + " inputs");
      st.kind = cpu::PlanStep::Kind::kAdd;
    } else if (type == "relu") {
      st.kind = cpu::PlanStep::Kind::kRelu;
    } else {
      return unsupported(l, "has no step in the oneDNN plan");
    }
    spec.steps.push_back(std::move(st));
  }
  spec.logits_value = resolve(g.logits_tensor());
  spec.logits_per_sample = g.num_classes();
  std::string why;
  out.plan = cpu::OnednnPlan::create(spec, &why);
  if (!out.plan) out.reason = why;
  return out;
}

}  // namespace cnnergy
