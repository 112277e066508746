// Pooling, LRN, batch norm and softmax cross-entropy on the GPU. Channel-last pooling and batch
// norm whose channels fill 16-byte packs (every NHWC layer of the zoo's ResNets, VGGs, ...) run the
// backend's own vectorised kernels (batch_norm.cu, pool.cu, lrn.cu), which stream at memory bandwidth
// in every dtype. Elsewhere cuDNN runs where its semantics and type support match the contract
// exactly (pooling whose ceil-mode output equals cuDNN's floor formula, NCHW fp32/fp16 LRN,
// fp32/fp16 batch norm) and the own generic kernels run the rest: Caffe ceil-mode windows, NHWC or
// bf16 LRN, bf16 batch norm (as PyTorch, which also keeps bf16 off cuDNN's legacy batch norm).
// Softmax cross-entropy is always an own kernel.
#include <cmath>
#include <string>
#include <utility>

#include "backend/cuda/cuda_ops.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"

namespace cnnergy::cuda {

namespace {

void at_least(std::int64_t v, std::int64_t min_value, const char* op, const char* what) {
  if (v < min_value)
    throw InvalidArgument(std::string(op) + ": " + what + " must be at least " +
                          std::to_string(min_value) + " (got " + std::to_string(v) + ")");
}

bool cudnn_takes(DType t) { return t == DType::kF32 || t == DType::kF16; }

// The result of a cuDNN call on a path that has an own-kernel twin: true when it ran; false when
// this cuDNN does not support the case (the caller switches to its own kernels for good); throws
// for any other failure.
bool cudnn_ran(cudnnStatus_t status, const char* call, const char* layer) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) {
    log_debug(std::string(layer) + ": " + call + " returned " + cudnnGetErrorString(status) +
              "; using the backend's own kernels");
    return false;
  }
  check_status(status, call, __FILE__, __LINE__);
  return false;
}

// ---- pooling -----------------------------------------------------------------------------------
}  // namespace

bool pool_argmax_fits(const Pool2dDesc& d) {
  const kernels::PoolParams p{d.out_h(), d.out_w(), d.kernel_h, d.kernel_w, d.stride_h, d.stride_w, d.pad_h, d.pad_w, 0};
  return d.mode == PoolMode::kMax && d.keep_argmax && kernels::pool_backward_scratch_bytes({d.n, d.c, d.h, d.w, false}, p) > 0;
}

namespace {
class CudaPool final : public PoolKernel {
 public:
  CudaPool(std::shared_ptr<CudaContext> ctx, const Pool2dDesc& d)
      : ctx_(std::move(ctx)), d_(d), dtype_(ctx_->dtype()), layout_(ctx_->layout()) {
    params_ = {d.out_h(),
               d.out_w(),
               d.kernel_h,
               d.kernel_w,
               d.stride_h,
               d.stride_w,
               d.pad_h,
               d.pad_w,
               d.mode == PoolMode::kMax ? 0 : (d.mode == PoolMode::kAvgIncludePad ? 1 : 2)};
    // cuDNN sizes outputs with floor; it matches the contract when that gives the same size (then
    // every window also lies inside [-pad, in + pad), so include-pad divisors agree too).
    const std::int64_t floor_h = (d.h + 2 * d.pad_h - d.kernel_h) / d.stride_h + 1;
    const std::int64_t floor_w = (d.w + 2 * d.pad_w - d.kernel_w) / d.stride_w + 1;
    const bool own_packs = layout_ == Layout::kNHWC && kernels::fills_packs(d.c, dtype_);
    // A normalised pool (Pool2dDesc::normalised) runs the own kernels: cuDNN's pooling applies no
    // batch norm, and its backward would need the batch norm's output, which nothing writes.
    use_cudnn_ = !own_packs && !d.normalised && !d.relu_mask && cudnn_takes(dtype_) && floor_h == d.out_h() &&
                 floor_w == d.out_w();
    if (d.relu_mask && !pool_argmax_fits(d))
      throw NotSupported("pool2d: a pool that applies the ReLU's mask keeps its argmax: max pooling with keep_argmax "
                         "and a window of at most 255 (ask pools_relu_mask first)");
    if (d.normalised && !pool_argmax_fits(d))
      throw NotSupported("pool2d: a pool that applies a batch norm's normalisation keeps its argmax: max pooling with "
                         "keep_argmax and a window of at most 255 (ask fuses_batch_norm_pool first)");
    if (!use_cudnn_) {
      // Training on the own kernels: forward keeps the window argmax (a byte per output; 51 MiB for
      // ResNet-50's stem pool at batch 256), and the executor then keeps neither x (392 MiB there in
      // bf16) nor y for the backward, which also skips its argmax pass over x.
      const std::size_t argmax_bytes = kernels::pool_backward_scratch_bytes(x_dims(), params_);
      if (d.keep_argmax && argmax_bytes > 0) argmax_ = ctx_->scratch(argmax_bytes);
      return;
    }
    const cudnnPoolingMode_t mode = d.mode == PoolMode::kMax ? CUDNN_POOLING_MAX
                                    : d.mode == PoolMode::kAvgIncludePad
                                        ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                        : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    CNNERGY_CUDA_CALL(cudnnSetPooling2dDescriptor(
        pool_desc_, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(d.kernel_h),
        static_cast<int>(d.kernel_w), static_cast<int>(d.pad_h), static_cast<int>(d.pad_w),
        static_cast<int>(d.stride_h), static_cast<int>(d.stride_w)));
    set_tensor_4d(x_desc_, dtype_, layout_, d.n, d.c, d.h, d.w);
    set_tensor_4d(y_desc_, dtype_, layout_, d.n, d.c, d.out_h(), d.out_w());
    int n = 0, c = 0, h = 0, w = 0;
    CNNERGY_CUDA_CALL(cudnnGetPooling2dForwardOutputDim(pool_desc_, x_desc_, &n, &c, &h, &w));
    if (h != d.out_h() || w != d.out_w()) use_cudnn_ = false;  // defensive: own kernels then
  }

