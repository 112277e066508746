// An Executor binds a Graph to a Backend at one batch size: it owns bound copies of the layers,
// plans and allocates activation and gradient memory, and runs forward/backward as a whole or one
// layer at a time (for per-layer timing). Nothing here waits for the device except read_loss().
//
// Memory planning (ExecutorOptions::reuse_memory, on by default). Steps are numbered: forward of
// layer i is step i, backward of layer i is step 2L-1-i. Every activation and gradient tensor gets
// a live interval of steps:
// * an activation lives from its producer's forward to its last forward consumer, extended to the
//   backward step of any layer that reads it in backward (producer needs_outputs_in_backward, a
//   consumer needs_inputs_in_backward); activations nobody reads in backward die after forward;
// * the gradient of a tensor lives from the backward of its first consumer in backward order (which
//   overwrites it; later consumers accumulate) to the backward of its producer;
// * flatten (a view, Layer::InputAlias::kView) shares its input's storage; an in-place ReLU
//   (kInPlace) does too when its input is read by no other layer and not by its producer's
//   backward. Tensors sharing storage form one group whose interval is the union of theirs.
// * an input's gradient shares its layer's output gradient when the layer allows it
//   (Layer::gradient_in_place: ReLU computes it in place, add hands it on) and is the input's
//   sole consumer, or its last consumer where the input's other consumers (a residual block's
//   first convolution) can accumulate into the shared buffer without any other tensor of the group
//   being read or written meanwhile (gradient_groups.hpp); such gradients form one group too. A
//   ResNet's identity shortcut thus costs no gradient copy.
// * ReLU fusion (ExecutorOptions::fuse_relu, on by default): a ReLU that is the sole consumer of a
//   layer's only output is offered to that layer (Layer::fuse_relu, batch norm where the backend's
//   kernels can; after a batch norm folded into a convolution, that convolution where the backend's
//   Backend::fuses_conv_relu holds: the CPU's oneDNN post-op, the GPU's bias pass); if taken, the ReLU is absorbed and its output and input gradient are the
//   producer's output and output gradient (one group each, with or without reuse_memory). Nothing
//   else changes: the same tensors, the same values (the fused kernels round exactly as the pair did).
// * Residual fusion (ExecutorOptions::fuse_residual, eval-only executors with folded batch norms):
//   an add whose input is a folded convolution's output read by nothing else, and whose other input
//   z is computed before that convolution, is offered to the convolution (Layer::fuse_residual,
//   where Backend::fuses_conv_residual holds: the GPU's fused cuDNN epilogue); if taken, the
//   convolution computes relu?(conv + b + z) with z as its second input, the add (and the ReLU it
//   took) runs nothing, and its output is the convolution's output (one group). The values differ
//   from the unfused chain by rounding only (the sum is rounded once).
//   Without folding (training, or evaluation with batch norms kept), an add whose input is a batch
//   norm's only output, read by nothing else, and whose other input z is computed before that batch
//   norm, is offered to the batch norm (Layer::fuse_residual, where Backend::fuses_batch_norm_residual
//   holds): if taken, the batch norm's forward writes relu?(bn(x) + z) into the add's output (one
//   group with the batch norm's output) and the add's forward runs nothing; the add's backward masks
//   and hands on its output gradient, the batch norm's reads it. In training with the add's ReLU
//   taken too (ExecutorOptions::fuse_residual_backward), and where the batch norm comes right before
//   the add, the batch norm's backward does the add's in-place mask in its own first pass
//   (Layer::take_residual_relu_backward; the add's backward then only hands on). The values equal
//   the unfused chain's bit for bit (bn(x) is rounded to the dtype before the add).
// * Statistics fusion (training executors, where the backend offers it: BackendOptions::
//   conv_statistics_fusion): a batch norm whose input is a convolution's only output, read by
//   nothing else, is given that convolution's per-channel sums (Layer::offer_statistics /
//   use_statistics): the convolution computes them with its forward where its kernel measured that
//   faster (CUDA: cuDNN's convolution + GenStats graph), and the batch norm's statistics come from
//   them instead of a pass over its input. Memory is planned as before; the values differ by
//   rounding only (fp32 sums of y, E[y^2] - E[y]^2, against the batch norm's own reduction).
// * Batch-norm apply fusion (training executors, ExecutorOptions::fuse_batch_norm_pool, where the
//   backend offers it: Backend::fuses_batch_norm_pool): a batch norm whose output (its fused ReLU's
//   included) only a max pool right after it reads, the pool keeping its argmax, hands the pool its
//   normalisation (Layer::offer_normalisation / take_normalisation / hand_on_normalisation): the batch
//   norm's forward computes its statistics and coefficients only, the pool reads the batch norm's
//   input (kept live through the pool's forward) and normalises it as it reads. The batch norm's output
//   is never written nor read and takes no memory (activation() of it is undefined). The values are the
//   unfused pair's bit for bit. ResNet's stem at bf16 b256: the 411 MB output neither written nor read.
// * Convolution workspaces in the arena (training executors, ExecutorOptions::conv_workspace_in_arena):
//   each convolution's forward and backward get an interval of the arena as long as their own step,
//   as large as the most workspace its chosen algorithms ask (Layer::conv_workspace_bound, known once
//   the algorithms are resolved, before planning), handed to the backend around the call
//   (Backend::set_conv_workspace). The workspace then takes memory only where a step's live tensors
//   leave none free, instead of a shared buffer as large as the largest convolution's need held for the
//   whole run (ResNet-50 bf16 b256: 202 MiB). A call that asks for more falls back to the shared one.
//   The workspaces are placed after every tensor (into the gaps they leave), so the arena grows by at
//   most the largest of them; the activation budget below counts tensors only. Not with reuse_memory=false.
// Intervals are placed in one arena by net/memory_plan.hpp (greedy by size: largest first, each at
// the lowest offset, 256-byte aligned, where it overlaps no interval live at the same time), which
// lands close to the most bytes live at one step (MemoryReport::live_peak_bytes).
// Activations and gradients share the pool (both are in the backend dtype). Parameters, their
// gradients and layer-internal state (BN saved statistics, dropout masks, loss probabilities) are
// never pooled. With reuse_memory=false every tensor gets its own buffer (the naive sum).
// In eval-only mode (training=false) no gradient is allocated and nothing is kept for backward.
// Consequence of reuse: backward() is valid once after each forward(kTrain) (memory of activations
// it no longer needs may hold gradients afterwards), and activation(id) of a tensor is valid only
// during its interval; the logits stay valid until the next forward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.hpp"
#include "core/host_memory.hpp"
#include "core/tensor.hpp"
#include "layers/layer.hpp"
#include "net/graph.hpp"
#include "net/memory_plan.hpp"

