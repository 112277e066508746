// train_data_parallel(): one rank's measured loop. Per step: load (own shard, asynchronous upload),
// forward, backward with bucket all-reduces launched from the layer hook, the compute stream's wait
// for the last bucket ("comm_exposed"), update; then Communicator::end_step() keeps the host at
// most one step ahead so a dead peer is noticed within the timeout. With cuda_graph the step after
// load is one replayed recording (TrainStep), timed as a whole ("step"). Timed windows start after
// the warm-up steps; energy comes from this rank's own probe. Aggregation across ranks:
// dp_report.cpp.
#include "train/parallel/dp_trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <exception>
#include <functional>
#include <optional>

#include "core/errors.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "measure/phase_timer.hpp"
#include "net/checkpoint.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "train/parallel/dp_internal.hpp"
#include "train/parallel/sharding.hpp"
#include "train/evaluator.hpp"
#include "train/fixed_batch.hpp"
#include "train/train_step.hpp"

namespace cnnergy::dist {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

enum PhaseIndex : std::size_t { kLoad = 0, kForward, kBackward, kCommExposed, kUpdate, kNumPhases };
constexpr std::size_t kGraphStep = 1;  // with cuda_graph: load, step

void validate(const DataParallelConfig& c, const data::DatasetSplits& d, const Graph& g,
              int world) {
  if (c.per_replica_batch < 1)
    throw InvalidArgument("the per-replica batch must be at least 1, got " +
                          std::to_string(c.per_replica_batch));
  if (c.epochs < 1)
    throw InvalidArgument("epochs must be at least 1, got " + std::to_string(c.epochs));
  if (c.warmup_iterations < 0 || c.max_iterations_per_epoch < 0 || c.eval_batches < 0 ||
      c.check_weights_every < 0)
    throw InvalidArgument("warm-up, iteration, evaluation and check counts must be >= 0");
  if (c.cuda_graph && c.wait_method == WaitMethod::kBarrier)
    throw InvalidArgument(
        "--wait-method barrier times every all-reduce apart, and a step replayed as a CUDA graph "
        "(--cuda-graph) is timed only as a whole: use --wait-method estimate (nothing is timed per "
        "bucket then either) or drop --cuda-graph");
  if (c.expected_world_size > 0 && c.expected_world_size != world)
    throw InvalidArgument("expected " + std::to_string(c.expected_world_size) +
                          " ranks, but the communicator has " + std::to_string(world) +
                          " (mpirun -np and --gpus disagree?)");
  if (!d.train) throw InvalidArgument("no training data");
  data::check_compatible(d.train->sample_shape(), g.input_per_sample(), d.train->num_classes(),
                         g.num_classes());
  const std::int64_t global = c.per_replica_batch * world;
  if (d.train->size() < global)
    throw InvalidArgument("the training set has " + std::to_string(d.train->size()) +
                          " samples, fewer than one global batch of " + std::to_string(global) +
                          " (" + std::to_string(world) + " replicas x " +
                          std::to_string(c.per_replica_batch) + ")");
}

// Everything a rank's numbers depend on; ranks must agree on it before the first collective that
// would otherwise hang or silently mix different models.
std::string run_signature(const Graph& g, const Backend& b, const DataParallelConfig& c,
                          const data::DatasetSplits& d, int world) {
  std::string s = "model " + model_signature(g);
  s += "; replica batch " + std::to_string(c.per_replica_batch) + " x " + std::to_string(world);
  s += "; " + std::string(dtype_name(b.dtype())) + (b.options().allow_tf32 ? "+tf32" : "") + " " +
       std::string(layout_name(b.layout())) + " on " + b.name();
  s += "; data '" + d.train->name() + "' (" + std::to_string(d.train->size()) + ")";
  s += "; epochs " + std::to_string(c.epochs) + " max-iters " +
       std::to_string(c.max_iterations_per_epoch) + " warm-up " +
       std::to_string(c.warmup_iterations) + " seed " + std::to_string(c.seed);
  s += "; lr " + std::to_string(c.solver.schedule.base_lr) + " momentum " +
       std::to_string(c.solver.momentum) + " decay " + std::to_string(c.solver.weight_decay);
  if (c.fixed_batch) s += "; fixed batch";
  if (c.cuda_graph) s += "; cuda graph";
  s += "; buckets " + std::to_string(c.buckets.cap_bytes) + (c.buckets.overlap ? " overlap" : "") +
       " wait " + wait_method_name(c.wait_method);
  if (!c.signature.empty()) s += "; " + c.signature;
  return s;
}

// Identical initial state on every replica, whatever each one's initialiser did: rank 0's masters
// and buffers are broadcast, then every working copy is refreshed from its master.
void broadcast_state(Executor& exec, Communicator& comm) {
  comm.wait_for_compute();
  for (Parameter* p : exec.parameters()) comm.broadcast(p->master, 0);
  for (StateBuffer* b : exec.buffers()) comm.broadcast(b->tensor, 0);
  comm.compute_wait_for_comm();
  comm.synchronize();
  for (std::size_t i = 0; i < exec.num_layers(); ++i) exec.layer(i).refresh_working_copies();
}

// Running statistics (batch norm) differ per replica; evaluation uses their mean over ranks.
void average_buffers(Executor& exec, Communicator& comm) {
  const auto buffers = exec.buffers();
  if (buffers.empty() || comm.size() == 1) return;
  comm.wait_for_compute();
  for (StateBuffer* b : buffers) comm.all_reduce_sum(b->tensor);
  comm.compute_wait_for_comm();
  comm.synchronize();
  Backend& backend = exec.backend();
  const float inv = 1.0f / static_cast<float>(comm.size());
  for (StateBuffer* b : buffers) {
    Tensor host = Tensor::host(b->tensor.shape(), DType::kF32, b->tensor.layout());
    backend.download(b->tensor, host);
    for (float& v : host.f32()) v *= inv;
    backend.upload(host, b->tensor);
  }
}

// `settle` is a bounded wait for everything this rank enqueued (see train_data_parallel).
void check_weights(Executor& exec, Communicator& comm, const std::function<void()>& settle,
                   std::int64_t step, std::string* out) {
  settle();
  const std::string mine = weights_checksum(exec);
  const auto all = comm.all_gather(mine);
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw InternalError("replica weights diverged after step " + std::to_string(step) +
                          ": rank 0 checksum " + all[0] + ", rank " + std::to_string(r) +
                          " checksum " + all[r]);
  if (out) *out = mine;
}

}  // namespace

