// The kernel contracts every backend implements: plain descriptors (sizes and hyper-parameters) and
// one kernel interface per operation. Layers (src/layers) own parameters and shapes and call these;
// backends (src/backend/cpu, src/backend/cuda) implement them. The CPU backend is the reference.
//
// Conventions for every kernel:
// * Tensors are views; outputs are passed as `const Tensor&` and written in place. An absent
//   optional tensor is a default-constructed (undefined) Tensor.
// * 4-D activations are logical N,C,H,W; their memory layout is the tensor's layout (NCHW or NHWC).
//   2-D activations are (N, F). A convolution's working weight has logical shape (K, C/g, R, S) and
//   the backend's layout (NHWC-tagged weights are stored K, R, S, C/g, as cuDNN's NHWC filters). Activations, working weights and their gradients use the backend's
//   activation dtype; batch-norm parameters/statistics, master weights, momentum and the loss are fp32.
// * `accumulate == true` means dx += result (a tensor consumed by several layers, e.g. a residual);
//   false means dx = result.
// * Kernels are enqueued on the backend's stream and never wait for the host.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/activation_kind.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"

namespace cnnergy {

// ---- convolution ---------------------------------------------------------------------------------
struct Conv2dDesc {
  std::int64_t n = 1, c = 1, h = 1, w = 1;  // input
  std::int64_t k = 1;                       // output channels
  std::int64_t r = 1, s = 1;                // kernel height, width
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
  bool bias = true;
  // y = max(0, conv + b): the ReLU after a convolution with a bias, fused into its forward (set only
  // where Backend::fuses_conv_relu(desc) holds; see net/executor.hpp). The backward passes stay the
  // convolution's alone: the layer masks the output gradient by the output before calling them.
  bool relu = false;
  // y = relu?(conv + b + z): the residual add after a folded inference convolution, fused (set only
  // where Backend::fuses_conv_residual(desc) holds; the kernel then runs forward_residual).
  bool residual = false;
  // The batch norm after a training convolution without a bias takes its statistics from the
  // convolution (set only where Backend::fuses_conv_statistics(desc) holds): forward_statistics
  // may write the per-channel sum and sum of squares of y along with y.
  bool statistics = false;
  // Whether backward_data will be called (false: the convolution's input takes no gradient, as a
  // network's first does). Kernels then neither search nor plan a workspace for it; it still runs,
  // resolved then, if called.
  bool data_gradient = true;

  // The fewest values per output channel (n x out_h x out_w) whose statistics a convolution is
  // offered: the variance from fp32 sums, E[y^2] - E[y]^2, loses the digits the mean shares with
  // the values, and with a handful of values per channel the variance can be tiny beside the mean
  // by chance (ResNet-50's last stage at 32x32 images and batch 2: two values, gradients off by
  // tens of percent). Such small channels gain nothing from the fusion either.
  static constexpr std::int64_t kMinStatisticsValues = 256;
  bool statistics_well_conditioned() const { return n * out_h() * out_w() >= kMinStatisticsValues; }

  std::int64_t out_h() const { return (h + pad_top + pad_bottom - dilation_h * (r - 1) - 1) / stride_h + 1; }
  std::int64_t out_w() const { return (w + pad_left + pad_right - dilation_w * (s - 1) - 1) / stride_w + 1; }
  Shape input_shape() const { return {n, c, h, w}; }
  Shape weight_shape() const { return {k, c / groups, r, s}; }  // always K, C/g, R, S (logical)
  Shape output_shape() const { return {n, k, out_h(), out_w()}; }
};

// Which algorithm a convolution uses. Empty strings mean "the run's policy" (BackendOptions).
// Names: CPU "reference" | "im2col_gemm"; CUDA "auto" | "find" | "heuristic" | "graph_find" |
// "graph_heuristic" | a cuDNN algorithm name.
struct ConvAlgoChoice {
  std::string forward;
  std::string backward_data;
  std::string backward_filter;
};

// What a convolution kernel actually runs, for `model-info --show-algos` and the results store.
struct ConvAlgoInfo {
  std::string forward, backward_data, backward_filter;  // algorithm names
  std::string math_type;                                // "fp32", "tf32", "tensor_op", ...
  std::size_t workspace_bytes = 0;                      // largest of the three
  std::vector<std::string> notes;                       // e.g. "winograd unsupported for 7x7, fell back to ..."
};

class ConvKernel {
 public:
  virtual ~ConvKernel() = default;
  // y = conv(x, w) + b (b undefined when desc.bias is false)
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) = 0;
  virtual void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) = 0;
  // dw = dW(x, dy); db = sum of dy over N,H,W. Overwrites dw and db. db undefined: no bias, or the
  // caller computed it (Backend::relu_backward_bias_grad); the kernel then leaves the bias alone.
  virtual void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) = 0;
  virtual ConvAlgoInfo info() const = 0;
  // The most workspace any call of this kernel asks the backend for (Backend::set_conv_workspace),
  // after info() has resolved its algorithms; 0 where its calls take none from there.
  virtual std::size_t workspace_bound() const { return 0; }
  // From now until the next call, forward() is given the same weight tensor with unchanged values
  // (an inference convolution's folded weights; the layer calls it again after each refold). A
  // kernel may then keep the weights prepared (the CPU's oneDNN path: reordered once) instead of
  // preparing them per call. Never called for weights that training updates.
  virtual void hold_weights() {}
  // Whether forward() runs the convolution with its bias (and fused ReLU) as one fused kernel
  // (BackendOptions::conv_epilogue_fusion, once the first forward has decided).
  virtual bool epilogue_fused() const { return false; }
  // y = relu?(conv(x, w) + b + z) for a kernel made with desc.residual (z has y's shape). Only
  // kernels of backends whose fuses_conv_residual holds implement it.
  virtual void forward_residual(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& z,
                                const Tensor& y);
  // A kernel made with desc.statistics: y = conv(x, w) (no bias), and where the kernel computes them
  // with the convolution (CUDA: cuDNN's fused graph, where it measures faster than the batch norm's
  // own statistics pass), sums[k] = the sum of y's channel k and sums[K + k] the sum of its squares
  // (fp32, 2K values, as the kernel wrote y). Returns whether it wrote the sums; when not, the batch
  // norm computes its statistics itself. The base runs forward() and writes none.
  virtual bool forward_statistics(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& sums);
};

