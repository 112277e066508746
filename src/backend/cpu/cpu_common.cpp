// Argument checks, tracked host allocation and the shared scratch workspace of the CPU backend.
#include "backend/cpu/cpu_common.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#ifdef CNNERGY_HAVE_ONEDNN
#include <dnnl.h>
#else
#include <cblas.h>
#endif

#include "core/errors.hpp"

namespace cnnergy::cpu {

void sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
           const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc) {
#ifdef CNNERGY_HAVE_ONEDNN
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                                          ldb, beta, c, ldc);
  if (status != dnnl_success)
    throw InternalError("oneDNN's sgemm failed (status " + std::to_string(static_cast<int>(status)) + ") for " +
                        std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
#endif
}

namespace {

std::string prefix(std::string_view op, std::string_view name) {
  return std::string(op) + ": " + std::string(name) + " ";
}

void check_host_defined(const Tensor& t, std::string_view op, std::string_view name) {
  if (!t.defined()) throw InvalidArgument(prefix(op, name) + "is undefined");
  if (!t.device().is_cpu())
    throw InvalidArgument(prefix(op, name) + "must live in host memory for the CPU backend, got " +
                          t.describe());
}

std::string mib(std::size_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return os.str();
}

}  // namespace

void check_f32(const Tensor& t, std::string_view op, std::string_view name, std::int64_t numel) {
  check_host_defined(t, op, name);
  if (t.dtype() != DType::kF32)
    throw NotSupported(prefix(op, name) + "is " + std::string(dtype_name(t.dtype())) +
                       "; the CPU backend computes in fp32/NCHW only");
  if (t.shape().rank() == 4 && t.layout() != Layout::kNCHW)
    throw NotSupported(prefix(op, name) + "is " + std::string(layout_name(t.layout())) +
                       "; the CPU backend computes in fp32/NCHW only");
  if (t.numel() != numel)
    throw ShapeError(prefix(op, name) + "has shape " + t.shape().str() + " (" +
                     std::to_string(t.numel()) + " elements), expected " + std::to_string(numel) +
                     " elements");
}

void check_f32_shape(const Tensor& t, std::string_view op, std::string_view name,
                     const Shape& shape) {
  check_f32(t, op, name, t.defined() ? t.numel() : 0);
  if (t.shape() != shape)
    throw ShapeError(prefix(op, name) + "has shape " + t.shape().str() + ", expected " +
                     shape.str());
}

void check_i32(const Tensor& t, std::string_view op, std::string_view name, std::int64_t numel) {
  check_host_defined(t, op, name);
  if (t.dtype() != DType::kI32)
    throw InvalidArgument(prefix(op, name) + "must be int32, got " +
                          std::string(dtype_name(t.dtype())));
  if (t.numel() != numel)
    throw ShapeError(prefix(op, name) + "has shape " + t.shape().str() + ", expected " +
                     std::to_string(numel) + " elements");
}

void check_at_least(std::int64_t v, std::int64_t min_value, std::string_view op,
                    std::string_view what) {
  if (v < min_value)
    throw InvalidArgument(std::string(op) + ": " + std::string(what) + " must be >= " +
                          std::to_string(min_value) + " (got " + std::to_string(v) + ")");
}

void check_blas_dim(std::int64_t v, std::string_view op, std::string_view what) {
  if (v > static_cast<std::int64_t>(INT_MAX))
    throw NotSupported(std::string(op) + ": " + std::string(what) + " = " + std::to_string(v) +
                       " exceeds what one BLAS call takes (" + std::to_string(INT_MAX) + ")");
}

std::size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size);
}

std::size_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::size_t value_kib = 0;
  std::string unit;
  while (in >> key >> value_kib >> unit) {
    if (key == "MemAvailable:") return value_kib * 1024;
  }
  return 0;
}

std::shared_ptr<Buffer> HostMemory::allocate(std::size_t size_bytes) {
  auto fail = [&]() -> OutOfMemory {
    std::string msg = "CPU backend: cannot allocate " + std::to_string(size_bytes) + " bytes (" +
                      mib(size_bytes) + ") of host memory";
    if (const auto avail = available_memory_bytes(); avail > 0)
      msg += "; " + mib(avail) + " available";
    msg += "; the backend holds " + mib(in_use_.load());
    return OutOfMemory(msg);
  };
  constexpr std::size_t kAlign = 64;
  if (size_bytes > std::numeric_limits<std::size_t>::max() - kAlign) throw fail();
  // More than the machine's RAM can never be useful (and some allocators abort instead of failing).
  if (const auto ram = physical_memory_bytes(); ram > 0 && size_bytes > ram) {
    OutOfMemory e = fail();
    throw OutOfMemory(std::string(e.what()) + "; the machine has " + mib(ram) + " of RAM");
  }
  const std::size_t rounded = (size_bytes + kAlign - 1) / kAlign * kAlign;
  void* p = nullptr;
  if (rounded > 0) {
    p = std::aligned_alloc(kAlign, rounded);
    if (p == nullptr) throw fail();
    // Zero-filled so that a kernel reading memory nobody wrote gives the same result every run.
    std::memset(p, 0, rounded);
  }
  const std::size_t now = in_use_.fetch_add(size_bytes) + size_bytes;
  std::size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  std::shared_ptr<HostMemory> self = shared_from_this();
  return std::make_shared<Buffer>(p, size_bytes, Device{}, [self, size_bytes](void* q) {
    std::free(q);
    self->release(size_bytes);
  });
}

MemoryStats HostMemory::stats() const {
  MemoryStats s;
  s.in_use_bytes = in_use_.load();
  s.peak_bytes = peak_.load();
  s.total_bytes = physical_memory_bytes();
  return s;
}

float* Workspace::floats(std::size_t count) {
  const std::size_t bytes = count * sizeof(float);
  if (!buffer_ || buffer_->size_bytes() < bytes) {
    buffer_.reset();  // give the old block back before asking for the larger one
    buffer_ = memory_->allocate(bytes);
  }
  return static_cast<float*>(buffer_->data());
}

}  // namespace cnnergy::cpu
