// Executor: binds a graph's layers to a backend at a batch size, allocates the memory plan
// (described in executor_memory.cpp, planned by net/memory_plan; executor.hpp gives the rules), hands
// the layers their tensors and runs forward/backward whole or per layer. The fusion passes it runs
// when binding are in fusion_passes.cpp.
#include "net/executor.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "core/hash.hpp"

namespace cnnergy {
namespace {

// One layer call's convolution workspace (Backend::set_conv_workspace): the layer's region of the
// arena where it has one, the backend's shared workspace again afterwards (also when the call throws).
class ConvWorkspaceScope {
 public:
  ConvWorkspaceScope(Backend& backend, void* data, std::size_t bytes) : backend_(data != nullptr ? &backend : nullptr) {
    if (backend_ != nullptr) backend_->set_conv_workspace(data, bytes);
  }
  ~ConvWorkspaceScope() {
    if (backend_ != nullptr) backend_->set_conv_workspace(nullptr, 0);
  }
  ConvWorkspaceScope(const ConvWorkspaceScope&) = delete;
  ConvWorkspaceScope& operator=(const ConvWorkspaceScope&) = delete;

 private:
  Backend* backend_;
};

}  // namespace

Executor::Executor(const Graph& graph, Backend& backend, const ExecutorOptions& options)
    : graph_(graph), backend_(backend), options_(options) {
  if (options_.batch_size < 1)
    throw InvalidArgument("batch size must be at least 1, got " + std::to_string(options_.batch_size));
  const std::int64_t n = options_.batch_size;
  for (std::size_t i = 0; i < graph_.num_layers(); ++i) {
    auto layer = graph_.layer(i).clone();
    layer->set_input_grad_needed(graph_.layer(i).input_grad_needed());
    std::vector<Shape> shapes;
    for (int t : graph_.layer_inputs(i)) shapes.push_back(graph_.tensor(t).shape.with_batch(n));
    layer->setup(shapes);
    layers_.push_back(std::move(layer));
  }
  if (options_.fold_batch_norm) {
    if (options_.training)
      throw InvalidArgument("batch-norm folding is for evaluation-only executors (training=false)");
    fold_batch_norms();
  }
  if (options_.fuse_relu) fuse_relus();
  absorbed_output_of_.assign(layers_.size(), -1);
  residual_input_.assign(layers_.size(), -1);
  forward_taken_output_of_.assign(layers_.size(), -1);
  if (options_.fuse_residual) fuse_residuals();
  if (options_.training) fuse_statistics();
  // (convolution, max pool): the pools offered their convolution's ReLU mask (offer_argmax_keeping).
  std::vector<std::pair<std::size_t, std::size_t>> relu_mask_offers;
  if (options_.training) relu_mask_offers = offer_argmax_keeping();
  normalised_input_of_.assign(layers_.size(), -1);
  output_unwritten_.assign(layers_.size(), 0);
  if (options_.training && options_.fuse_batch_norm_pool) fuse_normalisations();
  if (backend_.device().is_cpu()) {
    host_budget_ = options_.host_memory ? *options_.host_memory : host_memory_budget();
    host_in_use_at_start_ = backend_.memory_stats().in_use_bytes;
    check_fits_before_binding();
  }
  for (auto& layer : layers_) layer->bind(backend_, options_.training);
  // A pool whose kernel took its convolution's ReLU mask (offer_argmax_keeping): the convolution skips
  // its own, and its output is read in backward no more. Where the kernel did not, both would mask
  // (the same values): the convolution keeps its mask and its output.
  for (const auto& [conv, pool] : relu_mask_offers)
    if (layers_[pool]->applies_relu_mask()) {
      layers_[conv]->leave_relu_mask();
      ++memory_.relu_mask_pools;
    }
  loss_layer_ = dynamic_cast<LossLayer*>(layers_.at(static_cast<std::size_t>(graph_.loss_layer())).get());
  CNNERGY_CHECK(loss_layer_ != nullptr, "the graph's loss layer is not a LossLayer");
  // Every convolution resolves its algorithms now (cuDNN's "find" times candidates in scratch
  // memory), before the activation arena exists, so that find's transient workspace never adds to
  // the peak on top of the whole arena. Forward-only executors resolve lazily (forward alone).
  // The backend's progress line names the layer being searched (one of how many).
  if (options_.training) {
    // workspace_within_activations: the searches consider workspaces up to what the step's tensors
    // take at their live peak (planned now, before any algorithm is known), so that no chosen
    // workspace, nor a search's own, outgrows the activations the step holds anyway.
    // The backend's configured cap comes back when the searches end, thrown out of or not (the
    // backend outlives this executor: an evaluation executor, the next trial of a sweep).
    struct SearchCap {
      Backend& backend;
      bool set = false;
      ~SearchCap() {
        if (set) backend.set_search_workspace_limit(0);
      }
    } cap{backend_};
    if (options_.workspace_within_activations && options_.reuse_memory && options_.conv_workspace_in_arena) {
      // (Recomputation, activation_budget_bytes, is left out: one cap for a network and batch.)
      const std::size_t budget = std::max(plan_and_allocate(/*tensors_only=*/true), options_.search_workspace_floor_bytes);
      memory_.search_workspace_limit_bytes = backend_.set_search_workspace_limit(budget);
      cap.set = memory_.search_workspace_limit_bytes > 0;
    }
    std::size_t convs = 0, done = 0;
    for (const auto& l : layers_) convs += l->category() == LayerCategory::kConv;
    for (const auto& l : layers_) {
      if (l->category() == LayerCategory::kConv) backend_.set_search_layer(++done, convs, l->name());
      (void)l->conv_algorithms();
    }
    backend_.set_search_layer(0, 0, "");
    // The shared workspace the searches grew (a convolution with a bias times the fused epilogue
    // against the unfused pair, which runs there with its forward algorithm's workspace; find and
    // `auto` time their candidates in scratch of their own) goes back before
    // the arena is allocated, not after: held across the allocation it added its size to the peak
    // (fp32 VGG-16 b64 on an H200: 2.9 GiB above what the step holds). A call the plan leaves outside
    // the arena grows it again to what that call needs.
    const MemoryStats searched = backend_.memory_stats();
    memory_.search_peak_bytes = searched.peak_bytes;
    memory_.search_workspace_bytes = searched.conv_workspace_bytes;
    backend_.release_conv_workspace();
  }
  plan_and_allocate();
  for (const auto& l : layers_) {
    memory_.kept_pool_argmaxes += l->type() == "max_pool" && options_.training && !l->needs_inputs_in_backward();
    for (const auto& p : l->parameters())
      memory_.parameter_bytes += p.master.size_bytes() + p.working.size_bytes() + p.grad.size_bytes();
    for (const auto& b : l->buffers()) memory_.layer_state_bytes += b.tensor.size_bytes();
    memory_.layer_state_bytes += l->private_bytes();
  }
}

Executor::~Executor() = default;

// What binding and planning must allocate at the least, before any of it is: the fp32 masters (and
// their gradients when training) and the largest activation at this batch (it exists at some step,
// whatever the plan shares). Counted in double: an absurd batch overflows no integer here.
void Executor::check_fits_before_binding() const {
  double params = 0;
  for (const auto& l : layers_) params += static_cast<double>(l->parameter_count()) * 4.0 * (options_.training ? 2 : 1);
  double largest = 0;
  std::string largest_name;
  for (std::size_t t = 1; t < graph_.num_tensors(); ++t) {
    const GraphTensor& gt = graph_.tensor(static_cast<int>(t));
    const double bytes = static_cast<double>(gt.shape.with_batch(1).numel()) *
                         static_cast<double>(options_.batch_size) *
                         static_cast<double>(dtype_size_bytes(backend_.dtype()));
    if (bytes > largest) {
      largest = bytes;
      largest_name = layers_.at(static_cast<std::size_t>(gt.producer))->name();
    }
  }
  const double need = std::min(params + largest, 1.8e19);
  check_host_memory_fits(static_cast<std::uint64_t>(need), *host_budget_,
                         "batch " + std::to_string(options_.batch_size) + " of " + graph_.model_name() +
                             (options_.training ? " (training)" : " (inference)"),
                         "the output of layer '" + largest_name + "' alone takes " +
                             format_memory_bytes(static_cast<std::uint64_t>(std::min(largest, 1.8e19))) +
                             (options_.training ? ", the parameters and their gradients " : ", the parameters ") +
                             format_memory_bytes(static_cast<std::uint64_t>(params)));
}

void Executor::fold_parameters() {
  restore_masters();  // folding reads them
  for (auto& l : layers_) l->fold_absorbed();
  folds_pending_ = false;
  ++folds_;
  if (options_.masters_on_host && !options_.training) park_masters();
}

void Executor::park_masters() {
  if (masters_parked()) return;
  for (auto& l : layers_)
    for (auto& p : l->parameters()) {
      if (!p.working.defined() || !p.master.defined()) continue;  // the forward reads this master
      Tensor host = Tensor::host(p.master.shape(), DType::kF32, p.master.layout());
      backend_.download(p.master, host);
      memory_.parameter_bytes -= p.master.size_bytes();
      memory_.parked_master_bytes += p.master.size_bytes();
      parked_.push_back({&p, std::move(host)});
      p.master = Tensor{};  // its device memory goes back to the allocator
    }
}

void Executor::restore_masters() {
  for (ParkedMaster& m : parked_) {
    m.parameter->master = backend_.alloc(m.host.shape(), DType::kF32, m.host.layout());
    backend_.upload(m.host, m.parameter->master);
    memory_.parameter_bytes += m.host.size_bytes();
    memory_.parked_master_bytes -= m.host.size_bytes();
  }
  parked_.clear();
}

std::size_t Executor::statistics_from_convolutions() const {
  return static_cast<std::size_t>(std::count_if(statistics_links_.begin(), statistics_links_.end(),
                                                [](const auto& link) { return link->written; }));
}

std::size_t Executor::plan_and_allocate(bool tensors_only) {
  const auto num_layers = static_cast<int>(layers_.size());
  const auto num_tensors = graph_.num_tensors();
  const DType dtype = backend_.dtype();
  const bool train = options_.training;
  const bool reuse = options_.reuse_memory;
  auto shape_of = [&](int t) { return graph_.tensor(t).shape.with_batch(options_.batch_size); };
  MemoryDescription d = describe_memory(/*with_workspaces=*/!tensors_only);
  // The search's budget (workspace_within_activations): the tensors' live peak, nothing recomputed,
  // no workspace, nothing allocated.
  if (tensors_only) return tensors_live_peak_bytes(d.request);
  if (train && reuse && options_.activation_budget_bytes) {  // recomputation (ExecutorOptions::activation_budget_bytes)
    d.request.recompute_options = recompute_options(d);
    d.request.activation_budget_bytes = options_.activation_budget_bytes;
  }
  ArenaPlan plan = plan_memory(d.request);
  recompute_before_.assign(layers_.size(), {});
  memory_.recomputed_outputs = plan.recomputed.size();
  memory_.recomputed_bytes = 0;
  for (const ArenaPlan::Recompute& r : plan.recomputed) {
    const RecomputeOption& o = d.request.recompute_options.at(r.option);
    recompute_before_.at(static_cast<std::size_t>(r.before_layer)).push_back(Recompute{o.layer, o.input, o.group});
    memory_.recomputed_bytes += d.request.groups[static_cast<std::size_t>(o.group)].bytes;
  }
  std::vector<PlanInterval>& items = plan.items;
  // What each item is, for MemoryReport::live_at_peak.
  std::vector<std::string> labels(items.size());
  for (std::size_t g = 0; g < num_tensors; ++g) {
    if (plan.group_item[g] < 0) continue;
    const std::string output = "output of " + layers_[static_cast<std::size_t>(graph_.tensor(static_cast<int>(g)).producer)]->name();
    labels[static_cast<std::size_t>(plan.group_item[g])] = output;
    if (plan.backward_item[g] >= 0) labels[static_cast<std::size_t>(plan.backward_item[g])] = output + " (rebuilt)";
  }
  for (std::size_t k = 0; k < d.gradient_labels.size(); ++k) labels[plan.gradient_base + k] = d.gradient_labels[k];
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (plan.forward_workspace_item[l] >= 0)
      labels[static_cast<std::size_t>(plan.forward_workspace_item[l])] = "workspace of " + layers_[l]->name() + " (forward)";
    if (plan.backward_workspace_item[l] >= 0)
      labels[static_cast<std::size_t>(plan.backward_workspace_item[l])] = "workspace of " + layers_[l]->name() + " (backward)";
  }
  std::vector<int> grad_item(num_tensors, -1);
  for (std::size_t t = 0; t < num_tensors; ++t)
    if (d.gradient[t] >= 0) grad_item[t] = static_cast<int>(plan.gradient_base) + d.gradient[t];
  const std::vector<int>& group = d.group;
  const std::vector<int>& group_item = plan.group_item;
  const std::vector<int>& backward_item = plan.backward_item;
  const std::vector<int>& forward_workspace_item = plan.forward_workspace_item;
  const std::vector<int>& backward_workspace_item = plan.backward_workspace_item;
  const std::size_t naive = d.naive_bytes;

