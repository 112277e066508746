// CounterProfiler over CUPTI's range profiler (CUDA 12.6+: cupti_range_profiler.h with the host API
// of cupti_profiler_host.h): one user range around the call, user replay until every pass of the
// metric set was collected, values evaluated on the host. libcupti and libcuda are opened by dlopen,
// so nothing links against them and a machine without them reports why.
#include "convbench/counter_profiler.hpp"

#include <algorithm>
#include <cstdint>

#include "core/errors.hpp"

#if CNNERGY_HAVE_CUPTI_RANGE_PROFILER
#include <cuda.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>
#endif

namespace cnnergy::convbench {

const std::vector<std::string>& counter_metric_names() {
  static const std::vector<std::string> names = {
      "gpu__time_duration.sum",
      "sm__warps_active.avg.pct_of_peak_sustained_active",
      "sm__inst_executed.avg.per_cycle_active",
      "smsp__inst_executed.sum",
      "smsp__thread_inst_executed.sum",
      "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
      "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
      "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
      "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
      "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
      "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
      "dram__bytes_read.sum",
      "dram__bytes_write.sum",
      "dram__throughput.avg.pct_of_peak_sustained_elapsed",
      "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
  };
  return names;
}

std::vector<DerivedMetric> derive_metrics(const std::map<std::string, double>& raw, std::optional<double> call_ms) {
  std::vector<DerivedMetric> out;
  const auto get = [&](const char* name, double& v) {
    const auto it = raw.find(name);
    if (it == raw.end()) return false;
    v = it->second;
    return true;
  };
  double a = 0, b = 0;
  if (get("sm__warps_active.avg.pct_of_peak_sustained_active", a)) out.push_back({"achieved_occupancy_pct", "%", a});
  if (get("sm__inst_executed.avg.per_cycle_active", a)) out.push_back({"ipc_per_sm", "inst/cycle", a});
  if (get("smsp__thread_inst_executed.sum", a) && get("smsp__inst_executed.sum", b) && b > 0)
    out.push_back({"warp_execution_efficiency_pct", "%", 100.0 * a / (32.0 * b)});
  if (get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", a) &&
      get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", b) && b > 0)
    out.push_back({"global_load_sectors_per_request", "sectors", a / b});
  if (get("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", a) &&
      get("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", b) && b > 0)
    out.push_back({"global_store_sectors_per_request", "sectors", a / b});
  if (get("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", a) &&
      get("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", b)) {
    out.push_back({"shared_bank_conflicts", "wavefronts", b});
    if (a > 0) out.push_back({"shared_efficiency_pct", "%", 100.0 * (a - std::min(a, b)) / a});
  }
  double read = 0, write = 0, duration_ns = 0;
  const bool have_read = get("dram__bytes_read.sum", read);
  const bool have_write = get("dram__bytes_write.sum", write);
  if (have_read) out.push_back({"dram_read_bytes", "B", read});
  if (have_write) out.push_back({"dram_write_bytes", "B", write});
  if (get("dram__throughput.avg.pct_of_peak_sustained_elapsed", a)) out.push_back({"dram_throughput_pct", "%", a});
  if (get("gpu__time_duration.sum", duration_ns)) out.push_back({"range_duration_ms", "ms", duration_ns / 1e6});
  if (have_read && have_write && call_ms && *call_ms > 0)
    out.push_back({"dram_gb_per_s", "GB/s", (read + write) / (*call_ms * 1e6)});
  if (get("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", a))
    out.push_back({"tensor_pipe_active_pct", "%", a});
  return out;
}

#if CNNERGY_HAVE_CUPTI_RANGE_PROFILER
namespace {

// The entry points used, resolved from libcupti / libcuda once.
struct Api {
  bool loaded = false;
  std::string load_error;
#define CNNERGY_CUPTI_FN(name) decltype(&::name) name = nullptr;
  CNNERGY_CUPTI_FN(cuptiGetResultString)
  CNNERGY_CUPTI_FN(cuptiProfilerInitialize)
  CNNERGY_CUPTI_FN(cuptiDeviceGetChipName)
  CNNERGY_CUPTI_FN(cuptiProfilerGetCounterAvailability)
  CNNERGY_CUPTI_FN(cuptiProfilerHostInitialize)
  CNNERGY_CUPTI_FN(cuptiProfilerHostDeinitialize)
  CNNERGY_CUPTI_FN(cuptiProfilerHostConfigAddMetrics)
  CNNERGY_CUPTI_FN(cuptiProfilerHostGetConfigImageSize)
  CNNERGY_CUPTI_FN(cuptiProfilerHostGetConfigImage)
  CNNERGY_CUPTI_FN(cuptiProfilerHostGetNumOfPasses)
  CNNERGY_CUPTI_FN(cuptiProfilerHostEvaluateToGpuValues)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerEnable)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerDisable)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerGetCounterDataSize)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerCounterDataImageInitialize)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerSetConfig)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerStart)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerStop)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerPushRange)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerPopRange)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerDecodeData)
  CNNERGY_CUPTI_FN(cuptiRangeProfilerGetCounterDataInfo)
  CNNERGY_CUPTI_FN(cuCtxGetCurrent)
  CNNERGY_CUPTI_FN(cuCtxGetDevice)
