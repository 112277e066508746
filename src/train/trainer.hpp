// The measured training loop of Castro et al. 2019's Algorithm 1: per iteration load (prefetched batch,
// asynchronous upload), forward, backward and update, each timed with device events without
// stalling the loop; top-1/top-5 accuracy on held-out data after each epoch; time-to-accuracy;
// checkpoints at epoch ends so a long run survives interruption. Energy windows come from an
// optional EnergyProbe (telemetry), so this layer runs where there is no GPU driver.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "measure/energy_probe.hpp"
#include "measure/statistics.hpp"
#include "net/solver.hpp"

namespace cnnergy {

class Graph;
namespace data {
struct DatasetSplits;
}

struct TrainConfig {
  std::int64_t batch_size = 64;
  std::int64_t epochs = 1;
  std::int64_t max_iterations_per_epoch = 0;  // 0 = the whole epoch
  std::int64_t eval_batches = 0;              // 0 = the whole held-out set
  SolverOptions solver;                       // iterations_per_epoch is set by the trainer
  std::optional<double> target_accuracy;      // top-1 in (0, 1]: stop once reached
  std::string save_path;                      // checkpoint written after every epoch
  std::string resume_path;                    // checkpoint to continue from
  int loader_workers = 2;
  int prefetch = 3;
  std::uint64_t seed = 1;
  std::int64_t loss_every = 20;               // read the loss every N iterations (a device sync)
  bool cuda_graph = false;                    // replay each step as a recorded CUDA graph (TrainStep)
  std::optional<std::size_t> activation_budget_bytes;  // ExecutorOptions::activation_budget_bytes
};

struct EpochReport {
  std::int64_t epoch = 0;           // 1-based
  std::int64_t iterations = 0;
  double train_loss = 0;            // mean of the losses read during the epoch
  std::optional<double> top1, top5; // held-out accuracy
  double seconds = 0;               // wall time of the training part of the epoch
  double eval_seconds = 0;
  double samples_per_s = 0;
  std::optional<double> joules;     // energy of the training part of the epoch
  double average_watts = 0;
  double learning_rate = 0;
};

struct TrainReport {
  std::vector<EpochReport> epochs;
  std::vector<std::string> phase_names;  // load, forward, backward, update (load, step with --cuda-graph)
  std::vector<Summary> phase_ms;         // per iteration, over every timed iteration
  Summary iteration_ms;
  double loader_wait_ms = 0;             // total time the loop waited for the loader
  double total_seconds = 0;
  std::optional<double> total_joules;
  std::string energy_source = "none";
  std::optional<double> seconds_to_target, joules_to_target;
  std::int64_t samples = 0;
  double flops_per_sample = 0;           // forward + backward, from the layers' workload
  std::size_t peak_memory_bytes = 0;
  std::size_t activation_bytes = 0;      // the executor's activations and their gradients (MemoryReport)
  std::size_t recomputed_outputs = 0;    // outputs recomputed in backward (TrainConfig::activation_budget_bytes)
  std::size_t conv_statistics = 0;       // batch norms given their statistics by their convolution (--fuse-statistics)
  std::size_t conv_statistics_computed = 0;  // of them, taken from the convolution at the last step
                                             // (Executor::statistics_from_convolutions)
  std::int64_t graph_recordings = 0;     // --cuda-graph: recordings made (one per input slot, learning
                                         // rate and loss scale seen)
};

// Called after every epoch (for printing as it goes).
using EpochCallback = std::function<void(const EpochReport&)>;

// Trains graph on data.train, evaluates on data.test (or nothing when absent).
TrainReport train(const Graph& graph, Backend& backend, const data::DatasetSplits& data, const TrainConfig& config,
                  EnergyProbe* energy, const EpochCallback& on_epoch);

}  // namespace cnnergy
