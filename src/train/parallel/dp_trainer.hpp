// Data-parallel training (Castro et al. 2019, Section 5): the global batch split over N replicas, each rank
// training on its slice of the same shuffled epoch, gradients summed over ranks bucket by bucket
// while backward still runs, and every replica applying the same update, so weights stay identical
// (checked by checksums at the end and, on request, every few steps). Per rank it measures compute,
// all-reduce transfer, waiting for the slowest rank, exposed communication and the energy of its
// own GPU; every rank ends with the whole picture (all ranks' figures, per-node and total energy).
//
// Averaging: each replica scales its loss gradient by 1/N (folded into the loss scale handed to
// backward), so the all-reduced sum is the mean gradient over the global batch, exactly what one
// process with the whole batch computes. Batch norm normalises per replica (statistics over the
// per-replica batch, as every framework's default DDP does); running statistics are averaged over
// ranks before each evaluation. Dropout masks differ per rank (seed mixed with the rank).
//
// With cuda_graph (GPU replicas), every step after the first is one replayed CUDA graph per rank
// holding forward, backward with its bucket all-reduces (forked onto the communication stream and
// joined back inside the recording) and the update; the step is then timed only as a whole, and
// the per-bucket all-reduce, wait and exposed-communication figures are not measured (empty).
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
#include "train/parallel/communicator.hpp"
#include "train/parallel/grad_buckets.hpp"

namespace cnnergy {
class Graph;
class Executor;
namespace data {
struct DatasetSplits;
}
}  // namespace cnnergy

