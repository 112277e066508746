// The Layer contract: shape inference (setup), the parameters and buffers a layer owns, binding to a
// backend (kernel creation), forward/backward over tensors the executor supplies, what backward
// needs kept alive (for memory planning), and the layer's own per-sample workload (workload.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/ops.hpp"
#include "core/rng.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "layers/specs.hpp"
#include "layers/workload.hpp"

namespace cnnergy {

// Groups for hotspot summaries (Li et al. 2016: which kind of layer dominates).
enum class LayerCategory { kConv, kFc, kPool, kRelu, kNorm, kDropout, kEltwise, kConcat, kLoss, kOther };
std::string_view category_name(LayerCategory c);  // "conv", "fc", "pool", ...

enum class Phase { kTrain, kEval };

// A trained parameter. `master` is fp32 (what the optimiser updates and checkpoints hold);
// `working` is the copy kernels read, in the backend dtype, and is undefined when the master is
// the working copy (fp32 backend, or parameters that always stay fp32: batch-norm gamma/beta).
// `grad` has the working copy's dtype. 4-D weights carry the backend layout (ops.hpp).
struct Parameter {
  std::string name;         // "<layer>.weight", "<layer>.bias", "<layer>.gamma", "<layer>.beta"
  Shape shape;              // logical shape, e.g. K, C/g, R, S
  bool decay = true;        // weight decay applies by default (weights yes; biases, BN no)
  bool backend_dtype = true;  // working copy in the backend dtype (false: always fp32)
  Tensor master;
  Tensor working;
  Tensor grad;
  const Tensor& value() const { return working.defined() ? working : master; }
};

// Non-trained state saved in checkpoints (batch-norm running statistics), fp32.
struct StateBuffer {
  std::string name;  // "<layer>.running_mean", "<layer>.running_var"
  Shape shape;
  Tensor tensor;
};

struct ForwardContext {
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  Phase phase = Phase::kTrain;
  std::uint64_t seed = 0;        // per layer and iteration (dropout masks)
  const Tensor* labels = nullptr;  // int32 (N): for loss layers
};

// Inputs/outputs a layer did not ask to keep (needs_inputs_in_backward()...) are passed undefined,
// because the executor may have reused their memory. An undefined input_grads[i] means no gradient
// is wanted for input i (e.g. the network input). accumulate[i]: add into input_grads[i] instead of
// overwriting it (a tensor consumed by several layers).
struct BackwardContext {
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  std::span<const Tensor> output_grads;
  std::span<const Tensor> input_grads;
  std::span<const bool> accumulate;
  float loss_scale = 1.0f;
  const Tensor* labels = nullptr;
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual std::string type() const = 0;  // "conv", "fc", "max_pool", ... (see the factory below)
  virtual LayerCategory category() const = 0;
  virtual std::size_t num_inputs() const { return 1; }  // 0 = any number >= 1 (concat)
  virtual std::string describe() const { return type(); }  // hyper-parameters for model-info

  // A fresh, unbound copy with the same hyper-parameters (executors clone the graph's layers).
  virtual std::unique_ptr<Layer> clone() const = 0;

  // Shape inference with batch dims included. Throws ShapeError naming the layer when an input
  // does not fit or an output would be empty. Also computes the per-sample workload and declares
  // the parameter and buffer shapes (tensors stay undefined until bind()).
  std::vector<Shape> setup(std::span<const Shape> input_shapes);
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<Shape>& output_shapes() const { return output_shapes_; }

  // Whether input 0 needs a data gradient (false for a layer reading the network input: conv/fc
  // skip backward_data, and their backward FLOPs drop the data gradient). Set before setup().
  void set_input_grad_needed(bool needed) { input_grad_needed_ = needed; }
  bool input_grad_needed() const { return input_grad_needed_; }

  const Workload& workload() const { return workload_; }  // per sample, forward (+ backward flops)
  std::int64_t parameter_count() const;

  std::vector<Parameter>& parameters() { return params_; }
  const std::vector<Parameter>& parameters() const { return params_; }
  std::vector<StateBuffer>& buffers() { return buffers_; }
  const std::vector<StateBuffer>& buffers() const { return buffers_; }

  // What backward reads, so the executor can free or reuse everything else after forward.
  virtual bool needs_inputs_in_backward() const { return false; }
  virtual bool needs_outputs_in_backward() const { return false; }
  // Whether output 0 may share memory with input 0: kView (flatten on NCHW: same data, another
  // shape; always safe) or kInPlace (ReLU: overwrites its input; the executor allows it only when
  // no other layer and no backward reads that input). Valid after bind().
  enum class InputAlias { kNone, kView, kInPlace };
  virtual InputAlias input_alias() const { return InputAlias::kNone; }
  // Whether the gradient of input `i` may share memory with the output gradient: backward computes
  // it element by element from the output gradient at the same index (ReLU), or hands the output
  // gradient on unchanged (add, which then copies nothing). The executor shares them only when
  // this layer is the input's sole consumer, or its last one and the other consumers' accumulations
  // overlap no other use of the shared buffer (net/gradient_groups.hpp).
  virtual bool gradient_in_place(std::size_t input) const {
    (void)input;
    return false;
  }