  void forward(const Tensor& x, const Tensor& y) override {
    ctx_->activate();
    check_device_tensor(x, *ctx_, "pool2d forward", "x", Shape{d_.n, d_.c, d_.h, d_.w}, dtype_,
                        layout_);
    check_device_tensor(y, *ctx_, "pool2d forward", "y", d_.output_shape(), dtype_, layout_);
    if (use_cudnn_) {
      const float one = 1.0f, zero = 0.0f;
      if (cudnn_ran(cudnnPoolingForward(ctx_->cudnn(), pool_desc_, &one, x_desc_, x.raw(), &zero,
                                        y_desc_, y.raw()),
                    "cudnnPoolingForward", "pool2d"))
        return;
      use_cudnn_ = false;
    }
    kernels::pool_forward(x.raw(), dims_of(x), y.raw(), dtype_, params_, ctx_->stream(), kept_argmax());
  }

  bool keeps_argmax() const override { return argmax_ != nullptr; }
  bool applies_relu_mask() const override { return d_.relu_mask && argmax_ != nullptr; }
  std::size_t workspace_bound() const override {
    return use_cudnn_ || argmax_ ? 0 : kernels::pool_backward_scratch_bytes(x_dims(), params_);
  }

  void forward_normalised(const Tensor& x, const NormalisationMap& map, bool relu, const Tensor& y) override {
    ctx_->activate();
    if (!d_.normalised)
      throw InvalidArgument("pool2d: forward_normalised needs a kernel made with Pool2dDesc::normalised");
    if (map.f32 == nullptr) throw InvalidArgument("pool2d: forward_normalised without the batch norm's fp32 coefficients");
    check_device_tensor(x, *ctx_, "pool2d forward_normalised", "x", Shape{d_.n, d_.c, d_.h, d_.w}, dtype_, layout_);
    check_device_tensor(y, *ctx_, "pool2d forward_normalised", "y", d_.output_shape(), dtype_, layout_);
    kernels::pool_forward(x.raw(), dims_of(x), y.raw(), dtype_, params_, ctx_->stream(), kept_argmax(),
                          kernels::PoolNormalisation{map.f32, relu});
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                bool accumulate) override {
    ctx_->activate();
    check_device_tensor(dy, *ctx_, "pool2d backward", "dy", d_.output_shape(), dtype_, layout_);
    check_device_tensor(dx, *ctx_, "pool2d backward", "dx", Shape{d_.n, d_.c, d_.h, d_.w}, dtype_,
                        layout_);
    if (argmax_) {  // the latest forward's argmax: x unread, y only for the ReLU's mask (Pool2dDesc::relu_mask)
      if (applies_relu_mask())
        check_device_tensor(y, *ctx_, "pool2d backward", "y", d_.output_shape(), dtype_, layout_);
      kernels::pool_backward(nullptr, dy.raw(), dx.raw(), x_dims(), dtype_, params_, accumulate, nullptr,
                             ctx_->stream(), kept_argmax(), applies_relu_mask() ? y.raw() : nullptr);
      return;
    }
    check_device_tensor(x, *ctx_, "pool2d backward", "x", Shape{d_.n, d_.c, d_.h, d_.w}, dtype_,
                        layout_);
    if (use_cudnn_) {
      check_device_tensor(y, *ctx_, "pool2d backward", "y", d_.output_shape(), dtype_, layout_);
      const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
      if (cudnn_ran(cudnnPoolingBackward(ctx_->cudnn(), pool_desc_, &one, y_desc_, y.raw(), y_desc_,
                                         dy.raw(), x_desc_, x.raw(), &beta, x_desc_, dx.raw()),
                    "cudnnPoolingBackward", "pool2d"))
        return;
      use_cudnn_ = false;
    }
    const kernels::Dims x_dims = dims_of(x);
    // The argmax bytes (one per output) live in the shared workspace the convolutions hold anyway
    // (a max pool runs between convolutions, on the same stream): VGG-16's first pool at batch 128
    // needs 98 MiB, which a scratch block would add to the peak on top of the activation arena.
    void* scratch = ctx_->conv_workspace(kernels::pool_backward_scratch_bytes(x_dims, params_));
    kernels::pool_backward(x.raw(), dy.raw(), dx.raw(), x_dims, dtype_, params_, accumulate, scratch,
                           ctx_->stream());
  }

