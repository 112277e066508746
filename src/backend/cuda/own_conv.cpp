// The CUDA backend's convolution kernel: each direction runs either cuDNN (conv_cudnn.hpp) or one
// of the project's own implementations (own_conv.hpp), by the layer's choice or the run's policy.
// Own directions get their tensors checked here, the bias added / reduced here, and their extra
// memory reported in info(); every other direction is delegated to a cuDNN kernel.
#include "backend/cuda/own_conv.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv_cudnn.hpp"
#include "backend/cuda/conv_space_to_depth.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

constexpr const char* kImplementations[] = {"direct", "im2col_gemm", "implicit_gemm", "fft",
                                            "winograd"};
constexpr const char* kAliases[] = {"winograd_2x2"};
constexpr std::array<Dir, 3> kDirs = {Dir::kForward, Dir::kBackwardData, Dir::kBackwardFilter};

std::string valid_own_names() {
  std::string s;
  for (const char* n : kImplementations) s += std::string(s.empty() ? "" : ", ") + kOwnConvPrefix + n;
  for (const char* n : kAliases) s += std::string(", ") + kOwnConvPrefix + n;
  return s;
}

// The implementation object of one name for one problem; null where this build has none.
std::unique_ptr<OwnConvAlgo> make_own(const std::string& impl, std::shared_ptr<CudaContext> ctx,
                                      const OwnConvProblem& p) {
  if (impl == "direct") return make_own_direct(std::move(ctx), p);
  if (impl == "im2col_gemm") return make_own_im2col_gemm(std::move(ctx), p);
  if (impl == "implicit_gemm") return make_own_implicit_gemm(std::move(ctx), p);
  if (impl == "winograd") return make_own_winograd(std::move(ctx), p, 4);
  if (impl == "winograd_2x2") return make_own_winograd(std::move(ctx), p, 2);
  if (impl == "fft") return make_own_fft(std::move(ctx), p);
  // Names are validated against own_conv_implementations() before a kernel is made: a name that
  // reaches here without a factory is a mismatch between that list and this one.
  throw InternalError("own convolution '" + impl + "' is listed but has no implementation");
}

std::string precision_text(const OwnConvProblem& p) {
  if (p.dtype == DType::kF32) return p.tf32 ? "tf32" : "fp32";
  return std::string(dtype_name(p.dtype)) + " in, fp32 accumulate";
}