// ---- fully connected -----------------------------------------------------------------------------
struct LinearDesc {
  std::int64_t n = 1, in_features = 1, out_features = 1;
  bool bias = true;
};

class LinearKernel {
 public:
  virtual ~LinearKernel() = default;
  // x (N, in), w (out, in), b (out), y (N, out): y = x w^T + b
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) = 0;
  virtual void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate) = 0;
  virtual void backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db) = 0;
};

// ---- pooling -------------------------------------------------------------------------------------
enum class PoolMode {
  kMax,
  kAvgIncludePad,  // divisor = window clipped to the padded input (Caffe / PyTorch count_include_pad)
  kAvgExcludePad,  // divisor = number of real input elements in the window
};

struct Pool2dDesc {
  std::int64_t n = 1, c = 1, h = 1, w = 1;
  std::int64_t kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  bool ceil_mode = false;  // Caffe-era output size: ceil, dropping a last window that starts in the padding
  PoolMode mode = PoolMode::kMax;
  // Training: a max pool's kernel may keep each output's window argmax from its forward, so that its
  // backward reads neither x nor y (PoolKernel::keeps_argmax).
  bool keep_argmax = false;
  // Training, with keep_argmax: the input is a batch norm's input, normalised as the pool reads it
  // (PoolKernel::forward_normalised); only where Backend::fuses_batch_norm_pool says so.
  bool normalised = false;
  // Training, with keep_argmax: the ReLU fused into the layer before the pool (its output the pool's
  // input) is applied to the gradient here instead of by that layer: backward routes an output's
  // gradient to its argmax only where the output is positive (there the ReLU's output is the pool's
  // output, and every other position's gradient is zero anyway), reading y. Only where
  // Backend::pools_relu_mask says so (PoolKernel::applies_relu_mask).
  bool relu_mask = false;

  std::int64_t out_h() const { return out_size(h, kernel_h, stride_h, pad_h); }
  std::int64_t out_w() const { return out_size(w, kernel_w, stride_w, pad_w); }
  Shape output_shape() const { return {n, c, out_h(), out_w()}; }

 private:
  std::int64_t out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p) const {
    const std::int64_t span = in + 2 * p - k;
    if (span < 0) return 0;  // window larger than the padded input: no output
    std::int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && p > 0 && (out - 1) * s >= in + p) --out;
    return out;
  }
};

// A batch norm's normalisation y = relu?(x * scale + shift) as its backend computed it, for that
// backend's max pool (BatchNormKernel::training_coefficients, PoolKernel::forward_normalised): per
// channel scale[C] then shift[C], in the precision the backend's batch norm applies them (CUDA: f32, on
// the device; the CPU: f64, in host memory), valid until the batch norm's next forward.
struct NormalisationMap {
  const float* f32 = nullptr;
  const double* f64 = nullptr;
  bool defined() const { return f32 != nullptr || f64 != nullptr; }
};