 private:
  kernels::Dims x_dims() const { return {d_.n, d_.c, d_.h, d_.w, layout_ == Layout::kNHWC}; }
  std::uint8_t* kept_argmax() const { return argmax_ ? static_cast<std::uint8_t*>(argmax_->data()) : nullptr; }

  std::shared_ptr<CudaContext> ctx_;
  Pool2dDesc d_;
  DType dtype_;
  Layout layout_;
  kernels::PoolParams params_{};
  bool use_cudnn_ = false;
  std::shared_ptr<Buffer> argmax_;  // Pool2dDesc::keep_argmax: the latest forward's window argmax
  PoolingDescriptor pool_desc_;
  TensorDescriptor x_desc_, y_desc_;
};

// ---- LRN ---------------------------------------------------------------------------------------
class CudaLrn final : public LrnKernel {
 public:
  CudaLrn(std::shared_ptr<CudaContext> ctx, const LrnDesc& d)
      : ctx_(std::move(ctx)),
        d_(d),
        dtype_(ctx_->dtype()),
        layout_(ctx_->layout()),
        params_{d.size, d.alpha, d.beta, d.k} {
    // cuDNN's formula is Caffe's (alpha divided by the window, window starting (size-1)/2 before
    // c). Even windows (asymmetric around c) stay on the own kernel, whose window is the CPU's by
    // construction.
    use_cudnn_ = layout_ == Layout::kNCHW && cudnn_takes(dtype_) && d.size % 2 == 1 &&
                 d.size >= CUDNN_LRN_MIN_N && d.size <= CUDNN_LRN_MAX_N && d.k >= CUDNN_LRN_MIN_K &&
                 d.beta >= CUDNN_LRN_MIN_BETA;
    if (!use_cudnn_) return;
    CNNERGY_CUDA_CALL(
        cudnnSetLRNDescriptor(lrn_desc_, static_cast<unsigned>(d.size), d.alpha, d.beta, d.k));
    set_tensor_4d(desc_, dtype_, layout_, d.n, d.c, d.h, d.w);
  }

  void forward(const Tensor& x, const Tensor& y) override {
    ctx_->activate();
    const Shape shape{d_.n, d_.c, d_.h, d_.w};
    check_device_tensor(x, *ctx_, "lrn forward", "x", shape, dtype_, layout_);
    check_device_tensor(y, *ctx_, "lrn forward", "y", shape, dtype_, layout_);
    if (use_cudnn_) {
      const float one = 1.0f, zero = 0.0f;
      if (cudnn_ran(
              cudnnLRNCrossChannelForward(ctx_->cudnn(), lrn_desc_, CUDNN_LRN_CROSS_CHANNEL_DIM1,
                                          &one, desc_, x.raw(), &zero, desc_, y.raw()),
              "cudnnLRNCrossChannelForward", "lrn"))
        return;
      use_cudnn_ = false;
    }
    kernels::lrn_forward(x.raw(), y.raw(), dims_of(x), dtype_, params_, ctx_->stream());
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                bool accumulate) override {
    ctx_->activate();
    const Shape shape{d_.n, d_.c, d_.h, d_.w};
    check_device_tensor(x, *ctx_, "lrn backward", "x", shape, dtype_, layout_);
    check_device_tensor(y, *ctx_, "lrn backward", "y", shape, dtype_, layout_);
    check_device_tensor(dy, *ctx_, "lrn backward", "dy", shape, dtype_, layout_);
    check_device_tensor(dx, *ctx_, "lrn backward", "dx", shape, dtype_, layout_);
    if (use_cudnn_) {
      const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
      if (cudnn_ran(cudnnLRNCrossChannelBackward(
                        ctx_->cudnn(), lrn_desc_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, desc_,
                        y.raw(), desc_, dy.raw(), desc_, x.raw(), &beta, desc_, dx.raw()),
                    "cudnnLRNCrossChannelBackward", "lrn"))
        return;
      use_cudnn_ = false;
    }
    kernels::lrn_backward(x.raw(), y.raw(), dy.raw(), dx.raw(), dims_of(x), dtype_, params_,
                          accumulate, ctx_->stream());
  }

