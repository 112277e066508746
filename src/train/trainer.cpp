// train(): Algorithm 1 of Castro et al. 2019 with device-event phase timing, lazy loss reads, held-out
// evaluation per epoch, time/energy-to-accuracy and epoch checkpoints.
#include "train/trainer.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/errors.hpp"
#include "core/log.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "measure/phase_timer.hpp"
#include "net/checkpoint.hpp"
#include "net/executor.hpp"
#include "net/graph.hpp"
#include "train/evaluator.hpp"
#include "train/train_step.hpp"

namespace cnnergy {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void validate(const TrainConfig& c, const data::DatasetSplits& d, const Graph& g) {
  if (c.batch_size < 1) throw InvalidArgument("batch size must be at least 1, got " + std::to_string(c.batch_size));
  if (c.epochs < 1) throw InvalidArgument("epochs must be at least 1, got " + std::to_string(c.epochs));
  if (c.target_accuracy && !(*c.target_accuracy > 0.0 && *c.target_accuracy <= 1.0))
    throw InvalidArgument("target accuracy must lie in (0, 1], got " + std::to_string(*c.target_accuracy));
  if (!d.train) throw InvalidArgument("no training data");
  data::check_compatible(d.train->sample_shape(), g.input_per_sample(), d.train->num_classes(), g.num_classes());
  if (d.train->size() < c.batch_size)
    throw InvalidArgument("the training set has " + std::to_string(d.train->size()) + " samples, fewer than one batch of " +
                          std::to_string(c.batch_size));
}

}  // namespace

