// Internals shared by the data-parallel trainer files (not a public interface): the raw per-rank
// measurements the loop collects, and the functions that turn them into the gathered report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/parallel/dp_trainer.hpp"

namespace cnnergy::dist {

struct RankState {
  int rank = 0;
  std::string host, device;
  std::int64_t iterations = 0;
  double seconds = 0;
  double loader_wait_ms = 0;
  std::optional<double> joules;
  bool energy_missing = false;  // a probe gave no reading for some window
  bool metered = false;         // this rank had an energy probe
  std::string energy_source = "none";
  std::vector<std::string> phase_names;
  std::vector<std::vector<double>> phase_ms;  // per phase, per timed iteration
  std::vector<double> iteration_ms;
  std::vector<BucketStepTiming> bucket_timings;  // per timed step
  bool host_comm = true;  // collectives synchronous on the host (threads, MPI)
  bool overlap = true;    // buckets launched from the backward hook
  bool graphed = false;   // steps replayed as CUDA graphs: phases load, step; no bucket timings
  std::int64_t graph_recordings = 0, graph_recordings_timed = 0;
  std::vector<EpochSummary> epochs;
};

// "lenet5 input 1x28x28 classes 10 params 431080 structure 0123abcd...": the model as the ranks
// compare it (name, shapes, every layer's type and hyper-parameters, hashed).
std::string model_signature(const Graph& graph);

// Per-rank dropout seed: replicas must not drop the same units of their different samples.
std::uint64_t mix_rank_seed(std::uint64_t seed, int rank);

// Turns this rank's measurements into its RankReport (after agreeing on per-bucket transfer times
// with the other ranks), gathers every rank's report and aggregates them. Collective.
DataParallelReport gather_report(Communicator& comm, const RankState& state,
                                 const std::vector<BucketInfo>& buckets,
                                 const DataParallelConfig& config);

// Round-trip text encoding of a RankReport (for all_gather).
std::string encode_rank_report(const RankReport& r);
RankReport decode_rank_report(const std::string& text);

// "%.17g": exact round trip of a double through text.
std::string exact_number(double v);

}  // namespace cnnergy::dist