  const std::size_t arena = plan.arena_bytes;
  if (host_budget_) {  // CPU: the planned activations plus what binding allocated, before allocating them
    std::uint64_t planned = arena;
    if (!reuse)
      for (const auto& it : items) planned += it.bytes;
    const std::size_t now = backend_.memory_stats().in_use_bytes;
    const std::uint64_t bound = now > host_in_use_at_start_ ? now - host_in_use_at_start_ : 0;
    check_host_memory_fits(planned + bound, *host_budget_,
                           "batch " + std::to_string(options_.batch_size) + " of " + graph_.model_name() +
                               (train ? " (training)" : " (inference)"),
                           "activations and gradients " + format_memory_bytes(planned) +
                               " as planned, parameters and layer state " + format_memory_bytes(bound));
  }
  pool_.clear();
  if (reuse) {
    // One arena, every tensor a view at its planned offset.
    pool_.push_back(backend_.alloc_buffer(std::max<std::size_t>(arena, 1)));
    memory_.activation_bytes = arena;
  } else {
    for (auto& it : items) {
      it.offset = pool_.size();  // the index of its own buffer (offset 0 in it)
      pool_.push_back(backend_.alloc_buffer(std::max<std::size_t>(it.bytes, 1)));
      memory_.activation_bytes += it.bytes;
    }
  }
  const std::size_t peak_bytes = plan.live_peak_bytes;
  const int peak_step = plan.peak_step;
  memory_.live_peak_bytes = peak_bytes;
  memory_.live_at_peak.clear();
  for (std::size_t k = 0; k < items.size(); ++k)
    if (items[k].start <= peak_step && peak_step <= items[k].end && items[k].bytes > 0)
      memory_.live_at_peak.push_back({labels.at(k), items[k].bytes});
  std::stable_sort(memory_.live_at_peak.begin(), memory_.live_at_peak.end(),
                   [](const MemoryReport::LiveBytes& a, const MemoryReport::LiveBytes& b) { return a.bytes > b.bytes; });
  memory_.peak_step = peak_step < num_layers ? "forward of " + layers_[static_cast<std::size_t>(peak_step)]->name()
                      : peak_step < 2 * num_layers
                          ? "backward of " + layers_[static_cast<std::size_t>(2 * num_layers - 1 - peak_step)]->name()
                          : "after the step";
  memory_.naive_bytes = naive;
  memory_.num_buffers = pool_.size();
  forward_workspace_.assign(layers_.size(), WorkspaceRegion{});
  backward_workspace_.assign(layers_.size(), WorkspaceRegion{});
  memory_.arena_workspaces = 0;
  memory_.arena_workspace_bytes = 0;
  auto region = [&](int item) {
    const PlanInterval& it = items.at(static_cast<std::size_t>(item));
    void* data = reuse ? static_cast<void*>(static_cast<char*>(pool_.front()->data()) + it.offset)
                       : pool_.at(it.offset)->data();
    return WorkspaceRegion{data, it.bytes};
  };
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (const auto& [item, slot] : {std::pair{forward_workspace_item[i], &forward_workspace_[i]},
                                     std::pair{backward_workspace_item[i], &backward_workspace_[i]}}) {
      if (item < 0) continue;
      *slot = region(item);
      ++memory_.arena_workspaces;
      memory_.arena_workspace_bytes = std::max(memory_.arena_workspace_bytes, slot->bytes);
    }