namespace cnnergy {

struct ExecutorOptions {
  std::int64_t batch_size = 1;
  bool training = true;       // allocate gradients and keep what backward reads
  bool reuse_memory = true;   // liveness-based buffer sharing (see above)
  std::uint64_t dropout_seed = 0;  // base seed of dropout masks (mixed with layer and iteration)
  bool fuse_relu = true;      // let layers take the ReLU after them (see above)
  bool fuse_residual = true;  // folded convolutions, or else batch norms, take the residual add after them (see above)
  bool fuse_residual_backward = true;  // training: such a batch norm masks the add's ReLU in backward too (see above)
  bool fuse_batch_norm_pool = true;    // training: a max pool applies the batch norm before it (see above)
  // Training: a max pool whose input is a convolution's fused ReLU output, read by it alone, keeps its
  // argmax and applies that ReLU's mask in its backward (Pool2dDesc::relu_mask, where the backend
  // offers it: Backend::pools_relu_mask); the convolution's output then dies after the pool's forward.
  bool pool_relu_mask = true;
  bool conv_workspace_in_arena = true; // training: each convolution's workspace is an interval of the arena (see above)
  // Training, with conv_workspace_in_arena: the algorithm searches consider only candidates whose
  // workspace is at most the activations and gradients live at the plan's peak without workspaces
  // (at least search_workspace_floor_bytes; never above BackendOptions::workspace_limit_bytes), so that
  // a workspace never makes the step hold more than twice its activations, and the searches'
  // transient memory stays below what the step holds. Where activations are small beside the
  // workspaces cuDNN's fastest candidates ask (AlexNet: 80-270 MiB against 100-150 MiB of activations),
  // the peak falls by about the workspace; the candidates left are as fast there (docs/internals.md,
  // "The searches capped by the activations").
  bool workspace_within_activations = true;
  // Its floor: a small network's activations can be a few MiB, and a workspace of 64 MiB costs
  // nothing that matters on a GPU (tests set 0 to make the cap bind at small sizes).
  std::size_t search_workspace_floor_bytes = std::size_t{64} << 20;
  // Eval-only executors: a batch norm that is the sole consumer of a convolution's output is folded
  // into it (Layer::absorb_batch_norm): the convolution runs with scaled weights and a bias, the
  // batch norm runs nothing. Call fold_parameters() whenever the weights change (initialize_parameters
  // does); forward(kEval) refuses to run on weights that were never folded.
  bool fold_batch_norm = false;
  // Eval-only executors in a 16-bit dtype: the fp32 masters of parameters that have a working
  // copy wait in host memory while requests run (the forward reads only the working
  // copies): fold_parameters() parks them at its end; parameters(), initialize_parameters() and
  // fold_parameters() bring them back first. AlexNet in bf16: 233 MiB of device memory freed.
  bool masters_on_host = false;
  // CPU executors (host memory) check that they fit before allocating: before binding, a lower bound
  // (the parameters and the largest activation at this batch), and before the activation arena, the
  // planned arena plus what binding allocated; a batch that cannot fit throws OutOfMemory "... does not
  // fit in host memory ..." with the bytes needed and available, instead of being killed by the OOM
  // killer half-way through. Unset: the budget the OS gives at construction (core/host_memory.hpp);
  // tests inject one.
  std::optional<HostMemoryBudget> host_memory;
  // Training: recompute instead of keep (see above). While the most activation and gradient bytes
  // live at one step exceed this budget, an output live at that step whose layer can write it again
  // from its input (Layer::recomputes_output: batch norm without a fused add, pooling) is dropped
  // after forward and written again, bit for bit, just before the first backward that reads it; the
  // most bytes freed per byte the rebuild moves first (batch norms before pools), then the largest.
  // 0 recomputes as many as lower the peak (one that is not live at the step where the most is live
  // saves nothing). Unset: nothing is recomputed. Each costs that layer's forward pass again in backward.
  std::optional<std::size_t> activation_budget_bytes;
};

struct MemoryReport {
  std::size_t fused_relus = 0;        // ReLU layers absorbed by their producer
  std::size_t folded_batch_norms = 0; // batch norms folded into the convolution before them
  std::size_t fused_residuals = 0;    // residual adds taken by the folded convolution or batch norm before them
  std::size_t fused_residual_masks = 0;  // of them, adds whose ReLU's backward mask their batch norm does
  std::size_t conv_statistics = 0;    // batch norms given their statistics by the convolution before them
  std::size_t kept_pool_argmaxes = 0; // max pools that keep their argmax from forward (their input freed)
  std::size_t normalising_pools = 0;  // max pools that apply the batch norm before them (its output never written)
  std::size_t relu_mask_pools = 0;    // max pools that apply the ReLU mask of the convolution before them (ExecutorOptions::pool_relu_mask)
  std::size_t activation_bytes = 0;   // pooled activations + gradients actually allocated
  std::size_t live_peak_bytes = 0;    // the most of them (and of the workspaces in the arena) live at one step (no plan can use less)
  std::size_t naive_bytes = 0;        // what one buffer per activation/gradient tensor would take
                                      // (a fused ReLU's output and input gradient are its producer's)
  std::size_t parameter_bytes = 0;    // masters, working copies, parameter gradients (device memory)
  std::size_t parked_master_bytes = 0;  // fp32 masters waiting in host memory (masters_on_host)
  std::size_t layer_state_bytes = 0;  // BN statistics, dropout masks, loss buffers
  std::size_t input_copy_bytes = 0;   // the input converted to the network's precision and layout (set_input)
  std::size_t num_buffers = 0;        // buffers allocated for them (1: the arena, when reusing)
  std::size_t recomputed_outputs = 0; // batch-norm and pooling outputs rebuilt in backward (activation_budget_bytes)
  std::size_t recomputed_bytes = 0;   // their bytes
  std::size_t arena_workspaces = 0;   // convolution calls whose workspace is an interval of the arena
  std::size_t arena_workspace_bytes = 0;  // the largest of those intervals
  // Training: the backend's peak when the algorithm searches were done, before the arena (what they
  // took above the parameters: candidates' operands and workspace), and the shared convolution
  // workspace they had grown, given back before the arena is allocated.
  std::size_t search_peak_bytes = 0;
  std::size_t search_workspace_bytes = 0;
  // The workspace cap the searches had (ExecutorOptions::workspace_within_activations; 0: the
  // configured one).
  std::size_t search_workspace_limit_bytes = 0;
  // Where the plan's live peak (live_peak_bytes) is reached and what is live there, largest first:
  // "output of L" (an activation, its producer L; "rebuilt" where recomputed in backward), "gradient of
  // the output of L", "workspace of L (forward|backward)". Their bytes sum to live_peak_bytes.
  struct LiveBytes {
    std::string what;
    std::size_t bytes = 0;
  };
  std::string peak_step;  // "forward of L", "backward of L" or "after the step"
  std::vector<LiveBytes> live_at_peak;
};

enum class Pass { kForward, kBackward };
// Called before (after == false) and after each layer's forward or backward in forward()/backward().
using LayerHook = std::function<void(std::size_t layer, Pass pass, bool after)>;

class Executor {
 public:
  // The graph must outlive the executor. Clones and sets up the graph's layers at options.batch_size, binds them (kernels, parameters)
  // and allocates the planned memory. Parameters are zero until initialize_parameters() or a
  // checkpoint load. Throws InvalidArgument for batch_size < 1, OutOfMemory, NotSupported.
  Executor(const Graph& graph, Backend& backend, const ExecutorOptions& options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const Graph& graph() const { return graph_; }
  Backend& backend() const { return backend_; }
  std::int64_t batch_size() const { return options_.batch_size; }
  bool training() const { return options_.training; }

  // Deterministic initial weights from seed (same seed, same network on every backend/replica).
  void initialize_parameters(std::uint64_t seed);
  // Recomputes folded batch norms from the current weights and statistics (after a checkpoint load
  // or any change of parameters). A no-op without ExecutorOptions::fold_batch_norm.
  void fold_parameters();
  // How many times fold_parameters() ran (initialize_parameters calls it): whoever keeps a copy of the
  // eval weights (the CPU inference plan) copies them again when this changed.
  std::uint64_t fold_count() const { return folds_; }
  // ExecutorOptions::masters_on_host: whether the masters are in host memory now, and bringing them
  // back to the device (a no-op when they are there).
  bool masters_parked() const { return !parked_.empty(); }
  void restore_masters();

  // Inputs: images (N, C, H, W) and labels int32 (N) on this backend's device. Images in the
  // backend dtype and layout are used in place (kept alive until the next set_input); others are
  // converted into an internal buffer by Backend::copy.
  void set_input(const Tensor& images, const Tensor& labels);
  const Tensor& input() const;   // the images tensor layers read
  const Tensor& labels() const;

  // Whole passes. forward(kTrain) draws new dropout masks per call; backward() needs a preceding
  // forward(kTrain). loss_scale multiplies the loss gradient (fp16 loss scaling).
  void forward(Phase phase = Phase::kTrain);
  void backward(float loss_scale = 1.0f);
  void set_hook(LayerHook hook) { hook_ = std::move(hook); }

  // One layer at a time, for per-layer timing: the caller runs forward_layer(0..L-1) then
  // backward_layer(L-1..0); the executor's own bookkeeping is the same as for whole passes.
  std::size_t num_layers() const;
  void forward_layer(std::size_t i, Phase phase = Phase::kTrain);
  void backward_layer(std::size_t i, float loss_scale = 1.0f);
  void begin_iteration();  // advances the dropout seed; forward() calls it itself

  Layer& layer(std::size_t i);
  const Layer& layer(std::size_t i) const;

  // Outputs on the device: logits (N, classes) in the backend dtype; loss fp32 (1), the batch mean.
  const Tensor& logits() const;
  const Tensor& loss() const;
  float read_loss() const;  // downloads the loss (waits for the device)

  // Activation tensor / gradient of a graph tensor id (undefined when not allocated, e.g. a
  // gradient in eval mode). Pooled memory: valid only while the tensor is live (see above).
  const Tensor& activation(int tensor_id) const;
  const Tensor& gradient(int tensor_id) const;

  // Every trained parameter in layer order, and every state buffer, for optimisers/checkpoints.
  std::vector<Parameter*> parameters();
  std::vector<StateBuffer*> buffers();

  const MemoryReport& memory() const { return memory_; }
  // Of the batch norms given their convolution's statistics (MemoryReport::conv_statistics), how many
  // took them from the convolution at its latest training forward (CUDA: where cuDNN's fused graph
  // timed faster; the others reduced their input themselves). 0 before the first training step.
  std::size_t statistics_from_convolutions() const;

 private:
  void fuse_relus();  // the fusion passes (fusion_passes.cpp, with fold_batch_norms), run when binding
  void fuse_residuals();
  void fuse_statistics();
  // Returns (convolution, max pool) for each pool offered the convolution's ReLU mask.
  std::vector<std::pair<std::size_t, std::size_t>> offer_argmax_keeping();
  void fuse_normalisations();
  // The layer that absorbed layer i (a ReLU fused into the layer before it, a batch norm folded into
  // its convolution) where that layer writes i's only input; -1 otherwise.
  int absorber_of(std::size_t i) const;
  void fold_batch_norms();
  void park_masters();
  // Plans and allocates the arena; tensors_only: plans the tensors alone (no workspace, nothing
  // recomputed), allocates nothing and changes nothing. Returns the plan's live peak in bytes.
  std::size_t plan_and_allocate(bool tensors_only = false);
  void check_fits_before_binding() const;  // CPU only: the lower bound (see ExecutorOptions::host_memory)
  void refresh_views();
  void run_forward_layer(std::size_t i, Phase phase);
  void run_backward_layer(std::size_t i, float loss_scale);
  // The memory planner's request for this network (executor_memory.cpp) and how tensors map onto it.
  struct MemoryDescription {
    MemoryPlanRequest request;
    std::vector<int> group;     // per tensor id: its activation storage group (an index of request.groups)
    std::vector<int> gradient;  // per tensor id: its gradient's index in request.gradients; -1: none
    std::vector<std::string> gradient_labels;  // per request.gradients entry (MemoryReport::live_at_peak)
    std::size_t naive_bytes = 0;               // MemoryReport::naive_bytes
  };
  MemoryDescription describe_memory(bool with_workspaces) const;
  std::vector<RecomputeOption> recompute_options(const MemoryDescription& d) const;

  const Graph& graph_;
  Backend& backend_;
  ExecutorOptions options_;
  std::optional<HostMemoryBudget> host_budget_;  // CPU executors: what the host may still give
  std::size_t host_in_use_at_start_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  LossLayer* loss_layer_ = nullptr;
  std::vector<Tensor> activations_;  // by tensor id (0: the images set_input gave)
  std::vector<Tensor> gradients_;    // by tensor id
  std::vector<Tensor> backward_activations_;  // what backward reads: activations_, or a recomputed group's rebuilt copy
  struct Recompute {
    int layer, input, group;  // layer writes tensor `group` again from tensor `input`
  };
  std::vector<std::vector<Recompute>> recompute_before_;  // per layer: rebuilt before its backward
  std::vector<std::shared_ptr<Buffer>> pool_;  // planned buffers
  // Per layer, the convolution workspace its forward / backward call takes (conv_workspace_in_arena;
  // bytes 0: none, the backend's shared one).
  struct WorkspaceRegion {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  std::vector<WorkspaceRegion> forward_workspace_, backward_workspace_;
  // Per layer, the tensors its forward/backward get (rebuilt when the input tensor changes).
  struct LayerIo {
    std::vector<Tensor> fwd_in, fwd_out, bwd_in, bwd_out, out_grads, in_grads;
    std::unique_ptr<bool[]> accumulate;
    bool run_backward = false;  // false when nothing upstream has parameters
  };
  std::vector<LayerIo> io_;
  Tensor own_input_;  // conversion target when set_input needs a copy
  Tensor labels_;
  std::uint64_t iteration_ = 0;
  // Residual fusion: per layer, the tensor an absorbed add's output shares (the convolution's output
  // it consumed; -1 otherwise), and the extra forward input of a convolution that took an add (z).
  std::vector<int> absorbed_output_of_;
  std::vector<int> residual_input_;
  // Per layer: an add whose forward a batch norm took (fuse_residuals without folding): the batch norm's
  // output, which is then the add's output too; -1 otherwise. The add's forward runs nothing.
  std::vector<int> forward_taken_output_of_;
  std::vector<std::shared_ptr<Layer::BatchStatistics>> statistics_links_;  // fuse_statistics's pairs
  // Batch-norm apply fusion, per layer: a normalising pool's forward input (the batch norm's input;
  // -1 otherwise), and whether the layer is a batch norm whose output is never written.
  std::vector<int> normalised_input_of_;
  std::vector<char> output_unwritten_;
  bool folds_pending_ = false;
  std::uint64_t folds_ = 0;  // folded batch norms whose weights were not computed yet
  struct ParkedMaster {
    Parameter* parameter;
    Tensor host;  // fp32, the master's shape and layout
  };
  std::vector<ParkedMaster> parked_;  // masters_on_host: the masters in host memory now
  LayerHook hook_;
  MemoryReport memory_;
};

}  // namespace cnnergy
