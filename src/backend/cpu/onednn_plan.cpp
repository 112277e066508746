// The whole-network oneDNN plan (see onednn_plan.hpp): primitives created once per batch size in
// oneDNN's chosen layouts, activation buffers assigned by liveness (best fit from the freed ones),
// weights reordered once per refresh_weights(); run() executes the primitive list on one stream.
#include "backend/cpu/onednn_plan.hpp"
#include "backend/cpu/onednn_engine.hpp"

#ifdef CNNERGY_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace cnnergy::cpu {

#ifndef CNNERGY_HAVE_ONEDNN

std::unique_ptr<OnednnPlan> OnednnPlan::create(const PlanSpec&, std::string* why_not) {
  if (why_not) *why_not = "this build has no oneDNN";
  return nullptr;
}

#else

namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;
constexpr std::size_t kAlign = 64;


std::size_t round_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A memory object's storage: an activation buffer, a held weight copy, or an outside pointer.
struct Slot {
  memory::desc md;
  int buffer = -1;        // activation buffer index
  int held = -1;          // held weight copy index
  const void* external = nullptr;
  bool is_input = false, is_logits = false;
};

struct Exec {
  dnnl::primitive primitive;
  std::vector<std::pair<int, int>> args;  // (DNNL_ARG_*, slot)
};

struct HeldWeights {
  int user_slot = -1, held_slot = -1;
  dnnl::reorder reorder;
};

class Plan final : public OnednnPlan {
 public:
  Plan(const PlanSpec& spec) : spec_(spec), stream_(onednn_cpu_engine()) { build(); }

  void run(const float* images, float* logits) override {
    memories_[input_slot_].set_data_handle(const_cast<float*>(images));
    memories_[logits_slot_].set_data_handle(logits);
    for (auto& e : execs_) e.primitive.execute(stream_, e.bound);
    stream_.wait();
  }

  void refresh_weights() override {
    for (auto& h : held_)
      h.reorder.execute(stream_, {{DNNL_ARG_FROM, memories_[h.user_slot]}, {DNNL_ARG_TO, memories_[h.held_slot]}});
    stream_.wait();
  }

  std::string describe() const override {
    std::string s = std::to_string(execs_.size()) + " oneDNN primitives (";
    bool first = true;
    for (const auto& [k, n] : counts_) {
      s += (first ? "" : ", ") + k + " x" + std::to_string(n);
      first = false;
    }
    std::size_t bytes = 0;
    for (std::size_t c : capacity_) bytes += c;
    s += "; " + std::to_string(fused_adds_) + " residual adds fused as sum post-ops), " +
         std::to_string(capacity_.size()) + " activation buffers, " +
         std::to_string(bytes / (1024 * 1024)) + " MiB; " + conv_impls_;
    return s;
  }
  std::size_t fused_adds() const override { return fused_adds_; }

 private:
  struct BoundExec {
    dnnl::primitive primitive;
    std::unordered_map<int, memory> bound;
  };
  struct Value {
    memory::desc md;
    int slot = -1;
    int buffer = -1;
    bool transferred = false;  // its buffer now belongs to a fused add's output
  };

  int new_slot(Slot s) {
    slots_.push_back(std::move(s));
    return static_cast<int>(slots_.size()) - 1;
  }
  int buffer_slot(const memory::desc& md, int buffer) { return new_slot(Slot{md, buffer, -1, nullptr}); }

  // Best fit among the free buffers; the largest free one grown; or a new one.
  int take_buffer(std::size_t bytes) {
    bytes = round_up(bytes);
    int best = -1;
    for (int b : free_)
      if (capacity_[b] >= bytes && (best < 0 || capacity_[b] < capacity_[best])) best = b;
    if (best < 0)
      for (int b : free_)
        if (best < 0 || capacity_[b] > capacity_[best]) best = b;
    if (best < 0) {
      capacity_.push_back(bytes);
      return static_cast<int>(capacity_.size()) - 1;
    }
    free_.erase(std::find(free_.begin(), free_.end(), best));
    capacity_[best] = std::max(capacity_[best], bytes);
    return best;
  }
  void release(int buffer) { free_.push_back(buffer); }