#undef CNNERGY_CUPTI_FN
};

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return fn != nullptr;
}

const Api& api() {
  static const Api a = [] {
    Api r;
    void* cupti = nullptr;
    for (const char* lib : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"})
      if ((cupti = dlopen(lib, RTLD_NOW | RTLD_LOCAL))) break;
    if (!cupti) {
      r.load_error = std::string("libcupti.so not found (add CUDA's lib directory to LD_LIBRARY_PATH): ") + dlerror();
      return r;
    }
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
      r.load_error = std::string("libcuda.so.1 not found: ") + dlerror();
      return r;
    }
    std::string missing;
#define CNNERGY_RESOLVE(lib, name) resolve(lib, #name, r.name, missing);
    CNNERGY_RESOLVE(cupti, cuptiGetResultString)
    CNNERGY_RESOLVE(cupti, cuptiProfilerInitialize)
    CNNERGY_RESOLVE(cupti, cuptiDeviceGetChipName)
    CNNERGY_RESOLVE(cupti, cuptiProfilerGetCounterAvailability)
    CNNERGY_RESOLVE(cupti, cuptiProfilerHostInitialize)
    CNNERGY_RESOLVE(cupti, cuptiProfilerHostDeinitialize)
    CNNERGY_RESOLVE(cupti, cuptiProfilerHostConfigAddMetrics)
    CNNERGY_RESOLVE(cupti, cuptiProfilerHostGetConfigImageSize)
    CNNERGY_RESOLVE(cupti, cuptiProfilerHostGetConfigImage)
    CNNERGY_RESOLVE(cupti, cuptiProfilerHostGetNumOfPasses)
    CNNERGY_RESOLVE(cupti, cuptiProfilerHostEvaluateToGpuValues)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerEnable)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerDisable)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerGetCounterDataSize)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerCounterDataImageInitialize)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerSetConfig)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerStart)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerStop)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerPushRange)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerPopRange)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerDecodeData)
    CNNERGY_RESOLVE(cupti, cuptiRangeProfilerGetCounterDataInfo)
    CNNERGY_RESOLVE(cuda, cuCtxGetCurrent)
    CNNERGY_RESOLVE(cuda, cuCtxGetDevice)
#undef CNNERGY_RESOLVE
    if (!missing.empty()) {
      r.load_error = "libcupti lacks the range profiler (" + missing + "); CUPTI of CUDA 12.6 or later is needed";
      return r;
    }
    r.loaded = true;
    return r;
  }();
  return a;
}

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (api().cuptiGetResultString && api().cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

void check(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) throw DeviceError(std::string(what) + ": " + result_text(r));
}

template <typename Params>
Params params_of(std::size_t size) {
  Params p{};
  p.structSize = size;
  return p;
}
#define CNNERGY_PARAMS(type) params_of<type>(type##_STRUCT_SIZE)