  // ReLU fusion, decided by the executor between setup() and bind(). A layer that can clamp its own
  // output at 0 on `backend` (batch norm) takes the ReLU that is its output's sole consumer:
  // fuse_relu() returns true, and backward then takes the gradient of the ReLU's output. That ReLU
  // is absorbed: it runs nothing, its output is the producer's output and its input gradient its
  // output gradient (the executor plans them as one). Both stay in the layer list, so per-layer
  // reports show the absorbed ReLU at no cost and say where it went.
  virtual bool fuse_relu(const Backend& backend) {
    (void)backend;
    return false;
  }
  // Whether this layer took the ReLU after it (fuse_relu returned true).
  virtual bool relu_fused() const { return false; }
  // Residual fusion (after batch-norm folding and ReLU fusion). Inference executors: a convolution
  // with a folded batch norm whose output only an add reads takes that add, and the add's fused ReLU
  // where `relu`: it then computes y = relu?(conv + b + z) with the add's other input z as its second
  // forward input, and the add is absorbed (its output is this layer's output). Without folding
  // (training): a batch norm takes the add likewise in forward, and the add's backward still runs.
  virtual bool fuse_residual(const Backend& backend, bool relu) {
    (void)backend;
    (void)relu;
    return false;
  }
  // Its backward, for training executors (ExecutorOptions::fuse_residual_backward): the batch norm
  // that took an add and the add's ReLU in forward may take that ReLU's backward too
  // (take_residual_relu_backward: true where it took both): it then masks the add's output gradient
  // by the add's output (its own output) in place, in its own first pass over that gradient
  // (BatchNormKernel::backward_masking), and the add leaves the in-place mask to it
  // (leave_relu_backward). The executor arms the pair only where the batch norm's backward runs
  // right after the add's, so that nothing reads the gradient between the two.
  virtual bool take_residual_relu_backward() { return false; }
  virtual void leave_relu_backward() {}
  // Statistics fusion, for training executors (decided between setup() and bind(), like ReLU
  // fusion; BackendOptions::conv_statistics_fusion). A convolution without a bias whose output only
  // a batch norm reads is offered that batch norm's statistics (offer_statistics: true where the
  // backend can compute them with the convolution, Backend::fuses_conv_statistics); the batch norm
  // then uses them (use_statistics). Both hold `link`: the convolution allocates its sums at bind
  // and says after each training forward whether it wrote them; when it did not, the batch norm
  // reduces its input itself.
  struct BatchStatistics {
    Tensor sums;           // fp32, 2C: the per-channel sum, then the sum of squares
    bool written = false;  // by the latest forward of the convolution
  };
  virtual bool offer_statistics(const Backend& backend, const std::shared_ptr<BatchStatistics>& link) {
    (void)backend;
    (void)link;
    return false;
  }
  virtual void use_statistics(const std::shared_ptr<BatchStatistics>& link) { (void)link; }
  // Argmax keeping, for training executors (between setup() and bind()): a max pool whose input
  // nothing else reads in backward is offered to keep its argmax from forward; it then asks its
  // kernel to (Pool2dDesc::keep_argmax), and where the kernel does (PoolKernel::keeps_argmax) it
  // needs neither its input nor its output in backward.
  virtual void offer_argmax_keeping() {}
  // ReLU mask taking, likewise: a max pool whose input is a convolution's fused ReLU output that only it
  // reads is offered to keep its argmax and apply that ReLU's mask in backward, reading its own output
  // (Pool2dDesc::relu_mask); it takes it where the backend offers such a kernel (Backend::pools_relu_mask).
  // Where its kernel then does (applies_relu_mask, after bind) the executor tells the convolution
  // (leave_relu_mask), whose output dies after the pool's forward.
  virtual bool offer_relu_mask(const Backend& backend) {
    (void)backend;
    return false;
  }
  virtual bool applies_relu_mask() const { return false; }
  // A layer with a fused ReLU whose mask the layer reading its output applies (after bind, before
  // planning): its backward skips the mask and it needs its output no more.
  virtual void leave_relu_mask() {}
  // Batch-norm apply fusion, for training executors (between setup() and bind(), after argmax keeping
  // was offered; ExecutorOptions::fuse_batch_norm_pool). A batch norm whose output (with its fused
  // ReLU's, one tensor) only a max pool reads, right after it, offers its normalisation
  // (offer_normalisation: its desc, where it can hand it on); the pool takes it where it keeps its
  // argmax and the backend pairs the two (take_normalisation, Backend::fuses_batch_norm_pool); the
  // batch norm then hands it on (hand_on_normalisation). Both hold `link`: the batch norm's forward
  // computes its statistics and coefficients only, writes no output and leaves the coefficients in
  // the link; the pool's forward reads the batch norm's input (the executor passes it) and applies
  // them as it reads. The pool's output, its argmax and every gradient are the unfused pair's bit for
  // bit; the batch norm's output is never written nor read (the executor allocates none).
  struct Normalisation {
    NormalisationMap coefficients;  // the batch norm's latest forward's (its backend's form)
    bool relu = false;                    // the batch norm's fused ReLU
  };
  virtual std::optional<BatchNormDesc> offer_normalisation() const { return std::nullopt; }
  virtual bool take_normalisation(const Backend& backend, const BatchNormDesc& batch_norm,
                                  const std::shared_ptr<Normalisation>& link) {
    (void)backend;
    (void)batch_norm;
    (void)link;
    return false;
  }
  virtual void hand_on_normalisation(const std::shared_ptr<Normalisation>& link) { (void)link; }
  // Batch-norm folding, for inference executors (decided between setup() and bind(), like ReLU
  // fusion). A layer that can apply a per-output-channel affine map y = scale * f(x) + shift itself
  // (a convolution: scaled weights, a bias) takes the eval-mode batch norm that is its output's sole
  // consumer; that batch norm is then absorbed (runs nothing; its output is the producer's). The
  // folded values are computed by fold_absorbed() once the weights are set: the batch norm supplies
  // its map (inference_affine: scale = gamma / sqrt(var + eps), shift = beta - mean * scale).
  virtual bool absorb_batch_norm(Layer& batch_norm) {
    (void)batch_norm;
    return false;
  }
  virtual bool inference_affine(std::vector<float>& scale, std::vector<float>& shift) const {
    (void)scale;
    (void)shift;
    return false;
  }
  virtual void fold_absorbed() {}
  void absorb_into(const std::string& producer) { absorbed_into_ = producer; }
  bool absorbed() const { return !absorbed_into_.empty(); }
  const std::string& absorbed_into() const { return absorbed_into_; }  // "" unless absorbed