 private:
  std::shared_ptr<CudaContext> ctx_;
  LrnDesc d_;
  DType dtype_;
  Layout layout_;
  kernels::LrnParams params_;
  bool use_cudnn_ = false;
  LrnDescriptor lrn_desc_;
  TensorDescriptor desc_;
};

// ---- batch norm --------------------------------------------------------------------------------
// cuDNN normalises channel-last tensors whose channel count does not fill 16-byte packs (and
// NCHW tensors of 2^31 elements or more); the own kernels take the rest, and they alone fuse a ReLU
// or a residual add. One fp32 NCHW ResNet-50 step at batch 256 on an H100: cuDNN's batch norms and
// the separate ReLU and add passes took 48.8 + 18.1 ms of kernel time, the plane kernels with those
// passes fused 33.8 + 5.6 ms, and the step ran 13 % faster (docs/benchmarks).
kernels::ChannelView batch_norm_view(const BatchNormDesc& d, Layout layout) {
  const bool flat = d.h == 1 && d.w == 1;  // N,C,1,1 reads the same in both layouts
  return kernels::channel_view({d.n, d.c, d.h, d.w, !flat && layout == Layout::kNHWC});
}
}  // namespace

bool batch_norm_uses_cudnn(const BatchNormDesc& d, DType dtype, Layout layout) {
  const kernels::ChannelView view = batch_norm_view(d, layout);
  const bool own = view.inner == 1 ? kernels::fills_packs(d.c, dtype) : kernels::plane_path_takes(view, dtype);
  return !own && cudnn_takes(dtype) && d.eps >= CUDNN_BN_MIN_EPSILON;
}

namespace {

class CudaBatchNorm final : public BatchNormKernel {
 public:
  CudaBatchNorm(std::shared_ptr<CudaContext> ctx, const BatchNormDesc& d)
      : BatchNormKernel(d.residual), ctx_(std::move(ctx)), d_(d), dtype_(ctx_->dtype()), layout_(ctx_->layout()) {
    flat_ = d.h == 1 && d.w == 1;
    const Layout tensor_layout = flat_ ? Layout::kNCHW : layout_;
    view_ = batch_norm_view(d, layout_);
    use_cudnn_ = batch_norm_uses_cudnn(d, dtype_, layout_);
    if ((d.relu || d.residual) && use_cudnn_)
      throw NotSupported(std::string("batch_norm: a fused ") + (d.residual ? "residual add" : "ReLU") +
                         " needs the backend's own kernels, and cuDNN takes " +
                         std::string(dtype_name(dtype_)) + " " + std::string(layout_name(layout_)) +
                         " with " + std::to_string(d.c) + " channels (ask fuses_batch_norm_" +
                         (d.residual ? "residual" : "relu") + " first)");
    // Forward's own coefficients, kept: a fused ReLU's backward recomputes forward's output from x with
    // them, and recompute_output applies them again (not after a fused residual add: the add's
    // backward masks its gradient itself, and that output is never recomputed).
    if (!d.residual && !use_cudnn_) {
      forward_coef_ = ctx_->scratch(static_cast<std::size_t>(2 * d.c) * sizeof(float));
      eval_coef_ = ctx_->scratch(static_cast<std::size_t>(2 * d.c) * sizeof(float));  // inference_coefficients
    }
    if (use_cudnn_) {
      // cuDNN's exponentialAverageFactor is the contract's momentum, and it keeps the unbiased
      // variance in the running estimate and 1/sqrt(var + eps) as the saved inverse deviation.
      mode_ = flat_ ? CUDNN_BATCHNORM_PER_ACTIVATION : CUDNN_BATCHNORM_SPATIAL;
      set_tensor_4d(x_desc_, dtype_, tensor_layout, d.n, d.c, d.h, d.w);
      CNNERGY_CUDA_CALL(cudnnDeriveBNTensorDescriptor(param_desc_, x_desc_, mode_));
    }
  }

  // The per-channel tensors a training forward reads and updates, and the values it trains with.
  void check_training_params(const char* op, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, const Tensor& saved_mean, const Tensor& saved_inv_std) const {
    for (const auto& [t, name] :
         {std::pair{&gamma, "gamma"}, std::pair{&beta, "beta"},
          std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"},
          std::pair{&saved_mean, "saved_mean"}, std::pair{&saved_inv_std, "saved_inv_std"}})
      check_param(*t, op, name);
    check_training_values();
  }