// The host-side metric configuration: chip, counter availability, config image. Deinitialised with it.
class HostConfig {
 public:
  HostConfig(CUcontext ctx, int device) {
    const Api& a = api();
    auto init = CNNERGY_PARAMS(CUpti_Profiler_Initialize_Params);
    check(a.cuptiProfilerInitialize(&init), "cuptiProfilerInitialize");
    auto chip = CNNERGY_PARAMS(CUpti_Device_GetChipName_Params);
    chip.deviceIndex = static_cast<std::size_t>(device);
    check(a.cuptiDeviceGetChipName(&chip), "cuptiDeviceGetChipName");
    chip_ = chip.pChipName;
    auto avail = CNNERGY_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
    avail.ctx = ctx;
    check(a.cuptiProfilerGetCounterAvailability(&avail), "cuptiProfilerGetCounterAvailability");
    availability_.resize(avail.counterAvailabilityImageSize);
    avail.pCounterAvailabilityImage = availability_.data();
    check(a.cuptiProfilerGetCounterAvailability(&avail), "cuptiProfilerGetCounterAvailability");
    auto host = CNNERGY_PARAMS(CUpti_Profiler_Host_Initialize_Params);
    host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    host.pChipName = chip_.c_str();
    host.pCounterAvailabilityImage = availability_.data();
    check(a.cuptiProfilerHostInitialize(&host), "cuptiProfilerHostInitialize");
    host_ = host.pHostObject;
    // One metric at a time, so one the chip does not offer is named and the others still count.
    for (const auto& name : counter_metric_names()) {
      auto add = CNNERGY_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
      add.pHostObject = host_;
      const char* n = name.c_str();
      add.ppMetricNames = &n;
      add.numMetrics = 1;
      if (a.cuptiProfilerHostConfigAddMetrics(&add) == CUPTI_SUCCESS) {
        metrics_.push_back(n);
      } else {
        unsupported_.push_back(name);
      }
    }
    if (metrics_.empty()) throw DeviceError("cuptiProfilerHostConfigAddMetrics: no metric is offered for " + chip_);
    auto size = CNNERGY_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
    size.pHostObject = host_;
    check(a.cuptiProfilerHostGetConfigImageSize(&size), "cuptiProfilerHostGetConfigImageSize");
    config_.resize(size.configImageSize);
    auto image = CNNERGY_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
    image.pHostObject = host_;
    image.configImageSize = config_.size();
    image.pConfigImage = config_.data();
    check(a.cuptiProfilerHostGetConfigImage(&image), "cuptiProfilerHostGetConfigImage");
  }
  ~HostConfig() {
    if (!host_) return;
    auto p = CNNERGY_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
    p.pHostObject = host_;
    api().cuptiProfilerHostDeinitialize(&p);
  }
  HostConfig(const HostConfig&) = delete;
  HostConfig& operator=(const HostConfig&) = delete;

  CUpti_Profiler_Host_Object* host() const { return host_; }
  const std::vector<const char*>& metrics() const { return metrics_; }
  const std::vector<std::string>& unsupported() const { return unsupported_; }
  std::vector<std::uint8_t>& config() { return config_; }

 private:
  std::string chip_;
  std::vector<std::uint8_t> availability_;
  CUpti_Profiler_Host_Object* host_ = nullptr;
  std::vector<const char*> metrics_;  // point into counter_metric_names() (static storage)
  std::vector<std::string> unsupported_;
  std::vector<std::uint8_t> config_;
};

// The range profiler enabled on a context for the lifetime of this object (disabled after, so the
// study's timings run without it).
class EnabledRangeProfiler {
 public:
  explicit EnabledRangeProfiler(CUcontext ctx) {
    auto p = CNNERGY_PARAMS(CUpti_RangeProfiler_Enable_Params);
    p.ctx = ctx;
    check(api().cuptiRangeProfilerEnable(&p), "cuptiRangeProfilerEnable");
    object_ = p.pRangeProfilerObject;
  }
  ~EnabledRangeProfiler() {
    auto p = CNNERGY_PARAMS(CUpti_RangeProfiler_Disable_Params);
    p.pRangeProfilerObject = object_;
    api().cuptiRangeProfilerDisable(&p);
  }
  EnabledRangeProfiler(const EnabledRangeProfiler&) = delete;
  EnabledRangeProfiler& operator=(const EnabledRangeProfiler&) = delete;
  CUpti_RangeProfiler_Object* get() const { return object_; }

 private:
  CUpti_RangeProfiler_Object* object_ = nullptr;
};

constexpr int kMaxPasses = 64;  // a guard: the metric set above needs a handful

class CuptiCounterProfiler final : public CounterProfiler {
 public:
  CuptiCounterProfiler(CUcontext ctx, int device) : ctx_(ctx), config_(ctx, device) {}

