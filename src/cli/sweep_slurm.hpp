// `cnnergy sweep ... --slurm`: the sweep as a Slurm job array (one shard per task, each into its own
// database) plus a merge job that runs after it (--dependency=afterany), joins the shards, writes the
// report and says which trials failed and why. Re-submitting the same sweep submits only the shards
// that still miss trials; `--dry-run` prints both scripts instead of submitting them.
#pragma once

#include <string>
#include <vector>

#include "cli/args.hpp"
#include "tune/knobs.hpp"
#include "tune/plan.hpp"

namespace cnnergy::cli {

// Declares --slurm, --slurm-opt, --shards and --slurm-dir (in their own group of sweep's --help).
void declare_slurm_flags(ArgParser& p);

// Writes and submits (or, with --dry-run, prints) the array and merge scripts. `trials` is the checked
// trial list; `runs_on_gpu`: the trials run on a CUDA device (each task then meters the GPU Slurm gave
// it). Returns the exit code. InvalidArgument for flags that cannot go together or bad --slurm-opt,
// NotSupported when sbatch is not on PATH, ChildFailed when sbatch refuses (its message included; an
// array already accepted is cancelled, so nothing is left half-submitted).
int run_sweep_on_slurm(const ArgParser& p, const std::vector<std::string>& args, const tune::SweepDefinition& def,
                       const std::vector<tune::TrialSpec>& trials, bool runs_on_gpu);

// The Slurm job a process runs in, as `sacct` names it: "ARRAYJOB_TASK" for an array task, else the
// job id; "" outside Slurm.
std::string slurm_job_id_from_environment();

}  // namespace cnnergy::cli