  auto view = [&](int t, int item) {
    const Shape s = shape_of(t);
    const PlanInterval& it = items.at(static_cast<std::size_t>(item));
    const Layout layout = s.rank() == 4 ? backend_.layout() : Layout::kNCHW;
    if (!reuse) return Tensor(s, dtype, layout, pool_.at(it.offset));
    return Tensor(s, dtype, layout, pool_.front(), it.offset);
  };
  activations_.assign(num_tensors, Tensor{});
  backward_activations_.assign(num_tensors, Tensor{});
  gradients_.assign(num_tensors, Tensor{});
  for (std::size_t t = 1; t < num_tensors; ++t) {
    const auto g = static_cast<std::size_t>(group[t]);
    if (group_item[g] < 0) {  // never written (batch-norm apply fusion): no memory, no view
      if (grad_item[t] >= 0) gradients_[t] = view(static_cast<int>(t), grad_item[t]);
      continue;
    }
    activations_[t] = view(static_cast<int>(t), group_item[g]);
    // A recomputed group's backward readers get the buffer it is rebuilt in.
    backward_activations_[t] = backward_item[g] >= 0 ? view(static_cast<int>(t), backward_item[g]) : activations_[t];
    if (grad_item[t] >= 0) gradients_[t] = view(static_cast<int>(t), grad_item[t]);
  }

