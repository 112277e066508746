// Hardware counters of one convolution call (Li et al. 2016, Section 5.C: achieved occupancy, IPC,
// warp execution efficiency, global load/store and shared-memory efficiency, DRAM throughput), read
// in-process through CUPTI's range profiler (libcupti opened at run time) with user replay.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cnnergy::convbench {

// The perfworks metrics asked for, as Nsight Compute names them (so `ncu --metrics NAME` reads the
// same quantity). A metric the GPU's profiler does not offer is left out and named in
// CounterSet::unsupported.
const std::vector<std::string>& counter_metric_names();

struct CounterSet {
  std::map<std::string, double> raw;     // metric name -> value over the profiled range
  std::vector<std::string> unsupported;  // asked for, not offered by this GPU's profiler
  int passes = 0;                        // replays of the call the counters needed
};

// What the study reports, computed from the raw values (absent when an input metric is missing):
//   achieved_occupancy_pct     sm__warps_active.avg.pct_of_peak_sustained_active
//   ipc_per_sm                 sm__inst_executed.avg.per_cycle_active
//   warp_execution_efficiency_pct  100 x smsp__thread_inst_executed.sum / (32 x smsp__inst_executed.sum)
//   global_load_sectors_per_request / global_store_sectors_per_request: l1tex sectors / requests of
//       the LSU pipe's global loads / stores (4 = each warp's 32 x 4 bytes in four 32-byte sectors;
//       more = scattered; TMA and cp.async.bulk traffic bypasses this pipe and is not counted)
//   shared_efficiency_pct      100 x (shared wavefronts - bank conflicts) / shared wavefronts
//   shared_bank_conflicts      l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
//   dram_read_bytes, dram_write_bytes, dram_throughput_pct (of peak, over the range's elapsed time,
//       which includes the gaps the profiler leaves between kernels: a lower bound),
//   dram_gb_per_s              (read + write) / call_ms, the call's timed median (when given)
//   tensor_pipe_active_pct     sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
//   range_duration_ms          gpu__time_duration.sum (the profiled call with the profiler's gaps)
struct DerivedMetric {
  std::string name;
  std::string unit;
  double value = 0;
};
std::vector<DerivedMetric> derive_metrics(const std::map<std::string, double>& raw,
                                          std::optional<double> call_ms = std::nullopt);

class CounterProfiler {
 public:
  virtual ~CounterProfiler() = default;
  // Profiles `call` as one range on the current CUDA context: runs it once per replay pass (the call
  // must be repeatable: same inputs, same work), `sync` waiting for the device after each. Throws
  // DeviceError with CUPTI's message when a step fails.
  virtual CounterSet measure(const std::function<void()>& call, const std::function<void()>& sync) = 0;
};

// A profiler for this process's current CUDA context, or null with `reason` set ("built without
// CUPTI's range profiler", "libcupti.so not found: ...", "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: ...").
// Call after the device has been used (the runtime's context must be current).
std::unique_ptr<CounterProfiler> open_counter_profiler(std::string& reason);

}  // namespace cnnergy::convbench
