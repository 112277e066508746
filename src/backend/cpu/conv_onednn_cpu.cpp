// The CPU convolution's forward pass through oneDNN (see conv_onednn_cpu.hpp). The primitive lets
// oneDNN choose the layouts (format_tag::any: on AVX2 the 8-channel blocked nChw8c); our tensors
// are NCHW, so the input is reordered in and the output out (cached reorder primitives, buffers in
// the backend's shared workspace), the weights are reordered per call or, once held, once.
#include "backend/cpu/conv_onednn_cpu.hpp"
#include "backend/cpu/onednn_engine.hpp"

#ifdef CNNERGY_HAVE_ONEDNN
#include <dnnl.hpp>
#endif

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace cnnergy::cpu {

#ifndef CNNERGY_HAVE_ONEDNN

bool onednn_available() { return false; }
std::unique_ptr<OnednnConvForward> OnednnConvForward::create(const Conv2dDesc&, bool,
                                                             std::shared_ptr<Workspace>) {
  return nullptr;
}

#else

bool onednn_available() { return true; }

dnnl::engine& onednn_cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;


constexpr std::size_t kAlign = 64;
std::size_t round_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// A reorder between a plain (user) and oneDNN's chosen descriptor; empty when they are the same.
struct Reorder {
  dnnl::reorder primitive;
  bool needed = false;
  Reorder() = default;
  Reorder(const memory::desc& from, const memory::desc& to) : needed(!(from == to)) {
    if (needed)
      primitive = dnnl::reorder(dnnl::reorder::primitive_desc(onednn_cpu_engine(), from, onednn_cpu_engine(), to));
  }
};

class OnednnConv final : public OnednnConvForward {
 public:
  OnednnConv(const Conv2dDesc& d, bool relu, std::shared_ptr<Workspace> workspace)
      : desc_(d), workspace_(std::move(workspace)), stream_(onednn_cpu_engine()) {
    const memory::dims src_dims{d.n, d.c, d.h, d.w}, dst_dims{d.n, d.k, d.out_h(), d.out_w()};
    const memory::dims wei_dims = d.groups == 1 ? memory::dims{d.k, d.c, d.r, d.s}
                                                : memory::dims{d.groups, d.k / d.groups, d.c / d.groups, d.r, d.s};
    const auto f32 = memory::data_type::f32;
    user_src_ = memory::desc(src_dims, f32, tag::nchw);
    user_dst_ = memory::desc(dst_dims, f32, tag::nchw);
    user_wei_ = memory::desc(wei_dims, f32, d.groups == 1 ? tag::oihw : tag::goihw);
    const memory::desc bias_md = d.bias ? memory::desc({d.k}, f32, tag::x) : memory::desc();
    const memory::dims strides{d.stride_h, d.stride_w}, dilates{d.dilation_h - 1, d.dilation_w - 1},
        pad_l{d.pad_top, d.pad_left}, pad_r{d.pad_bottom, d.pad_right};
    const dnnl::convolution_forward::desc cd(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        memory::desc(src_dims, f32, tag::any), memory::desc(wei_dims, f32, tag::any), bias_md,
        memory::desc(dst_dims, f32, tag::any), strides, dilates, pad_l, pad_r);
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    pd_ = dnnl::convolution_forward::primitive_desc(cd, attr, onednn_cpu_engine());  // throws if unsupported
    conv_ = dnnl::convolution_forward(pd_);
    src_in_ = Reorder(user_src_, pd_.src_desc());
    dst_out_ = Reorder(pd_.dst_desc(), user_dst_);
    wei_in_ = Reorder(user_wei_, pd_.weights_desc());
    src_bytes_ = src_in_.needed ? round_up(pd_.src_desc().get_size()) : 0;
    dst_bytes_ = dst_out_.needed ? round_up(pd_.dst_desc().get_size()) : 0;
    wei_bytes_ = wei_in_.needed ? round_up(pd_.weights_desc().get_size()) : 0;
    if (d.bias) bias_mem_ = memory(bias_md, onednn_cpu_engine(), DNNL_MEMORY_NONE);
  }

  void forward(const float* x, const float* w, const float* b, float* y) override {
    const bool use_held = held_ && held_for_ == w;
    const std::size_t wei_in_workspace = (wei_in_.needed && !held_) ? wei_bytes_ : 0;
    const std::size_t total = src_bytes_ + dst_bytes_ + wei_in_workspace;
    char* base = nullptr;
    if (total > 0) {
      auto* raw = reinterpret_cast<char*>(workspace_->floats((total + kAlign) / sizeof(float)));
      base = raw + (kAlign - reinterpret_cast<std::uintptr_t>(raw) % kAlign) % kAlign;
    }
    memory src(user_src_, onednn_cpu_engine(), const_cast<float*>(x));
    memory dst(user_dst_, onednn_cpu_engine(), y);
    memory wei(user_wei_, onednn_cpu_engine(), const_cast<float*>(w));
    if (src_in_.needed) {
      memory blocked(pd_.src_desc(), onednn_cpu_engine(), base);
      src_in_.primitive.execute(stream_, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, blocked}});
      src = blocked;
    }
    if (wei_in_.needed) {
      if (held_) {
        if (!use_held) {
          held_weights_.assign(wei_bytes_ / sizeof(float) + kAlign / sizeof(float), 0.0f);
          char* p = reinterpret_cast<char*>(held_weights_.data());
          p += (kAlign - reinterpret_cast<std::uintptr_t>(p) % kAlign) % kAlign;
          held_mem_ = memory(pd_.weights_desc(), onednn_cpu_engine(), p);
          wei_in_.primitive.execute(stream_, {{DNNL_ARG_FROM, wei}, {DNNL_ARG_TO, held_mem_}});
          held_for_ = w;
        }
        wei = held_mem_;
      } else {
        memory blocked(pd_.weights_desc(), onednn_cpu_engine(), base + src_bytes_ + dst_bytes_);
        wei_in_.primitive.execute(stream_, {{DNNL_ARG_FROM, wei}, {DNNL_ARG_TO, blocked}});
        wei = blocked;
      }
    }
    memory out = dst_out_.needed ? memory(pd_.dst_desc(), onednn_cpu_engine(), base + src_bytes_) : dst;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, out}};
    if (desc_.bias) {
      bias_mem_.set_data_handle(const_cast<float*>(b));
      args.emplace(DNNL_ARG_BIAS, bias_mem_);
    }
    conv_.execute(stream_, args);
    if (dst_out_.needed) dst_out_.primitive.execute(stream_, {{DNNL_ARG_FROM, out}, {DNNL_ARG_TO, dst}});
    stream_.wait();
  }

  void hold_weights() override {
    held_ = true;
    held_for_ = nullptr;  // new values: the next forward reorders them again
  }

  std::string describe() const override {
    std::string s = std::string("oneDNN ") + pd_.impl_info_str();
    if (src_in_.needed || dst_out_.needed) s += ", NCHW reordered to oneDNN's blocked layout and back";
    return s;
  }
  std::size_t workspace_bytes() const override { return src_bytes_ + dst_bytes_ + (held_ ? 0 : wei_bytes_); }

 private:
  Conv2dDesc desc_;
  std::shared_ptr<Workspace> workspace_;
  dnnl::stream stream_;
  memory::desc user_src_, user_dst_, user_wei_;
  dnnl::convolution_forward::primitive_desc pd_;
  dnnl::convolution_forward conv_;
  Reorder src_in_, dst_out_, wei_in_;
  std::size_t src_bytes_ = 0, dst_bytes_ = 0, wei_bytes_ = 0;
  memory bias_mem_;
  bool held_ = false;
  const float* held_for_ = nullptr;  // the weights held_mem_ was reordered from
  std::vector<float> held_weights_;
  memory held_mem_;
};

}  // namespace

std::unique_ptr<OnednnConvForward> OnednnConvForward::create(const Conv2dDesc& desc, bool relu,
                                                             std::shared_ptr<Workspace> workspace) {
  try {
    return std::make_unique<OnednnConv>(desc, relu, std::move(workspace));
  } catch (const dnnl::error&) {
    return nullptr;  // no implementation for this problem: the caller keeps im2col_gemm
  }
}

#endif

}  // namespace cnnergy::cpu
