// Caching device allocator and pinned host allocation for the CUDA backend.
#include "backend/cuda/cuda_allocator.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

#include "backend/cuda/cuda_check.hpp"
#include "core/errors.hpp"

namespace cnnergy::cuda {

namespace {

constexpr std::size_t kSmallGranule = 512;
constexpr std::size_t kSmallLimit = std::size_t{1} << 20;
constexpr std::size_t kLargeGranule = std::size_t{2} << 20;  // the coarsest step, however large the request
constexpr std::size_t kLargestRequest = std::size_t{1}
                                        << 60;  // beyond any device; avoids overflow below

// Makes `device` current for the scope and restores the previous one (the caller's thread may be
// working with another GPU).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    CNNERGY_CUDA_CALL(cudaGetDevice(&previous_));
    if (previous_ != device) CNNERGY_CUDA_CALL(cudaSetDevice(device));
  }
  ~DeviceScope() { (void)cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

std::size_t CachingAllocator::size_class(std::size_t size_bytes) {
  if (size_bytes > kLargestRequest)
    throw OutOfMemory("device allocation of " + format_bytes(size_bytes) +
                      " is larger than any GPU memory");
  if (size_bytes <= kSmallLimit)
    return ((size_bytes + kSmallGranule - 1) / kSmallGranule) * kSmallGranule;
  // An eighth of the power of two below, but never coarser than 2 MiB: a 10 GiB activation arena
  // would otherwise be rounded up by up to 1 GiB.
  const std::size_t step = std::min(std::bit_floor(size_bytes) / 8, kLargeGranule);
  return ((size_bytes + step - 1) / step) * step;
}

CachingAllocator::~CachingAllocator() { release_cached_locked(); }

std::shared_ptr<Buffer> CachingAllocator::allocate(std::size_t size_bytes) {
  const Device device{DeviceKind::kCuda, device_};
  if (size_bytes == 0) return std::make_shared<Buffer>(nullptr, 0, device, nullptr);
  const std::size_t class_bytes = size_class(size_bytes);
  void* ptr = nullptr;
  bool reused = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (retain_depth_ > 0) {
      // A block freed earlier in this capture serves a later request of its size: the graph replays
      // the captured work in the order it was enqueued, so this reuse is as stream-ordered as the
      // eager path's. The block stayed counted as in use, and the graph keeps it either way.
      auto r = std::find_if(retained_.begin(), retained_.end(),
                            [class_bytes](const Block& b) { return b.class_bytes == class_bytes; });
      if (r != retained_.end()) {
        ptr = r->ptr;
        retained_.erase(r);
        reused = true;
        ++stats_.capture_reuses;
      }
    }
    if (reused) {
      // still counted as in use: give_back kept it so during the capture
    } else if (auto it = free_lists_.find(class_bytes); it != free_lists_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= class_bytes;
    } else {
      DeviceScope scope(device_);
      cudaError_t status = cudaMalloc(&ptr, class_bytes);
      if (status == cudaErrorMemoryAllocation) {
        // Cached blocks of other sizes may be what is missing: give them back and try once more.
        (void)cudaGetLastError();
        release_cached_locked();
        status = cudaMalloc(&ptr, class_bytes);
      }
      if (status == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        const DeviceMemoryInfo mem = device_memory_info();
        throw OutOfMemory("cuda:" + std::to_string(device_) + ": out of memory allocating " +
                          format_bytes(size_bytes) +
                          "; device memory free: " + format_bytes(mem.free_bytes) + " of " +
                          format_bytes(mem.total_bytes) + "; this backend holds " +
                          format_bytes(stats_.in_use_bytes) + " in live buffers");
      }
      CNNERGY_CUDA_CALL(status);
      ++stats_.device_allocations;
    }
    if (!reused) {
      stats_.in_use_bytes += class_bytes;
      if (stats_.in_use_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.in_use_bytes;
    }
  }
  auto self = shared_from_this();
  return std::make_shared<Buffer>(
      ptr, size_bytes, device, [self, class_bytes](void* p) { self->give_back(p, class_bytes); });
}

void CachingAllocator::give_back(void* ptr, std::size_t class_bytes) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    if (retain_depth_ > 0) {
      retained_.push_back({ptr, class_bytes});  // stays "in use": a graph addresses it
      return;
    }
    free_lists_[class_bytes].push_back(ptr);
    stats_.cached_bytes += class_bytes;
  } catch (...) {
    (void)cudaFree(ptr);  // no memory for the list entry: return the block to the driver instead
  }
  stats_.in_use_bytes -= class_bytes;
}

void CachingAllocator::begin_retain() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++retain_depth_;
}

std::vector<CachingAllocator::Block> CachingAllocator::end_retain() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (retain_depth_ > 0) --retain_depth_;
  return std::exchange(retained_, {});
}

void CachingAllocator::release_retained(const std::vector<Block>& blocks) noexcept {
  for (const Block& b : blocks) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.in_use_bytes += b.class_bytes;  // give_back subtracts it again
    }
    give_back(b.ptr, b.class_bytes);
  }
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() noexcept {
  int previous = 0;
  const bool have_previous = cudaGetDevice(&previous) == cudaSuccess;
  if (have_previous && previous != device_) (void)cudaSetDevice(device_);
  for (auto& [class_bytes, blocks] : free_lists_)
    for (void* p : blocks) (void)cudaFree(p);  // errors ignored: at exit the runtime may be gone
  free_lists_.clear();
  stats_.cached_bytes = 0;
  if (have_previous && previous != device_) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.in_use_bytes;
}

std::shared_ptr<Buffer> allocate_pinned_host(std::size_t size_bytes) {
  if (size_bytes == 0) return std::make_shared<Buffer>(nullptr, 0, Device{}, nullptr);
  void* ptr = nullptr;
  const cudaError_t status = cudaHostAlloc(&ptr, size_bytes, cudaHostAllocDefault);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw OutOfMemory("pinned host allocation of " + format_bytes(size_bytes) +
                      " failed: " + cudaGetErrorString(status));
  }
  return std::make_shared<Buffer>(ptr, size_bytes, Device{},
                                  [](void* p) { (void)cudaFreeHost(p); });
}

}  // namespace cnnergy::cuda