  // Recomputation (ExecutorOptions::activation_budget_bytes). Whether the bound layer can write its
  // latest training output again, bit for bit, from its one input and its own saved state, any time
  // between that forward(kTrain) and its own backward (a batch norm where the backend's kernel can:
  // Backend::recomputes_batch_norm_output; never with a fused residual add); and doing it. The
  // executor then keeps the output only through forward and rebuilds it before the first backward
  // that reads it.
  virtual bool recomputes_output() const { return false; }
  virtual void recompute_output(const Tensor& input, const Tensor& output);

  // Device memory the bound layer holds besides parameters and buffers (BN saved statistics,
  // dropout mask, loss probabilities), for memory reports.
  virtual std::size_t private_bytes() const { return 0; }

  // The convolution algorithms the bound kernel runs (conv layers only), for --show-algos.
  virtual std::optional<ConvAlgoInfo> conv_algorithms() const { return std::nullopt; }
  // The most of the backend's convolution workspace (Backend::set_conv_workspace) one forward
  // (backward=false) or backward call of the bound layer asks for: a convolution's chosen algorithms
  // (ConvKernel::workspace_bound, once conv_algorithms() has resolved them), a max pool's argmax
  // pass in backward (PoolKernel::workspace_bound); 0 for other layers.
  virtual std::size_t workspace_bound(bool backward) const {
    (void)backward;
    return 0;
  }
  // A convolution whose forward runs with its bias (and ReLU) fused into one kernel (ConvKernel::epilogue_fused).
  virtual bool epilogue_fused() const { return false; }
  // The convolution problem of a conv layer after setup() (batch as set up), for studies that run
  // each distinct convolution on its own (cnnergy convbench); empty for every other layer.
  virtual std::optional<Conv2dDesc> conv_problem() const { return std::nullopt; }
  // The hyper-parameters the layer was made with (specs.hpp), for exporters; monostate for types
  // that have none.
  virtual LayerSpec spec() const { return {}; }
  // The weight and bias tensors forward(kEval) reads (a convolution with a folded batch norm: the
  // folded copies; the bias undefined when there is none), for whole-network inference plans
  // (infer/cpu_plan.hpp); empty for layers without weights. Valid after bind().
  virtual std::vector<Tensor> eval_weights() const { return {}; }