 protected:
  void training(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta,
                const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor* sums) override {
    ctx_->activate();
    if (sums != nullptr) check_sums(*sums);
    if (z != nullptr) check_activation(*z, "forward_training", "z");
    check_activation(x, "forward_training", "x");
    check_activation(y, "forward_training", "y");
    check_training_params("forward_training", gamma, beta, running_mean, running_var, saved_mean, saved_inv_std);
    if (use_cudnn_) {  // cuDNN reduces x itself: the sums, where given, go unused
      const float one = 1.0f, zero = 0.0f;
      if (cudnn_ran(cudnnBatchNormalizationForwardTraining(
                        ctx_->cudnn(), mode_, &one, &zero, x_desc_, x.raw(), x_desc_, y.raw(),
                        param_desc_, gamma.raw(), beta.raw(), d_.momentum, running_mean.raw(),
                        running_var.raw(), d_.eps, saved_mean.raw(), saved_inv_std.raw()),
                    "cudnnBatchNormalizationForwardTraining", "batch_norm"))
        return;
      use_cudnn_ = false;
    }
    auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view_, dtype_));
    kernels::BatchNormParams bp = params(z);
    if (z != nullptr && d_.relu) bp.relu_mask = relu_mask();
    const bool masked = kernels::batch_norm_forward_training(
        x.raw(), y.raw(), dtype_, view_, f32(gamma), f32(beta), f32(running_mean), f32(running_var),
        f32(saved_mean), f32(saved_inv_std), bp, scratch->data(), ctx_->stream(), forward_coef(),
        sums != nullptr ? f32(*sums) : nullptr);
    relu_mask_of_ = masked ? y.raw() : nullptr;
  }

  // The normalisation handed to a max pool (Backend::fuses_batch_norm_pool: never on cuDNN's path,
  // never with a residual add): training keeps its coefficients where a fused ReLU's backward finds
  // them; evaluation's go to a buffer of their own, so that an evaluation forward leaves them be.
 public:
  NormalisationMap training_coefficients(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         const Tensor& running_mean, const Tensor& running_var,
                                         const Tensor& saved_mean, const Tensor& saved_inv_std,
                                         const Tensor* sums) override {
    ctx_->activate();
    check_hands_on("training_coefficients");
    if (sums != nullptr) check_sums(*sums);
    check_activation(x, "training_coefficients", "x");
    check_training_params("training_coefficients", gamma, beta, running_mean, running_var, saved_mean, saved_inv_std);
    auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view_, dtype_));
    (void)kernels::batch_norm_forward_training(x.raw(), nullptr, dtype_, view_, f32(gamma), f32(beta),
                                               f32(running_mean), f32(running_var), f32(saved_mean),
                                               f32(saved_inv_std), params(nullptr), scratch->data(), ctx_->stream(),
                                               forward_coef(), sums != nullptr ? f32(*sums) : nullptr);
    relu_mask_of_ = nullptr;
    return {forward_coef(), nullptr};
  }

  NormalisationMap inference_coefficients(const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                          const Tensor& running_var) override {
    ctx_->activate();
    check_hands_on("inference_coefficients");
    for (const auto& [t, name] : {std::pair{&gamma, "gamma"}, std::pair{&beta, "beta"},
                                  std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"}})
      check_param(*t, "inference_coefficients", name);
    auto* coef = static_cast<float*>(eval_coef_->data());
    kernels::batch_norm_inference_coefficients(d_.c, f32(gamma), f32(beta), f32(running_mean), f32(running_var),
                                               d_.eps, coef, ctx_->stream());
    return {coef, nullptr};
  }

 protected:
  void inference(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta,
                 const Tensor& running_mean, const Tensor& running_var, const Tensor& y) override {
    ctx_->activate();
    if (z != nullptr) check_activation(*z, "forward_inference", "z");
    check_activation(x, "forward_inference", "x");
    check_activation(y, "forward_inference", "y");
    for (const auto& [t, name] :
         {std::pair{&gamma, "gamma"}, std::pair{&beta, "beta"},
          std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"}})
      check_param(*t, "forward_inference", name);
    if (use_cudnn_) {
      const float one = 1.0f, zero = 0.0f;
      if (cudnn_ran(cudnnBatchNormalizationForwardInference(
                        ctx_->cudnn(), mode_, &one, &zero, x_desc_, x.raw(), x_desc_, y.raw(),
                        param_desc_, gamma.raw(), beta.raw(), running_mean.raw(), running_var.raw(),
                        d_.eps),
                    "cudnnBatchNormalizationForwardInference", "batch_norm"))
        return;
      use_cudnn_ = false;
    }
    auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view_, dtype_));
    kernels::batch_norm_forward_inference(x.raw(), y.raw(), dtype_, view_, f32(gamma), f32(beta),
                                          f32(running_mean), f32(running_var), params(z),
                                          scratch->data(), ctx_->stream());
  }

 public:
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& /*beta*/,
                const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor& dx,
                const Tensor& dgamma, const Tensor& dbeta, bool accumulate) override {
    ctx_->activate();
    check_activation(x, "backward", "x");
    check_activation(dy, "backward", "dy");
    check_activation(dx, "backward", "dx");
    for (const auto& [t, name] : {std::pair{&gamma, "gamma"}, std::pair{&saved_mean, "saved_mean"},
                                  std::pair{&saved_inv_std, "saved_inv_std"},
                                  std::pair{&dgamma, "dgamma"}, std::pair{&dbeta, "dbeta"}})
      check_param(*t, "backward", name);
    if (use_cudnn_) {
      const float one = 1.0f, zero = 0.0f, data_beta = accumulate ? 1.0f : 0.0f;
      if (cudnn_ran(cudnnBatchNormalizationBackward(
                        ctx_->cudnn(), mode_, &one, &data_beta, &one, &zero, x_desc_, x.raw(),
                        x_desc_, dy.raw(), x_desc_, dx.raw(), param_desc_, gamma.raw(),
                        dgamma.raw(), dbeta.raw(), d_.eps, saved_mean.raw(), saved_inv_std.raw()),
                    "cudnnBatchNormalizationBackward", "batch_norm"))
        return;
      use_cudnn_ = false;
    }
    auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view_, dtype_));
    kernels::batch_norm_backward(x.raw(), dy.raw(), dx.raw(), dtype_, view_, f32(gamma),
                                 f32(saved_mean), f32(saved_inv_std), f32(dgamma), f32(dbeta),
                                 d_.relu && !d_.residual ? forward_coef() : nullptr, accumulate, scratch->data(),
                                 ctx_->stream());
  }

  // The add's mask in the reduction's pass on the tiled and plane paths
  // (kernels::batch_norm_backward_masking; else its relu_backward and then backward).
  bool backward_masking(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                        const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor& dx,
                        const Tensor& dgamma, const Tensor& dbeta, bool accumulate) override {
    if (!d_.residual || !d_.relu)
      throw InvalidArgument("batch_norm: backward_masking needs a kernel made with a residual add and a ReLU");
    ctx_->activate();
    for (const auto& [t, name] : {std::pair{&x, "x"}, std::pair{&y, "y"}, std::pair{&dy, "dy"}, std::pair{&dx, "dx"}})
      check_activation(*t, "backward_masking", name);
    for (const auto& [t, name] : {std::pair{&gamma, "gamma"}, std::pair{&saved_mean, "saved_mean"},
                                  std::pair{&saved_inv_std, "saved_inv_std"},
                                  std::pair{&dgamma, "dgamma"}, std::pair{&dbeta, "dbeta"}})
      check_param(*t, "backward_masking", name);
    auto scratch = ctx_->scratch(kernels::channel_reduce_scratch_bytes(view_, dtype_));
    // Forward's mask of this y where it wrote one (BatchNormKernel::backward_masking's contract: y
    // holds what the latest forward_training_residual wrote there).
    const auto* mask = relu_mask_of_ != nullptr && relu_mask_of_ == y.raw()
                           ? static_cast<const std::uint8_t*>(relu_mask_->data())
                           : nullptr;
    kernels::batch_norm_backward_masking(x.raw(), y.raw(), dy.raw(), dx.raw(), dtype_, view_, f32(gamma),
                                         f32(saved_mean), f32(saved_inv_std), f32(dgamma), f32(dbeta), accumulate,
                                         scratch->data(), ctx_->stream(), mask);
    return true;
  }

 protected:
  // The coefficients forward_training kept (use_cudnn_ is never set for a kernel that has them:
  // Backend::recomputes_batch_norm_output asks batch_norm_uses_cudnn first).
  void reapply(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& saved_mean,
               const Tensor& saved_inv_std, const Tensor& y) override {
    (void)gamma, (void)beta, (void)saved_mean, (void)saved_inv_std;  // all in the kept coefficients
    ctx_->activate();
    check_activation(x, "recompute_output", "x");
    check_activation(y, "recompute_output", "y");
    if (!forward_coef_ || use_cudnn_)
      throw NotSupported("batch_norm: recompute_output needs the backend's own kernels (" +
                         std::string(dtype_name(dtype_)) + " " + std::string(layout_name(layout_)) + " with " +
                         std::to_string(d_.c) + " channels runs cuDNN's; ask recomputes_batch_norm_output first)");
    kernels::batch_norm_reapply(x.raw(), y.raw(), dtype_, view_, forward_coef(), d_.relu, ctx_->stream());
  }

 private:
  static float* f32(const Tensor& t) { return static_cast<float*>(t.raw()); }
  kernels::BatchNormParams params(const Tensor* z) const {
    return {d_.eps, d_.momentum, d_.relu, z != nullptr ? z->raw() : nullptr};
  }
  float* forward_coef() const {
    return forward_coef_ ? static_cast<float*>(forward_coef_->data()) : nullptr;
  }
  void check_training_values() const {
    if (view_.per_channel() < 2)
      throw InvalidArgument("batch_norm: training needs more than one value per channel (batch " +
                            std::to_string(d_.n) + " x " + std::to_string(d_.h * d_.w) +
                            " positions)");
  }
  void check_hands_on(const char* what) const {
    if (use_cudnn_ || d_.residual || !forward_coef_)
      throw NotSupported(std::string("batch_norm: ") + what +
                         " needs the backend's own kernels and no fused residual add (ask fuses_batch_norm_pool first)");
  }
  // The fused add's ReLU mask buffer, allocated at the first training forward outside a CUDA graph
  // capture (inference never needs it); null where the view has no tiled path or while capturing
  // before it exists (the backward then reads y).
  std::uint8_t* relu_mask() {
    if (!relu_mask_) {
      const std::size_t bytes = kernels::batch_norm_relu_mask_bytes(view_, dtype_);
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      CNNERGY_CUDA_CALL(cudaStreamIsCapturing(ctx_->stream(), &capture));
      if (bytes == 0 || capture != cudaStreamCaptureStatusNone) return nullptr;
      relu_mask_ = ctx_->scratch(bytes);
    }
    return static_cast<std::uint8_t*>(relu_mask_->data());
  }

  // 4-D (N, C, H, W) in the backend's layout; with H = W = 1 also 2-D (N, C) or 4-D in any layout
  // (one value per channel and sample reads the same in both).
  void check_activation(const Tensor& t, const char* fn, const char* name) const {
    const std::string op = std::string("batch_norm ") + fn;
    if (!flat_) {
      check_device_tensor(t, *ctx_, op.c_str(), name, Shape{d_.n, d_.c, d_.h, d_.w}, dtype_,
                          layout_);
      return;
    }
    check_device_tensor(t, *ctx_, op.c_str(), name);
    if (t.numel() != d_.n * d_.c || t.shape()[0] != d_.n || t.dtype() != dtype_)
      throw ShapeError(op + ": " + name + " must be " + std::string(dtype_name(dtype_)) + " " +
                       Shape{d_.n, d_.c}.str() + ", got " + t.describe());
  }
  void check_sums(const Tensor& t) const {
    check_device_tensor(t, *ctx_, "batch_norm forward_training", "sums");
    if (t.numel() != 2 * d_.c || t.dtype() != DType::kF32)
      throw ShapeError("batch_norm forward_training: sums must be fp32 with " + std::to_string(2 * d_.c) +
                       " elements, got " + t.describe());
  }
  void check_param(const Tensor& t, const char* fn, const char* name) const {
    const std::string op = std::string("batch_norm ") + fn;
    check_device_tensor(t, *ctx_, op.c_str(), name);
    if (t.numel() != d_.c || t.dtype() != DType::kF32)
      throw ShapeError(op + ": " + name + " must be fp32 with " + std::to_string(d_.c) +
                       " elements, got " + t.describe());
  }

  std::shared_ptr<CudaContext> ctx_;
  BatchNormDesc d_;
  DType dtype_;
  Layout layout_;
  bool flat_ = false;
  kernels::ChannelView view_;
  bool use_cudnn_ = false;
  cudnnBatchNormMode_t mode_ = CUDNN_BATCHNORM_SPATIAL;
  TensorDescriptor x_desc_, param_desc_;
  std::shared_ptr<Buffer> forward_coef_;  // fused ReLU: the latest forward_training's scale, shift
  std::shared_ptr<Buffer> relu_mask_;     // fused add + ReLU: the latest training output's mask
  const void* relu_mask_of_ = nullptr;    // the y that mask is of (null: none written)
  std::shared_ptr<Buffer> eval_coef_;     // inference_coefficients' scale, shift (with forward_coef_)
};