class PoolKernel {
 public:
  virtual ~PoolKernel() = default;
  virtual void forward(const Tensor& x, const Tensor& y) = 0;
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx, bool accumulate) = 0;
  // True for a kernel made with Pool2dDesc::keep_argmax that keeps it: every forward writes each
  // output's window argmax (a byte per output) into the kernel, and backward reads that (the latest
  // forward's) instead of x and y, which may then be passed undefined.
  virtual bool keeps_argmax() const { return false; }
  // True for a kernel made with Pool2dDesc::relu_mask that applies it: backward then needs y.
  virtual bool applies_relu_mask() const { return false; }
  // The most of the backend's convolution workspace (Backend::set_conv_workspace) a backward call asks
  // for (its window argmax, where it neither keeps one nor runs cuDNN's); 0 where none.
  virtual std::size_t workspace_bound() const { return 0; }
  // A kernel made with Pool2dDesc::normalised: forward of the batch norm's output, reading the batch
  // norm's input x instead: each value is normalised as it is read, round(relu?(x * scale + shift))
  // per channel with map (BatchNormKernel::training_coefficients or inference_coefficients of this
  // backend) and the batch norm's fused ReLU where relu, exactly what the batch norm would have
  // stored. y and the kept argmax are forward's of that output.
  virtual void forward_normalised(const Tensor& x, const NormalisationMap& map, bool relu, const Tensor& y);
};

// ---- local response normalisation (across channels, Caffe/AlexNet) --------------------------------
// y = x / (k + alpha / size * sum_{c' in window(c)} x_{c'}^2)^beta
struct LrnDesc {
  std::int64_t n = 1, c = 1, h = 1, w = 1;
  std::int64_t size = 5;
  double alpha = 1e-4, beta = 0.75, k = 1.0;
};

class LrnKernel {
 public:
  virtual ~LrnKernel() = default;
  virtual void forward(const Tensor& x, const Tensor& y) = 0;
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx, bool accumulate) = 0;
};

// ---- batch normalisation (per channel for 4-D, per feature for 2-D) -------------------------------
struct BatchNormDesc {
  std::int64_t n = 1, c = 1, h = 1, w = 1;  // 2-D inputs use h = w = 1
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch; variance unbiased
  // A ReLU fused into the output: y = max(0, bn(x)), and backward takes dy of that output. Backward
  // recomputes the ReLU's mask from x (exactly as forward rounded it) with the coefficients of the
  // latest forward_training, so no activation more is kept. Only where
  // Backend::fuses_batch_norm_relu(desc) says so.
  bool relu = false;
  // The residual add after the batch norm fused into its output (training, and evaluation without
  // folding; the executor offers it where Backend::fuses_batch_norm_residual holds):
  // forward_training_residual / forward_inference_residual write y = act(bn(x) + z), act the add's
  // fused ReLU where relu is also set, rounding bn(x) to the activation dtype before the add exactly
  // as the separate pair does. Backward stays the plain batch norm's (relu ignored): its dy is the
  // gradient of bn(x), which the add's own backward, still run, masks and hands on.
  bool residual = false;
};