const std::vector<std::string>& dp_phase_names() {
  static const std::vector<std::string> names = {"load", "forward", "backward", "comm_exposed",
                                                 "update"};
  return names;
}

const std::vector<std::string>& dp_graph_phase_names() {
  static const std::vector<std::string> names = {"load", "step"};
  return names;
}

namespace {

// With cuda_graph, an exception leaving the loop would destroy the recordings, and destroying one
// first waits for its replays; a replay whose all-reduce waits for a peer that failed never ends
// unless this rank's communicator is aborted (which makes its collectives return). NCCL (>= 2.26)
// in turn finishes an abort only once the graphs that captured its collectives are gone, which is
// why NcclCommunicator aborts on a thread of its own. Declared after the TrainStep, this guard
// runs before the recordings are destroyed.
class AbortOnUnwind {
 public:
  AbortOnUnwind(Communicator& comm, bool armed)
      : comm_(comm), armed_(armed), uncaught_(std::uncaught_exceptions()) {}
  ~AbortOnUnwind() {
    if (armed_ && std::uncaught_exceptions() > uncaught_) {
      try {
        comm_.abort("rank " + std::to_string(comm_.rank()) +
                    " failed during a data-parallel step recorded as a CUDA graph");
      } catch (...) {  // never from a destructor
      }
    }
  }
  AbortOnUnwind(const AbortOnUnwind&) = delete;
  AbortOnUnwind& operator=(const AbortOnUnwind&) = delete;