// ---- softmax cross-entropy ---------------------------------------------------------------------
class CudaSoftmaxXent final : public SoftmaxXentKernel {
 public:
  CudaSoftmaxXent(std::shared_ptr<CudaContext> ctx, const SoftmaxXentDesc& d)
      : ctx_(std::move(ctx)),
        d_(d),
        dtype_(ctx_->dtype()),
        row_loss_(ctx_->scratch(static_cast<std::size_t>(d.n) * sizeof(float))) {}

  // Labels are not checked on the host (that would need a copy and a wait): a label outside
  // [0, classes) makes the loss NaN, which check_finite and the trainer see.
  void forward(const Tensor& logits, const Tensor& labels, const Tensor& probs,
               const Tensor& loss) override {
    ctx_->activate();
    check_device_tensor(logits, *ctx_, "softmax_xent forward", "logits", Shape{d_.n, d_.classes},
                        dtype_, Layout::kNCHW);
    check_labels(labels, "forward");
    check_device_tensor(probs, *ctx_, "softmax_xent forward", "probs", Shape{d_.n, d_.classes},
                        DType::kF32, Layout::kNCHW);
    check_device_tensor(loss, *ctx_, "softmax_xent forward", "loss");
    if (loss.numel() != 1 || loss.dtype() != DType::kF32)
      throw ShapeError("softmax_xent forward: loss must be one fp32 value, got " + loss.describe());
    kernels::softmax_xent_forward(
        logits.raw(), dtype_, labels.data<std::int32_t>(), static_cast<float*>(probs.raw()),
        static_cast<float*>(row_loss_->data()), static_cast<float*>(loss.raw()), d_.n, d_.classes,
        ctx_->stream());
  }

