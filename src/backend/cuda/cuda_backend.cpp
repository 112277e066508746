// CudaBackend: the Backend contract on one NVIDIA GPU. Memory comes from the caching allocator
// (zero-filled, like the CPU backend's), transfers and element-wise work are enqueued on the one
// stream, layer kernels come from cuda_ops.hpp. Also device_count() and create_cuda_backend().
#include "backend/cuda/cuda_backend.hpp"

#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <bit>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/conv_algos.hpp"
#include "backend/cuda/conv_cudnn.hpp"
#include "backend/cuda/own_conv.hpp"
#include "backend/cuda/cuda_context.hpp"
#include "backend/cuda/cuda_device_event.hpp"
#include "backend/cuda/cuda_graph.hpp"
#include "backend/cuda/cuda_ops.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/sgd_tables.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

// ---- the backend -------------------------------------------------------------------------------
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& options)
      : ctx_(std::make_shared<CudaContext>(options)) {}

  std::string name() const override { return "cuda"; }
  std::string device_name() const override { return ctx_->properties().name; }
  const BackendOptions& options() const override { return ctx_->options(); }
  const std::shared_ptr<CudaContext>& context() const { return ctx_; }
  ~CudaBackend() override {
    if (copy_stream_) (void)cudaStreamSynchronize(copy_stream_->get());
  }
  void* native_stream() const override { return static_cast<void*>(ctx_->stream()); }
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work) override {
    auto graph = std::make_unique<CudaGraph>(*this);
    graph->capture(work);
    return graph;
  }
  std::string cuda_runtime_version() const override {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) return {};
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  }
  std::string cudnn_version() const override {
    const std::size_t v = cudnnGetVersion();  // e.g. 91900 for 9.19.0
    return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
  }
  AlgoSearchStats algo_search_stats() const override { return ctx_->search_clock().stats(); }
  void set_search_layer(std::size_t index, std::size_t count, const std::string& name) override {
    ctx_->search_clock().set_layer(index, count, name);
    if (count == 0 && ctx_->algo_cache()) ctx_->algo_cache()->flush();  // the search is done
  }
  void profiler_range(bool active) override {
    ctx_->activate();
    CNNERGY_CUDA_CALL(active ? cudaProfilerStart() : cudaProfilerStop());
  }
  std::string pci_bus_id() const override {
    char id[32] = {};
    if (cudaDeviceGetPCIBusId(id, sizeof id, ctx_->device_index()) != cudaSuccess) return {};
    return id;
  }

  std::shared_ptr<Buffer> alloc_buffer(std::size_t size_bytes) override {
    ctx_->activate();
    auto buffer = ctx_->allocator().allocate(size_bytes);
    if (size_bytes > 0)
      CNNERGY_CUDA_CALL(cudaMemsetAsync(buffer->data(), 0, size_bytes, ctx_->stream()));
    return buffer;
  }
  std::shared_ptr<Buffer> alloc_pinned_host(std::size_t size_bytes) override {
    ctx_->activate();
    return allocate_pinned_host(size_bytes);
  }
  MemoryStats memory_stats() const override {
    const AllocatorStats s = ctx_->allocator().stats();
    const auto workspace = ctx_->conv_workspace_buffer();
    return {s.in_use_bytes, s.peak_bytes, ctx_->properties().totalGlobalMem,
            workspace ? CachingAllocator::size_class(workspace->size_bytes()) : 0, ctx_->region_overflows(),
            ctx_->region_overflow_bytes()};
  }
  void reset_peak_memory() override { ctx_->allocator().reset_peak(); }
  void release_conv_workspace() override { ctx_->release_conv_workspace(); }
  std::size_t set_search_workspace_limit(std::size_t bytes) override { return ctx_->set_workspace_limit(bytes); }
  void set_conv_workspace(void* data, std::size_t bytes) override { ctx_->set_conv_workspace_region(data, bytes); }

  void upload(const Tensor& host, const Tensor& dst, bool async) override {
    ctx_->activate();
    check_transfer(host, dst, "upload");
    CNNERGY_CUDA_CALL(cudaMemcpyAsync(dst.raw(), host.raw(), dst.size_bytes(),
                                      cudaMemcpyHostToDevice, ctx_->stream()));
    if (!async) synchronize();
  }
  std::unique_ptr<DeviceEvent> upload_on_copy_stream(const Tensor& host, const Tensor& dst,
                                                     const DeviceEvent* after) override {
    ctx_->activate();
    check_transfer(host, dst, "upload");
    if (!copy_stream_) copy_stream_ = std::make_unique<Stream>();
    if (after != nullptr) {
      const auto* e = dynamic_cast<const CudaDeviceEvent*>(after);
      if (e == nullptr) throw InvalidArgument("upload_on_copy_stream: 'after' is not a CUDA event");
      if (e->recorded()) CNNERGY_CUDA_CALL(cudaStreamWaitEvent(copy_stream_->get(), e->raw(), 0));
    }
    CNNERGY_CUDA_CALL(cudaMemcpyAsync(dst.raw(), host.raw(), dst.size_bytes(), cudaMemcpyHostToDevice,
                                      copy_stream_->get()));
    auto done = std::make_unique<CudaDeviceEvent>(ctx_);
    done->record_on(copy_stream_->get());
    return done;
  }
  void wait_event(const DeviceEvent& event) override {
    const auto* e = dynamic_cast<const CudaDeviceEvent*>(&event);
    if (e == nullptr) throw InvalidArgument("wait_event: not a CUDA event");
    if (!e->recorded()) return;
    ctx_->activate();
    CNNERGY_CUDA_CALL(cudaStreamWaitEvent(ctx_->stream(), e->raw(), 0));
  }

  void download(const Tensor& src, const Tensor& host) override {
    ctx_->activate();
    check_transfer(host, src, "download");
    CNNERGY_CUDA_CALL(cudaMemcpyAsync(host.raw(), src.raw(), src.size_bytes(),
                                      cudaMemcpyDeviceToHost, ctx_->stream()));
    synchronize();
  }

  void copy(const Tensor& src, const Tensor& dst) override { convert(src, dst, false, "copy"); }
  void accumulate(const Tensor& src, const Tensor& dst) override {
    convert(src, dst, true, "accumulate");
  }

  void fill(const Tensor& t, float value) override {
    ctx_->activate();
    check_device_tensor(t, *ctx_, "fill", "t");
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    if (bits == 0) {  // +0.0 is all-zero bytes in every dtype
      CNNERGY_CUDA_CALL(cudaMemsetAsync(t.raw(), 0, t.size_bytes(), ctx_->stream()));
      return;
    }
    kernels::fill(t.raw(), t.dtype(), t.numel(), value, ctx_->stream());
  }

  void synchronize() override {
    ctx_->activate();
    CNNERGY_CUDA_CALL(cudaStreamSynchronize(ctx_->stream()));
  }
  std::unique_ptr<DeviceEvent> make_event() override {
    ctx_->activate();
    return std::make_unique<CudaDeviceEvent>(ctx_);
  }

  std::vector<std::string> conv_algorithm_names(const std::string& direction) const override {
    for (const ConvDirection d : {ConvDirection::kForward, ConvDirection::kBackwardData, ConvDirection::kBackwardFilter}) {
      if (direction != direction_name(d)) continue;
      std::vector<std::string> names;
      for (const NamedConvAlgo& a : conv_algos(d)) names.emplace_back(a.name);
      return names;
    }
    throw InvalidArgument("unknown convolution direction '" + direction +
                          "' (choose one of: forward, backward_data, backward_filter)");
  }
  std::vector<std::string> conv_engine_names(const Conv2dDesc& desc, const std::string& direction) override {
    (void)conv_algorithm_names(direction);  // InvalidArgument for an unknown direction
    ctx_->activate();
    const CudnnConv conv(ctx_, desc, ConvAlgoChoice{});
    for (const ConvDirection d : {ConvDirection::kForward, ConvDirection::kBackwardData, ConvDirection::kBackwardFilter})
      if (direction == direction_name(d)) return conv.graph_engine_names(d);
    return {};
  }
  std::unique_ptr<ConvKernel> make_conv(const Conv2dDesc& desc,
                                        const ConvAlgoChoice& algo) override {
    if (desc.relu && !desc.bias)  // fuses_conv_relu holds only with a bias: the executor never asks
      throw NotSupported("conv2d on cuda: a fused ReLU (Conv2dDesc::relu) needs a bias (it rides the bias pass)");
    ctx_->activate();
    return make_cuda_conv(ctx_, desc, algo);  // cuDNN, or own implementations (own_conv.hpp)
  }
  std::unique_ptr<LinearKernel> make_linear(const LinearDesc& desc) override {
    ctx_->activate();
    return make_cublas_linear(ctx_, desc);
  }
  std::unique_ptr<PoolKernel> make_pool(const Pool2dDesc& desc) override {
    ctx_->activate();
    return make_cuda_pool(ctx_, desc);
  }
  std::unique_ptr<LrnKernel> make_lrn(const LrnDesc& desc) override {
    ctx_->activate();
    return make_cuda_lrn(ctx_, desc);
  }
  std::unique_ptr<BatchNormKernel> make_batch_norm(const BatchNormDesc& desc) override {
    ctx_->activate();
    return make_cuda_batch_norm(ctx_, desc);
  }
  // The fused cuDNN epilogue (conv_epilogue_plan.hpp) or, where it is slower, the convolution's
  // own passes: a convolution with a bias takes the residual add whenever the offer is on.
  bool fuses_conv_residual(const Conv2dDesc& desc) const override {
    return desc.bias && ctx_->options().conv_epilogue_fusion && ctx_->options().conv_algo_policy.rfind("own:", 0) != 0;
  }
  bool fuses_batch_norm_relu(const BatchNormDesc& desc) const override {
    return !batch_norm_uses_cudnn(desc, ctx_->dtype(), ctx_->layout());
  }
  // The residual add rides the normalisation pass of the own kernels (batch_norm.cu): one pass
  // reads x and z and writes the sum, instead of the batch norm writing bn(x) and the add reading it.
  bool fuses_batch_norm_residual(const BatchNormDesc& desc) const override {
    return !batch_norm_uses_cudnn(desc, ctx_->dtype(), ctx_->layout());
  }
  // The stem's batch norm, ReLU and max pool: the pool reads the batch norm's input and normalises
  // it as it reads (kernels::PoolNormalisation), so the batch norm's output is never written and read
  // back (ResNet-50 at bf16 b256: 411 MB each way). The own kernels on both sides, the pool keeping
  // its argmax (its backward then reads neither x nor the output nobody wrote).
  bool fuses_batch_norm_pool(const BatchNormDesc& bn, const Pool2dDesc& pool) const override {
    return !bn.residual && !batch_norm_uses_cudnn(bn, ctx_->dtype(), ctx_->layout()) && pool.normalised &&
           pool_argmax_fits(pool) && bn.n == pool.n && bn.c == pool.c && bn.h == pool.h && bn.w == pool.w;
  }
  // The ReLU before a max pool applied by the pool's backward from its output (kernels::pool_backward's
  // relu_y), on the own kernels with the argmax kept; NHWC only. Measured on an H200 against the
  // unmasked pair in one process (docs/benchmarks): in NHWC it is faster (bf16 VGG-16 +5 %,
  // AlexNet +4-6 %) and smaller (VGG-16 b128 5,483 -> 4,248 MiB); in fp32 NCHW, where the unmasked pool
  // runs cuDNN's backward, it is 2-5 % slower for less memory (VGG-16 b128 11,860 -> 9,698 MiB; at b64
  // and for AlexNet the peak is the algorithm search's either way), and there the convolution keeps its
  // mask: the speed, as the other defaults.
  bool pools_relu_mask(const Pool2dDesc& pool) const override {
    return pool.relu_mask && pool.keep_argmax && pool.mode == PoolMode::kMax && pool_argmax_fits(pool) &&
           ctx_->layout() == Layout::kNHWC;
  }
  // The own kernels keep forward's coefficients (2 floats a channel) and apply them again; cuDNN's
  // batch norm keeps none, and its rounding is its own.
  bool recomputes_batch_norm_output(const BatchNormDesc& desc) const override {
    return !desc.residual && !batch_norm_uses_cudnn(desc, ctx_->dtype(), ctx_->layout());
  }
  // A folded inference convolution's ReLU rides its bias pass (kernels::bias_add): one pass over
  // the output instead of two, the same values.
  bool fuses_conv_relu(const Conv2dDesc& desc) const override { return desc.bias; }
  // cuDNN's convolution + GenStats graph (conv_epilogue_plan.hpp), timed per layer against the
  // forward and the batch norm's statistics pass: cuDNN 9.19 has engines for it in fp16 and bf16
  // NHWC only (none for NCHW; fp32's break its numerics), and offered in fp16 only: bf16 has only
  // a run-time-compiled engine, never faster at ResNet-50's shapes on an H100, and a bf16 step through
  // it (where it won at batch 8, 64x64) came out farther from fp32 and further apart run to run than
  // the unfused step (docs/internals.md, statistics from the convolution).
  bool fuses_conv_statistics(const Conv2dDesc& desc) const override {
    const BackendOptions& o = ctx_->options();
    return o.conv_statistics_fusion != StatisticsFusion::kOff && !desc.bias && !desc.relu && !desc.residual &&
           desc.groups == 1 && desc.statistics_well_conditioned() && o.layout == Layout::kNHWC &&
           o.dtype == DType::kF16 && o.conv_algo_policy.rfind("own:", 0) != 0;
  }
  std::unique_ptr<SoftmaxXentKernel> make_softmax_xent(const SoftmaxXentDesc& desc) override {
    ctx_->activate();
    return make_cuda_softmax_xent(ctx_, desc);
  }

  void relu_forward(const Tensor& x, const Tensor& y) override {
    ctx_->activate();
    check_same(x, y, "relu_forward", "x", "y");
    kernels::relu_forward(x.raw(), y.raw(), x.dtype(), x.numel(), ctx_->stream());
  }
  void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx,
                     bool accumulate) override {
    ctx_->activate();
    check_same(y, dy, "relu_backward", "y", "dy");
    check_same(y, dx, "relu_backward", "y", "dx");
    kernels::relu_backward(y.raw(), dy.raw(), dx.raw(), y.dtype(), y.numel(), accumulate,
                           ctx_->stream());
  }

  bool fuses_relu_bias_grad() const override { return true; }
  void relu_backward_bias_grad(const Tensor& y, const Tensor& dy, const Tensor& db) override {
    ctx_->activate();
    check_same(y, dy, "relu_backward_bias_grad", "y", "dy");
    if (y.shape().rank() != 4 || !db.defined() || db.dtype() != y.dtype() || db.numel() != y.shape()[1])
      throw InvalidArgument("relu_backward_bias_grad: needs a 4-D y and dy, and db of y's channels in y's dtype");
    const kernels::ChannelView view = kernels::channel_view(dims_of(dy));
    auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view, y.dtype()));
    kernels::relu_backward_bias_grad(y.raw(), dy.raw(), y.dtype(), view, db.raw(), db.dtype(), scratch->data(),
                                     ctx_->stream());
  }

  void dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask,
                       const Tensor& y) override {
    ctx_->activate();
    if (!(p >= 0.0f && p < 1.0f))
      throw InvalidArgument("dropout: probability must be in [0, 1), got " + std::to_string(p));
    check_same(x, mask, "dropout_forward", "x", "mask");
    check_same(x, y, "dropout_forward", "x", "y");
    kernels::dropout_forward(x.raw(), mask.raw(), y.raw(), x.dtype(), dims_of(x), p, seed,
                             ctx_->stream());
  }
  void dropout_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx,
                        bool accumulate) override {
    ctx_->activate();
    check_same(dy, mask, "dropout_backward", "dy", "mask");
    check_same(dy, dx, "dropout_backward", "dy", "dx");
    kernels::dropout_backward(dy.raw(), mask.raw(), dx.raw(), dy.dtype(), dy.numel(), accumulate,
                              ctx_->stream());
  }

  void add_forward(const Tensor& a, const Tensor& b, const Tensor& y) override {
    ctx_->activate();
    check_same(a, b, "add_forward", "a", "b");
    check_same(a, y, "add_forward", "a", "y");
    kernels::add(a.raw(), b.raw(), y.raw(), a.dtype(), a.numel(), ctx_->stream());
  }
  void add_relu_forward(const Tensor& a, const Tensor& b, const Tensor& y) override {
    ctx_->activate();
    check_same(a, b, "add_relu_forward", "a", "b");
    check_same(a, y, "add_relu_forward", "a", "y");
    kernels::add(a.raw(), b.raw(), y.raw(), a.dtype(), a.numel(), ctx_->stream(), /*relu=*/true);
  }

  void activation_forward(const ActivationDesc& d, const Tensor& x, const Tensor& y) override {
    cuda_activation_forward(*ctx_, d, x, y);
  }
  void activation_backward(const ActivationDesc& d, const Tensor& x, const Tensor& dy, const Tensor& dx,
                           bool accumulate) override {
    cuda_activation_backward(*ctx_, d, x, dy, dx, accumulate);
  }
  void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y) override { cuda_mul_forward(*ctx_, a, b, y); }
  void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, const Tensor& da, bool accumulate_a,
                    const Tensor& db, bool accumulate_b) override {
    cuda_mul_backward(*ctx_, a, b, dy, da, accumulate_a, db, accumulate_b);
  }
  void channel_affine_forward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& y) override {
    if (!shift.defined()) throw InvalidArgument("channel_affine_forward: needs a shift tensor");
    cuda_channel_affine(*ctx_, x, scale, shift, y, false);
  }
  void channel_affine_backward(const Tensor& dy, const Tensor& scale, const Tensor& dx, bool accumulate) override {
    cuda_channel_affine(*ctx_, dy, scale, Tensor(), dx, accumulate);
  }
  void channel_shuffle(const Tensor& x, std::int64_t groups, const Tensor& y, bool accumulate) override {
    cuda_channel_shuffle(*ctx_, x, groups, y, accumulate);
  }
  void channel_slice_forward(const Tensor& x, std::int64_t begin, const Tensor& y) override {
    cuda_channel_slice(*ctx_, x, y, begin, true, false);
  }
  void channel_slice_backward(const Tensor& dy, std::int64_t begin, const Tensor& dx, bool accumulate) override {
    cuda_channel_slice(*ctx_, dx, dy, begin, false, accumulate);
  }

  void concat_forward(std::span<const Tensor> xs, const Tensor& y) override {
    concat(xs, y, true, false);
  }
  void concat_backward(const Tensor& dy, std::span<const Tensor> dxs, bool accumulate) override {
    concat(dxs, dy, false, accumulate);
  }

  void sgd_update(const Tensor& master, const Tensor& grad, const Tensor& momentum,
                  const Tensor& working, const SgdStep& step,
                  const Tensor& skip_if_nonzero) override {
    ctx_->activate();
    const SgdOperands o = sgd_operands(master, grad, momentum, working, step.momentum, "sgd_update");
    kernels::sgd_update(o.entry.master, o.entry.grad, o.grad_dtype, o.entry.momentum, o.entry.working,
                        o.working_dtype, o.entry.count,
                        {step.learning_rate, step.momentum, step.weight_decay, step.inv_grad_scale},
                        skip_flag(skip_if_nonzero, "sgd_update"), ctx_->stream());
  }

  // One launch per (grad, working) dtype pair over a device table of the parameters (SgdTables),
  // where one exists or can be uploaded now; one launch per parameter otherwise (a first step
  // inside a CUDA-graph capture).
  void sgd_update_all(std::span<const SgdUpdate> updates, const SgdStep& step,
                      const Tensor& skip_if_nonzero) override {
    ctx_->activate();
    const std::int32_t* skip = skip_flag(skip_if_nonzero, "sgd_update_all");
    const kernels::SgdParams params{step.learning_rate, step.momentum, 0.0f, step.inv_grad_scale};
    std::map<std::pair<DType, DType>, std::vector<kernels::SgdEntry>> groups;
    for (const SgdUpdate& u : updates) {
      SgdOperands o = sgd_operands(u.master, u.grad, u.momentum, u.working, step.momentum, "sgd_update_all");
      if (o.entry.count == 0) continue;
      o.entry.weight_decay = u.weight_decay;
      o.entry.vector = kernels::sgd_entry_packs(o.entry, o.grad_dtype, o.working_dtype) ? 1 : 0;
      groups[{o.grad_dtype, o.working_dtype}].push_back(o.entry);
    }
    for (const auto& [dtypes, entries] : groups) {
      if (const SgdTables::Table* t = sgd_tables_.find_or_upload(entries, *ctx_)) {
        kernels::sgd_update_many(t->entries, t->chunks, t->num_chunks, dtypes.first, dtypes.second, params, skip,
                                 ctx_->stream());
        continue;
      }
      for (const kernels::SgdEntry& e : entries) {
        kernels::SgdParams each = params;
        each.weight_decay = e.weight_decay;
        kernels::sgd_update(e.master, e.grad, dtypes.first, e.momentum, e.working, dtypes.second, e.count, each, skip,
                            ctx_->stream());
      }
    }
  }

  void check_finite(const Tensor& t, const Tensor& flag) override {
    ctx_->activate();
    check_device_tensor(t, *ctx_, "check_finite", "t");
    check_flag(flag, "check_finite", "flag");
    kernels::check_finite(t.raw(), t.dtype(), t.numel(), flag.data<std::int32_t>(), ctx_->stream());
  }

  void count_topk(const Tensor& logits, const Tensor& labels, int k,
                  const Tensor& correct) override {
    ctx_->activate();
    const char* op = "count_topk";
    check_device_tensor(logits, *ctx_, op, "logits");
    check_device_tensor(labels, *ctx_, op, "labels");
    check_flag(correct, op, "correct");
    if (logits.shape().rank() != 2 || logits.dtype() == DType::kI32)
      throw ShapeError("count_topk: logits must be a floating-point (N, classes) tensor, got " +
                       logits.describe());
    if (labels.dtype() != DType::kI32 || labels.numel() != logits.shape()[0])
      throw ShapeError("count_topk: labels must be int32 with " +
                       std::to_string(logits.shape()[0]) + " elements, got " + labels.describe());
    if (k < 1) throw InvalidArgument("count_topk: k must be at least 1, got " + std::to_string(k));
    kernels::count_topk(logits.raw(), logits.dtype(), labels.data<std::int32_t>(),
                        logits.shape()[0], logits.shape()[1], k, correct.data<std::int32_t>(),
                        ctx_->stream());
  }

 private:
  void check_transfer(const Tensor& host, const Tensor& device, const char* op) const {
    if (!host.defined() || !host.device().is_cpu())
      throw InvalidArgument(std::string(op) +
                            ": the host tensor must be defined host memory, got " +
                            (host.defined() ? host.describe() : std::string("undefined")));
    check_device_tensor(device, *ctx_, op, "device tensor");
    if (host.dtype() != device.dtype() || host.numel() != device.numel() ||
        (device.shape().rank() == 4 && host.shape().rank() == 4 &&
         host.layout() != device.layout()))
      throw InvalidArgument(std::string(op) + ": host " + host.describe() + " and device " +
                            device.describe() +
                            " differ in dtype, size or layout (transfers do not convert)");
  }

  // Element-wise operands: same element count and dtype, same layout when both are 4-D.
  void check_same(const Tensor& a, const Tensor& b, const char* op, const char* an,
                  const char* bn) const {
    check_device_tensor(a, *ctx_, op, an);
    check_device_tensor(b, *ctx_, op, bn);
    if (a.numel() != b.numel() || a.dtype() != b.dtype())
      throw ShapeError(std::string(op) + ": " + an + " " + a.describe() + " and " + bn + " " +
                       b.describe() + " differ in size or dtype");
    // (layout tags of 4-D tensors with a 1x1 spatial size do not matter: both read N, C)
    if (a.shape().rank() == 4 && b.shape().rank() == 4 && a.layout() != b.layout() &&
        a.shape().per_sample() != a.shape()[1])
      throw InvalidArgument(std::string(op) + ": " + an + " and " + bn + " differ in layout");
  }

  void check_flag(const Tensor& t, const char* op, const char* name) const {
    check_device_tensor(t, *ctx_, op, name);
    if (t.dtype() != DType::kI32 || t.numel() != 1)
      throw ShapeError(std::string(op) + ": " + name + " must be one int32, got " + t.describe());
  }

  void convert(const Tensor& src, const Tensor& dst, bool accumulate, const char* op) {
    ctx_->activate();
    check_device_tensor(src, *ctx_, op, "src");
    check_device_tensor(dst, *ctx_, op, "dst");
    if (src.numel() != dst.numel())
      throw ShapeError(std::string(op) + ": src " + src.describe() + " and dst " + dst.describe() +
                       " differ in size");
    const bool src_nhwc = src.shape().rank() == 4 && src.layout() == Layout::kNHWC;
    const bool dst_nhwc = dst.shape().rank() == 4 && dst.layout() == Layout::kNHWC;
    if (src_nhwc != dst_nhwc && src.shape() != dst.shape())
      throw ShapeError(std::string(op) + ": a layout change needs equal shapes, got " +
                       src.describe() + " and " + dst.describe());
    if (!accumulate && src.dtype() == dst.dtype() && src_nhwc == dst_nhwc) {
      CNNERGY_CUDA_CALL(cudaMemcpyAsync(dst.raw(), src.raw(), dst.size_bytes(),
                                        cudaMemcpyDeviceToDevice, ctx_->stream()));
      return;
    }
    kernels::Dims dims =
        src_nhwc != dst_nhwc ? dims_of(dst) : kernels::Dims{dst.numel(), 1, 1, 1, false};
    kernels::convert(src.raw(), src.dtype(), src_nhwc, dst.raw(), dst.dtype(), dims, accumulate,
                     ctx_->stream());
  }

  // Concatenation along channels as one strided block copy per part: NCHW rows are samples
  // (C*H*W elements), NHWC rows are pixels (C elements), 2-D rows are samples (F elements).
  void concat(std::span<const Tensor> parts, const Tensor& whole, bool forward, bool accumulate) {
    ctx_->activate();
    const char* op = forward ? "concat_forward" : "concat_backward";
    check_device_tensor(whole, *ctx_, op, forward ? "y" : "dy");
    const Shape& ws = whole.shape();
    if (ws.rank() != 2 && ws.rank() != 4)
      throw ShapeError(std::string(op) + ": needs 2-D or 4-D tensors, got " + ws.str());
    const bool nhwc = ws.rank() == 4 && whole.layout() == Layout::kNHWC;
    const std::int64_t spatial = ws.h() * ws.w();
    std::int64_t channels = 0;
    for (const Tensor& p : parts) {
      check_device_tensor(p, *ctx_, op, forward ? "x" : "dx");
      const Shape& s = p.shape();
      if (s.rank() != ws.rank() || s.n() != ws.n() || s.h() != ws.h() || s.w() != ws.w() ||
          p.dtype() != whole.dtype() || (ws.rank() == 4 && p.layout() != whole.layout()))
        throw ShapeError(std::string(op) + ": part " + p.describe() + " does not fit " +
                         whole.describe());
      channels += s.c();
    }
    if (channels != ws.c())
      throw ShapeError(std::string(op) + ": parts have " + std::to_string(channels) +
                       " channels in total, " + whole.describe() + " has " +
                       std::to_string(ws.c()));
    const std::int64_t rows = nhwc ? ws.n() * spatial : ws.n();
    const std::int64_t whole_ld = nhwc ? ws.c() : ws.c() * spatial;
    const std::size_t elem = dtype_size_bytes(whole.dtype());
    std::int64_t offset = 0;  // elements into a row of the whole
    for (const Tensor& p : parts) {
      const std::int64_t cols = nhwc ? p.shape().c() : p.shape().c() * spatial;
      char* whole_at = static_cast<char*>(whole.raw()) + static_cast<std::size_t>(offset) * elem;
      if (forward)
        kernels::copy_2d(p.raw(), cols, whole_at, whole_ld, rows, cols, whole.dtype(), false,
                         ctx_->stream());
      else
        kernels::copy_2d(whole_at, whole_ld, p.raw(), cols, rows, cols, whole.dtype(), accumulate,
                         ctx_->stream());
      offset += cols;
    }
  }

  // An SGD update's operands, checked: master fp32, grad of its size, momentum (fp32, the same size)
  // where step_momentum needs one, a working copy other than the master (kF32 and null otherwise).
  struct SgdOperands {
    kernels::SgdEntry entry;
    DType grad_dtype = DType::kF32, working_dtype = DType::kF32;
  };
  SgdOperands sgd_operands(const Tensor& master, const Tensor& grad, const Tensor& momentum, const Tensor& working,
                           float step_momentum, const char* op) const {
    check_device_tensor(master, *ctx_, op, "master");
    check_device_tensor(grad, *ctx_, op, "grad");
    if (master.dtype() != DType::kF32)
      throw InvalidArgument(std::string(op) + ": master must be fp32, got " + master.describe());
    SgdOperands o;
    const std::int64_t n = master.numel();
    o.entry.count = n;
    o.entry.master = static_cast<float*>(master.raw());
    if (grad.numel() != n)
      throw ShapeError(std::string(op) + ": master " + master.shape().str() + " and grad " + grad.shape().str() +
                       " differ in size");
    if (grad.dtype() == DType::kI32) throw InvalidArgument(std::string(op) + ": grad must be floating point");
    o.entry.grad = grad.raw();
    o.grad_dtype = grad.dtype();
    if (momentum.defined()) {  // plain SGD needs no momentum buffer
      check_device_tensor(momentum, *ctx_, op, "momentum");
      if (momentum.dtype() != DType::kF32 || momentum.numel() != n)
        throw ShapeError(std::string(op) + ": momentum must be fp32 with " + std::to_string(n) + " elements, got " +
                         momentum.describe());
      o.entry.momentum = static_cast<float*>(momentum.raw());
    } else if (step_momentum != 0.0f) {
      throw InvalidArgument(std::string(op) + ": momentum " + std::to_string(step_momentum) +
                            " needs a momentum buffer");
    }
    if (working.defined() && working.raw() != master.raw()) {
      check_device_tensor(working, *ctx_, op, "working");
      if (working.numel() != n || working.dtype() == DType::kI32)
        throw ShapeError(std::string(op) + ": working copy " + working.describe() + " does not match master " +
                         master.describe());
      o.entry.working = working.raw();
      o.working_dtype = working.dtype();
    }
    return o;
  }
  const std::int32_t* skip_flag(const Tensor& skip_if_nonzero, const char* op) const {
    if (!skip_if_nonzero.defined()) return nullptr;
    check_flag(skip_if_nonzero, op, "skip_if_nonzero");
    return skip_if_nonzero.data<std::int32_t>();
  }

  std::shared_ptr<CudaContext> ctx_;
  std::unique_ptr<Stream> copy_stream_;  // created on first upload_on_copy_stream
  SgdTables sgd_tables_;                 // after ctx_: its buffers go back before the context does
};

