// Internals shared by the CPU kernels: argument checks that turn a wrong tensor into a typed error
// naming the operation, the tracked host allocator behind Backend::alloc_buffer, and the scratch
// workspace that one backend's convolution kernels share (like one stream's cuDNN workspace).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backend/ops.hpp"
#include "core/tensor.hpp"

namespace cnnergy::cpu {

// Largest convolution scratch buffer the CPU backend uses, whatever the run's workspace limit: the
// im2col batch is processed in chunks that fit (one sample at a time at worst).
inline constexpr std::size_t kMaxConvWorkspaceBytes = std::size_t{256} << 20;

// ---- argument checks (all throw; the message names `op` and the argument)
// -------------------------

// A defined host fp32 tensor (NCHW when 4-D) with exactly `numel` elements.
void check_f32(const Tensor& t, std::string_view op, std::string_view name, std::int64_t numel);
// As check_f32, and the shape equals `shape` exactly.
void check_f32_shape(const Tensor& t, std::string_view op, std::string_view name,
                     const Shape& shape);
// A defined host int32 tensor with exactly `numel` elements.
void check_i32(const Tensor& t, std::string_view op, std::string_view name, std::int64_t numel);
// Throws InvalidArgument "<op>: <what> must be ... (got v)" unless v >= min_value.
void check_at_least(std::int64_t v, std::int64_t min_value, std::string_view op,
                    std::string_view what);
// The largest dimension cblas accepts (its int); the conv/linear kernels check their sizes against
// it.
void check_blas_dim(std::int64_t v, std::string_view op, std::string_view what);

// Row-major C = alpha * op(A) op(B) + beta * C (op: transposed where asked). oneDNN's sgemm where
// the build has oneDNN, so that one thread pool (oneDNN's OpenMP) runs every CPU kernel: OpenBLAS's
// own threads, spinning and yielding after each call, took a tenth of the two cores from oneDNN's
// convolutions in ResNet-50 inference; OpenBLAS's cblas_sgemm otherwise.
void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc);

inline const float* cf32(const Tensor& t) { return static_cast<const float*>(t.raw()); }
inline float* mf32(const Tensor& t) { return static_cast<float*>(t.raw()); }

// ---- tracked host memory
// ----------------------------------------------------------------------------

// Counts the bytes a backend holds (buffers and workspace). Buffers keep it alive through their
// deleters, so a tensor may outlive the backend that allocated it.
class HostMemory : public std::enable_shared_from_this<HostMemory> {
 public:
  // Zero-filled, 64-byte aligned. Throws OutOfMemory naming the size and the memory available.
  std::shared_ptr<Buffer> allocate(std::size_t size_bytes);
  MemoryStats stats() const;

  // Must be reached through a shared_ptr (allocate hands copies of it to the buffers' deleters).
  static std::shared_ptr<HostMemory> create() {
    return std::shared_ptr<HostMemory>(new HostMemory());
  }

 private:
  HostMemory() = default;
  void release(std::size_t size_bytes) { in_use_.fetch_sub(size_bytes); }
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> peak_{0};
};

// Physical memory and MemAvailable from the OS (0 where unknown).
std::size_t physical_memory_bytes();
std::size_t available_memory_bytes();

// A growable scratch buffer. Not thread-safe: one backend's kernels run one after another, as on
// one stream. The pointer stays valid until the next floats() call that asks for more.
class Workspace {
 public:
  explicit Workspace(std::shared_ptr<HostMemory> memory) : memory_(std::move(memory)) {}
  float* floats(std::size_t count);
  std::size_t capacity_bytes() const { return buffer_ ? buffer_->size_bytes() : 0; }

 private:
  std::shared_ptr<HostMemory> memory_;
  std::shared_ptr<Buffer> buffer_;
};

}  // namespace cnnergy::cpu
