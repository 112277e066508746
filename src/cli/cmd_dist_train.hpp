// `cnnergy dist-train`: data-parallel training over N GPUs (or N CPU replicas), in one process
// (--gpus N) or one process per GPU under mpirun/srun, with per-rank compute / all-reduce / wait
// time and energy, per-node and total energy, and speed-up, efficiency and energy per sample
// against a one-GPU baseline (strong scaling with --global-batch, weak with --per-gpu-batch).
// `cnnergy concurrent`: K trainings on disjoint GPU subsets at once against the same K one after
// another on all GPUs (Gera et al. 2018), total time and energy of both schedules.
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_dist_train(const std::vector<std::string>& args);
int run_concurrent(const std::vector<std::string>& args);

}  // namespace cnnergy::cli