class BatchNormKernel {
 public:
  // residual: made with BatchNormDesc::residual (the entry points below check the calls against it).
  explicit BatchNormKernel(bool residual) : residual_(residual) {}
  virtual ~BatchNormKernel() = default;
  // gamma, beta, running_mean, running_var, saved_mean, saved_inv_std: fp32, shape (C).
  // sums (optional): x's per-channel sum then sum of squares (fp32, 2C values), as the convolution
  // that wrote x computed them (ConvKernel::forward_statistics); the batch statistics then come
  // from them (mean = sum / M, biased variance = sum of squares / M - mean^2) instead of a pass over x.
  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                        const Tensor& running_var, const Tensor& y, const Tensor& saved_mean,
                        const Tensor& saved_inv_std, const Tensor* sums = nullptr) {
    check_residual_given(false);
    training(x, nullptr, gamma, beta, running_mean, running_var, y, saved_mean, saved_inv_std, sums);
  }
  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                         const Tensor& running_var, const Tensor& y) {
    check_residual_given(false);
    inference(x, nullptr, gamma, beta, running_mean, running_var, y);
  }
  // BatchNormDesc::residual: as forward_training / forward_inference, then y = act(y + z) in the
  // same pass (z: x's shape, dtype and layout). A kernel made with a residual add takes only these
  // two, one made without only the two above (InvalidArgument otherwise).
  void forward_training_residual(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                                 const Tensor& saved_mean, const Tensor& saved_inv_std,
                                 const Tensor* sums = nullptr) {
    check_residual_given(true);
    training(x, &z, gamma, beta, running_mean, running_var, y, saved_mean, saved_inv_std, sums);
  }
  void forward_inference_residual(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& running_mean, const Tensor& running_var, const Tensor& y) {
    check_residual_given(true);
    inference(x, &z, gamma, beta, running_mean, running_var, y);
  }
  // Writes the latest forward_training's y again from the same x, bit for bit (its ReLU included),
  // with the coefficients that forward used: the executor's recomputation, which drops y after
  // forward and rebuilds it just before the first backward that reads it (ExecutorOptions::
  // activation_budget_bytes). Not after a fused residual add (InvalidArgument), and only where
  // Backend::recomputes_batch_norm_output(desc) holds. gamma, beta, saved_*: as forward_training's.
  void recompute_output(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& saved_mean,
                        const Tensor& saved_inv_std, const Tensor& y) {
    check_residual_given(false);
    reapply(x, gamma, beta, saved_mean, saved_inv_std, y);
  }
  // Batch-norm apply fusion (Backend::fuses_batch_norm_pool): forward_training / forward_inference
  // without y, whose normalisation a max pool then applies as it reads x (PoolKernel::
  // forward_normalised). Training: the batch statistics (from sums where given), running averages
  // and saved values as forward_training computes them; evaluation: the running averages' map.
  // Returns the map y = relu?(x * scale + shift) (NormalisationMap), valid until the kernel's next
  // forward. Backward runs as after forward_training.
  virtual NormalisationMap training_coefficients(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                                 const Tensor& running_mean, const Tensor& running_var,
                                                 const Tensor& saved_mean, const Tensor& saved_inv_std,
                                                 const Tensor* sums);
  virtual NormalisationMap inference_coefficients(const Tensor& gamma, const Tensor& beta,
                                                  const Tensor& running_mean, const Tensor& running_var);
  // dgamma, dbeta overwritten; dx overwritten or accumulated. beta is read only with a fused ReLU
  // (by backends that recompute forward's coefficients rather than keep them).
  virtual void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                        const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor& dx,
                        const Tensor& dgamma, const Tensor& dbeta, bool accumulate) = 0;
  // A kernel made with a residual add and a ReLU (BatchNormDesc::residual and relu), where it can:
  // the add's ReLU backward and then backward, in fewer passes than Backend::relu_backward(y, dy, dy)
  // followed by backward, with the same values bit for bit. dy (the add's output gradient, which the
  // add's other input may share) is overwritten with dy where y (forward's output) is positive and +0
  // elsewhere; the rest as backward. Returns false, having done nothing, where the kernel has no
  // such pass (the caller then runs the two). Where y is the tensor this kernel's latest
  // forward_training_residual wrote, it must still hold those values: a backend may read a mask it
  // kept of them instead (the CUDA tiled path: 1/16 of y's bytes).
  virtual bool backward_masking(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                                const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor& dx,
                                const Tensor& dgamma, const Tensor& dbeta, bool accumulate) {
    (void)x, (void)y, (void)dy, (void)gamma, (void)saved_mean, (void)saved_inv_std, (void)dx, (void)dgamma,
        (void)dbeta, (void)accumulate;
    return false;
  }

 protected:
  // The backend's forward passes; z: the fused residual add's other input, null without one (the
  // entry points above have checked that it comes exactly when the kernel was made with one); sums:
  // the statistics' sums, null when training reduces x itself.
  virtual void training(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta,
                        const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                        const Tensor& saved_mean, const Tensor& saved_inv_std, const Tensor* sums) = 0;
  virtual void inference(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta,
                         const Tensor& running_mean, const Tensor& running_var, const Tensor& y) = 0;
  virtual void reapply(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& saved_mean,
                       const Tensor& saved_inv_std, const Tensor& y) = 0;

 private:
  void check_residual_given(bool given) const;
  bool residual_;
};

// ---- softmax + cross-entropy loss -----------------------------------------------------------------
struct SoftmaxXentDesc {
  std::int64_t n = 1, classes = 2;
};

class SoftmaxXentKernel {
 public:
  virtual ~SoftmaxXentKernel() = default;
  // logits (N, K) activation dtype; labels int32 (N); probs fp32 (N, K); loss fp32 (1): mean over N.
  virtual void forward(const Tensor& logits, const Tensor& labels, const Tensor& probs, const Tensor& loss) = 0;
  // dlogits = loss_scale * (probs - onehot(labels)) / N
  virtual void backward(const Tensor& probs, const Tensor& labels, float loss_scale, const Tensor& dlogits) = 0;
};

// ---- optimiser -----------------------------------------------------------------------------------
struct SgdStep {
  float learning_rate = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  float inv_grad_scale = 1.0f;  // gradients are multiplied by this first (1 / loss scale)
};
// One parameter of Backend::sgd_update_all: sgd_update's tensors and its weight decay.
struct SgdUpdate {
  Tensor master, grad, momentum, working;
  float weight_decay = 0.0f;
};

// ---- the backend ---------------------------------------------------------------------------------
// Whether a training convolution computes the statistics of the batch norm that reads its output
// (BackendOptions::conv_statistics_fusion).
enum class StatisticsFusion {
  kOff,          // the batch norm reduces its input itself
  kWhereFaster,  // per layer, where the backend measures the fused form faster (the default)
  kAlways,       // wherever the backend can run the fused form, faster or not (to study it)
};
// The --fuse-statistics word for each: off, on, always.
inline const char* statistics_fusion_name(StatisticsFusion f) {
  return f == StatisticsFusion::kOff ? "off" : f == StatisticsFusion::kAlways ? "always" : "on";
}