  CounterSet measure(const std::function<void()>& call, const std::function<void()>& sync) override {
    const Api& a = api();
    sync();
    EnabledRangeProfiler range(ctx_);
    const auto& metrics = config_.metrics();
    auto size = CNNERGY_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
    size.pRangeProfilerObject = range.get();
    size.pMetricNames = const_cast<const char**>(metrics.data());
    size.numMetrics = metrics.size();
    size.maxNumOfRanges = 1;
    size.maxNumRangeTreeNodes = 1;
    check(a.cuptiRangeProfilerGetCounterDataSize(&size), "cuptiRangeProfilerGetCounterDataSize");
    std::vector<std::uint8_t> data(size.counterDataSize, 0);
    auto init = CNNERGY_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
    init.pRangeProfilerObject = range.get();
    init.counterDataSize = data.size();
    init.pCounterData = data.data();
    check(a.cuptiRangeProfilerCounterDataImageInitialize(&init), "cuptiRangeProfilerCounterDataImageInitialize");

    auto set = CNNERGY_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
    set.pRangeProfilerObject = range.get();
    set.configSize = config_.config().size();
    set.pConfig = config_.config().data();
    set.counterDataImageSize = data.size();
    set.pCounterDataImage = data.data();
    set.range = CUPTI_UserRange;
    set.replayMode = CUPTI_UserReplay;
    set.maxRangesPerPass = 1;
    set.numNestingLevels = 1;
    set.minNestingLevel = 1;
    set.passIndex = 0;
    set.targetNestingLevel = 1;
    check(a.cuptiRangeProfilerSetConfig(&set), "cuptiRangeProfilerSetConfig");

    CounterSet out;
    out.unsupported = config_.unsupported();
    bool all_submitted = false;
    while (!all_submitted) {
      if (++out.passes > kMaxPasses) throw DeviceError("CUPTI range profiler: more than 64 replay passes");
      auto start = CNNERGY_PARAMS(CUpti_RangeProfiler_Start_Params);
      start.pRangeProfilerObject = range.get();
      check(a.cuptiRangeProfilerStart(&start), "cuptiRangeProfilerStart");
      auto push = CNNERGY_PARAMS(CUpti_RangeProfiler_PushRange_Params);
      push.pRangeProfilerObject = range.get();
      push.pRangeName = "convolution";
      check(a.cuptiRangeProfilerPushRange(&push), "cuptiRangeProfilerPushRange");
      call();
      sync();
      auto pop = CNNERGY_PARAMS(CUpti_RangeProfiler_PopRange_Params);
      pop.pRangeProfilerObject = range.get();
      check(a.cuptiRangeProfilerPopRange(&pop), "cuptiRangeProfilerPopRange");
      auto stop = CNNERGY_PARAMS(CUpti_RangeProfiler_Stop_Params);
      stop.pRangeProfilerObject = range.get();
      check(a.cuptiRangeProfilerStop(&stop), "cuptiRangeProfilerStop");
      all_submitted = stop.isAllPassSubmitted != 0;
    }
    auto decode = CNNERGY_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
    decode.pRangeProfilerObject = range.get();
    check(a.cuptiRangeProfilerDecodeData(&decode), "cuptiRangeProfilerDecodeData");
    auto info = CNNERGY_PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
    info.pCounterDataImage = data.data();
    info.counterDataImageSize = data.size();
    check(a.cuptiRangeProfilerGetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
    if (info.numTotalRanges == 0) throw DeviceError("CUPTI range profiler: no range was collected");

    std::vector<double> values(metrics.size(), 0.0);
    auto eval = CNNERGY_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
    eval.pHostObject = config_.host();
    eval.pCounterDataImage = data.data();
    eval.counterDataImageSize = data.size();
    eval.rangeIndex = 0;
    eval.ppMetricNames = const_cast<const char**>(metrics.data());
    eval.numMetrics = metrics.size();
    eval.pMetricValues = values.data();
    check(a.cuptiProfilerHostEvaluateToGpuValues(&eval), "cuptiProfilerHostEvaluateToGpuValues");
    for (std::size_t i = 0; i < metrics.size(); ++i) out.raw[metrics[i]] = values[i];
    return out;
  }

 private:
  CUcontext ctx_;
  HostConfig config_;
};

}  // namespace

std::unique_ptr<CounterProfiler> open_counter_profiler(std::string& reason) {
  const Api& a = api();
  if (!a.loaded) {
    reason = a.load_error;
    return nullptr;
  }
  CUcontext ctx = nullptr;
  CUdevice device = 0;
  if (a.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
    reason = "no current CUDA context (use the device before opening the counter profiler)";
    return nullptr;
  }
  if (a.cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    reason = "cuCtxGetDevice failed";
    return nullptr;
  }
  try {
    return std::make_unique<CuptiCounterProfiler>(ctx, static_cast<int>(device));
  } catch (const Error& e) {
    reason = e.what();
    return nullptr;
  }
}

#else

std::unique_ptr<CounterProfiler> open_counter_profiler(std::string& reason) {
  reason = "built without CUPTI's range profiler (cupti_range_profiler.h of CUDA 12.6+ not found at configure time)";
  return nullptr;
}

#endif

}  // namespace cnnergy::convbench
