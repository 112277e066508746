// The execution context one CUDA backend owns: its device, one compute stream, the cuDNN and cuBLAS
// handles bound to that stream, the caching allocator, the convolution workspace shared by all
// convolution kernels (capped by BackendOptions::workspace_limit_bytes), the per-backend caches of
// search results, the persistent algorithm cache (BackendOptions::algo_cache_dir) and the search's
// clock. Kernels hold it through a shared_ptr, so a kernel never outlives its handles.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "backend/cuda/conv_search_clock.hpp"
#include "backend/cuda/cuda_allocator.hpp"
#include "backend/cuda/cuda_raii.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/ops.hpp"
#include "core/algo_cache.hpp"

namespace cnnergy::cuda {

// A cuDNN algorithm choice for one convolution problem and direction.
struct CachedConvAlgo {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t workspace_bytes = 0;
};

class GraphConvPlan;     // conv_graph_plan.hpp
class EpilogueConvPlan;  // conv_epilogue_plan.hpp

// Search results keyed by the cuDNN problem (shapes, dtype, layout, math, direction, workspace
// cap), so identical layers search once per backend: "find" keeps the legacy algorithm,
// "graph_find" / "graph_heuristic" keep the execution plan itself (layers of one shape share it).
template <typename Value>
class SearchCache {
 public:
  std::optional<Value> lookup(const std::string& key) {  // counts a hit when found
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    ++hits_;
    return it->second;
  }
  void store(const std::string& key, const Value& value) {  // counts a search
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[key] = value;
    ++find_runs_;
  }
  // A value that was not searched here (read from the persistent cache): counts nothing.
  void insert(const std::string& key, const Value& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[key] = value;
  }
  std::size_t hits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hits_;
  }
  std::size_t find_runs() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return find_runs_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Value> entries_;
  std::size_t hits_ = 0, find_runs_ = 0;
};
using ConvAlgoCache = SearchCache<CachedConvAlgo>;
using GraphPlanCache = SearchCache<std::shared_ptr<const GraphConvPlan>>;
using AutoChoiceCache = SearchCache<bool>;  // "auto": whether the graph API won a problem
// Fused-epilogue forwards: the plan that beat the unfused pair, or null where the pair won or no
// engine runs the graph.
using EpiloguePlanCache = SearchCache<std::shared_ptr<const EpilogueConvPlan>>;

class CudaContext {
 public:
  explicit CudaContext(const BackendOptions& options);  // options already validated
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  const BackendOptions& options() const { return options_; }
  int device_index() const { return options_.device.index; }
  const cudaDeviceProp& properties() const { return properties_; }
  // Makes this backend's GPU current on the calling thread (cheap when it already is).
  void activate() const;