  void backward(const Tensor& probs, const Tensor& labels, float loss_scale,
                const Tensor& dlogits) override {
    ctx_->activate();
    check_device_tensor(probs, *ctx_, "softmax_xent backward", "probs", Shape{d_.n, d_.classes},
                        DType::kF32, Layout::kNCHW);
    check_labels(labels, "backward");
    check_device_tensor(dlogits, *ctx_, "softmax_xent backward", "dlogits", Shape{d_.n, d_.classes},
                        dtype_, Layout::kNCHW);
    const auto scale =
        static_cast<float>(static_cast<double>(loss_scale) / static_cast<double>(d_.n));
    kernels::softmax_xent_backward(static_cast<const float*>(probs.raw()),
                                   labels.data<std::int32_t>(), scale, dlogits.raw(), dtype_, d_.n,
                                   d_.classes, ctx_->stream());
  }

 private:
  void check_labels(const Tensor& labels, const char* fn) const {
    const std::string op = std::string("softmax_xent ") + fn;
    check_device_tensor(labels, *ctx_, op.c_str(), "labels");
    if (labels.numel() != d_.n || labels.dtype() != DType::kI32)
      throw ShapeError(op + ": labels must be int32 with " + std::to_string(d_.n) +
                       " elements, got " + labels.describe());
  }