  // Per-layer I/O and accumulate flags: the first writer of a gradient in backward order (the
  // highest-index consumer, first occurrence among its inputs) overwrites; the others add.
  io_.clear();
  io_.resize(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto& ins = graph_.layer_inputs(i);
    LayerIo& io = io_[i];
    io.accumulate = std::make_unique<bool[]>(ins.size());
    for (std::size_t j = 0; j < ins.size(); ++j) {
      const GraphTensor& gt = graph_.tensor(ins[j]);
      bool first = gt.consumers.back() == static_cast<int>(i);
      for (std::size_t k = 0; k < j; ++k) first = first && ins[k] != ins[j];
      io.accumulate[j] = !first;
    }
    bool any_grad = static_cast<int>(i) == graph_.loss_layer();
    for (int t : graph_.layer_outputs(i)) any_grad = any_grad || graph_.tensor(t).needs_grad;
    io.run_backward = train && any_grad;
  }
  refresh_views();
  return peak_bytes;
}

void Executor::refresh_views() {
  // What backward reads of tensor t: its rebuilt copy where it is recomputed (the network input,
  // tensor 0, is set_input's and never is).
  auto read_back = [&](std::size_t t) -> const Tensor& {
    return t < backward_activations_.size() && backward_activations_[t].defined() ? backward_activations_[t]
                                                                                   : activations_[t];
  };
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    LayerIo& io = io_[i];
    const Layer& l = *layers_[i];
    io.fwd_in.clear();
    io.fwd_out.clear();
    io.bwd_in.clear();
    io.bwd_out.clear();
    io.out_grads.clear();
    io.in_grads.clear();
    for (int t : graph_.layer_inputs(i)) {
      const auto ti = static_cast<std::size_t>(t);
      const int normalised = normalised_input_of_[i];  // a normalising pool reads the batch norm's input
      io.fwd_in.push_back(activations_[normalised >= 0 ? static_cast<std::size_t>(normalised) : ti]);
      io.bwd_in.push_back(l.needs_inputs_in_backward() ? read_back(ti) : Tensor{});
      io.in_grads.push_back(graph_.tensor(t).needs_grad ? gradients_[ti] : Tensor{});
    }
    if (residual_input_[i] >= 0)  // a fused residual add's other input (forward only, after the layer's own)
      io.fwd_in.push_back(activations_[static_cast<std::size_t>(residual_input_[i])]);
    for (int t : graph_.layer_outputs(i)) {
      const auto ti = static_cast<std::size_t>(t);
      io.fwd_out.push_back(activations_[ti]);
      io.bwd_out.push_back(l.needs_outputs_in_backward() ? read_back(ti) : Tensor{});
      io.out_grads.push_back(gradients_[ti]);
    }
  }
}