  cudaStream_t stream() const { return stream_.get(); }
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }
  CachingAllocator& allocator() { return *allocator_; }
  ConvAlgoCache& conv_algo_cache() { return conv_algo_cache_; }
  GraphPlanCache& graph_plan_cache() { return graph_plan_cache_; }
  AutoChoiceCache& auto_choice_cache() { return auto_choice_cache_; }
  EpiloguePlanCache& epilogue_plan_cache() { return epilogue_plan_cache_; }
  // The persistent algorithm cache shared by this process's backends of the same GPU; null when
  // BackendOptions::algo_cache_dir is empty.
  AlgoCache* algo_cache() const { return algo_cache_.get(); }
  ConvSearchClock& search_clock() { return search_clock_; }
  const ConvSearchClock& search_clock() const { return search_clock_; }

  // Stream-ordered scratch memory from the caching allocator (freed back when the pointer dies).
  std::shared_ptr<Buffer> scratch(std::size_t bytes) { return allocator_->allocate(bytes); }
  // A search's timing workspace: scratch, with the shared workspace given back first, so that the
  // two are never held at once (the shared one grows again at the next call that needs it). Without
  // it the searches' peak was the largest candidate's offer on top of what an earlier layer's chosen
  // algorithm had grown the shared one to (AlexNet fp32 b64 on an H200: 578 + 192 MiB).
  std::shared_ptr<Buffer> search_scratch(std::size_t bytes) {
    workspace_.reset();
    return allocator_->allocate(bytes);
  }
  // Backend::set_search_workspace_limit: the cap the searches and the caches' keys read
  // (options().workspace_limit_bytes) is `bytes` until the next call, never above the configured cap;
  // 0 restores the configured one. Returns the cap now in effect.
  std::size_t set_workspace_limit(std::size_t bytes) {
    options_.workspace_limit_bytes = bytes == 0 ? configured_workspace_limit_ : std::min(bytes, configured_workspace_limit_);
    return options_.workspace_limit_bytes;
  }
  // The shared convolution workspace, grown to at least `bytes` (callers never ask beyond the cap).
  // Valid until the next call; safe to share because every kernel runs on the one stream. Max
  // pooling's backward keeps its argmax bytes there too.
  void* conv_workspace(std::size_t bytes);
  // Drops the workspace (back to the allocator once no captured graph holds it).
  void release_conv_workspace() { workspace_.reset(); }
  // Backend::set_conv_workspace: conv_workspace() hands out this region where it holds the request
  // (overflows counts the requests it did not hold, overflow_bytes the largest).
  std::size_t region_overflows() const { return region_overflows_; }
  std::size_t region_overflow_bytes() const { return region_overflow_bytes_; }
  void set_conv_workspace_region(void* data, std::size_t bytes) {
    region_data_ = data;
    region_bytes_ = data != nullptr ? bytes : 0;
  }
  // A caller's own bytes at the start of the executor's region (Backend::set_conv_workspace) for the
  // length of one call (space-to-depth's rearranged input), so that no buffer of their size is held
  // for the whole run: until the scope ends, conv_workspace() hands out what follows them in the
  // region (a request beyond it gets the shared workspace, counted as an overflow), so the kernels
  // called inside never overwrite them. data() is null where no region is set or it cannot hold
  // `bytes`: the caller uses memory of its own then. One at a time.
  class RegionPrefix {
   public:
    RegionPrefix(CudaContext& ctx, std::size_t bytes);
    ~RegionPrefix();
    RegionPrefix(const RegionPrefix&) = delete;
    RegionPrefix& operator=(const RegionPrefix&) = delete;
    void* data() const { return data_; }
    // What `bytes` take of the region: rounded up so that what follows starts aligned for cuDNN.
    static std::size_t footprint(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

   private:
    static constexpr std::size_t kAlign = 256;
    CudaContext& ctx_;
    void* data_ = nullptr;
  };

  // The workspace buffer itself (a captured CUDA graph keeps it alive after the context grows it).
  std::shared_ptr<Buffer> conv_workspace_buffer() const { return workspace_; }

  // The dtype the activations use, and the cuDNN names for it.
  DType dtype() const { return options_.dtype; }
  Layout layout() const { return options_.layout; }

 private:
  BackendOptions options_;
  std::size_t configured_workspace_limit_ = 0;  // BackendOptions::workspace_limit_bytes as given
  cudaDeviceProp properties_{};
  std::shared_ptr<CachingAllocator>
      allocator_;  // first: destroyed after everything that returns memory
  Stream stream_;
  CudnnHandle cudnn_;
  CublasHandle cublas_;
  std::shared_ptr<Buffer> workspace_;
  void* region_data_ = nullptr;  // set_conv_workspace_region
  std::size_t region_bytes_ = 0;
  std::size_t region_overflows_ = 0, region_overflow_bytes_ = 0;  // requests beyond the region
  std::size_t region_prefix_bytes_ = 0;  // an active RegionPrefix's bytes (aligned), 0 without one
  ConvAlgoCache conv_algo_cache_;
  GraphPlanCache graph_plan_cache_;  // after the cuDNN handle: its plans go first
  AutoChoiceCache auto_choice_cache_;
  EpiloguePlanCache epilogue_plan_cache_;  // after the cuDNN handle: its plans go first
  std::shared_ptr<AlgoCache> algo_cache_;
  ConvSearchClock search_clock_;
};

// ---- helpers shared by the kernel implementations ----------------------------------------------
cudnnDataType_t cudnn_dtype(DType t);  // fp32, fp16, bf16 (InvalidArgument otherwise)
cudnnTensorFormat_t cudnn_format(Layout l);
// Kernel geometry of a tensor: 4-D tensors with their layout, 2-D as (N, F, 1, 1).
kernels::Dims dims_of(const Tensor& t);
// Throws InvalidArgument/ShapeError naming `op` and `name` unless t is a defined device tensor of
// this backend's GPU with the expected shape and dtype (and, for 4-D, the expected layout).
void check_device_tensor(const Tensor& t, const CudaContext& ctx, const char* op, const char* name,
                         const Shape& shape, DType dtype, Layout layout);
void check_device_tensor(const Tensor& t, const CudaContext& ctx, const char* op, const char* name);
// Sets a 4-D cuDNN tensor descriptor (dims must fit cuDNN's int).
void set_tensor_4d(cudnnTensorDescriptor_t desc, DType dtype, Layout layout, std::int64_t n,
                   std::int64_t c, std::int64_t h, std::int64_t w);
// The context of a CUDA backend (InvalidArgument for any other backend); cuda_backend.cpp.
std::shared_ptr<CudaContext> context_of(const Backend& backend);
// The math type name the run uses: "fp32", "tf32" or "tensor_op".
std::string math_name(const BackendOptions& options);

}  // namespace cnnergy::cuda