struct BackendOptions {
  Device device;
  DType dtype = DType::kF32;          // activation/working-weight type: fp32, fp16 or bf16
  bool allow_tf32 = false;            // fp32 math on tensor cores (precision "tf32")
  Layout layout = Layout::kNCHW;      // layout of 4-D activations
  std::size_t workspace_limit_bytes = std::size_t{4} << 30;  // cap for convolution workspaces
  std::string conv_algo_policy = "auto";  // CUDA: auto | find | heuristic | graph_find | graph_heuristic | <algorithm name>; CPU ignores
  // graph_find and auto: how many engines of cuDNN's ranking are timed (besides a few of its
  // fallback list); more finds faster kernels, fewer searches faster (PyTorch's
  // torch.backends.cudnn.benchmark_limit, whose default is also 10).
  std::size_t conv_search_candidates = 10;
  bool conv_algo_fallback = true;     // a named algorithm that cannot run a shape falls back (else error)
  // CUDA: a forward convolution with a bias may run as one cuDNN fused graph (conv + bias, + the
  // fused ReLU), where an engine runs it and it measures faster than the convolution and its bias
  // pass (backend/cuda/conv_epilogue_plan.hpp). On, as the commands run (--fuse-epilogue); the
  // first plan of a shape can take a second to compile.
  bool conv_epilogue_fusion = true;
  // CUDA, NHWC: a strided forward convolution over few channels (a network's first layer: AlexNet's
  // 11x11/4 over 3 channels, ResNet's 7x7/2) may run as a stride-1 convolution over C*S*S channels
  // of its input rearranged space-to-depth, where that measures faster (conv_space_to_depth.hpp).
  // On, as the commands run (--space-to-depth).
  bool conv_space_to_depth = true;
  // Training: a convolution without a bias whose output only a batch norm reads may compute that
  // batch norm's statistics (Conv2dDesc::statistics; CUDA: cuDNN's convolution + GenStats graph,
  // taken per layer where it measures faster than the forward and the batch norm's statistics pass;
  // cuDNN 9.19 on Hopper has a pre-compiled engine for it in fp16 NHWC only, and only there is it
  // offered; CPU: the sums after the forward). --fuse-statistics on|off|always.
  StatisticsFusion conv_statistics_fusion = StatisticsFusion::kWhereFaster;
  // CUDA: directory of the persistent algorithm cache (core/algo_cache.hpp); empty: none, every
  // process searches anew. Commands fill it from --algo-cache (resolve_algo_cache_dir).
  std::string algo_cache_dir;
};

// The convolution algorithm search of one backend so far (CUDA; zeros elsewhere).
struct AlgoSearchStats {
  double search_ms = 0;        // wall time spent searching (timing candidates), all problems
  std::size_t searched = 0;    // problems searched
  std::size_t cached = 0;      // decisions taken from the persistent cache instead
  std::string cache_path;      // the persistent cache file; empty when off
};

// Device-side timestamps for phase timing: record() enqueues; elapsed_ms() waits for both events.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual void record() = 0;
  virtual void synchronize() = 0;
  virtual bool ready() const = 0;                      // completed, without waiting
  virtual double elapsed_ms(const DeviceEvent& since) const = 0;
};

// Device work recorded once and replayed with one launch (a CUDA graph): what
// Backend::capture() returns. The recorded kernels keep the arguments they were enqueued with
// (scalars, tensor addresses), so a replay repeats exactly that work on whatever those tensors
// hold at the time.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;  // enqueued on the compute stream, asynchronous like the kernels
  virtual std::size_t node_count() const = 0;
};

struct MemoryStats {
  std::size_t in_use_bytes = 0;
  std::size_t peak_bytes = 0;
  std::size_t total_bytes = 0;  // device capacity (0 where unknown)
  std::size_t conv_workspace_bytes = 0;  // the convolutions' shared workspace, part of in_use (GPU)
  // Calls that asked for more workspace than the region set for them (Backend::set_conv_workspace),
  // served from the shared workspace instead, and the most one asked (GPU).
  std::size_t conv_workspace_overflows = 0;
  std::size_t conv_workspace_overflow_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;                // "cpu" or "cuda"
  virtual std::string device_name() const = 0;         // "NVIDIA H200", CPU model, ...
  virtual const BackendOptions& options() const = 0;
  Device device() const { return options().device; }
  DType dtype() const { return options().dtype; }
  Layout layout() const { return options().layout; }