void Executor::initialize_parameters(std::uint64_t seed) {
  restore_masters();  // drawn into the masters
  Rng rng(seed);
  for (auto& l : layers_) l->init_parameters(rng);
  // Imported weights (ONNX initialisers) replace the drawn ones, converted to each tensor's layout.
  const InitialValues& values = graph_.initial_values();
  if (!values.empty()) {
    auto put = [&](const std::string& name, const Tensor& target) {
      auto it = values.find(name);
      if (it == values.end()) return;
      backend_.upload(from_f32_nchw(it->second, DType::kF32, target.layout()), target);
    };
    for (auto& l : layers_) {
      for (auto& p : l->parameters()) put(p.name, p.master);
      for (auto& b : l->buffers()) put(b.name, b.tensor);
      l->refresh_working_copies();
    }
  }
  fold_parameters();
}

void Executor::set_input(const Tensor& images, const Tensor& labels) {
  const Shape want = graph_.tensor(graph_.input_tensor()).shape.with_batch(options_.batch_size);
  if (!(images.shape() == want))
    throw ShapeError("model " + graph_.model_name() + " at batch " + std::to_string(options_.batch_size) +
                     " expects input " + want.str() + ", got " + images.shape().str());
  if (images.device() != backend_.device())
    throw InvalidArgument("input images are on " + images.device().str() + ", the network on " +
                          backend_.device().str());
  if (labels.defined()) {
    if (labels.dtype() != DType::kI32 || !(labels.shape() == Shape{options_.batch_size}))
      throw ShapeError("labels must be int32 (" + std::to_string(options_.batch_size) + "), got " + labels.describe());
    if (labels.device() != backend_.device())
      throw InvalidArgument("labels are on " + labels.device().str() + ", the network on " + backend_.device().str());
  }
  const Layout layout = want.rank() == 4 ? backend_.layout() : Layout::kNCHW;
  Tensor in = images;
  if (images.dtype() != backend_.dtype() || images.layout() != layout) {
    if (!own_input_.defined()) {
      own_input_ = backend_.alloc(want, backend_.dtype(), backend_.layout());
      memory_.input_copy_bytes = own_input_.size_bytes();
    }
    backend_.copy(images, own_input_);
    in = own_input_;
  }
  labels_ = labels;
  if (activations_[0].raw() != in.raw() || activations_[0].buffer() != in.buffer()) {
    activations_[0] = in;
    refresh_views();
  }
}

