// KernelTracer over CUPTI's activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), with libcupti
// opened by dlopen at run time so the build and the CPU-only binary need no CUPTI. CUPTI's buffer
// callbacks carry no user pointer, so the one active tracer is reached through a function-local
// registry guarded by a mutex (the reason for "one tracer per process at a time").
#include "convbench/kernel_metrics.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "core/errors.hpp"

#if CNNERGY_HAVE_CUPTI
#include <cupti_activity.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#endif

namespace cnnergy::convbench {

MetricsLevel parse_metrics_level(std::string_view text) {
  if (text == "off") return MetricsLevel::kOff;
  if (text == "kernels") return MetricsLevel::kKernels;
  if (text == "full") return MetricsLevel::kFull;
  throw InvalidArgument("unknown --metrics '" + std::string(text) + "' (choose one of: off, kernels, full)");
}

std::string_view metrics_level_name(MetricsLevel level) {
  switch (level) {
    case MetricsLevel::kOff:
      return "off";
    case MetricsLevel::kKernels:
      return "kernels";
    case MetricsLevel::kFull:
      break;
  }
  return "full";
}

#if CNNERGY_HAVE_CUPTI
namespace {

struct KernelAccumulator {
  std::int64_t launches = 0;
  std::uint64_t total_ns = 0;
  int registers = 0;
  std::int64_t shared = 0;
  int block = 0;
  std::int64_t grid = 0;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, KernelAccumulator> kernels;
  bool active = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string demangle(const char* name) {
  if (!name) return "(unnamed)";
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !out) return name;
  std::string s(out);
  std::free(out);
  return s;
}

using RegisterFn = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
using KindFn = CUptiResult (*)(CUpti_ActivityKind);
using FlushFn = CUptiResult (*)(uint32_t);
using NextFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);
using ResultStringFn = CUptiResult (*)(CUptiResult, const char**);

struct CuptiApi {
  void* handle = nullptr;
  RegisterFn register_callbacks = nullptr;
  KindFn enable = nullptr, disable = nullptr;
  FlushFn flush_all = nullptr;
  NextFn next_record = nullptr;
  ResultStringFn result_string = nullptr;
};

CuptiApi& api() {
  static CuptiApi a;
  return a;
}

constexpr std::size_t kBufferBytes = std::size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Registry& r = registry();
  CUpti_Activity* record = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    while (api().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (!r.active || record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      KernelAccumulator& a = r.kernels[demangle(k->name)];
      ++a.launches;
      a.total_ns += k->end > k->start ? k->end - k->start : 0;
      a.registers = k->registersPerThread;
      a.shared = static_cast<std::int64_t>(k->staticSharedMemory) + k->dynamicSharedMemory;
      a.block = k->blockX * k->blockY * k->blockZ;
      a.grid = static_cast<std::int64_t>(k->gridX) * k->gridY * k->gridZ;
    }
  }
  std::free(buffer);
}

std::string cupti_error(CUptiResult r) {
  const char* s = nullptr;
  if (api().result_string && api().result_string(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

class CuptiTracer final : public KernelTracer {
 public:
  void start() override {
    Registry& r = registry();
    api().flush_all(1);  // drop what came before into the inactive registry
    std::lock_guard<std::mutex> lock(r.mutex);
    r.kernels.clear();
    r.active = true;
  }
  KernelReport stop(std::int64_t calls) override {
    Registry& r = registry();
    const CUptiResult flushed = api().flush_all(1);
    std::lock_guard<std::mutex> lock(r.mutex);
    r.active = false;
    KernelReport report;
    report.calls = calls;
    if (flushed != CUPTI_SUCCESS) report.counters = "unavailable: the activity flush failed: " + cupti_error(flushed);
    double total_ms = 0;
    for (const auto& [name, a] : r.kernels) {
      KernelRecord k;
      k.name = name;
      k.launches = a.launches;
      k.total_ms = static_cast<double>(a.total_ns) / 1e6;
      k.registers_per_thread = a.registers;
      k.shared_bytes_per_block = a.shared;
      k.block_threads = a.block;
      k.grid_blocks = a.grid;
      total_ms += k.total_ms;
      report.kernels.push_back(std::move(k));
    }
    for (auto& k : report.kernels) k.share = total_ms > 0 ? k.total_ms / total_ms : 0;
    std::sort(report.kernels.begin(), report.kernels.end(),
              [](const KernelRecord& a, const KernelRecord& b) { return a.total_ms > b.total_ms; });
    return report;
  }
  ~CuptiTracer() override {
    api().flush_all(1);
    api().disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
};

}  // namespace

std::unique_ptr<KernelTracer> open_kernel_tracer(std::string& reason) {
  CuptiApi& a = api();
  if (!a.handle) {
    for (const char* lib : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) {
      a.handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (a.handle) break;
    }
    if (!a.handle) {
      reason = std::string("libcupti.so not found (add CUDA's lib directory to LD_LIBRARY_PATH): ") + dlerror();
      return nullptr;
    }
    a.register_callbacks = reinterpret_cast<RegisterFn>(dlsym(a.handle, "cuptiActivityRegisterCallbacks"));
    a.enable = reinterpret_cast<KindFn>(dlsym(a.handle, "cuptiActivityEnable"));
    a.disable = reinterpret_cast<KindFn>(dlsym(a.handle, "cuptiActivityDisable"));
    a.flush_all = reinterpret_cast<FlushFn>(dlsym(a.handle, "cuptiActivityFlushAll"));
    a.next_record = reinterpret_cast<NextFn>(dlsym(a.handle, "cuptiActivityGetNextRecord"));
    a.result_string = reinterpret_cast<ResultStringFn>(dlsym(a.handle, "cuptiGetResultString"));
    if (!a.register_callbacks || !a.enable || !a.disable || !a.flush_all || !a.next_record) {
      reason = "libcupti lacks the activity API functions";
      a.handle = nullptr;  // the library stays loaded (dlclose of CUPTI is unsafe); unusable
      return nullptr;
    }
    const CUptiResult r = a.register_callbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      reason = "cuptiActivityRegisterCallbacks: " + cupti_error(r);
      a.handle = nullptr;
      return nullptr;
    }
  }
  const CUptiResult r = a.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    reason = "cuptiActivityEnable(CONCURRENT_KERNEL): " + cupti_error(r);
    return nullptr;
  }
  return std::make_unique<CuptiTracer>();
}

#else

std::unique_ptr<KernelTracer> open_kernel_tracer(std::string& reason) {
  reason = "built without CUPTI (cupti_activity.h not found at configure time)";
  return nullptr;
}

#endif

}  // namespace cnnergy::convbench