  // Memory. alloc_buffer throws OutOfMemory with the requested size and what is free.
  virtual std::shared_ptr<Buffer> alloc_buffer(std::size_t size_bytes) = 0;
  Tensor alloc(const Shape& shape, DType dtype, Layout layout = Layout::kNCHW) {
    const auto bytes = static_cast<std::size_t>(shape.numel()) * dtype_size_bytes(dtype);
    return Tensor(shape, dtype, shape.rank() == 4 ? layout : Layout::kNCHW, alloc_buffer(bytes));
  }
  // Page-locked host memory for fast asynchronous uploads (plain host memory on the CPU backend).
  virtual std::shared_ptr<Buffer> alloc_pinned_host(std::size_t size_bytes) = 0;
  virtual MemoryStats memory_stats() const = 0;
  // From now on memory_stats().peak_bytes counts from what is in use now (the CUDA allocator; a no-op
  // where peaks are not tracked): a serving loop's own peak, without the setup and search before it.
  virtual void reset_peak_memory() {}
  // Drops the convolutions' shared workspace (a captured graph keeps its own reference); the next
  // convolution grows a new one to what it asks. After the algorithm searches, so that the workspace
  // is what the chosen algorithms need, not the largest any candidate asked for. A no-op on the CPU.
  virtual void release_conv_workspace() {}
  // From now until the next call, convolution algorithm searches consider only candidates whose
  // workspace is at most `bytes`, never more than BackendOptions::workspace_limit_bytes (0: that cap
  // again); the persistent cache keys carry the cap, as they do the configured one. Returns the cap
  // now in effect (the base: none, 0; the CPU's convolutions search nothing).
  virtual std::size_t set_search_workspace_limit(std::size_t bytes) {
    (void)bytes;
    return 0;
  }
  // From now until the next call, convolutions take their workspace from [data, data + bytes) (a
  // training executor's arena: each convolution's own interval, live during its call only) where it
  // holds what they ask, instead of growing the shared workspace; (nullptr, 0) gives the shared one
  // back. The region must stay valid, and unused by anything else, until then. The base ignores it
  // (the CPU's convolutions report no bound and keep their shared workspace).
  virtual void set_conv_workspace(void* data, std::size_t bytes) {
    (void)data;
    (void)bytes;
  }

  // Transfers and element-wise utilities. Host tensors must have the same dtype/layout as dst.
  // upload with async=true returns before the copy ends: keep `host` alive until synchronize().
  virtual void upload(const Tensor& host, const Tensor& dst, bool async = false) = 0;
  virtual void download(const Tensor& src, const Tensor& host) = 0;  // waits for the copy
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;       // converts dtype and layout
  virtual void fill(const Tensor& t, float value) = 0;
  virtual void accumulate(const Tensor& src, const Tensor& dst) = 0;  // dst += src
  virtual void synchronize() = 0;
  virtual std::unique_ptr<DeviceEvent> make_event() = 0;