const Tensor& Executor::input() const { return activations_.at(0); }
const Tensor& Executor::labels() const { return labels_; }
std::size_t Executor::num_layers() const { return layers_.size(); }
Layer& Executor::layer(std::size_t i) { return *layers_.at(i); }
const Layer& Executor::layer(std::size_t i) const { return *layers_.at(i); }
const Tensor& Executor::logits() const { return activations_.at(static_cast<std::size_t>(graph_.logits_tensor())); }
const Tensor& Executor::loss() const { return loss_layer_->loss(); }
const Tensor& Executor::activation(int id) const { return activations_.at(static_cast<std::size_t>(id)); }
const Tensor& Executor::gradient(int id) const { return gradients_.at(static_cast<std::size_t>(id)); }

float Executor::read_loss() const {
  Tensor host = Tensor::host(Shape{1});
  backend_.download(loss(), host);
  return host.f32()[0];
}

void Executor::begin_iteration() { ++iteration_; }

void Executor::run_forward_layer(std::size_t i, Phase phase) {
  if (!activations_[0].defined()) throw InvalidArgument("forward before set_input()");
  if (phase == Phase::kTrain && !options_.training)
    throw InvalidArgument("this executor was bound for evaluation only; forward(kTrain) needs training=true");
  if (folds_pending_)
    throw InvalidArgument("folded batch norms have no weights yet: call fold_parameters() after setting them");
  const bool is_loss = static_cast<int>(i) == graph_.loss_layer();
  if (is_loss && !labels_.defined()) {
    if (phase == Phase::kTrain) throw InvalidArgument("training forward without labels (set_input)");
    return;  // inference without labels: no loss
  }
  if (forward_taken_output_of_[i] >= 0) return;  // an add whose forward the batch norm before it ran
  LayerIo& io = io_[i];
  ForwardContext ctx;
  ctx.inputs = io.fwd_in;
  ctx.outputs = io.fwd_out;
  ctx.phase = phase;
  ctx.seed = mix64(options_.dropout_seed ^ (iteration_ * 0x9E3779B97F4A7C15ull), i);
  ctx.labels = &labels_;
  const ConvWorkspaceScope workspace(backend_, forward_workspace_[i].data, forward_workspace_[i].bytes);
  layers_[i]->forward(ctx);
}

