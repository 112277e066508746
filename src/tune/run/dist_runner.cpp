// Trials with more than one GPU (the --gpus knob): the model trains data-parallel over N devices of
// this node (N CPU replicas on the CPU), the batch knob being the global batch split over them (Castro et al. 2019,
// Section 5). Each repetition is one timed data-parallel run, every GPU metered and summed. With
// the cuda_graph knob on, every replica replays its step as one recorded CUDA graph.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.hpp"
#include "data/dataset.hpp"
#include "measure/statistics.hpp"
#include "net/graph.hpp"
#include "train/parallel/dp_trainer.hpp"
#include "tune/run/runners.hpp"

namespace cnnergy::tune {

TrialMeasurement run_data_parallel_trial(const Graph& graph, const BackendOptions& backend_options, std::int64_t gpus,
                                         std::int64_t global_batch, bool cuda_graph, const MeasureSettings& settings) {
  if (global_batch % gpus != 0)
    throw InvalidArgument("global batch " + std::to_string(global_batch) + " does not split evenly over " +
                          std::to_string(gpus) + " GPUs");
  dist::LocalRunOptions lo;
  lo.backend = backend_options;
  for (std::int64_t i = 0; i < gpus; ++i) lo.devices.push_back(static_cast<int>(i));
  if (backend_options.device.is_cuda() && gpus > cuda_device_count())
    throw InvalidArgument(std::to_string(gpus) + " GPUs asked for, " + std::to_string(cuda_device_count()) +
                          " present");
  const Shape& in = graph.input_per_sample();
  auto run = [&](std::int64_t iterations) {
    dist::DataParallelConfig c;
    c.per_replica_batch = global_batch / gpus;
    c.epochs = 1;
    c.warmup_iterations = std::max(1, settings.warmup_iterations);
    c.max_iterations_per_epoch = c.warmup_iterations + iterations;
    c.evaluate = false;
    // As the one-GPU trials (FixedBatchWorkload): compute and communication, no data loading, so
    // the trials of different GPU counts compare like with like.
    c.fixed_batch = true;
    c.cuda_graph = cuda_graph;  // NotSupported (the trial fails with the reason) on the CPU or with dropout
    c.solver.loss_scale = SolverOptions::loss_scale_for(backend_options.dtype);
    const std::int64_t size = global_batch * (c.max_iterations_per_epoch + 1);
    const auto data = data::open_dataset("synthetic:" + std::to_string(in[0]) + "x" + std::to_string(in[1]) + "x" +
                                         std::to_string(in[2]) + ":classes=" + std::to_string(graph.num_classes()) +
                                         ":size=" + std::to_string(size) + ":test_size=" + std::to_string(global_batch));
    return dist::run_local_data_parallel(graph, data, lo, c);
  };
  // Calibrate the number of steps that fills the window, then measure the repetitions.
  const auto probe = run(std::max<std::int64_t>(2, settings.min_iterations / 2));
  const double step_s = probe.seconds / static_cast<double>(std::max<std::int64_t>(1, probe.timed_iterations));
  const auto iterations = std::max<std::int64_t>(
      settings.min_iterations, static_cast<std::int64_t>(std::ceil(settings.window_seconds / std::max(step_s, 1e-6))));
  TrialMeasurement m;
  const RepetitionPolicy policy{settings.repetitions, std::max(settings.repetitions, settings.max_repetitions),
                                settings.cv_threshold};
  std::vector<double> ms_per_step;  // --reps auto: more repetitions while the step time varies
  while (wants_another_window(ms_per_step, policy)) {
    const auto r = run(iterations);
    Repetition out;
    out.elapsed_ms = r.seconds * 1e3;
    out.iterations = r.timed_iterations;
    if (r.total_joules) {
      for (const auto& rank : r.ranks) out.energy_mj.push_back(rank.joules.value_or(0) * 1e3);
      out.energy_source = r.ranks.empty() ? "" : r.ranks.front().energy_source;
    }
    ms_per_step.push_back(out.elapsed_ms / static_cast<double>(std::max<std::int64_t>(1, out.iterations)));
    m.repetitions.push_back(std::move(out));
    m.flops_per_iteration = r.flops_per_sample * static_cast<double>(global_batch);
  }
  m.samples_per_iteration = static_cast<double>(global_batch);
  return m;
}

}  // namespace cnnergy::tune