 private:
  Communicator& comm_;
  bool armed_;
  int uncaught_;
};

}  // namespace

DataParallelReport train_data_parallel(const Graph& graph, Backend& backend, Communicator& comm,
                                       const data::DatasetSplits& data,
                                       const DataParallelConfig& config, EnergyProbe* energy) {
  const int world = comm.size();
  const int rank = comm.rank();
  validate(config, data, graph, world);
  agree(comm, "run (model, batch, precision, data, solver)",
        run_signature(graph, backend, config, data, world));

  const std::int64_t b = config.per_replica_batch;
  const std::int64_t global = b * world;
  const std::int64_t full_epoch = data.train->size() / global;
  const std::int64_t iters_per_epoch = config.max_iterations_per_epoch > 0
                                           ? std::min(full_epoch, config.max_iterations_per_epoch)
                                           : full_epoch;

  ExecutorOptions eo;
  eo.batch_size = b;
  eo.dropout_seed = mix_rank_seed(config.seed, rank);
  eo.activation_budget_bytes = config.activation_budget_bytes;
  Executor exec(graph, backend, eo);
  const bool graphed = config.cuda_graph;
  // NotSupported on every rank alike (same backend and model, agreed above), before any collective.
  if (graphed) check_graph_step_supported(exec);
  exec.initialize_parameters(config.seed);
  broadcast_state(exec, comm);

  SolverOptions so = config.solver;
  so.iterations_per_epoch = iters_per_epoch;
  SgdSolver solver(exec, so);
  BucketOptions bo = config.buckets;
  bo.wait_barrier = config.wait_method == WaitMethod::kBarrier;
  bo.timed = !graphed;  // events recorded inside a capture cannot be read back
  GradientBuckets buckets(exec, comm, bo);
  // Same buckets everywhere, or the all-reduces would pair different tensors.
  std::string layout_text;
  for (const BucketInfo& bi : buckets.buckets())
    layout_text += std::to_string(bi.bytes) + std::string(dtype_name(bi.dtype)) + ",";
  agree(comm, "gradient buckets", layout_text);

  // A bounded wait for everything this rank has enqueued. Eagerly the collectives run on the
  // communication stream, so waiting for it covers them; in a replayed graph they run inside the
  // graph on the compute stream, so the communication stream first waits for the compute stream.
  auto settle = [&] {
    if (graphed) comm.wait_for_compute();
    comm.synchronize();
  };

  RankState st;  // what dp_report.cpp turns into the reports
  st.graphed = graphed;
  st.phase_names = graphed ? dp_graph_phase_names() : dp_phase_names();
  PhaseTimer timer(backend, st.phase_names);
  const Shape& per = data.train->sample_shape();
  const Shape in_shape{b, per[0], per[1], per[2]};
  // Two input slots (the upload of the next batch overlaps the step reading the other); one batch
  // for --fixed-batch.
  Tensor images[2], labels[2];
  for (int i = 0; i < (config.fixed_batch ? 1 : 2); ++i) {
    images[i] = backend.alloc(in_shape, DType::kF32);
    labels[i] = backend.alloc(Shape{b}, DType::kI32);
  }
  std::deque<std::pair<data::Batch, std::unique_ptr<DeviceEvent>>> in_flight;
  if (config.fixed_batch)
    upload_random_batch(backend, data.train->num_classes(), mix_rank_seed(config.seed, rank), images[0], labels[0]);
  const float backward_scale_divisor = static_cast<float>(world);
  // The graph-mode step (the eager loop below does the same by hand, timing each phase). Declared
  // after everything its recordings address, so they are destroyed first.
  StepHooks hooks;
  hooks.loss_scale_divisor = backward_scale_divisor;
  hooks.before_backward = [&] { buckets.begin_step(); };
  hooks.after_backward = [&] { buckets.end_backward(); };
  hooks.before_recording = settle;  // replacing a recording waits for its replays: bounded first
  TrainStep train_step(exec, solver, graphed, hooks);
  AbortOnUnwind abort_on_unwind(comm, graphed);

  std::int64_t step = 0, slot = 0;
  std::int64_t window_recordings0 = 0;
  for (std::int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    data::LoaderOptions lo;
    lo.batch_size = b;
    lo.shuffle = false;  // the shard is already in this epoch's shuffled order
    lo.drop_last = true;
    lo.augment = config.augment;
    lo.workers = config.loader_workers;
    lo.prefetch = config.prefetch;
    lo.epochs = 1;
    lo.seed = config.seed + static_cast<std::uint64_t>(epoch) * 7919u;
    std::optional<data::DataLoader> loader;
    if (!config.fixed_batch)
      loader.emplace(epoch_shard(data.train, config.seed, epoch, rank, world, b, iters_per_epoch), lo, backend);
    auto loader_wait_ms = [&] { return loader ? loader->stats().consumer_wait_ms : 0.0; };

    EpochSummary es;
    es.epoch = epoch + 1;
    es.iterations = iters_per_epoch;
    double loss_sum = 0;
    std::int64_t loss_reads = 0;
    bool window_open = false;
    Clock::time_point window_t0;
    double window_wait0 = 0;

    for (std::int64_t it = 0; it < iters_per_epoch; ++it, ++step) {
      if (step >= config.warmup_iterations && !window_open) {
        // Start of a timed window: nothing of the warm-up may leak into it.
        settle();
        backend.synchronize();
        if (step == config.warmup_iterations) {
          timer.flush();
          timer.clear();
          buckets.harvest(true);
          buckets.clear_timings();
        }
        if (energy) energy->begin();
        window_open = true;
        window_t0 = Clock::now();
        window_wait0 = loader_wait_ms();
        window_recordings0 = train_step.recordings();
      }
      timer.begin_iteration();
      int input_slot = 0;  // which input buffers this step reads (one recording each)
      if (loader) {
        std::optional<data::Batch> batch = loader->next();
        if (!batch) throw InternalError("the loader ran out of batches before the epoch ended");
        input_slot = static_cast<int>(slot % 2);
        const Tensor& dev_images = images[input_slot];
        const Tensor& dev_labels = labels[input_slot];
        ++slot;
        backend.upload(batch->images, dev_images, /*async=*/true);
        backend.upload(batch->labels, dev_labels, /*async=*/true);
        auto uploaded = backend.make_event();
        uploaded->record();
        in_flight.emplace_back(std::move(*batch), std::move(uploaded));
        while (in_flight.size() > 2 || (!in_flight.empty() && in_flight.front().second->ready())) {
          in_flight.front().second->synchronize();
          in_flight.pop_front();
        }
        exec.set_input(dev_images, dev_labels);
      } else {
        exec.set_input(images[0], labels[0]);  // already there: the "load" phase is empty
      }
      timer.end_phase(kLoad);
      if (graphed) {
        // The step reads the loss scale before it records or replays; with a dynamic scale that
        // is a download behind the previous step (all-reduces included): wait for it bounded.
        if (so.loss_scale.dynamic) settle();
        train_step.run(input_slot);  // the first step eagerly (untimed per bucket), then replays
        timer.end_phase(kGraphStep);
        timer.end_iteration();
        // The communication stream holds none of a replay's all-reduces: it waits for the compute
        // stream first, so end_step's fence follows this step's replay and bounds the host's lead.
        comm.wait_for_compute();
      } else {
        exec.forward(Phase::kTrain);
        timer.end_phase(kForward);
        // A dynamic loss scale is read back from the previous update, which waited for the
        // previous all-reduces: wait for those first, with the timeout, instead of blocking
        // without one.
        if (so.loss_scale.dynamic) comm.synchronize();
        buckets.begin_step();
        exec.backward(solver.loss_scale() / backward_scale_divisor);
        timer.end_phase(kBackward);
        buckets.end_backward();
        timer.end_phase(kCommExposed);
        solver.step();
        timer.end_phase(kUpdate);
        timer.end_iteration();
      }
      comm.end_step();

      if (config.loss_every > 0 && (it % config.loss_every == 0 || it + 1 == iters_per_epoch)) {
        settle();
        const float l = exec.read_loss();
        if (std::isfinite(l)) {
          loss_sum += l;
          ++loss_reads;
        }
      }
      if (config.check_weights_every > 0 && (step + 1) % config.check_weights_every == 0)
        check_weights(exec, comm, settle, step + 1, nullptr);
      if (config.after_step) {
        settle();
        backend.synchronize();
        config.after_step(rank, step + 1, exec);
      }
    }
    settle();
    backend.synchronize();
    in_flight
        .clear();  // only now: an asynchronous upload may read a batch until the device is idle
    if (window_open) {
      st.seconds += seconds_since(window_t0);
      st.graph_recordings_timed += train_step.recordings() - window_recordings0;
      st.loader_wait_ms += loader_wait_ms() - window_wait0;
      if (energy) {
        if (auto r = energy->end()) {
          st.joules = st.joules.value_or(0) + r->joules;
          st.energy_source = energy->source();
        } else {
          st.energy_missing = true;
        }
      }
    }
    // Mean of the ranks' sampled losses: each rank's loss is over an equal slice of the batch.
    const std::vector<std::string> losses = comm.all_gather(
        exact_number(loss_reads ? loss_sum / static_cast<double>(loss_reads) : std::nan("")));
    double sum = 0;
    for (const auto& l : losses) sum += std::strtod(l.c_str(), nullptr);
    es.train_loss = sum / static_cast<double>(world);

    if (config.evaluate && data.test) {
      average_buffers(exec, comm);
      const auto shard = strided_shard(data.test, rank, world);
      const std::int64_t max_batches =
          config.eval_batches > 0 ? std::max<std::int64_t>(1, config.eval_batches / world) : 0;
      Accuracy a;
      if (shard) a = evaluate(exec, shard, max_batches, config.loader_workers);
      const double hits1 = a.top1 * static_cast<double>(a.samples),
                   hits5 = a.top5 * static_cast<double>(a.samples);
      const double n = all_reduce_host_sum(comm, static_cast<double>(a.samples));
      const double h1 = all_reduce_host_sum(comm, std::round(hits1));
      const double h5 = all_reduce_host_sum(comm, std::round(hits5));
      if (n > 0) {
        es.top1 = h1 / n;
        es.top5 = h5 / n;
        es.eval_samples = static_cast<std::int64_t>(n);
      }
    }
    st.epochs.push_back(es);
  }

  settle();
  backend.synchronize();
  timer.flush();
  buckets.harvest(true);
  std::string checksum;
  check_weights(exec, comm, settle, step, &checksum);
  if (!config.save_path.empty()) {
    if (rank == 0) save_checkpoint(config.save_path, exec, solver);
    comm.barrier();
  }

  st.rank = rank;
  st.metered = energy != nullptr;
  st.host = comm.host_name();
  st.device = backend.device().str() + " (" + backend.device_name() + ")";
  st.iterations = step;
  st.phase_ms = timer.phase_ms();
  st.iteration_ms = timer.iteration_ms();
  st.bucket_timings = buckets.timings();
  st.host_comm = comm.kind() != "nccl";
  st.overlap = buckets.options().overlap;
  st.graph_recordings = train_step.recordings();
  const Workload w = graph.total_workload();

  DataParallelReport report = gather_report(comm, st, buckets.buckets(), config);
  report.weights_checksum = checksum;
  report.flops_per_sample = static_cast<double>(w.flops_forward + w.flops_backward);
  report.model = graph.model_name();
  report.recomputed_outputs = exec.memory().recomputed_outputs;  // the same plan on every rank
  report.conv_statistics = exec.memory().conv_statistics;
  report.conv_statistics_computed = exec.statistics_from_convolutions();
  return report;
}

}  // namespace cnnergy::dist
