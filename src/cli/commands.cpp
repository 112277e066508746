// The table of commands, in the order `cnnergy --help` lists them.
#include "cli/commands.hpp"

#include "cli/cmd_compare.hpp"
#include "cli/cmd_convbench.hpp"
#include "cli/cmd_dist_train.hpp"
#include "cli/cmd_export_onnx.hpp"
#include "cli/cmd_infer.hpp"
#include "cli/cmd_model_info.hpp"
#include "cli/cmd_profile.hpp"
#include "cli/cmd_results.hpp"
#include "cli/cmd_sweep.hpp"
#include "cli/cmd_train.hpp"
#include "cli/telemetry_commands.hpp"

namespace cnnergy::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"model-info", "per-layer operations, FLOPs, data volumes and CTC of a model (Castro et al. 2019, Sec. 4)", run_model_info},
      {"train", "train a model; time, throughput, accuracy (and energy) per epoch", run_train},
      {"dist-train", "data-parallel training over N GPUs / MPI ranks: per-GPU time, wait and energy, scaling", run_dist_train},
      {"concurrent", "K trainings on disjoint GPU subsets at once vs one after another: time and energy", run_concurrent},
      {"infer", "inference latency percentiles, throughput and energy per image, batch 1 to large; open loop; .npy runner",
       run_infer},
      {"export-onnx", "write a zoo or imported model with its weights (seeded or a checkpoint's) as an ONNX file",
       run_export_onnx},
      {"profile", "per-layer and per-phase time and energy of a training iteration", run_profile},
      {"convbench", "convolution study: implementations x directions x precisions, time, memory, energy (Li et al. 2016)",
       run_convbench},
      {"sweep", "sweep knobs over a model or a command; store every trial; optimum per metric", run_sweep},
      {"report", "terminal tables and a self-contained HTML report of a results database", run_report},
      {"export", "export a results database as CSV and/or JSON", run_export},
      {"merge", "merge results databases (the shards of a sweep, several runs)", run_merge},
      {"compare", "result sets of several databases side by side: GPUs, CPUs, drivers, tags (Gera et al. 2018)", run_compare},
      {"devices", "GPUs NVML sees: readings, what each can measure and control", run_devices},
      {"monitor", "run a command and report its time and energy (perf stat for joules)", run_monitor},
      {"exporter", "serve every GPU's telemetry to Prometheus (a node exporter; Slurm job labels)", run_exporter},
      {"restore", "restore GPU settings left changed by a crashed or killed run", run_restore},
      {"daemon-state", "GPU state, leases and your rights as the cnnergyd knob daemon reports them", run_daemon_state},
  };
  return table;
}

}  // namespace cnnergy::cli