void Executor::run_backward_layer(std::size_t i, float loss_scale) {
  if (!options_.training) throw InvalidArgument("this executor was bound for evaluation only: no backward");
  // Outputs this layer is the first to read in backward, rebuilt (even where it runs no backward
  // itself: a later reader may).
  for (const Recompute& r : recompute_before_[i])
    layers_[static_cast<std::size_t>(r.layer)]->recompute_output(backward_activations_[static_cast<std::size_t>(r.input)],
                                                                  backward_activations_[static_cast<std::size_t>(r.group)]);
  LayerIo& io = io_[i];
  if (!io.run_backward) return;
  BackwardContext ctx;
  ctx.inputs = io.bwd_in;
  ctx.outputs = io.bwd_out;
  ctx.output_grads = io.out_grads;
  ctx.input_grads = io.in_grads;
  ctx.accumulate = std::span<const bool>(io.accumulate.get(), io.in_grads.size());
  ctx.loss_scale = loss_scale;
  ctx.labels = &labels_;
  const ConvWorkspaceScope workspace(backend_, backward_workspace_[i].data, backward_workspace_[i].bytes);
  layers_[i]->backward(ctx);
}

void Executor::forward_layer(std::size_t i, Phase phase) {
  if (i >= layers_.size()) throw InvalidArgument("layer index " + std::to_string(i) + " out of range");
  run_forward_layer(i, phase);
}

void Executor::backward_layer(std::size_t i, float loss_scale) {
  if (i >= layers_.size()) throw InvalidArgument("layer index " + std::to_string(i) + " out of range");
  run_backward_layer(i, loss_scale);
}

void Executor::forward(Phase phase) {
  begin_iteration();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (hook_) hook_(i, Pass::kForward, false);
    run_forward_layer(i, phase);
    if (hook_) hook_(i, Pass::kForward, true);
  }
}

void Executor::backward(float loss_scale) {
  for (std::size_t k = layers_.size(); k-- > 0;) {
    if (hook_) hook_(k, Pass::kBackward, false);
    run_backward_layer(k, loss_scale);
    if (hook_) hook_(k, Pass::kBackward, true);
  }
}

std::vector<Parameter*> Executor::parameters() {
  restore_masters();  // callers read or write the masters (checkpoints, optimisers, export)
  std::vector<Parameter*> out;
  for (auto& l : layers_)
    for (auto& p : l->parameters()) out.push_back(&p);
  return out;
}

std::vector<StateBuffer*> Executor::buffers() {
  std::vector<StateBuffer*> out;
  for (auto& l : layers_)
    for (auto& b : l->buffers()) out.push_back(&b);
  return out;
}

}  // namespace cnnergy
