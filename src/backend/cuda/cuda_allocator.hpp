// A caching device allocator: freed blocks go back to per-size-class free lists and are handed out
// again without cudaMalloc/cudaFree (which synchronise the device), so per-iteration activations
// and scratch buffers cost a lock and a vector pop. Stream-ordered reuse is safe because all of the
// backend's device work runs on its one stream.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/tensor.hpp"

namespace cnnergy::cuda {

struct AllocatorStats {
  std::size_t in_use_bytes = 0;        // size classes of live buffers
  std::size_t peak_bytes = 0;          // highest in_use_bytes so far
  std::size_t cached_bytes = 0;        // freed blocks kept for reuse
  std::size_t device_allocations = 0;  // cudaMalloc calls that succeeded (cache misses)
  std::size_t capture_reuses = 0;      // requests served by a block freed earlier in the same capture
};

class CachingAllocator : public std::enable_shared_from_this<CachingAllocator> {
 public:
  // Buffers hold a shared_ptr to the allocator (their deleter), so create it through a shared_ptr.
  static std::shared_ptr<CachingAllocator> create(int device) {
    return std::shared_ptr<CachingAllocator>(new CachingAllocator(device));
  }
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A device buffer of at least size_bytes. Throws OutOfMemory naming the request, the device's
  // free memory and what this allocator holds (after it has returned its cache to the driver and
  // retried).
  std::shared_ptr<Buffer> allocate(std::size_t size_bytes);
  // Returns every cached block to the driver (cudaFree).
  void release_cached();

  // While retaining (CUDA graph capture), freed blocks go to the capture's own list, not back to the
  // cache: a captured graph keeps addressing them on every replay. Later requests of the same size
  // class in the same capture take them from that list (the graph replays its work in the order it
  // was captured, so the reuse is ordered as in eager execution, and the captured step holds no more
  // than the eager step). end_retain() hands the list to the graph, which gives the blocks back with
  // release_retained() when it is destroyed. They count as in use meanwhile.
  struct Block {
    void* ptr;
    std::size_t class_bytes;
  };
  void begin_retain();
  std::vector<Block> end_retain();
  void release_retained(const std::vector<Block>& blocks) noexcept;
  AllocatorStats stats() const;
  void reset_peak();  // peak_bytes = in_use_bytes

  // The size class a request is served from: multiples of 512 B up to 1 MiB, then steps of 1/8 of
  // the power of two below, at most 2 MiB (waste under 12.5 % and under 2 MiB). Throws OutOfMemory
  // for absurd sizes.
  static std::size_t size_class(std::size_t size_bytes);

 private:
  explicit CachingAllocator(int device) : device_(device) {}
  void give_back(void* ptr, std::size_t class_bytes) noexcept;
  void release_cached_locked() noexcept;

  int device_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists_;
  AllocatorStats stats_;
  int retain_depth_ = 0;
  std::vector<Block> retained_;
};

// Page-locked host memory (cudaHostAlloc) as a host Buffer; throws OutOfMemory on failure.
std::shared_ptr<Buffer> allocate_pinned_host(std::size_t size_bytes);

}  // namespace cnnergy::cuda