  std::shared_ptr<CudaContext> ctx_;
  SoftmaxXentDesc d_;
  DType dtype_;
  std::shared_ptr<Buffer> row_loss_;
};

}  // namespace

std::unique_ptr<PoolKernel> make_cuda_pool(std::shared_ptr<CudaContext> ctx, const Pool2dDesc& d) {
  const char* op = "pool2d";
  at_least(d.n, 1, op, "batch size");
  at_least(d.c, 1, op, "channels");
  at_least(d.h, 1, op, "input height");
  at_least(d.w, 1, op, "input width");
  at_least(d.kernel_h, 1, op, "kernel_h");
  at_least(d.kernel_w, 1, op, "kernel_w");
  at_least(d.stride_h, 1, op, "stride_h");
  at_least(d.stride_w, 1, op, "stride_w");
  at_least(d.pad_h, 0, op, "pad_h");
  at_least(d.pad_w, 0, op, "pad_w");
  if (d.pad_h >= d.kernel_h || d.pad_w >= d.kernel_w)
    throw InvalidArgument("pool2d: padding " + std::to_string(d.pad_h) + "x" +
                          std::to_string(d.pad_w) + " must be smaller than the window " +
                          std::to_string(d.kernel_h) + "x" + std::to_string(d.kernel_w));
  if (d.h + 2 * d.pad_h < d.kernel_h || d.w + 2 * d.pad_w < d.kernel_w)
    throw ShapeError("pool2d: the " + std::to_string(d.kernel_h) + "x" +
                     std::to_string(d.kernel_w) + " window does not fit the padded input " +
                     std::to_string(d.h) + "x" + std::to_string(d.w));
  return std::make_unique<CudaPool>(std::move(ctx), d);
}

std::unique_ptr<LrnKernel> make_cuda_lrn(std::shared_ptr<CudaContext> ctx, const LrnDesc& d) {
  const char* op = "lrn";
  at_least(d.n, 1, op, "batch size");
  at_least(d.c, 1, op, "channels");
  at_least(d.h, 1, op, "height");
  at_least(d.w, 1, op, "width");
  at_least(d.size, 1, op, "size");
  if (!(d.k > 0.0) || !(d.alpha >= 0.0) || !std::isfinite(d.beta))
    throw InvalidArgument(
        "lrn: needs k > 0, alpha >= 0 and a finite beta (got k=" + std::to_string(d.k) +
        ", alpha=" + std::to_string(d.alpha) + ", beta=" + std::to_string(d.beta) + ")");
  return std::make_unique<CudaLrn>(std::move(ctx), d);
}

std::unique_ptr<BatchNormKernel> make_cuda_batch_norm(std::shared_ptr<CudaContext> ctx,
                                                      const BatchNormDesc& d) {
  const char* op = "batch_norm";
  at_least(d.n, 1, op, "batch size");
  at_least(d.c, 1, op, "channels");
  at_least(d.h, 1, op, "height");
  at_least(d.w, 1, op, "width");
  if (!(d.eps > 0.0) || !(d.momentum >= 0.0 && d.momentum <= 1.0))
    throw InvalidArgument("batch_norm: needs eps > 0 and momentum in [0, 1] (got eps=" +
                          std::to_string(d.eps) + ", momentum=" + std::to_string(d.momentum) + ")");
  return std::make_unique<CudaBatchNorm>(std::move(ctx), d);
}

std::unique_ptr<SoftmaxXentKernel> make_cuda_softmax_xent(std::shared_ptr<CudaContext> ctx,
                                                          const SoftmaxXentDesc& d) {
  at_least(d.n, 1, "softmax_xent", "batch size");
  at_least(d.classes, 1, "softmax_xent", "classes");
  return std::make_unique<CudaSoftmaxXent>(std::move(ctx), d);
}

}  // namespace cnnergy::cuda