  // The slot holding value v in layout `want`: v's own, or a reorder into a temporary buffer.
  int as_layout(int v, const memory::desc& want, std::vector<int>& temps) {
    if (values_[v].md == want) return values_[v].slot;
    const int buf = take_buffer(want.get_size());
    temps.push_back(buf);
    const int to = buffer_slot(want, buf);
    const dnnl::engine& eng = onednn_cpu_engine();
    add_exec(dnnl::reorder(dnnl::reorder::primitive_desc(eng, values_[v].md, eng, want)),
             {{DNNL_ARG_FROM, values_[v].slot}, {DNNL_ARG_TO, to}});
    count("reorder");
    return to;
  }
  void add_exec(dnnl::primitive p, std::vector<std::pair<int, int>> args) {
    pending_.push_back(Exec{std::move(p), std::move(args)});
  }
  void count(const std::string& k) { ++counts_[k]; }
  int define(int v, const memory::desc& md) {
    values_[v].md = md;
    values_[v].buffer = take_buffer(md.get_size());
    values_[v].slot = buffer_slot(md, values_[v].buffer);
    return values_[v].slot;
  }
  int hold(const memory::desc& user, const memory::desc& held, const float* w) {
    HeldWeights h;
    h.user_slot = new_slot(Slot{user, -1, -1, w});
    h.held_slot = new_slot(Slot{held, -1, static_cast<int>(held_storage_.size()), nullptr});
    held_storage_.emplace_back(static_cast<char*>(std::aligned_alloc(kAlign, round_up(held.get_size()))));
    h.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(onednn_cpu_engine(), user, onednn_cpu_engine(), held));
    held_.push_back(std::move(h));
    return held_.back().held_slot;
  }
  static dnnl::post_ops relu_ops(bool pre, bool sum, bool post) {
    dnnl::post_ops ops;
    if (pre) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    if (sum) ops.append_sum(1.0f);
    if (post) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    return ops;
  }

  void build();
  void build_conv(std::size_t i, std::vector<int>& temps);
  void build_pool(const PlanStep& st);
  void build_add(const PlanStep& st);
  void build_relu(const PlanStep& st);
  void build_linear(const PlanStep& st, std::vector<int>& temps);
  int resolve(int v) const {
    while (alias_[v] >= 0) v = alias_[v];
    return v;
  }

  PlanSpec spec_;
  dnnl::stream stream_;
  std::vector<int> alias_;
  std::vector<Value> values_;
  std::vector<std::vector<std::size_t>> readers_;  // per value, the steps reading it
  std::vector<bool> fused_step_;                   // an add done by the convolution before it
  std::vector<Slot> slots_;
  std::vector<std::size_t> capacity_;
  std::vector<int> free_;
  std::vector<Exec> pending_;
  std::vector<BoundExec> execs_;
  std::vector<HeldWeights> held_;
  std::vector<std::unique_ptr<char, FreeDeleter>> held_storage_, buffers_;
  std::vector<memory> memories_;
  int input_slot_ = -1, logits_slot_ = -1;
  std::size_t fused_adds_ = 0;
  std::unordered_map<std::string, int> counts_;
  std::string conv_impls_;
};

