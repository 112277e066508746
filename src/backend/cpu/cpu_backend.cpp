// CpuBackend: the Backend contract on host memory. Work is synchronous, so events are host
// timestamps and synchronize() has nothing to wait for; kernels live in one file per operation.
#include "backend/cpu/cpu_backend.hpp"

#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "backend/cpu/conv_onednn_cpu.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "core/errors.hpp"

namespace cnnergy::cpu {

namespace {

class CpuEvent final : public DeviceEvent {
 public:
  void record() override {
    time_ = std::chrono::steady_clock::now();
    recorded_ = true;
  }
  void synchronize() override {}
  // Nothing is ever pending on the CPU (like a CUDA event that was never recorded, it reads as
  // done).
  bool ready() const override { return true; }
  double elapsed_ms(const DeviceEvent& since) const override {
    const auto* start = dynamic_cast<const CpuEvent*>(&since);
    if (start == nullptr)
      throw InvalidArgument("elapsed_ms: the start event belongs to another backend");
    if (!recorded_ || !start->recorded_)
      throw InvalidArgument("elapsed_ms: both events must be recorded first");
    return std::chrono::duration<double, std::milli>(time_ - start->time_).count();
  }

 private:
  std::chrono::steady_clock::time_point time_{};
  bool recorded_ = false;
};

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "CPU";
}

void check_host(const Tensor& t, std::string_view op, std::string_view name) {
  if (!t.defined())
    throw InvalidArgument(std::string(op) + ": " + std::string(name) + " is undefined");
  if (!t.device().is_cpu())
    throw InvalidArgument(std::string(op) + ": " + std::string(name) +
                          " must be a host tensor, got " + t.describe());
}

// Same dtype, element count and (for 4-D tensors) layout: the bytes can be copied as they are.
void check_same_bytes(const Tensor& src, const Tensor& dst, std::string_view op) {
  check_host(src, op, "source");
  check_host(dst, op, "destination");
  const bool layouts_differ =
      src.shape().rank() == 4 && dst.shape().rank() == 4 && src.layout() != dst.layout();
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel() || layouts_differ)
    throw InvalidArgument(std::string(op) + ": source " + src.describe() + " and destination " +
                          dst.describe() + " differ in dtype, layout or size");
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options)
      : options_(options),
        memory_(HostMemory::create()),
        workspace_(std::make_shared<Workspace>(memory_)),
        device_name_(cpu_model_name()),
        // The run's policy picks the CPU default only when it names a CPU algorithm; CUDA policies
        // ("find", "heuristic", cuDNN names) mean nothing here; of the own implementations
        // ("own:NAME"), own:im2col_gemm is the CPU's im2col_gemm and the others are refused.
        default_conv_algo_(options.conv_algo_policy.rfind("own:", 0) == 0
                               ? parse_conv_algo(options.conv_algo_policy, ConvAlgo::kIm2colGemm)
                           : options.conv_algo_policy == "reference" ? ConvAlgo::kReference
                                                                     : ConvAlgo::kIm2colGemm),
        // The forward pass runs through oneDNN where the build has it, unless the run's policy
        // names a CPU algorithm (reference, im2col_gemm, own:im2col_gemm) for every direction.
        default_forward_algo_(options.conv_algo_policy == "onednn" ||
                                      (onednn_available() && options.conv_algo_policy != "reference" &&
                                       options.conv_algo_policy != "im2col_gemm" &&
                                       options.conv_algo_policy.rfind("own:", 0) != 0)
                                  ? parse_conv_algo("onednn", ConvAlgo::kIm2colGemm)
                                  : default_conv_algo_) {}

  std::string name() const override { return "cpu"; }
  std::string device_name() const override { return device_name_; }
  const BackendOptions& options() const override { return options_; }

  std::shared_ptr<Buffer> alloc_buffer(std::size_t size_bytes) override {
    return memory_->allocate(size_bytes);
  }
  std::shared_ptr<Buffer> alloc_pinned_host(std::size_t size_bytes) override {
    return memory_->allocate(size_bytes);
  }
  MemoryStats memory_stats() const override { return memory_->stats(); }

  void upload(const Tensor& host, const Tensor& dst, bool /*async*/) override {
    check_same_bytes(host, dst, "upload");
    std::memmove(dst.raw(), host.raw(), host.size_bytes());
  }
  void download(const Tensor& src, const Tensor& host) override {
    check_same_bytes(src, host, "download");
    std::memmove(host.raw(), src.raw(), src.size_bytes());
  }
  void copy(const Tensor& src, const Tensor& dst) override {
    check_host(src, "copy", "source");
    check_host(dst, "copy", "destination");
    const bool same_layout =
        src.shape().rank() != 4 || dst.shape().rank() != 4 || src.layout() == dst.layout();
    if (src.dtype() == dst.dtype() && same_layout && src.numel() == dst.numel()) {
      std::memmove(dst.raw(), src.raw(), src.size_bytes());
      return;
    }
    // A conversion reads logical elements, so both sides must have the same logical shape.
    if (src.shape() != dst.shape())
      throw ShapeError("copy: converting " + src.describe() + " to " + dst.describe() +
                       " needs equal shapes");
    const Tensor converted = from_f32_nchw(to_f32_nchw(src), dst.dtype(), dst.layout());
    std::memcpy(dst.raw(), converted.raw(), dst.size_bytes());
  }
  void fill(const Tensor& t, float value) override { cpu::fill(t, value); }
  void accumulate(const Tensor& src, const Tensor& dst) override { cpu::accumulate(src, dst); }
  void synchronize() override {}
  std::unique_ptr<DeviceEvent> make_event() override { return std::make_unique<CpuEvent>(); }

  std::vector<std::string> conv_algorithm_names(const std::string& direction) const override {
    if (direction != "forward" && direction != "backward_data" && direction != "backward_filter")
      throw InvalidArgument("unknown convolution direction '" + direction +
                            "' (choose one of: forward, backward_data, backward_filter)");
    // reference and im2col_gemm run every direction, onednn the forward (conv_cpu.cpp)
    if (direction == "forward" && onednn_available()) return {"reference", "im2col_gemm", "onednn"};
    return {"reference", "im2col_gemm"};
  }
  std::unique_ptr<ConvKernel> make_conv(const Conv2dDesc& desc,
                                        const ConvAlgoChoice& algo) override {
    if (desc.residual)  // fuses_conv_residual is false here: the executor never asks
      throw NotSupported("conv2d on cpu: the CPU backend takes no residual add into a convolution "
                         "(Conv2dDesc::residual; fuses_conv_residual answers no here)");
    return make_conv_kernel(desc, algo, default_conv_algo_, options_.workspace_limit_bytes,
                            workspace_, default_forward_algo_);
  }
  std::unique_ptr<LinearKernel> make_linear(const LinearDesc& desc) override {
    return make_linear_kernel(desc);
  }
  std::unique_ptr<PoolKernel> make_pool(const Pool2dDesc& desc) override {
    return make_pool_kernel(desc, *memory_);
  }
  std::unique_ptr<LrnKernel> make_lrn(const LrnDesc& desc) override {
    return make_lrn_kernel(desc);
  }
  std::unique_ptr<BatchNormKernel> make_batch_norm(const BatchNormDesc& desc) override {
    return make_batch_norm_kernel(desc);
  }
  bool fuses_batch_norm_relu(const BatchNormDesc&) const override { return true; }
  bool fuses_batch_norm_residual(const BatchNormDesc&) const override { return true; }
  bool recomputes_batch_norm_output(const BatchNormDesc& desc) const override { return !desc.residual; }
  // The batch norm's map (fp64) applied by the max pool as it reads (pool_cpu.cpp), which keeps its argmax.
  bool fuses_batch_norm_pool(const BatchNormDesc& bn, const Pool2dDesc& pool) const override {
    return !bn.residual && pool.normalised && pool.keep_argmax && pool.mode == PoolMode::kMax && bn.n == pool.n &&
           bn.c == pool.c && bn.h == pool.h && bn.w == pool.w && pool.h * pool.w <= std::numeric_limits<std::int32_t>::max();
  }
  // The ReLU's mask applied by the max pool's backward from its output (pool_cpu.cpp), which keeps its argmax.
  bool pools_relu_mask(const Pool2dDesc& pool) const override {
    return pool.relu_mask && pool.keep_argmax && pool.mode == PoolMode::kMax &&
           pool.h * pool.w <= std::numeric_limits<std::int32_t>::max();
  }
  bool fuses_conv_relu(const Conv2dDesc&) const override { return true; }  // every algorithm (conv_cpu.cpp)
  bool fuses_conv_statistics(const Conv2dDesc& desc) const override {
    return options_.conv_statistics_fusion != StatisticsFusion::kOff && !desc.bias && !desc.relu && !desc.residual &&
           desc.statistics_well_conditioned();
  }
  std::unique_ptr<SoftmaxXentKernel> make_softmax_xent(const SoftmaxXentDesc& desc) override {
    return make_softmax_xent_kernel(desc);
  }

  void relu_forward(const Tensor& x, const Tensor& y) override { cpu::relu_forward(x, y); }
  void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx,
                     bool accumulate) override {
    cpu::relu_backward(y, dy, dx, accumulate);
  }
  void dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask,
                       const Tensor& y) override {
    cpu::dropout_forward(x, p, seed, mask, y);
  }
  void dropout_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx,
                        bool accumulate) override {
    cpu::dropout_backward(dy, mask, dx, accumulate);
  }
  void add_forward(const Tensor& a, const Tensor& b, const Tensor& y) override {
    cpu::add_forward(a, b, y);
  }
  void concat_forward(std::span<const Tensor> xs, const Tensor& y) override {
    cpu::concat_forward(xs, y);
  }
  void concat_backward(const Tensor& dy, std::span<const Tensor> dxs, bool accumulate) override {
    cpu::concat_backward(dy, dxs, accumulate);
  }
  void activation_forward(const ActivationDesc& d, const Tensor& x, const Tensor& y) override {
    cpu::activation_forward(d, x, y);
  }
  void activation_backward(const ActivationDesc& d, const Tensor& x, const Tensor& dy, const Tensor& dx,
                           bool accumulate) override {
    cpu::activation_backward(d, x, dy, dx, accumulate);
  }
  void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y) override { cpu::mul_forward(a, b, y); }
  void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, const Tensor& da, bool accumulate_a,
                    const Tensor& db, bool accumulate_b) override {
    cpu::mul_backward(a, b, dy, da, accumulate_a, db, accumulate_b);
  }
  void channel_affine_forward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& y) override {
    cpu::channel_affine_forward(x, scale, shift, y);
  }
  void channel_affine_backward(const Tensor& dy, const Tensor& scale, const Tensor& dx, bool accumulate) override {
    cpu::channel_affine_backward(dy, scale, dx, accumulate);
  }
  void channel_shuffle(const Tensor& x, std::int64_t groups, const Tensor& y, bool accumulate) override {
    cpu::channel_shuffle(x, groups, y, accumulate);
  }
  void channel_slice_forward(const Tensor& x, std::int64_t begin, const Tensor& y) override {
    cpu::channel_slice_forward(x, begin, y);
  }
  void channel_slice_backward(const Tensor& dy, std::int64_t begin, const Tensor& dx, bool accumulate) override {
    cpu::channel_slice_backward(dy, begin, dx, accumulate);
  }
  void sgd_update(const Tensor& master, const Tensor& grad, const Tensor& momentum,
                  const Tensor& working, const SgdStep& step,
                  const Tensor& skip_if_nonzero) override {
    cpu::sgd_update(master, grad, momentum, working, step, skip_if_nonzero);
  }
  void check_finite(const Tensor& t, const Tensor& flag) override { cpu::check_finite(t, flag); }
  void count_topk(const Tensor& logits, const Tensor& labels, int k,
                  const Tensor& correct) override {
    cpu::count_topk(logits, labels, k, correct);
  }

 private:
  BackendOptions options_;
  std::shared_ptr<HostMemory> memory_;
  std::shared_ptr<Workspace> workspace_;
  std::string device_name_;
  ConvAlgo default_conv_algo_;
  ConvAlgo default_forward_algo_;
};

}  // namespace

std::unique_ptr<Backend> create_cpu_backend(const BackendOptions& options) {
  if (!options.device.is_cpu())
    throw InvalidArgument("create_cpu_backend: device " + options.device.str() + " is not the CPU");
  if (options.dtype != DType::kF32 || options.layout != Layout::kNCHW)
    throw NotSupported("the CPU backend computes in fp32/NCHW only (asked for " +
                       std::string(dtype_name(options.dtype)) + "/" +
                       std::string(layout_name(options.layout)) +
                       "); use --device cuda for fp16/bf16/tf32 or NHWC");
  // allow_tf32 has no meaning on the CPU and is ignored.
  return std::make_unique<CpuBackend>(options);
}

}  // namespace cnnergy::cpu