TrainReport train(const Graph& graph, Backend& backend, const data::DatasetSplits& data, const TrainConfig& config,
                  EnergyProbe* energy, const EpochCallback& on_epoch) {
  validate(config, data, graph);
  ExecutorOptions eo;
  eo.batch_size = config.batch_size;
  eo.dropout_seed = config.seed;
  eo.activation_budget_bytes = config.activation_budget_bytes;
  Executor exec(graph, backend, eo);
  exec.initialize_parameters(config.seed);

  const std::int64_t full_epoch = data.train->size() / config.batch_size;
  const std::int64_t iters_per_epoch =
      config.max_iterations_per_epoch > 0 ? std::min(full_epoch, config.max_iterations_per_epoch) : full_epoch;
  SolverOptions so = config.solver;
  so.iterations_per_epoch = iters_per_epoch;
  SgdSolver solver(exec, so);
  TrainStep train_step(exec, solver, config.cuda_graph);  // NotSupported here, before any data moves

  std::int64_t start_epoch = 0;
  if (!config.resume_path.empty()) {
    load_checkpoint(config.resume_path, exec, solver);
    start_epoch = solver.epoch();
    log_info("resumed from " + config.resume_path + " at epoch " + std::to_string(start_epoch) + ", iteration " +
             std::to_string(solver.iteration()));
    if (start_epoch >= config.epochs) log_warn("the checkpoint already covers the requested epochs");
  }

  data::LoaderOptions lo;
  lo.batch_size = config.batch_size;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.augment = true;
  lo.workers = config.loader_workers;
  lo.prefetch = config.prefetch;
  lo.seed = config.seed + static_cast<std::uint64_t>(start_epoch) * 7919u;
  lo.epochs = std::max<std::int64_t>(config.epochs - start_epoch, 0);

  TrainReport report;
  // A replayed graph is one launch: its phases cannot be told apart, only the whole step.
  report.phase_names = config.cuda_graph ? std::vector<std::string>{"load", "step"}
                                         : std::vector<std::string>{"load", "forward", "backward", "update"};
  const std::size_t num_phases = report.phase_names.size();
  report.energy_source = energy ? energy->source() : "none";
  const Workload w = graph.total_workload();
  report.flops_per_sample = static_cast<double>(w.flops_forward + w.flops_backward);
  report.activation_bytes = exec.memory().activation_bytes;
  report.recomputed_outputs = exec.memory().recomputed_outputs;
  report.conv_statistics = exec.memory().conv_statistics;
  if (lo.epochs == 0) {  // a checkpoint that already covers the requested epochs: nothing to run
    report.phase_ms.assign(report.phase_names.size(), Summary{});
    return report;
  }

  data::DataLoader loader(data.train, lo, backend);
  const Shape& per = data.train->sample_shape();
  const Shape in_shape{config.batch_size, per[0], per[1], per[2]};
  // Double-buffered input: while the step of iteration i reads slot i % 2, the next batch is copied
  // into the other slot on the backend's copy stream (after the step that last read it), so loading
  // overlaps compute. The host batch of a slot stays referenced until its copy has completed.
  struct InputSlot {
    Tensor images, labels;
    std::optional<data::Batch> host;
    std::unique_ptr<DeviceEvent> copied;     // the copy into this slot (copy stream)
    std::unique_ptr<DeviceEvent> last_read;  // the end of the last step that read it (compute stream)
  };
  InputSlot slots[2];
  for (auto& sl : slots) {
    sl.images = backend.alloc(in_shape, DType::kF32);
    sl.labels = backend.alloc(Shape{config.batch_size}, DType::kI32);
  }
  auto prefetch_into = [&](InputSlot& sl) {
    std::optional<data::Batch> batch = loader.next();
    if (!batch) throw InternalError("the loader ran out of batches before the epoch ended");
    if (sl.copied) sl.copied->synchronize();  // the old host batch's copy is done: release it
    sl.host = std::move(batch);
    backend.upload_on_copy_stream(sl.host->labels, sl.labels, sl.last_read.get());
    sl.copied = backend.upload_on_copy_stream(sl.host->images, sl.images, sl.last_read.get());
  };

  PhaseTimer timer(backend, report.phase_names);
  std::vector<std::vector<double>> all_phase(num_phases);
  std::vector<double> all_iter;
  const auto run_t0 = Clock::now();
  double train_seconds_total = 0, joules_total = 0;
  bool have_joules = energy != nullptr;
  std::int64_t slot = 0;

  for (std::int64_t epoch = start_epoch; epoch < config.epochs; ++epoch) {
    EpochReport er;
    er.epoch = epoch + 1;
    er.learning_rate = solver.learning_rate();
    double loss_sum = 0;
    std::int64_t loss_reads = 0;
    backend.synchronize();
    if (energy) energy->begin();
    const auto t0 = Clock::now();
    const auto wait0 = loader.stats().consumer_wait_ms;
    prefetch_into(slots[slot % 2]);  // the epoch's first batch
    for (std::int64_t it = 0; it < iters_per_epoch; ++it) {
      InputSlot& cur = slots[slot % 2];
      InputSlot& next = slots[(slot + 1) % 2];
      ++slot;
      timer.begin_iteration();
      backend.wait_event(*cur.copied);  // the "load" phase is what compute waits for its batch
      exec.set_input(cur.images, cur.labels);
      timer.end_phase(0);
      if (it + 1 < iters_per_epoch) prefetch_into(next);  // overlaps this step
      if (train_step.graphed()) {
        train_step.run(static_cast<int>((slot - 1) % 2));
        timer.end_phase(1);
      } else {
        exec.forward(Phase::kTrain);
        timer.end_phase(1);
        exec.backward(solver.loss_scale());
        timer.end_phase(2);
        solver.step();
        timer.end_phase(3);
      }
      if (!cur.last_read) cur.last_read = backend.make_event();
      cur.last_read->record();
      timer.end_iteration();
      if (config.loss_every > 0 && (it % config.loss_every == 0 || it + 1 == iters_per_epoch)) {
        const float l = exec.read_loss();
        if (std::isfinite(l)) {
          loss_sum += l;
          ++loss_reads;
        }
      }
    }
    // Skip the rest of a shortened epoch so the next epoch starts at its own first batch.
    while (config.max_iterations_per_epoch > 0 && iters_per_epoch < full_epoch) {
      auto b = loader.next();
      if (!b || b->last_in_epoch) break;
    }
    backend.synchronize();
    for (auto& sl : slots) {
      if (sl.copied) sl.copied->synchronize();
      sl.host.reset();
    }
    er.seconds = seconds_since(t0);
    if (energy) {
      if (auto r = energy->end()) {
        er.joules = r->joules;
        er.average_watts = r->average_watts;
        joules_total += r->joules;
      } else {
        have_joules = false;
      }
    }
    (void)wait0;
    train_seconds_total += er.seconds;
    er.iterations = iters_per_epoch;
    er.samples_per_s = static_cast<double>(iters_per_epoch * config.batch_size) / er.seconds;
    er.train_loss = loss_reads ? loss_sum / static_cast<double>(loss_reads) : std::nan("");
    report.samples += iters_per_epoch * config.batch_size;

    timer.flush();
    for (std::size_t p = 0; p < num_phases; ++p)
      all_phase[p].insert(all_phase[p].end(), timer.phase_ms()[p].begin(), timer.phase_ms()[p].end());
    all_iter.insert(all_iter.end(), timer.iteration_ms().begin(), timer.iteration_ms().end());
    timer.clear();

    if (data.test) {
      const auto e0 = Clock::now();
      const Accuracy a = evaluate(exec, data.test, config.eval_batches, config.loader_workers);
      er.eval_seconds = seconds_since(e0);
      er.top1 = a.top1;
      er.top5 = a.top5;
    }
    if (!config.save_path.empty()) save_checkpoint(config.save_path, exec, solver);
    report.epochs.push_back(er);
    if (on_epoch) on_epoch(er);
    if (config.target_accuracy && er.top1 && *er.top1 >= *config.target_accuracy && !report.seconds_to_target) {
      report.seconds_to_target = train_seconds_total;
      if (have_joules) report.joules_to_target = joules_total;
      break;
    }
  }
  report.total_seconds = seconds_since(run_t0);
  if (have_joules) report.total_joules = joules_total;
  for (std::size_t p = 0; p < num_phases; ++p) report.phase_ms.push_back(summarize(all_phase[p]));
  report.graph_recordings = train_step.recordings();
  report.conv_statistics_computed = exec.statistics_from_convolutions();
  report.iteration_ms = summarize(all_iter);
  report.loader_wait_ms = loader.stats().consumer_wait_ms;
  report.peak_memory_bytes = backend.memory_stats().peak_bytes;
  return report;
}

}  // namespace cnnergy
