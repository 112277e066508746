// Kernel-level view of one convolution cell (Li et al. 2016, Sections 5.A and 5.C): the kernels it
// launches with their share of time, registers per thread and shared memory per block, from CUPTI's
// activity API loaded at run time (libcupti ships with CUDA); the hardware counters beside them come
// from counter_profiler.hpp. Where either cannot be read: a reason.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cnnergy::convbench {

enum class MetricsLevel { kOff, kKernels, kFull };
MetricsLevel parse_metrics_level(std::string_view text);  // off | kernels | full; InvalidArgument otherwise
std::string_view metrics_level_name(MetricsLevel level);

struct KernelRecord {
  std::string name;               // demangled where CUPTI gives it demangled
  std::int64_t launches = 0;
  double total_ms = 0;            // summed kernel durations
  double share = 0;               // of all kernel time of the traced calls
  int registers_per_thread = 0;
  std::int64_t shared_bytes_per_block = 0;  // static + dynamic
  int block_threads = 0;
  std::int64_t grid_blocks = 0;
};

struct KernelReport {
  std::vector<KernelRecord> kernels;  // descending total_ms
  std::int64_t calls = 0;             // convolution calls traced
  // The counters of Li et al. 2016 (achieved occupancy, IPC, warp execution efficiency, global
  // load/store and shared efficiency, DRAM throughput) over one call, from CUPTI's range profiler
  // (counter_profiler.hpp) with --metrics full: "read: ..." with the values below, or
  // "unavailable: REASON" / "not read: ..." with none.
  std::string counters;
  std::map<std::string, double> counter_values;  // perfworks metric name -> value
  std::vector<std::string> counters_unsupported; // asked for, not offered by this GPU
  int counter_passes = 0;                        // replays of the call the counters took
};

// Traces the kernels of the work between start() and stop() on this process's GPU.
class KernelTracer {
 public:
  virtual ~KernelTracer() = default;
  virtual void start() = 0;
  // Stops, flushes and returns the kernels seen since start(); `calls` is stored as given.
  virtual KernelReport stop(std::int64_t calls) = 0;
};

// A tracer, or null with `reason` set ("built without CUPTI", "libcupti.so not found: ...",
// "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", ...). One tracer per process at a time.
std::unique_ptr<KernelTracer> open_kernel_tracer(std::string& reason);

}  // namespace cnnergy::convbench