void Plan::build() {
  const auto nv = static_cast<std::size_t>(spec_.num_values);
  alias_.assign(nv, -1);
  values_.assign(nv, Value{});
  // A ReLU that is the sole reader of a convolution's, inner product's or add's output becomes
  // that step's eltwise post-op (its output is the producer's output).
  std::vector<int> producer(nv, -1), reader_count(nv, 0);
  for (std::size_t i = 0; i < spec_.steps.size(); ++i) {
    producer[static_cast<std::size_t>(spec_.steps[i].output)] = static_cast<int>(i);
    for (int v : spec_.steps[i].inputs) ++reader_count[static_cast<std::size_t>(v)];
  }
  std::vector<bool> skip(spec_.steps.size(), false);
  for (std::size_t i = 0; i < spec_.steps.size(); ++i) {
    const PlanStep& st = spec_.steps[i];
    if (st.kind != PlanStep::Kind::kRelu) continue;
    const int in = st.inputs[0], p = producer[static_cast<std::size_t>(in)];
    if (p < 0 || reader_count[static_cast<std::size_t>(in)] != 1) continue;
    PlanStep& prod = spec_.steps[static_cast<std::size_t>(p)];
    if (prod.kind == PlanStep::Kind::kPool || prod.kind == PlanStep::Kind::kRelu || prod.relu_after) continue;
    prod.relu_after = true;
    alias_[static_cast<std::size_t>(st.output)] = in;
    skip[i] = true;
  }
  readers_.assign(nv, {});
  for (std::size_t i = 0; i < spec_.steps.size(); ++i) {
    if (skip[i]) continue;
    for (int& v : spec_.steps[i].inputs) {
      v = resolve(v);
      readers_[static_cast<std::size_t>(v)].push_back(i);
    }
  }
  const int logits = resolve(spec_.logits_value);
  fused_step_.assign(spec_.steps.size(), false);
  values_[0].md = memory::desc({spec_.n, spec_.c, spec_.h, spec_.w}, kF32, tag::nchw);
  input_slot_ = new_slot(Slot{values_[0].md, -1, -1, nullptr, true, false});
  values_[0].slot = input_slot_;
  for (std::size_t i = 0; i < spec_.steps.size(); ++i) {
    if (skip[i] || fused_step_[i]) continue;
    const PlanStep& st = spec_.steps[i];
    std::vector<int> temps;
    switch (st.kind) {
      case PlanStep::Kind::kConv: build_conv(i, temps); break;
      case PlanStep::Kind::kPool: build_pool(st); break;
      case PlanStep::Kind::kAdd: build_add(st); break;
      case PlanStep::Kind::kRelu: build_relu(st); break;
      case PlanStep::Kind::kLinear: build_linear(st, temps); break;
    }
    for (int b : temps) release(b);
    for (int v : st.inputs) {
      Value& val = values_[static_cast<std::size_t>(v)];
      if (v == 0 || v == logits || val.transferred || val.buffer < 0) continue;
      if (readers_[static_cast<std::size_t>(v)].back() == i) release(val.buffer);
    }
  }
  // The one reorder out: the logits value to plain (N, everything else) fp32. Where its producer
  // writes that layout already (the classifier's inner product: plain (N, classes)) and no other
  // value shares its slot, the producer writes into the caller's logits instead (no copy a run).
  const Value& out = values_[static_cast<std::size_t>(logits)];
  if (out.slot < 0) throw std::runtime_error("the logits are produced by no step");
  const memory::dims dims = out.md.dims();
  const tag plain = dims.size() == 4 ? tag::nchw : tag::nc;
  const memory::desc plain_md(dims, kF32, plain);
  const auto sharing =
      std::count_if(values_.begin(), values_.end(), [&](const Value& v) { return v.slot == out.slot; });
  if (out.md == plain_md && out.slot != input_slot_ && slots_[out.slot].buffer >= 0 && sharing == 1) {
    logits_slot_ = out.slot;
    slots_[out.slot].buffer = -1;
    slots_[out.slot].is_logits = true;
  } else {
    logits_slot_ = new_slot(Slot{plain_md, -1, -1, nullptr, false, true});
    const dnnl::engine& eng = onednn_cpu_engine();
    add_exec(dnnl::reorder(dnnl::reorder::primitive_desc(eng, out.md, eng, plain_md)),
             {{DNNL_ARG_FROM, out.slot}, {DNNL_ARG_TO, logits_slot_}});
  }
  // Storage, memory objects, bound argument maps; then the weights.
  for (std::size_t c : capacity_) buffers_.emplace_back(static_cast<char*>(std::aligned_alloc(kAlign, c)));
  for (const Slot& s : slots_) {
    void* p = DNNL_MEMORY_NONE;
    if (s.buffer >= 0) p = buffers_[static_cast<std::size_t>(s.buffer)].get();
    if (s.held >= 0) p = held_storage_[static_cast<std::size_t>(s.held)].get();
    if (s.external) p = const_cast<void*>(s.external);
    memories_.emplace_back(s.md, onednn_cpu_engine(), p);
  }
  for (Exec& e : pending_) {
    BoundExec b{std::move(e.primitive), {}};
    for (auto [arg, slot] : e.args) b.bound.emplace(arg, memories_[static_cast<std::size_t>(slot)]);
    execs_.push_back(std::move(b));
  }
  pending_.clear();
  refresh_weights();
}