  // Allocates parameters, gradients and buffers on the backend and creates the kernels. Throws
  // NotSupported naming the layer and the backend when the backend lacks a kernel.
  // with_gradients=false (inference) allocates no parameter gradients.
  void bind(Backend& backend, bool with_gradients = true);
  bool bound() const { return backend_ != nullptr; }
  Backend& backend() const;

  // Initial values: weights from rng (He normal or the spec's gaussian), biases, gamma 1, beta 0,
  // running mean 0 and variance 1. Needs bind(). Draws in a fixed order so a seed gives one network.
  virtual void init_parameters(Rng& rng);
  // Copies every master into its working copy (after init or a checkpoint load).
  void refresh_working_copies();

  virtual void forward(const ForwardContext& ctx) = 0;
  virtual void backward(const BackwardContext& ctx) = 0;

 protected:
  // Implemented by each layer: output shapes from input shapes (checks included).
  virtual std::vector<Shape> infer_shapes(std::span<const Shape> inputs) = 0;
  // Per-sample workload from the shapes set by infer_shapes.
  virtual Workload compute_workload() const = 0;
  // Creates kernels for the bound backend (parameters are already allocated; with_gradients() says
  // whether this binding trains).
  virtual void create_kernels(Backend& backend) { (void)backend; }
  bool with_gradients() const { return with_gradients_; }
  // Declares a parameter / buffer (in infer_shapes); returns its index.
  std::size_t declare_parameter(const std::string& suffix, const Shape& shape, bool decay, bool backend_dtype);
  std::size_t declare_buffer(const std::string& suffix, const Shape& shape);

  // ShapeError "layer 'name' (type): message".
  [[noreturn]] void shape_error(const std::string& message) const;
  void check_input_count(std::span<const Shape> inputs, std::size_t expected) const;
  // Fills a host fp32 tensor and uploads it into the master of parameter i.
  void upload_parameter(std::size_t i, const Tensor& host_f32_nchw);
  // He normal (stddev sqrt(2 / fan_in)) or gaussian weights into parameter i, constant into bias j.
  void init_weight(std::size_t i, const WeightInit& init, std::int64_t fan_in, Rng& rng);
  void init_constant(std::size_t i, float value);

  Backend* backend_ = nullptr;

 private:
  bool with_gradients_ = false;  // bind()'s
  std::string name_;
  std::vector<Shape> input_shapes_, output_shapes_;
  std::vector<Parameter> params_;
  std::vector<StateBuffer> buffers_;
  Workload workload_;
  bool input_grad_needed_ = true;
  std::string absorbed_into_;
};

// Factory functions (one per layer type, defined in that type's .cpp).
std::unique_ptr<Layer> make_conv_layer(const std::string& name, const ConvSpec& spec);
std::unique_ptr<Layer> make_fc_layer(const std::string& name, const FcSpec& spec);
std::unique_ptr<Layer> make_pool_layer(const std::string& name, const PoolSpec& spec);  // max or avg by spec.mode
std::unique_ptr<Layer> make_global_avg_pool_layer(const std::string& name);
std::unique_ptr<Layer> make_relu_layer(const std::string& name);
std::unique_ptr<Layer> make_lrn_layer(const std::string& name, const LrnSpec& spec);
std::unique_ptr<Layer> make_batch_norm_layer(const std::string& name, const BatchNormSpec& spec);
std::unique_ptr<Layer> make_dropout_layer(const std::string& name, float p);
std::unique_ptr<Layer> make_add_layer(const std::string& name);
std::unique_ptr<Layer> make_concat_layer(const std::string& name);
std::unique_ptr<Layer> make_flatten_layer(const std::string& name);
std::unique_ptr<Layer> make_softmax_loss_layer(const std::string& name);
// Layers of imported networks (activation.cpp, mul.cpp, channel_ops.cpp).
std::unique_ptr<Layer> make_activation_layer(const std::string& name, const ActivationDesc& desc);
std::string activation_type_name(ActivationKind kind);  // "clip", "leaky_relu", "sigmoid", ...
std::unique_ptr<Layer> make_mul_layer(const std::string& name);
std::unique_ptr<Layer> make_channel_shuffle_layer(const std::string& name, std::int64_t groups);
std::unique_ptr<Layer> make_channel_slice_layer(const std::string& name, std::int64_t begin, std::int64_t count);
// y = x * scale[c] + shift[c], constants of 1 or C values (not trained).
std::unique_ptr<Layer> make_channel_affine_layer(const std::string& name, std::vector<float> scale,
                                                 std::vector<float> shift);

// The loss layer's readouts (fp32 on the device), for executors: mean loss (1) and probs (N, K).
class LossLayer : public Layer {
 public:
  using Layer::Layer;
  virtual const Tensor& loss() const = 0;
  virtual const Tensor& probabilities() const = 0;
};

}  // namespace cnnergy