class OwnConvKernel final : public ConvKernel {
 public:
  OwnConvKernel(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& d, const ConvAlgoChoice& choice)
      : ctx_(std::move(ctx)), d_(d), dtype_(ctx_->dtype()), layout_(ctx_->layout()) {
    problem_ = {d_, dtype_, dtype_ == DType::kF32 && ctx_->options().allow_tf32,
                layout_ == Layout::kNHWC};
    const std::string& run_policy = ctx_->options().conv_algo_policy;
    const bool run_own = has_own_prefix(run_policy);
    const std::array<const std::string*, 3> fields = {&choice.forward, &choice.backward_data,
                                                      &choice.backward_filter};
    std::array<std::string, 3> cudnn_fields;
    // The descriptor's checks (InvalidArgument / ShapeError) before any implementation sizes it.
    { const CudnnConv validated(ctx_, d_, ConvAlgoChoice{"heuristic", "heuristic", "heuristic"}); }
    for (Dir dir : kDirs) {
      const std::size_t i = static_cast<std::size_t>(dir);
      const std::string& field = *fields[i];
      const bool explicit_own = has_own_prefix(field);
      if (!explicit_own && !(field.empty() && run_own)) {
        cudnn_fields[i] = field.empty() && run_own ? "auto" : field;
        continue;
      }
      const std::string impl = own_conv_implementation(explicit_own ? field : run_policy);
      const std::string rule = rule_for(impl, dir);
      if (rule.empty()) {
        own_[i] = impl;
        cudnn_fields[i] = "heuristic";  // never run; keeps the delegate's info() cheap
        continue;
      }
      const std::string what = std::string("conv2d ") + direction_name(dir) + ": own:" + impl +
                               " cannot run this convolution (" + rule + ")";
      if (explicit_own || !ctx_->options().conv_algo_fallback) throw NotSupported(what);
      notes_.push_back(what + "; fell back to cuDNN auto");
      cudnn_fields[i] = "auto";
    }
    cudnn_ = std::make_unique<CudnnConv>(ctx_, d_, ConvAlgoChoice{cudnn_fields[0], cudnn_fields[1],
                                                                  cudnn_fields[2]});
  }

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    OwnConvAlgo* a = own(Dir::kForward);
    if (a == nullptr) return cudnn_->forward(x, w, b, y);
    ctx_->activate();
    check(x, "forward", "x", d_.input_shape());
    check(w, "forward", "w", d_.weight_shape());
    check(y, "forward", "y", d_.output_shape());
    if (d_.bias) check(b, "forward", "b", Shape{d_.k});
    a->forward(x.raw(), w.raw(), y.raw());
    if (d_.bias)
      kernels::bias_add(y.raw(), b.raw(), dtype_, kernels::channel_view(dims_of(y)), ctx_->stream(), d_.relu);
  }

  void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) override {
    OwnConvAlgo* a = own(Dir::kBackwardData);
    if (a == nullptr) return cudnn_->backward_data(dy, w, dx, accumulate);
    ctx_->activate();
    check(dy, "backward_data", "dy", d_.output_shape());
    check(w, "backward_data", "w", d_.weight_shape());
    check(dx, "backward_data", "dx", d_.input_shape());
    a->backward_data(dy.raw(), w.raw(), dx.raw(), accumulate);
  }

  void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw,
                       const Tensor& db) override {
    OwnConvAlgo* a = own(Dir::kBackwardFilter);
    if (a == nullptr) return cudnn_->backward_filter(x, dy, dw, db);
    ctx_->activate();
    check(x, "backward_filter", "x", d_.input_shape());
    check(dy, "backward_filter", "dy", d_.output_shape());
    check(dw, "backward_filter", "dw", d_.weight_shape());
    const bool bias_grad = d_.bias && db.defined();  // undefined: the caller computed it
    if (bias_grad) check(db, "backward_filter", "db", Shape{d_.k});
    a->backward_filter(x.raw(), dy.raw(), dw.raw());
    if (bias_grad) {
      const kernels::ChannelView view = kernels::channel_view(dims_of(dy));
      auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view, dtype_));
      kernels::bias_grad(dy.raw(), dtype_, view, db.raw(), dtype_, scratch->data(), ctx_->stream());
    }
  }

  // The own implementations allocate their scratch per call; only the cuDNN delegate takes the
  // workspace (where it runs a direction at all).
  std::size_t workspace_bound() const override {
    const bool all_own = std::all_of(own_.begin(), own_.end(), [](const auto& s) { return !s.empty(); });
    return all_own ? 0 : cudnn_->workspace_bound();
  }

  ConvAlgoInfo info() const override {
    ConvAlgoInfo out;
    const bool all_own = std::all_of(own_.begin(), own_.end(), [](const auto& s) { return !s.empty(); });
    if (!all_own) out = cudnn_->info();
    std::array<std::string*, 3> names = {&out.forward, &out.backward_data, &out.backward_filter};
    std::size_t own_ws = 0;
    for (Dir dir : kDirs) {
      const std::size_t i = static_cast<std::size_t>(dir);
      if (own_[i].empty()) continue;
      *names[i] = kOwnConvPrefix + own_[i];
      own_ws = std::max(own_ws, algos_.at(own_[i])->workspace_bytes(dir));
    }
    if (all_own) {
      out.math_type = precision_text(problem_);
      out.workspace_bytes = own_ws;
    } else {
      out.workspace_bytes = std::max(out.workspace_bytes, own_ws);
    }
    out.notes.insert(out.notes.begin(), notes_.begin(), notes_.end());
    return out;
  }

 private:
  // "" when `impl` runs `dir` here, else the rule (creating the implementation on first use).
  std::string rule_for(const std::string& impl, Dir dir) {
    auto it = algos_.find(impl);
    if (it == algos_.end()) it = algos_.emplace(impl, make_own(impl, ctx_, problem_)).first;
    return it->second->unsupported(dir);
  }
  OwnConvAlgo* own(Dir dir) const {
    const std::string& impl = own_[static_cast<std::size_t>(dir)];
    return impl.empty() ? nullptr : algos_.at(impl).get();
  }
  void check(const Tensor& t, const char* fn, const char* name, const Shape& shape) const {
    const std::string op = std::string("conv2d ") + fn;
    check_device_tensor(t, *ctx_, op.c_str(), name, shape, dtype_, layout_);
  }

  std::shared_ptr<CudaContext> ctx_;
  Conv2dDesc d_;
  DType dtype_;
  Layout layout_;
  OwnConvProblem problem_;
  std::array<std::string, 3> own_;  // the own implementation of each direction ("" = cuDNN)
  std::map<std::string, std::unique_ptr<OwnConvAlgo>> algos_;
  std::unique_ptr<CudnnConv> cudnn_;
  std::vector<std::string> notes_;
};

}  // namespace

std::span<const char* const> own_conv_implementations() { return kImplementations; }
std::span<const char* const> own_conv_aliases() { return kAliases; }

bool has_own_prefix(const std::string& name) { return name.rfind(kOwnConvPrefix, 0) == 0; }

std::string own_conv_implementation(const std::string& name) {
  const std::string impl = has_own_prefix(name) ? name.substr(4) : name;
  for (const char* n : kImplementations)
    if (impl == n) return impl;
  for (const char* n : kAliases)
    if (impl == n) return impl;
  throw InvalidArgument("unknown own convolution implementation '" + name + "'; valid: " +
                        valid_own_names());
}

std::unique_ptr<ConvKernel> make_cuda_conv(std::shared_ptr<CudaContext> ctx, const Conv2dDesc& desc,
                                           const ConvAlgoChoice& choice) {
  const bool any_own = has_own_prefix(choice.forward) || has_own_prefix(choice.backward_data) ||
                       has_own_prefix(choice.backward_filter) ||
                       has_own_prefix(ctx->options().conv_algo_policy);
  if (!any_own) {
    if (ctx->options().conv_space_to_depth) {
      if (const auto g = space_to_depth_geometry(desc, ctx->layout())) {
        // Its data gradient never runs; its weight gradient may (training), chosen as the plain one's.
        auto rearranged = std::make_unique<CudnnConv>(ctx, space_to_depth_desc(desc, *g),
                                                      ConvAlgoChoice{choice.forward, "heuristic", choice.backward_filter});
        auto plain = std::make_unique<CudnnConv>(ctx, desc, choice);
        return make_space_to_depth_conv(std::move(ctx), desc, *g, std::move(plain), std::move(rearranged));
      }
    }
    return std::make_unique<CudnnConv>(std::move(ctx), desc, choice);
  }
  return std::make_unique<OwnConvKernel>(std::move(ctx), desc, choice);
}

}  // namespace cnnergy::cuda