std::string no_gpu_reason() {
  int count = 0;
  const cudaError_t s = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (s != cudaSuccess) return std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s);
  return "the driver reports no devices";
}

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> create_cuda_backend(const BackendOptions& options) {
  const int count = device_count();
  if (count == 0)
    throw NotSupported("no CUDA GPU found (" + no_gpu_reason() +
                       "); run with --device cpu or on a machine with a GPU");
  if (!options.device.is_cuda())
    throw InvalidArgument("create_cuda_backend: device " + options.device.str() +
                          " is not a CUDA device");
  if (options.device.index < 0 || options.device.index >= count)
    throw InvalidArgument("device " + options.device.str() + " requested, but this machine has " +
                          std::to_string(count) +
                          " GPU(s): cuda:0 .. cuda:" + std::to_string(count - 1));
  if (options.dtype == DType::kI32)
    throw InvalidArgument("the activation dtype must be fp32, fp16 or bf16, not int32");
  cudaDeviceProp p{};
  CNNERGY_CUDA_CALL(cudaGetDeviceProperties(&p, options.device.index));
  const int cc = p.major * 10 + p.minor;
  const std::string gpu = std::string(p.name) + " (compute capability " + std::to_string(p.major) +
                          "." + std::to_string(p.minor) + ")";
  if (options.dtype == DType::kBF16 && cc < 80)
    throw NotSupported("bf16 needs compute capability 8.0 or newer; " + gpu);
  if (options.dtype == DType::kF16 && cc < 53)
    throw NotSupported("fp16 needs compute capability 5.3 or newer; " + gpu);
  if (options.dtype == DType::kF32 && options.allow_tf32 && cc < 80)
    throw NotSupported("tf32 needs compute capability 8.0 or newer; " + gpu);
  validate_conv_algo_policy(options.conv_algo_policy);
  if (options.conv_search_candidates < 1 || options.conv_search_candidates > 100)
    throw InvalidArgument("conv_search_candidates must be 1 to 100 (got " +
                          std::to_string(options.conv_search_candidates) + ")");
  return std::make_unique<CudaBackend>(options);
}