void Plan::build_conv(std::size_t i, std::vector<int>& temps) {
  const PlanStep& st = spec_.steps[i];
  const Conv2dDesc& d = st.conv;
  const memory::dims src_dims{d.n, d.c, d.h, d.w}, dst_dims{d.n, d.k, d.out_h(), d.out_w()};
  const memory::dims wei_dims = d.groups == 1 ? memory::dims{d.k, d.c, d.r, d.s}
                                              : memory::dims{d.groups, d.k / d.groups, d.c / d.groups, d.r, d.s};
  const memory::desc bias_md = st.bias ? memory::desc({d.k}, kF32, tag::x) : memory::desc();
  auto make_pd = [&](const memory::desc& dst, const dnnl::post_ops& ops) {
    const dnnl::convolution_forward::desc cd(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, memory::desc(src_dims, kF32, tag::any),
        memory::desc(wei_dims, kF32, tag::any), bias_md, dst, {d.stride_h, d.stride_w},
        {d.dilation_h - 1, d.dilation_w - 1}, {d.pad_top, d.pad_left}, {d.pad_bottom, d.pad_right});
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    return dnnl::convolution_forward::primitive_desc(cd, attr, onednn_cpu_engine());
  };
  // The residual add after this convolution, fused as a sum post-op: the add is the output's sole
  // reader, the shortcut exists already, is not the network input and nobody reads it after the add
  // or between this convolution and the add; the convolution then writes into the shortcut's buffer.
  const int out = st.output;
  dnnl::convolution_forward::primitive_desc pd;
  int dst_slot = -1;
  bool fused = false;
  const auto& rd = readers_[static_cast<std::size_t>(out)];
  if (rd.size() == 1 && spec_.steps[rd[0]].kind == PlanStep::Kind::kAdd) {
    const std::size_t j = rd[0];
    const PlanStep& add = spec_.steps[j];
    const int s = add.inputs[0] == out ? add.inputs[1] : add.inputs[0];
    const Value& sv = values_[static_cast<std::size_t>(s)];
    const auto& srd = readers_[static_cast<std::size_t>(s)];
    const bool ok = s != out && s != 0 && sv.slot >= 0 && !sv.transferred && srd.back() == j &&
                    std::none_of(srd.begin(), srd.end(), [&](std::size_t r) { return r > i && r < j; }) &&
                    sv.md.dims() == dst_dims;
    if (ok) {
      try {
        pd = make_pd(sv.md, relu_ops(st.relu_after, true, add.relu_after));
        values_[static_cast<std::size_t>(s)].transferred = true;
        values_[static_cast<std::size_t>(add.output)] = Value{sv.md, sv.slot, sv.buffer, false};
        dst_slot = sv.slot;
        fused_step_[j] = true;
        fused = true;
        ++fused_adds_;
      } catch (const dnnl::error&) {
        dst_slot = -1;  // no fused implementation: a separate binary add
      }
    }
  }
  if (dst_slot < 0) {
    pd = make_pd(memory::desc(dst_dims, kF32, tag::any), relu_ops(st.relu_after, false, false));
    dst_slot = define(out, pd.dst_desc());
  }
  const int src = as_layout(st.inputs[0], pd.src_desc(), temps);
  const memory::desc user_w(wei_dims, kF32, d.groups == 1 ? tag::oihw : tag::goihw);
  const int wei = hold(user_w, pd.weights_desc(), st.weights);
  std::vector<std::pair<int, int>> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst_slot}};
  if (st.bias) args.emplace_back(DNNL_ARG_BIAS, new_slot(Slot{bias_md, -1, -1, st.bias}));
  add_exec(dnnl::convolution_forward(pd), std::move(args));
  count(fused ? "conv+sum" : "conv");
  const std::string impl = pd.impl_info_str();
  if (conv_impls_.find(impl) == std::string::npos) conv_impls_ += (conv_impls_.empty() ? "" : " ") + impl;
}

void Plan::build_pool(const PlanStep& st) {
  const Pool2dDesc& p = st.pool;
  const Value& in = values_[static_cast<std::size_t>(st.inputs[0])];
  const std::int64_t oh = p.out_h(), ow = p.out_w();
  // oneDNN takes an explicit right/bottom padding: the smallest that gives our output size (ceil
  // mode: the extension that makes the last window; floor mode: at most the padding given).
  auto right_pad = [](std::int64_t size, std::int64_t k, std::int64_t s, std::int64_t pl, std::int64_t out_size) {
    for (std::int64_t pr = 0; pr <= k + s; ++pr)
      if ((size + pl + pr - k) / s + 1 == out_size) return pr;
    throw std::runtime_error("no oneDNN padding gives this pooling's output size");
  };
  const std::int64_t pr_h = right_pad(p.h, p.kernel_h, p.stride_h, p.pad_h, oh);
  const std::int64_t pr_w = right_pad(p.w, p.kernel_w, p.stride_w, p.pad_w, ow);
  // Our count_include_pad divisor clips a window to the padded input; oneDNN's counts the extension.
  if (p.mode == PoolMode::kAvgIncludePad && (pr_h > p.pad_h || pr_w > p.pad_w))
    throw std::runtime_error("layer '" + st.name + "': ceil-mode average pooling counting the padding");
  const auto alg = p.mode == PoolMode::kMax ? dnnl::algorithm::pooling_max
                   : p.mode == PoolMode::kAvgIncludePad ? dnnl::algorithm::pooling_avg_include_padding
                                                        : dnnl::algorithm::pooling_avg_exclude_padding;
  const dnnl::pooling_forward::desc pdsc(dnnl::prop_kind::forward_inference, alg, in.md,
                                         memory::desc({p.n, p.c, oh, ow}, kF32, tag::any), {p.stride_h, p.stride_w},
                                         {p.kernel_h, p.kernel_w}, {p.pad_h, p.pad_w}, {pr_h, pr_w});
  const dnnl::pooling_forward::primitive_desc pd(pdsc, onednn_cpu_engine());
  const int dst = define(st.output, pd.dst_desc());
  add_exec(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, in.slot}, {DNNL_ARG_DST, dst}});
  count(oh == 1 && ow == 1 && p.kernel_h == p.h && p.kernel_w == p.w ? "global_pool" : "pool");
  if (st.relu_after) {  // (a pool before its ReLU: not offered by the builder's fusion; kept exact)
    const dnnl::eltwise_forward::primitive_desc ed(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu,
                                    pd.dst_desc(), 0.0f),
        onednn_cpu_engine());
    add_exec(dnnl::eltwise_forward(ed), {{DNNL_ARG_SRC, dst}, {DNNL_ARG_DST, dst}});
    count("relu");
  }
}