  // Double-buffered input: an upload on a separate copy stream, so it overlaps the compute already
  // queued. The copy first waits for `after` (an event recorded on the compute stream after the last
  // reader of `dst`; may be null) and returns an event that completes with the copy; the caller keeps
  // `host` alive until then and makes the compute stream wait with wait_event() before reading `dst`.
  // Backends without a copy stream upload synchronously (the default below).
  virtual std::unique_ptr<DeviceEvent> upload_on_copy_stream(const Tensor& host, const Tensor& dst,
                                                             const DeviceEvent* after) {
    (void)after;
    upload(host, dst, /*async=*/false);
    auto done = make_event();
    done->record();
    return done;
  }
  // The compute stream waits (on the device, not the host) until `event` completes.
  virtual void wait_event(const DeviceEvent& event) { (void)event; }
  // The backend's native stream (cudaStream_t on CUDA; null on the CPU), for libraries that enqueue
  // on it (NCCL collectives). PCI bus id of the device ("" on the CPU), to match NVML devices.
  virtual void* native_stream() const { return nullptr; }
  virtual std::string pci_bus_id() const { return {}; }
  // Records what `work` enqueues on the compute stream, without running it, for replay; null where
  // the backend cannot record (the CPU). `work` must have run once normally before (a convolution's
  // first run resolves its algorithm, which cannot be recorded) and must not wait on the host;
  // DeviceError otherwise. Memory freed inside `work` stays reserved for the recording.
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& work) {
    (void)work;
    return nullptr;
  }
  // Versions of the libraries this backend runs on, for the results store ("" where none).
  virtual std::string cuda_runtime_version() const { return {}; }
  // The convolution algorithm search so far (searching happens when an executor binds a model).
  virtual AlgoSearchStats algo_search_stats() const { return {}; }
  // Names the layer whose algorithms are resolved next (index of count, from 1), for the search's
  // progress line; count 0 ends the sequence.
  virtual void set_search_layer(std::size_t /*index*/, std::size_t /*count*/,
                                const std::string& /*name*/) {}
  virtual std::string cudnn_version() const { return {}; }
  // Opens (true) or closes (false) the range a profiler started with capture off records (Nsight
  // Compute's --profile-from-start off): cudaProfilerStart/Stop on CUDA, nothing elsewhere.
  virtual void profiler_range(bool active) { (void)active; }

  // The algorithm names make_conv accepts in one direction's field ("forward", "backward_data" or
  // "backward_filter"), each naming one fixed algorithm (policies that choose for themselves are
  // left out), for studies that try every one (cnnergy convbench). InvalidArgument for another direction.
  virtual std::vector<std::string> conv_algorithm_names(const std::string& direction) const = 0;
  // Per problem, the finer choices below those names that make_conv also accepts in the direction's
  // field: on CUDA every cuDNN graph-API engine configuration that runs `desc` ("graph:eng..."),
  // none elsewhere. InvalidArgument for an unknown direction.
  virtual std::vector<std::string> conv_engine_names(const Conv2dDesc& desc, const std::string& direction) {
    (void)desc;
    (void)direction;
    return {};
  }

  // Kernels (throw NotSupported naming the operation and the backend if absent).
  virtual std::unique_ptr<ConvKernel> make_conv(const Conv2dDesc& desc, const ConvAlgoChoice& algo) = 0;
  virtual std::unique_ptr<LinearKernel> make_linear(const LinearDesc& desc) = 0;
  virtual std::unique_ptr<PoolKernel> make_pool(const Pool2dDesc& desc) = 0;
  virtual std::unique_ptr<LrnKernel> make_lrn(const LrnDesc& desc) = 0;
  virtual std::unique_ptr<BatchNormKernel> make_batch_norm(const BatchNormDesc& desc) = 0;
  // Whether make_batch_norm takes desc with relu = true (the executor fuses a ReLU that is a batch
  // norm's sole consumer into it where this holds; see net/executor.hpp).
  virtual bool fuses_batch_norm_relu(const BatchNormDesc& desc) const {
    (void)desc;
    return false;
  }
  // Whether make_batch_norm takes desc with residual = true (BatchNormDesc::residual; the executor
  // offers a batch norm the residual add that is its output's sole consumer where this holds).
  virtual bool fuses_batch_norm_residual(const BatchNormDesc& desc) const {
    (void)desc;
    return false;
  }
  // Whether the kernel make_batch_norm(desc) returns can write its training output again bit for bit
  // (BatchNormKernel::recompute_output; never with desc.residual).
  virtual bool recomputes_batch_norm_output(const BatchNormDesc& desc) const {
    (void)desc;
    return false;
  }
  // Whether make_batch_norm(batch_norm) and make_pool(pool) (max, keep_argmax and normalised set) make
  // a pair whose apply pass the pool takes (BatchNormKernel::training_coefficients, PoolKernel::
  // forward_normalised; the executor offers it where the batch norm's output, its ReLU's included,
  // is read by that pool alone).
  virtual bool fuses_batch_norm_pool(const BatchNormDesc& batch_norm, const Pool2dDesc& pool) const {
    (void)batch_norm;
    (void)pool;
    return false;
  }
  // Whether make_pool(pool) (max, keep_argmax and relu_mask set) applies the ReLU before it in its
  // backward (Pool2dDesc::relu_mask; the executor offers it where a convolution's fused ReLU output is
  // read by that pool alone, and the convolution then skips its own mask).
  virtual bool pools_relu_mask(const Pool2dDesc& pool) const {
    (void)pool;
    return false;
  }
  // Whether make_conv takes desc with relu = true (forward only: the executor offers it to folded
  // inference convolutions, which never run backward).
  virtual bool fuses_conv_relu(const Conv2dDesc& desc) const {
    (void)desc;
    return false;
  }
  // Whether make_conv takes desc with residual = true (forward only, like fuses_conv_relu: the
  // executor offers a folded inference convolution the residual add that consumes its output).
  virtual bool fuses_conv_residual(const Conv2dDesc& desc) const {
    (void)desc;
    return false;
  }
  // Whether make_conv takes desc with statistics = true (BackendOptions::conv_statistics_fusion
  // on, and a convolution the backend can compute the statistics of; the executor then offers the
  // batch norm that is its output's sole consumer the sums).
  virtual bool fuses_conv_statistics(const Conv2dDesc& desc) const {
    (void)desc;
    return false;
  }
  virtual std::unique_ptr<SoftmaxXentKernel> make_softmax_xent(const SoftmaxXentDesc& desc) = 0;

  // Stateless element-wise kernels.
  virtual void relu_forward(const Tensor& x, const Tensor& y) = 0;  // y may alias x
  virtual void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool accumulate) = 0;
  // A convolution's fused ReLU backward and its bias gradient (4-D y, dy of one dtype and layout;
  // db of y's channels): dy = dy where y > 0, else 0, in place, and db = the sum of the masked dy
  // over everything but the channel, the values of relu_backward then the kernel's own bias
  // gradient. Where fuses_relu_bias_grad() holds (CUDA: one pass over dy); NotSupported elsewhere.
  virtual bool fuses_relu_bias_grad() const { return false; }
  virtual void relu_backward_bias_grad(const Tensor& y, const Tensor& dy, const Tensor& db);
  // Inverted dropout: keep element i when uniform01(seed, i) >= p; mask holds 0 or 1/(1-p).
  virtual void dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask, const Tensor& y) = 0;
  virtual void dropout_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx, bool accumulate) = 0;
  virtual void add_forward(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  // y = max(0, a + b) (an add that took the ReLU after it), the same values as add then ReLU.
  virtual void add_relu_forward(const Tensor& a, const Tensor& b, const Tensor& y) {
    add_forward(a, b, y);
    relu_forward(y, y);
  }
  // Activations of activation_kind.hpp (formulas in activation_math.hpp). y may alias x; dx may
  // alias dy (backward reads x, not y).
  virtual void activation_forward(const ActivationDesc& desc, const Tensor& x, const Tensor& y) = 0;
  virtual void activation_backward(const ActivationDesc& desc, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                   bool accumulate) = 0;
  // y = a * b, b of a's shape or (N, C, 1, 1) broadcast over H, W of a 4-D a (squeeze-and-excitation).
  // Backward: da = dy * b (may alias dy), db = dy * a (summed over H, W when broadcast); an undefined
  // da or db is not computed.
  virtual void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  virtual void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, const Tensor& da, bool accumulate_a,
                            const Tensor& db, bool accumulate_b) = 0;
  // y = x[:, :, ...] * scale[c] + shift[c] with fp32 constants of C values (or 1, broadcast):
  // Mul/Add/Sub/Div by a constant in imported models. dx = dy * scale[c].
  virtual void channel_affine_forward(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& y) = 0;
  virtual void channel_affine_backward(const Tensor& dy, const Tensor& scale, const Tensor& dx, bool accumulate) = 0;
  // Channel shuffle (ShuffleNet): x viewed as (N, groups, C / groups, H, W), the two group axes
  // swapped: y[:, o] = x[:, (o % groups) * (C / groups) + o / groups]. Its adjoint (backward) is
  // the shuffle with C / groups groups.
  virtual void channel_shuffle(const Tensor& x, std::int64_t groups, const Tensor& y, bool accumulate) = 0;
  // y = x[:, begin : begin + C_y] (4-D or 2-D). Backward writes dy there and zeros elsewhere
  // (accumulate: adds dy there, nothing elsewhere).
  virtual void channel_slice_forward(const Tensor& x, std::int64_t begin, const Tensor& y) = 0;
  virtual void channel_slice_backward(const Tensor& dy, std::int64_t begin, const Tensor& dx, bool accumulate) = 0;
  // Concatenate along channels (dim 1) of 4-D or features of 2-D tensors.
  virtual void concat_forward(std::span<const Tensor> xs, const Tensor& y) = 0;
  virtual void concat_backward(const Tensor& dy, std::span<const Tensor> dxs, bool accumulate) = 0;
  // Momentum SGD on fp32 master weights, then refresh the working copy (undefined when the master
  // is the working copy). When skip_if_nonzero (int32, 1) holds non-zero, nothing changes
  // (fp16 dynamic loss scaling: an overflowed step is skipped without a host round trip).
  virtual void sgd_update(const Tensor& master, const Tensor& grad, const Tensor& momentum, const Tensor& working,
                          const SgdStep& step, const Tensor& skip_if_nonzero) = 0;
  // sgd_update for each of `updates` with its own weight decay (step.weight_decay is not read), the
  // same values bit for bit: what a solver's step runs. This base runs them one by one; CUDA in one
  // launch per pair of gradient and working-copy dtypes (its device table of the parameters is
  // uploaded the first time it sees them, outside a CUDA-graph capture).
  virtual void sgd_update_all(std::span<const SgdUpdate> updates, const SgdStep& step, const Tensor& skip_if_nonzero);
  // flag (int32, 1) |= any element of t is Inf or NaN.
  virtual void check_finite(const Tensor& t, const Tensor& flag) = 0;
  // Top-k hits: correct (int32, 1) += number of rows whose label is among the k largest logits.
  virtual void count_topk(const Tensor& logits, const Tensor& labels, int k, const Tensor& correct) = 0;
};

// Creates the backend for options.device. CUDA when built without it, or when no GPU is present,
// throws NotSupported saying which. The CPU backend supports fp32 and NCHW only.
std::unique_ptr<Backend> create_backend(const BackendOptions& options);
bool cuda_backend_built();
int cuda_device_count();  // 0 when not built, no driver or no GPU

}  // namespace cnnergy