ConvAlgoCacheStats conv_algo_cache_stats(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr)
    throw InvalidArgument("conv_algo_cache_stats: backend '" + backend.name() + "' is not CUDA");
  // Legacy finds and graph-API plan searches together: a network uses one policy or the other.
  ConvAlgoCache& legacy = cuda->context()->conv_algo_cache();
  GraphPlanCache& graph = cuda->context()->graph_plan_cache();
  return {legacy.find_runs() + graph.find_runs(), legacy.hits() + graph.hits()};
}

void* native_stream(const Backend& backend) {
  return static_cast<void*>(context_of(backend)->stream());
}

std::vector<std::string> conv_algorithm_names(const std::string& direction) {
  for (const ConvDirection d :
       {ConvDirection::kForward, ConvDirection::kBackwardData, ConvDirection::kBackwardFilter}) {
    if (direction != direction_name(d)) continue;
    std::vector<std::string> names;
    for (const NamedConvAlgo& a : conv_algos(d)) names.emplace_back(a.name);
    return names;
  }
  throw InvalidArgument("unknown convolution direction '" + direction +
                        "'; valid: forward, backward_data, backward_filter");
}

std::shared_ptr<CudaContext> context_of(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda == nullptr)
    throw InvalidArgument("backend '" + backend.name() + "' is not a CUDA backend");
  return cuda->context();
}

}  // namespace cnnergy::cuda