void Plan::build_add(const PlanStep& st) {
  const Value& a = values_[static_cast<std::size_t>(st.inputs[0])];
  const Value& b = values_[static_cast<std::size_t>(st.inputs[1])];
  dnnl::primitive_attr attr;
  attr.set_post_ops(relu_ops(false, false, st.relu_after));
  const dnnl::binary::primitive_desc pd(dnnl::binary::desc(dnnl::algorithm::binary_add, a.md, b.md, a.md), attr,
                                        onednn_cpu_engine());
  const int dst = define(st.output, a.md);
  add_exec(dnnl::binary(pd), {{DNNL_ARG_SRC_0, a.slot}, {DNNL_ARG_SRC_1, b.slot}, {DNNL_ARG_DST, dst}});
  count("binary_add");
}

void Plan::build_relu(const PlanStep& st) {
  const Value& in = values_[static_cast<std::size_t>(st.inputs[0])];
  const dnnl::eltwise_forward::primitive_desc pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, in.md, 0.0f),
      onednn_cpu_engine());
  const int dst = define(st.output, in.md);
  add_exec(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, in.slot}, {DNNL_ARG_DST, dst}});
  count("relu");
}

void Plan::build_linear(const PlanStep& st, std::vector<int>& temps) {
  const Value& in = values_[static_cast<std::size_t>(st.inputs[0])];
  const memory::dims idims = in.md.dims();
  memory::dims wdims{st.out_features};
  for (std::size_t k = 1; k < idims.size(); ++k) wdims.push_back(idims[k]);
  const memory::desc bias_md = st.bias ? memory::desc({st.out_features}, kF32, tag::x) : memory::desc();
  const memory::desc dst_md({idims[0], st.out_features}, kF32, tag::nc);
  const tag wtag = idims.size() == 4 ? tag::oihw : tag::oi;
  const dnnl::inner_product_forward::desc ipd(dnnl::prop_kind::forward_inference, memory::desc(idims, kF32, tag::any),
                                              memory::desc(wdims, kF32, tag::any), bias_md, dst_md);
  dnnl::primitive_attr attr;
  attr.set_post_ops(relu_ops(false, false, st.relu_after));
  const dnnl::inner_product_forward::primitive_desc pd(ipd, attr, onednn_cpu_engine());
  const int src = as_layout(st.inputs[0], pd.src_desc(), temps);
  const int wei = hold(memory::desc(wdims, kF32, wtag), pd.weights_desc(), st.weights);
  const int dst = define(st.output, pd.dst_desc());
  std::vector<std::pair<int, int>> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (st.bias) args.emplace_back(DNNL_ARG_BIAS, new_slot(Slot{bias_md, -1, -1, st.bias}));
  add_exec(dnnl::inner_product_forward(pd), std::move(args));
  count("inner_product");
}

}  // namespace

std::unique_ptr<OnednnPlan> OnednnPlan::create(const PlanSpec& spec, std::string* why_not) {
  try {
    return std::make_unique<Plan>(spec);
  } catch (const dnnl::error& e) {
    if (why_not) *why_not = std::string("oneDNN has no primitive for a step: ") + e.what();
  } catch (const std::exception& e) {
    if (why_not) *why_not = e.what();
  }
  return nullptr;
}

#endif

}  // namespace cnnergy::cpu