namespace cnnergy::dist {

// How "waiting for the slowest rank" is measured (docs/multi-gpu.md):
// kEstimate: every bucket's all-reduce is timed on the communication stream from the moment it
//   could start on this rank to its end; the fastest such time of that bucket over all steps and
//   ranks is its transfer time, anything above it is waiting. Overlap stays on.
// kBarrier: diagnostic; after backward a one-element all-reduce absorbs the waiting, then the
//   buckets run back to back (pure transfers). Exact, but turns overlap off.
enum class WaitMethod { kEstimate, kBarrier };
std::string wait_method_name(WaitMethod m);
WaitMethod parse_wait_method(const std::string& text);  // "estimate" | "barrier"

struct DataParallelConfig {
  std::int64_t per_replica_batch = 32;
  std::int64_t epochs = 1;
  std::int64_t max_iterations_per_epoch = 0;  // 0 = whole epochs (data set / global batch)
  std::int64_t warmup_iterations =
      2;                 // trained, but neither timed nor metered (NCCL set-up, cuDNN find)
  bool evaluate = true;  // held-out top-1/top-5 after each epoch (split over ranks)
  std::int64_t eval_batches = 0;  // per evaluation over all ranks (0 = the whole held-out set)
  SolverOptions solver;           // iterations_per_epoch is set here
  std::uint64_t seed = 1;         // weights, epoch permutations, augmentation, dropout
  bool augment = false;           // random crop/mirror of training samples
  // Every step trains on one random batch uploaded to each replica once (no loader, no copies):
  // compute and communication alone, as the one-GPU benchmarks and sweep trials measure them.
  // The weights still update and stay identical across replicas; accuracy means nothing then.
  bool fixed_batch = false;
  // Replay each step (after the first, eager one) as a CUDA graph recorded per input slot, redone
  // when the learning rate or the fp16 loss scale changes (TrainStep). NotSupported on the CPU and
  // for networks with dropout; InvalidArgument with WaitMethod::kBarrier (nothing is timed).
  bool cuda_graph = false;
  std::optional<std::size_t> activation_budget_bytes;  // per replica: ExecutorOptions::activation_budget_bytes
  int loader_workers = 2;
  int prefetch = 3;
  std::int64_t loss_every = 20;  // read the loss every N steps (a bounded synchronisation)
  BucketOptions buckets;         // wait_barrier is set from wait_method
  WaitMethod wait_method = WaitMethod::kEstimate;
  std::int64_t check_weights_every =
      0;  // compare weight checksums across ranks every N steps (0: end only)
  int expected_world_size =
      0;                  // when > 0: InvalidArgument unless the communicator has this many ranks
  std::string save_path;  // rank 0 writes a checkpoint at the end
  std::string signature;  // more run description the ranks must agree on (data spec, ...)
  // Called on every rank after every step with everything synchronised (tests).
  std::function<void(int rank, std::int64_t step, Executor& executor)> after_step;
};

// The phases every rank times per step, in order (RankReport::phase_ms).
const std::vector<std::string>& dp_phase_names();  // load, forward, backward, comm_exposed, update
// With cuda_graph: load, step (a replayed graph's forward, backward, all-reduces and update cannot
// be told apart).
const std::vector<std::string>& dp_graph_phase_names();

struct RankReport {
  int rank = 0;
  std::string host;
  std::string device;  // "cuda:1 (NVIDIA H200)", "cpu (...)"
  std::int64_t timed_iterations = 0;
  double seconds = 0;  // wall time of the timed (metered) windows
  Summary iteration_ms;
  std::vector<Summary> phase_ms;  // per iteration, DataParallelReport::phase_names
  // Totals over the timed iterations (ms). Empty where not measured: with cuda_graph the step is
  // one replayed graph, timed only as a whole (step_ms).
  std::optional<double> compute_ms;       // forward + backward + update, communication excluded
  std::optional<double> allreduce_ms;     // all-reduce transfer time (overlapped or not)
  std::optional<double> wait_ms;          // waiting for slower ranks
  std::optional<double> exposed_comm_ms;  // compute idle because of communication (not overlapped)
  double step_ms = 0;  // the whole step after the load phase (forward to update, all-reduces in)
  double load_ms = 0;
  double loader_wait_ms = 0;          // time the loop blocked on the data loader
  std::optional<double> joules;       // this rank's GPU over the timed windows
  std::optional<double> wait_joules;  // estimate: wait time x this GPU's average power
  double average_watts = 0;
  std::string energy_source = "none";
  bool metered = false;  // the rank had an energy probe (joules may still be missing)
};

struct NodeEnergy {
  std::string host;
  int ranks = 0;
  std::optional<double> joules;  // sum over the node's GPUs (empty when one lacks a reading)
};

struct EpochSummary {
  std::int64_t epoch = 0;  // 1-based
  std::int64_t iterations = 0;
  double train_loss = 0;  // mean of the sampled losses over ranks
  std::optional<double> top1, top5;
  std::int64_t eval_samples = 0;
};

struct DataParallelReport {
  std::string comm_kind;
  int world_size = 1;
  std::int64_t per_replica_batch = 0, global_batch = 0;
  std::int64_t iterations = 0;         // steps trained, warm-up included
  std::int64_t timed_iterations = 0;   // steps in the timed windows
  std::int64_t timed_samples = 0;      // global samples in the timed windows
  double seconds = 0;                  // timed wall time (slowest rank)
  double samples_per_s = 0;            // global throughput
  std::optional<double> total_joules;  // every rank's GPU, summed (never one GPU times N)
  std::optional<double> joules_per_sample;
  std::vector<NodeEnergy> nodes;
  std::vector<RankReport> ranks;  // by rank
  std::vector<BucketInfo> buckets;
  // Per bucket: the fastest all-reduce over steps and ranks; empty where not measured (cuda_graph).
  std::vector<double> bucket_transfer_ms;
  std::vector<EpochSummary> epochs;
  std::vector<std::string> phase_names;     // of RankReport::phase_ms
  bool cuda_graph = false;                  // steps replayed as CUDA graphs
  std::int64_t graph_recordings = 0;        // per rank (every rank records at the same steps)
  std::int64_t graph_recordings_timed = 0;  // of them, made inside the timed windows (host time
                                            // the device may idle through, counted in the step)
  std::string wait_method;
  std::string weights_checksum;  // FNV-1a of the final master weights, equal on every rank
  double flops_per_sample = 0;
  std::string model;
  std::string energy_note;  // e.g. which ranks had no energy reading
  std::size_t recomputed_outputs = 0;  // per replica (DataParallelConfig::activation_budget_bytes)
  std::size_t conv_statistics = 0;     // per replica: batch norms given their statistics by their convolution
  std::size_t conv_statistics_computed = 0;  // rank 0: of them, taken from the convolution at the last step
};

// One rank's part: call on every rank with the same graph, data, config; returns the report of the
// whole run on every rank. `energy` meters this rank's own GPU (null: time only). Throws
// InvalidArgument for a batch that does not fit the data, ranks that disagree on the model, batch,
// precision or data; DeviceError when a peer fails or stalls beyond the communicator's timeout.
DataParallelReport train_data_parallel(const Graph& graph, Backend& backend, Communicator& comm,
                                       const data::DatasetSplits& data,
                                       const DataParallelConfig& config, EnergyProbe* energy);

// FNV-1a 64 of every parameter's fp32 master, in order, as 16 hex digits (downloads; waits).
std::string weights_checksum(Executor& executor);

// This rank's energy probe for its own GPU (open_energy_probe), or null with a warning where that
// cannot be trusted: without a PCI bus id from the backend and with CUDA_VISIBLE_DEVICES set, the
// probe meters every GPU of the node, and `ranks_on_node` such probes summed would count each GPU
// that many times (the one thing this report must never do).
std::unique_ptr<EnergyProbe> open_own_gpu_probe(Backend& backend, int ranks_on_node);

// N replicas in this process, one thread each: CPU replicas through the threads communicator, or
// one GPU per replica through NCCL (devices = CUDA indices). A failing replica aborts the others at
// once; the first failure is rethrown. NotSupported when more GPUs are asked for than are visible.
struct LocalRunOptions {
  BackendOptions backend;    // device kind, dtype, layout, ...; the index comes from `devices`
  std::vector<int> devices;  // CUDA indices; for the CPU, one entry per replica (values unused)
  bool meter_energy = true;
  CommOptions comm;
};
DataParallelReport run_local_data_parallel(const Graph& graph, const data::DatasetSplits& data,
                                           const LocalRunOptions& options,
                                           const DataParallelConfig& config);

}  // namespace cnnergy::dist
