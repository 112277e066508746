// Concurrent jobs (Gera et al. 2018): K independent trainings on disjoint GPU subsets at the same time,
// against the same K trainings one after another on all the GPUs. Each schedule reports its wall
// time and the energy of every GPU it occupies over its whole wall time (a GPU whose job finished
// early still idles, and its idle power counts), plus each job's own data-parallel report.
// Jobs run as threads of this process (each job its own replicas, backends and communicators).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "train/parallel/dp_trainer.hpp"

namespace cnnergy::dist {

struct ConcurrentOptions {
  int jobs = 2;
  int gpus_per_job = 1;         // concurrent schedule: job j on GPUs [j*G, (j+1)*G)
  BackendOptions backend;       // device kind, precision, layout
  std::int64_t job_batch = 64;  // each job's global batch, the same in both schedules
  DataParallelConfig config;    // per_replica_batch is derived per schedule; job j uses seed + j
  bool meter_energy = true;
  CommOptions comm;
};

struct ScheduleReport {
  std::string name;              // "concurrent" or "sequential"
  double seconds = 0;            // wall time of the whole schedule
  std::optional<double> joules;  // every GPU of the schedule over that wall time
  std::int64_t samples = 0;      // samples trained by all jobs (warm-up included)
  std::vector<DataParallelReport> jobs;
};

struct ConcurrentReport {
  int total_gpus = 0;
  ScheduleReport concurrent, sequential;
  std::string energy_note;
};

// Throws NotSupported when jobs x gpus_per_job GPUs are not visible, InvalidArgument when the job
// batch does not split evenly over gpus_per_job (concurrent) or over all GPUs (sequential).
ConcurrentReport run_concurrent_schedules(const Graph& graph, const data::DatasetSplits& data,
                                          const ConcurrentOptions& options);

}  // namespace cnnergy::dist
